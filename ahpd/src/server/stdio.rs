//! `--stdio`: exactly one AHP connection over the process's own stdin and stdout, one JSON message
//! per line, for a host that runs ahpd nested inside another.

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::host::requests::ConnState;
use crate::host::Host;

/// Serves stdin/stdout until stdin closes or the daemon stops.
pub async fn serve(host: Host, max_frame_bytes: usize) {
    let (tx, mut rx) = mpsc::channel(host.config().outbound_capacity);
    let kick = host.cancel_token().child_token();
    // The process that runs ahpd over stdio is the host itself: root.
    let id = host.connect(tx, kick.clone(), crate::users::Principal::Root);
    let mut conn = ConnState::new(id, max_frame_bytes);
    let writer = tokio::spawn(async move {
        let mut out = tokio::io::stdout();
        while let Some(frame) = rx.recv().await {
            let line = format!("{}\n", frame.as_str());
            if out.write_all(line.as_bytes()).await.is_err() || out.flush().await.is_err() {
                break;
            }
        }
    });
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    loop {
        let line = tokio::select! {
            line = lines.next_line() => line,
            _ = kick.cancelled() => break,
        };
        match line {
            Ok(Some(line)) if line.trim().is_empty() => continue,
            Ok(Some(line)) => {
                host.handle_frame(&mut conn, &line);
                if conn.close_after_flush {
                    break;
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    host.disconnect(id);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), writer).await;
}
