//! Opening a link to a remote host: the command form (a child process in its own group, speaking
//! AHP on its stdio, one message per line) or the URL form (a WebSocket with the remote's token),
//! both carried by the JSON-RPC peer every worker already uses (`agent_runner::rpc`), which hands
//! over what arrives in the order it was written.

use std::time::Duration;

use agent_runner::child::{Child, ChildCommand};
use agent_runner::rpc::{Incoming, Peer};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use super::spec::Reach;

/// How long opening a link may take before it counts as failed.
const OPEN_WITHIN: Duration = Duration::from_secs(20);

/// An open link: the peer, what the remote sends, and the child that carries it (command form).
pub struct Opened {
    /// Requests and notifications to the remote.
    pub peer: Peer,
    /// What the remote sends that is not an answer, in order.
    pub incoming: mpsc::UnboundedReceiver<Incoming>,
    /// The command form's process (its group is killed when this is dropped).
    pub child: Option<Child>,
}

/// Opens a link as `reach` says, or says why it could not.
pub async fn open(name: &str, reach: &Reach) -> Result<Opened, String> {
    match tokio::time::timeout(OPEN_WITHIN, open_now(name, reach)).await {
        Ok(opened) => opened,
        Err(_) => Err(format!("opening the link took over {} s", OPEN_WITHIN.as_secs())),
    }
}

async fn open_now(name: &str, reach: &Reach) -> Result<Opened, String> {
    let (tx, incoming) = mpsc::unbounded_channel();
    let deliver = move |message| {
        let _ = tx.send(message);
    };
    match reach {
        Reach::Command(argv) => {
            let (program, args) = argv.split_first().ok_or("the command is empty")?;
            let (child, mut pipes) = ChildCommand::new(program)
                .args(args)
                .log_stderr(format!("remote {name}"), tracing::Level::INFO)
                .spawn()
                .map_err(|e| e.to_string())?;
            let stdin = pipes.take_stdin().map_err(|e| e.to_string())?;
            let peer = Peer::start_foreign(pipes.stdout, stdin, deliver);
            Ok(Opened { peer, incoming, child: Some(child) })
        }
        Reach::Url { url, token_file } => {
            let mut request = url.as_str().into_client_request().map_err(|e| format!("{url}: {e}"))?;
            if let Some(file) = token_file {
                let token = std::fs::read_to_string(file)
                    .map_err(|e| format!("could not read the token file {}: {e}", file.display()))?;
                let bearer = format!("Bearer {}", token.trim())
                    .parse()
                    .map_err(|_| format!("the token in {} is not a header value", file.display()))?;
                request.headers_mut().insert("Authorization", bearer);
            }
            let (socket, _) = tokio_tungstenite::connect_async(request).await.map_err(|e| describe_ws_error(&e))?;
            let (ours, theirs) = tokio::io::duplex(1 << 20);
            tokio::spawn(carry_frames(socket, theirs));
            let (reader, writer) = tokio::io::split(ours);
            let peer = Peer::start_foreign(reader, writer, deliver);
            Ok(Opened { peer, incoming, child: None })
        }
    }
}

/// A refused upgrade said as the remote said it (a 401 is a wrong or missing token).
fn describe_ws_error(e: &tokio_tungstenite::tungstenite::Error) -> String {
    use tokio_tungstenite::tungstenite::Error;
    match e {
        Error::Http(response) => {
            let body = response.body().as_deref().map(String::from_utf8_lossy).unwrap_or_default();
            format!("the remote refused the connection (HTTP {}): {}", response.status(), body.trim())
        }
        other => other.to_string(),
    }
}

/// Carries lines from the peer to the WebSocket as text frames and frames back as lines, until
/// either side closes.
async fn carry_frames(
    socket: tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    theirs: tokio::io::DuplexStream,
) {
    let (mut sink, mut stream) = socket.split();
    let (read, mut write) = tokio::io::split(theirs);
    let mut lines = BufReader::new(read).lines();
    loop {
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(line)) => {
                    if sink.send(Message::text(line)).await.is_err() {
                        break;
                    }
                }
                _ => {
                    let _ = sink.close().await;
                    break;
                }
            },
            frame = stream.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    let mut line = text.as_str().to_owned();
                    line.push('\n');
                    if write.write_all(line.as_bytes()).await.is_err() {
                        break;
                    }
                }
                Some(Ok(Message::Binary(bytes))) => {
                    let mut line = bytes.to_vec();
                    line.push(b'\n');
                    if write.write_all(&line).await.is_err() {
                        break;
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break,
            },
        }
    }
    let _ = write.shutdown().await;
}
