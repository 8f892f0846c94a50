//! `--stdio`: exactly one AHP connection over the process's own stdin and stdout, one JSON message
//! per line, for a host that runs ahpd nested inside another.

use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};

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
    let max_line = hard_frame_bytes.max(conn.limits.max_frame_bytes);
    let mut lines = FramedRead::new(tokio::io::stdin(), LinesCodec::new_with_max_length(max_line));
    // After a decoder error the stream says `None` once and then reads on (tokio-util's framing).
    let mut after_error = false;
    loop {
        let line = tokio::select! {
            line = lines.next() => line,
            _ = kick.cancelled() => break,
        };
        match line {
            Some(Ok(line)) if line.trim().is_empty() => continue,
            Some(Ok(line)) => {
                host.handle_frame(&mut conn, &line);
                if conn.close_after_flush {
                    break;
                }
            }
            Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                let error = crate::host::limits::over_limit(
                    "maxFrameBytes",
                    conn.limits.max_frame_bytes,
                    format!("A line over {max_line} bytes is over this host's limit (maxFrameBytes); it was not read"),
                );
                host.send_to(id, response(&serde_json::Value::Null, Err(error)));
                after_error = true;
            }
            None if after_error => after_error = false,
            None | Some(Err(LinesCodecError::Io(_))) => break,
        }
    }
    host.disconnect(id);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), writer).await;
}
