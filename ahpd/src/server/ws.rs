//! One AHP connection over a WebSocket: one JSON-RPC message per text frame in each direction.

use axum::extract::ws::{Message, WebSocket};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;

use crate::host::core::Frame;
use crate::host::requests::ConnState;
use crate::host::Host;

/// Serves one upgraded socket until either side closes it or the daemon stops.
pub async fn serve(host: Host, socket: WebSocket, principal: crate::users::Principal) {
    let (tx, mut rx) = mpsc::channel(host.config().outbound_capacity);
    let kick = host.cancel_token().child_token();
    let id = host.connect(tx, kick.clone(), principal.clone());
    let mut conn = ConnState::new(id, host.config().limits.clone());
    conn.principal = principal;
    let (mut sink, mut stream) = socket.split();
    let writer_kick = kick.clone();
    let writer = tokio::spawn(async move {
        loop {
            let frame = tokio::select! {
                frame = rx.recv() => match frame {
                    Some(frame) => frame,
                    None => break,
                },
                _ = writer_kick.cancelled() => break,
            };
            // A client that stopped reading blocks the send once its socket is full: the kick
            // must end that wait too, or the connection would stay open for ever.
            tokio::select! {
                sent = send_queued(&mut sink, frame, &mut rx) => if sent.is_err() { break },
                _ = writer_kick.cancelled() => break,
            }
        }
        // The close frame cannot reach a client that does not read; dropping the socket ends it.
        let _ = tokio::time::timeout(CLOSE_WAIT, sink.close()).await;
    });
    loop {
        let message = tokio::select! {
            message = stream.next() => message,
            _ = kick.cancelled() => break,
        };
        let text = match message {
            None | Some(Err(_)) | Some(Ok(Message::Close(_))) => break,
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Binary(bytes))) => match std::str::from_utf8(&bytes) {
                Ok(text) => text.into(),
                Err(_) => {
                    tracing::debug!(conn = id, "a binary frame that is not UTF-8 JSON; ignored");
                    continue;
                }
            },
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
        };
        host.handle_frame(&mut conn, text.as_str());
        if conn.close_after_flush {
            break;
        }
    }
    // Dropping the connection's queue lets the writer send what is left, then close.
    host.disconnect(id);
    if tokio::time::timeout(CLOSE_WAIT, writer).await.is_err() {
        kick.cancel();
    }
}

/// Sends `first` and whatever else is already queued for the connection (up to [`BATCH_FRAMES`])
/// with one flush: the frames are framed into the socket's buffer and written together, where a
/// flush per frame was a system call per envelope per client (the largest cost `perf` showed
/// under a streaming fan-out, docs/benchmarks.md).
async fn send_queued<S>(sink: &mut S, first: Frame, rx: &mut mpsc::Receiver<Frame>) -> Result<(), S::Error>
where
    S: futures_util::Sink<Message> + Unpin,
{
    sink.feed(Message::Text(first)).await?;
    for _ in 1..BATCH_FRAMES {
        match rx.try_recv() {
            Ok(frame) => sink.feed(Message::Text(frame)).await?,
            Err(_) => break,
        }
    }
    sink.flush().await
}

/// The most frames one flush gathers, so one busy connection still lets the others' writes in.
const BATCH_FRAMES: usize = 256;

/// How long a closing connection may take to send what is queued and its close frame.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
