//! A raw WebSocket peer for what the official client will not send: malformed frames, string ids,
//! batches, oversized messages, and upgrades with hostile headers.

use std::time::Duration;

use anyhow::{anyhow, bail};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// A raw connection.
pub struct RawSocket {
    ws: tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
}

/// Opens a WebSocket to `url` with extra headers; on an HTTP refusal answers its status.
pub async fn upgrade(url: &str, headers: &[(&str, &str)]) -> Result<RawSocket, u16> {
    let authorized = headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("authorization"));
    let url = if authorized { url.to_owned() } else { crate::daemon::with_token(url) };
    upgrade_as_given(&url, headers).await
}

/// Opens a WebSocket to `url` with exactly these headers (no token the harness knows is added).
pub async fn upgrade_as_given(url: &str, headers: &[(&str, &str)]) -> Result<RawSocket, u16> {
    let mut request = url.into_client_request().map_err(|_| 0u16)?;
    for (k, v) in headers {
        let name = tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(k.as_bytes()).map_err(|_| 0u16)?;
        request.headers_mut().insert(name, v.parse().map_err(|_| 0u16)?);
    }
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(64 << 20))
        .max_frame_size(Some(64 << 20));
    match tokio_tungstenite::connect_async_with_config(request, Some(config), false).await {
        Ok((ws, _)) => Ok(RawSocket { ws }),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => Err(response.status().as_u16()),
        Err(_) => Err(0),
    }
}

impl RawSocket {
    /// Connects with a receive buffer of about `receive_buffer` bytes, so a test that stops
    /// reading fills the path between the daemon and itself quickly (a slow reader).
    pub async fn connect_small_window(url: &str, receive_buffer: u32) -> anyhow::Result<Self> {
        let addr = url.trim_start_matches("ws://").trim_end_matches('/');
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.set_recv_buffer_size(receive_buffer)?;
        let stream = socket.connect(addr.parse()?).await?;
        let request = crate::daemon::with_token(url).into_client_request()?;
        let (ws, _) =
            tokio_tungstenite::client_async(request, tokio_tungstenite::MaybeTlsStream::Plain(stream)).await?;
        Ok(RawSocket { ws })
    }

    /// The next JSON message, or `None` once the peer closed (or reset) the connection; waits at
    /// most 30 s for either.
    pub async fn next_or_end(&mut self) -> anyhow::Result<Option<Value>> {
        Ok(self.next_text().await?.map(|text| serde_json::from_str(&text)).transpose()?)
    }

    /// Connects with no extra headers.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        upgrade(url, &[]).await.map_err(|status| anyhow!("upgrade refused with HTTP {status}"))
    }

    /// Sends one text frame.
    pub async fn send_text(&mut self, text: impl Into<String>) -> anyhow::Result<()> {
        self.ws.send(Message::Text(text.into().into())).await?;
        Ok(())
    }

    /// Sends a JSON value as one frame.
    pub async fn send(&mut self, value: Value) -> anyhow::Result<()> {
        self.send_text(value.to_string()).await
    }

    /// The next JSON message, waiting at most 30 s.
    pub async fn recv(&mut self) -> anyhow::Result<Value> {
        loop {
            let message = tokio::time::timeout(Duration::from_secs(30), self.ws.next())
                .await
                .map_err(|_| anyhow!("no message within 30 s"))?
                .ok_or_else(|| anyhow!("the connection closed"))??;
            match message {
                Message::Text(text) => return Ok(serde_json::from_str(&text)?),
                Message::Close(frame) => bail!("the connection closed: {frame:?}"),
                _ => continue,
            }
        }
    }

    /// The next text frame as it came, unparsed (a load generator's cheap read); `None` once the
    /// peer closed (or reset) the connection; waits at most 30 s for either.
    pub async fn next_text(&mut self) -> anyhow::Result<Option<String>> {
        loop {
            let message = tokio::time::timeout(Duration::from_secs(30), self.ws.next())
                .await
                .map_err(|_| anyhow!("neither a message nor the end within 30 s"))?;
            match message {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return Ok(None),
                Some(Ok(Message::Text(text))) => return Ok(Some(text.as_str().to_owned())),
                Some(Ok(_)) => continue,
            }
        }
    }

    /// The next response (skipping notifications).
    pub async fn response(&mut self) -> anyhow::Result<Value> {
        loop {
            let message = self.recv().await?;
            if message.get("method").is_none() {
                return Ok(message);
            }
        }
    }

    /// Sends a request and waits for the response with its id.
    pub async fn call(&mut self, id: u64, method: &str, params: Value) -> anyhow::Result<Value> {
        self.send(serde_json::json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })).await?;
        loop {
            let message = self.response().await?;
            if message.get("id") == Some(&Value::from(id)) {
                return Ok(message);
            }
        }
    }

    /// True once the peer closed the connection (within 10 s).
    pub async fn closed(&mut self) -> bool {
        let wait = async {
            loop {
                match self.ws.next().await {
                    None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return true,
                    Some(Ok(_)) => continue,
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), wait).await.unwrap_or(false)
    }
}

/// An HTTP GET on the daemon's port; answers the status code.
pub async fn http_status(url: &str, path: &str) -> anyhow::Result<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("ws://").trim_end_matches('/');
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).await?;
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf);
    let status = text.split_whitespace().nth(1).ok_or_else(|| anyhow!("no status line"))?;
    Ok(status.parse()?)
}

/// An HTTP POST with a JSON body on the daemon's port; answers (status, body).
pub async fn http_post(url: &str, headers: &[(&str, &str)], body: &str) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.trim_start_matches("http://").trim_start_matches("ws://");
    let (addr, path) = rest.split_once('/').map(|(a, p)| (a, format!("/{p}"))).unwrap_or((rest, "/".into()));
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    // A `Host` among `headers` is sent instead of the address's (a rebound name, in a door test).
    let host = headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("host")).map_or(addr, |(_, v)| *v);
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers.iter().filter(|(k, _)| !k.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await?;
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text.split_whitespace().nth(1).ok_or_else(|| anyhow!("no status line"))?.parse()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Ok((status, body))
}
