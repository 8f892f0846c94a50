//! One AHP connection over a WebSocket: one JSON-RPC message per text frame in each direction.

use axum::extract::ws::{Message, WebSocket};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;

use crate::host::requests::ConnState;
use crate::host::Host;

/// Serves one upgraded socket until either side closes it or the daemon stops.
pub async fn serve(host: Host, socket: WebSocket, max_frame_bytes: usize, principal: crate::users::Principal) {
    let (tx, mut rx) = mpsc::channel(host.config().outbound_capacity);
    let kick = host.cancel_token().child_token();
    let id = host.connect(tx, kick.clone(), principal.clone());
    let mut conn = ConnState::new(id, max_frame_bytes);
    conn.principal = principal;
    let (mut sink, mut stream) = socket.split();
    let writer_kick = kick.clone();
    let writer = tokio::spawn(async move {
        loop {
            tokio::select! {
                frame = rx.recv() => match frame {
                    Some(frame) => {
                        if sink.send(Message::Text(frame)).await.is_err() {
                            break;
                        }
                    }
                    None => break,
                },
                _ = writer_kick.cancelled() => break,
            }
        }
        let _ = sink.close().await;
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
    if tokio::time::timeout(std::time::Duration::from_secs(2), writer).await.is_err() {
        kick.cancel();
    }
}
