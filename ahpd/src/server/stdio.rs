//! `--stdio`: exactly one AHP connection over the process's own stdin and stdout, one JSON message
//! per line, for a host that runs ahpd nested inside another. With no daemon running on the data
//! folder it is served here, in process; with one, [`super::bridge`] relays it to that daemon.
//! Either way the lines are read by [`Lines`], which decides what a line too long is.

use futures_util::StreamExt;
use serde_json::Value;
use tokio::io::{AsyncWriteExt, Stdin};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

use crate::host::core::Frame;
use crate::host::requests::{response, ConnState};
use crate::host::Host;

/// Serves stdin/stdout until stdin closes or the daemon stops. A line over `hard_frame_bytes` is
/// skipped, not buffered: it is answered with the over-size error and the connection lives on.
pub async fn serve(host: Host, hard_frame_bytes: usize) {
    let (tx, mut rx) = mpsc::channel(host.config().outbound_capacity);
    let kick = host.cancel_token().child_token();
    // The process that runs ahpd over stdio is the host itself: root.
    let id = host.connect(tx, kick.clone(), crate::users::Principal::Root);
    let mut conn = ConnState::new(id, host.config().limits.clone());
    let writer = tokio::spawn(async move {
        let mut out = tokio::io::stdout();
        while let Some(frame) = rx.recv().await {
            let line = format!("{}\n", frame.as_str());
            if out.write_all(line.as_bytes()).await.is_err() || out.flush().await.is_err() {
                break;
            }
        }
    });
    let mut lines = Lines::stdin(hard_frame_bytes, conn.limits.max_frame_bytes);
    loop {
        let line = tokio::select! {
            line = lines.next() => line,
            _ = kick.cancelled() => break,
        };
        match line {
            Input::Line(line) => {
                host.handle_frame(&mut conn, &line);
                if conn.close_after_flush {
                    break;
                }
            }
            Input::TooLong(answer) => host.send_to(id, answer),
            Input::End => break,
        }
    }
    host.disconnect(id);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), writer).await;
}

/// What one read of stdin gives.
pub enum Input {
    /// A line that is not blank, without its newline.
    Line(String),
    /// A line over the limit, skipped unread: the answer to send for it.
    TooLong(Frame),
    /// Stdin closed (or could not be read).
    End,
}

/// Stdin's lines, each at most `max_line` bytes: a longer one is skipped, not buffered.
pub struct Lines {
    lines: FramedRead<Stdin, LinesCodec>,
    max_line: usize,
    max_frame_bytes: usize,
    /// After a decoder error the stream says `None` once and then reads on (tokio-util's framing).
    after_error: bool,
}

impl Lines {
    /// Stdin, read in lines of at most `hard_frame_bytes` (or `max_frame_bytes`, when larger): a
    /// line between the two is read and refused by whoever serves it, as a WebSocket frame is.
    pub fn stdin(hard_frame_bytes: usize, max_frame_bytes: usize) -> Self {
        let max_line = hard_frame_bytes.max(max_frame_bytes);
        Self {
            lines: FramedRead::new(tokio::io::stdin(), LinesCodec::new_with_max_length(max_line)),
            max_line,
            max_frame_bytes,
            after_error: false,
        }
    }

    /// The next line that is not blank. Cancel-safe: a read cut short loses nothing.
    pub async fn next(&mut self) -> Input {
        loop {
            match self.lines.next().await {
                Some(Ok(line)) if line.trim().is_empty() => continue,
                Some(Ok(line)) => return Input::Line(line),
                Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                    self.after_error = true;
                    return Input::TooLong(self.too_long());
                }
                None if self.after_error => self.after_error = false,
                None | Some(Err(LinesCodecError::Io(_))) => return Input::End,
            }
        }
    }

    /// The answer to a line over the limit (it has no id: it was never read).
    fn too_long(&self) -> Frame {
        let error = crate::host::limits::over_limit(
            "maxFrameBytes",
            self.max_frame_bytes,
            format!("A line over {} bytes is over this host's limit (maxFrameBytes); it was not read", self.max_line),
        );
        response(&Value::Null, Err(error))
    }
}
