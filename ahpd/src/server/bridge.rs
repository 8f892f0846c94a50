//! `--stdio` when a daemon already runs on this data folder: a plain client of that daemon's
//! WebSocket that relays each stdin line as one text frame and each frame as one stdout line. The
//! daemon (and every turn it runs) outlives the bridge; stdout carries the protocol alone.

use std::time::Duration;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};

use super::stdio::{Input, Lines};

/// How long the daemon's last frames and its close may take once stdin has closed.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Lines waiting for stdout: past this the daemon's frames wait in its own queue for this client.
const OUT_QUEUE: usize = 1024;

/// Where the bridge connects, and as whom.
pub struct Daemon {
    /// Its `ws://` URL, without a token.
    pub url: String,
    /// The token to present (the owner's), when it wants one.
    pub token: Option<String>,
}

/// How a relay ended.
#[derive(Debug, PartialEq)]
pub enum Ending {
    /// Stdin closed (the WebSocket was closed after it), or stdout did.
    ClientClosed,
    /// The daemon closed the WebSocket (or it broke): why, as a sentence.
    DaemonClosed(String),
}

/// Connects to `daemon` and relays until either side closes. Lines longer than
/// [`Lines::stdin`] allows are skipped and answered here, as the in-process `--stdio` does.
pub async fn relay(daemon: &Daemon, hard_frame_bytes: usize, max_frame_bytes: usize) -> anyhow::Result<Ending> {
    let (sink, stream) = connect(daemon).await?.split();
    let (out, out_rx) = mpsc::channel::<String>(OUT_QUEUE);
    let lines = Lines::stdin(hard_frame_bytes, max_frame_bytes);
    let drain = Drain::new();
    // Boxed, so that each can be dropped (and its sender of stdout lines with it) before the end.
    let mut upstream = Box::pin(upstream(lines, sink, out.clone(), drain.clone()));
    let mut downstream = Box::pin(downstream(stream, out, drain));
    let mut writer = Box::pin(write_lines(out_rx));
    let ending = tokio::select! {
        sent = &mut upstream => match sent {
            Sent::All => {
                // What the daemon sent before it read the close still reaches stdout.
                let _ = tokio::time::timeout(CLOSE_WAIT, futures_util::future::join(&mut downstream, &mut writer)).await;
                return Ok(Ending::ClientClosed);
            }
            Sent::OutputClosed => return Ok(Ending::ClientClosed),
            // The socket failed under a send: the read side says how, when it can.
            Sent::SocketFailed(why) => {
                let read = tokio::time::timeout(CLOSE_WAIT, &mut downstream).await;
                Ending::DaemonClosed(read.unwrap_or(why))
            }
        },
        why = &mut downstream => Ending::DaemonClosed(why),
        () = &mut writer => return Ok(Ending::ClientClosed),
    };
    // Every frame the daemon sent before it closed is written before the process says why it ends.
    drop(upstream);
    let _ = tokio::time::timeout(CLOSE_WAIT, writer).await;
    Ok(ending)
}

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How the relay of stdin ended.
enum Sent {
    /// Stdin closed, and the WebSocket was closed after it.
    All,
    /// Stdout closed: nobody reads the answers.
    OutputClosed,
    /// The WebSocket failed: how, as a sentence.
    SocketFailed(String),
}

/// Stdin to the daemon, a line a frame, until stdin closes; then the WebSocket is closed.
async fn upstream(
    mut lines: Lines,
    mut sink: SplitSink<Socket, Message>,
    out: mpsc::Sender<String>,
    drain: Drain,
) -> Sent {
    loop {
        match lines.next().await {
            Input::Line(line) => {
                if let Err(e) = sink.send(Message::text(line)).await {
                    return Sent::SocketFailed(format!("the connection broke: {e}"));
                }
            }
            Input::TooLong(answer) => {
                if out.send(answer.as_str().to_owned()).await.is_err() {
                    return Sent::OutputClosed;
                }
            }
            Input::End => {
                // A close read by the daemon drops the answers it has not sent yet: the requests
                // already relayed are answered first, as they are in process.
                if sink.send(Message::text(drain.start())).await.is_ok() {
                    let _ = tokio::time::timeout(CLOSE_WAIT, drain.done.notified()).await;
                }
                // The close handshake tells the daemon this client is gone for good.
                let _ = sink.close().await;
                return Sent::All;
            }
        }
    }
}

/// The daemon's frames to stdout, a frame a line, until it closes: why it ended, as a sentence.
async fn downstream(mut stream: SplitStream<Socket>, out: mpsc::Sender<String>, drain: Drain) -> String {
    loop {
        let text = match stream.next().await {
            Some(Ok(Message::Text(text))) => text.as_str().to_owned(),
            Some(Ok(Message::Binary(bytes))) => match String::from_utf8(bytes.to_vec()) {
                Ok(text) => text,
                Err(_) => continue,
            },
            Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
            Some(Ok(Message::Close(frame))) => {
                return match frame.map(|f| f.reason.to_string()).filter(|r| !r.is_empty()) {
                    Some(reason) => format!("it closed the connection: {reason}"),
                    None => "it closed the connection".to_owned(),
                };
            }
            Some(Err(e)) => return format!("the connection broke: {e}"),
            None => return "the connection ended".to_owned(),
        };
        if drain.answers(&text) {
            continue;
        }
        if out.send(text).await.is_err() {
            return "stdout was closed".to_owned();
        }
    }
}

/// Writes each line to stdout until every sender is gone (or stdout is).
async fn write_lines(mut lines: mpsc::Receiver<String>) {
    let mut out = tokio::io::stdout();
    while let Some(line) = lines.recv().await {
        if out.write_all(line.as_bytes()).await.is_err() || out.write_all(b"\n").await.is_err() {
            return;
        }
        // One flush for what is queued: a streamed burst is written together.
        if lines.is_empty() && out.flush().await.is_err() {
            return;
        }
    }
    let _ = out.flush().await;
}

/// The WebSocket to the daemon, its token as `Authorization: Bearer` (never in a URL, which a
/// proxy or a log could keep). Frames from the daemon are not size-limited: it is trusted.
async fn connect(daemon: &Daemon) -> anyhow::Result<Socket> {
    let mut request = daemon
        .url
        .as_str()
        .into_client_request()
        .map_err(|e| anyhow::anyhow!("{} is not a WebSocket URL: {e}", daemon.url))?;
    if let Some(token) = &daemon.token {
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| anyhow::anyhow!("the daemon's token cannot be sent in a header"))?;
        request.headers_mut().insert(tungstenite::http::header::AUTHORIZATION, value);
    }
    let config = WebSocketConfig::default().max_message_size(None).max_frame_size(None);
    match tokio_tungstenite::connect_async_with_config(request, Some(config), true).await {
        Ok((socket, _)) => Ok(socket),
        Err(tungstenite::Error::Http(response)) => {
            let body = response.body().as_deref().map(String::from_utf8_lossy).unwrap_or_default();
            anyhow::bail!(
                "the daemon at {} refused the connection ({}): {}",
                daemon.url,
                response.status(),
                body.trim()
            )
        }
        Err(e) => anyhow::bail!("could not connect to the daemon at {}: {e}", daemon.url),
    }
}

/// The bridge's own last request when stdin closes: a `ping` answered after every answer the
/// daemon had already queued for this connection, its answer kept off stdout.
#[derive(Clone)]
struct Drain {
    id: std::sync::Arc<str>,
    started: std::sync::Arc<std::sync::atomic::AtomicBool>,
    done: std::sync::Arc<tokio::sync::Notify>,
}

impl Drain {
    fn new() -> Self {
        Self {
            id: format!("ahpd-stdio-bridge-{}", uuid::Uuid::new_v4()).into(),
            started: Default::default(),
            done: Default::default(),
        }
    }

    /// The `ping` to send.
    fn start(&self) -> String {
        self.started.store(true, std::sync::atomic::Ordering::SeqCst);
        serde_json::json!({
            "jsonrpc": "2.0",
            "id": &*self.id,
            "method": "ping",
            "params": { "channel": ahp_types::ROOT_RESOURCE_URI },
        })
        .to_string()
    }

    /// True when `frame` is the answer to the `ping` (which then ends the wait for it).
    fn answers(&self, frame: &str) -> bool {
        if !self.started.load(std::sync::atomic::Ordering::SeqCst) || !frame.contains(&*self.id) {
            return false;
        }
        let answer = serde_json::from_str::<serde_json::Value>(frame).ok();
        if answer.is_some_and(|a| a.get("id").and_then(|id| id.as_str()) == Some(&*self.id)) {
            self.done.notify_one();
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drain_ping_is_told_from_the_daemons_other_frames() {
        let drain = Drain::new();
        let answer = format!(r#"{{"jsonrpc":"2.0","id":"{}","result":null}}"#, drain.id);
        assert!(!drain.answers(&answer), "not before it is sent");
        let ping: serde_json::Value = serde_json::from_str(&drain.start()).expect("json");
        assert_eq!(ping["method"], "ping");
        assert_eq!(ping["id"], &*drain.id);
        assert!(drain.answers(&answer));
        // A frame that only mentions the id (a message quoting it) is the client's.
        let quoting = format!(r#"{{"jsonrpc":"2.0","method":"action","params":{{"text":"{}"}}}}"#, drain.id);
        assert!(!drain.answers(&quoting));
        assert!(!drain.answers(r#"{"jsonrpc":"2.0","id":1,"result":null}"#));
    }
}
