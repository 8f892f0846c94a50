//! The verbs' side of the control socket: connect, send one request line, read one reply line.

use std::path::Path;
use std::time::Duration;

use interprocess::local_socket::tokio::prelude::*;
use interprocess::local_socket::GenericFilePath;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::{Reply, Request};

/// Why a request got no answer.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    /// Nothing listens on the socket (or it does not exist).
    #[error("nothing answers on {0}: {1}")]
    NotListening(String, std::io::Error),
    /// Something listens and did not answer in time.
    #[error("{0} did not answer within {1} s")]
    Silent(String, u64),
    /// The connection broke or closed before the answer.
    #[error("{0} closed before it answered: {1}")]
    Broken(String, String),
    /// The answer was not a reply.
    #[error("{0} answered something that is not a reply: {1}")]
    Garbled(String, serde_json::Error),
}

/// Connects to `socket`, sends `request`, and reads the reply, within `within` in all.
pub async fn ask(socket: &Path, request: &Request, within: Duration) -> Result<Reply, AskError> {
    let shown = socket.display().to_string();
    let stream = connect(socket).await?;
    let exchange = async {
        // `&Stream` reads and writes; no split needed.
        let mut send = &stream;
        let mut line = serde_json::to_string(request).map_err(|e| AskError::Broken(shown.clone(), e.to_string()))?;
        line.push('\n');
        send.write_all(line.as_bytes()).await.map_err(|e| AskError::Broken(shown.clone(), e.to_string()))?;
        send.flush().await.map_err(|e| AskError::Broken(shown.clone(), e.to_string()))?;
        let mut answer = String::new();
        let read = BufReader::new(&stream)
            .read_line(&mut answer)
            .await
            .map_err(|e| AskError::Broken(shown.clone(), e.to_string()))?;
        if read == 0 {
            return Err(AskError::Broken(shown.clone(), "no answer".into()));
        }
        serde_json::from_str(&answer).map_err(|e| AskError::Garbled(shown.clone(), e))
    };
    tokio::time::timeout(within, exchange).await.map_err(|_| AskError::Silent(shown.clone(), within.as_secs()))?
}

/// True when something listens on `socket` (a bound socket accepts a connection into its backlog
/// even before its owner serves it; a socket file left by a dead daemon refuses).
pub async fn listening(socket: &Path) -> bool {
    connect(socket).await.is_ok()
}

async fn connect(socket: &Path) -> Result<LocalSocketStream, AskError> {
    let shown = socket.display().to_string();
    let name = socket.to_fs_name::<GenericFilePath>().map_err(|e| AskError::NotListening(shown.clone(), e))?;
    // A local connect is answered at once, or refused; the bound is for a wedged kernel queue.
    match tokio::time::timeout(Duration::from_secs(5), LocalSocketStream::connect(name)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(AskError::NotListening(shown, e)),
        Err(_) => Err(AskError::Silent(shown, 5)),
    }
}
