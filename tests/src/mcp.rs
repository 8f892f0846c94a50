//! The official Python MCP SDK as a client of ahpd's tools endpoints (`tests/mcp/client.py`,
//! installed by `scripts/deps/mcp.sh`): 1.22.0 by default, or the newest release in one of its
//! modes ([`Sdk`]).

use std::path::PathBuf;

use anyhow::{anyhow, Context};
use serde_json::Value;

/// Which release of the SDK runs the client, and how it connects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sdk {
    /// 1.22.0 (`mcp-venv`): an `initialize` session at 2025-06-18, its newest revision.
    Pinned,
    /// The newest release (`mcp-venv-latest`) in one of its `Client` modes: `"legacy"` (the
    /// `initialize` handshake at its newest handshake revision), `"auto"` (`server/discover`
    /// first), or a revision such as `"2026-07-28"` (each request on its own).
    Latest(&'static str),
}

/// The python of the venv with the pinned `mcp` package.
pub fn python() -> PathBuf {
    python_of(Sdk::Pinned)
}

/// The python of the venv that holds `sdk`.
pub fn python_of(sdk: Sdk) -> PathBuf {
    let cache = std::env::var_os("AHPD_TEST_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(".cache"));
    let venv = match sdk {
        Sdk::Pinned => "mcp-venv",
        Sdk::Latest(_) => "mcp-venv-latest",
    };
    let python = cache.join(venv).join("bin/python");
    assert!(python.exists(), "{} is missing: run scripts/test (or scripts/deps/mcp.sh) first", python.display());
    python
}

/// Runs the pinned client; answers its one line of JSON.
pub async fn mcp_client(url: &str, token: &str, args: &[&str]) -> anyhow::Result<Value> {
    mcp_client_of(Sdk::Pinned, url, token, args).await
}

/// Runs the client on `sdk`; answers its one line of JSON.
pub async fn mcp_client_of(sdk: Sdk, url: &str, token: &str, args: &[&str]) -> anyhow::Result<Value> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp/client.py");
    let mut command = tokio::process::Command::new(python_of(sdk));
    if let Sdk::Latest(mode) = sdk {
        command.env("MCP_MODE", mode);
    }
    let out = command.arg(script).arg(url).arg(token).args(args).output().await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .last()
        .ok_or_else(|| anyhow!("the MCP client said nothing; stderr: {}", String::from_utf8_lossy(&out.stderr)))?;
    serde_json::from_str(line)
        .with_context(|| format!("the MCP client said {line:?}; stderr: {}", String::from_utf8_lossy(&out.stderr)))
}

/// Lists a tools endpoint's tools.
pub async fn list_tools(url: &str, token: &str) -> anyhow::Result<Value> {
    mcp_client(url, token, &["list"]).await
}

/// Lists a tools endpoint's tools with the client on `sdk`; says the revision agreed on.
pub async fn list_tools_of(sdk: Sdk, url: &str, token: &str) -> anyhow::Result<Value> {
    mcp_client_of(sdk, url, token, &["list"]).await
}

/// Calls a tool; answers `{isError, text}` (or `{httpError}`).
pub async fn call_tool(url: &str, token: &str, name: &str, arguments: &Value) -> anyhow::Result<Value> {
    mcp_client(url, token, &["call", name, &arguments.to_string()]).await
}

/// Calls several tools in order over one MCP session; answers each `{isError, text}`.
pub async fn call_tools(url: &str, token: &str, calls: &[(&str, Value)]) -> anyhow::Result<Vec<Value>> {
    call_tools_of(Sdk::Pinned, url, token, calls).await
}

/// Calls several tools in order with the client on `sdk`; answers each `{isError, text}` (or
/// `{rpcError}`).
pub async fn call_tools_of(sdk: Sdk, url: &str, token: &str, calls: &[(&str, Value)]) -> anyhow::Result<Vec<Value>> {
    let list: Vec<Value> =
        calls.iter().map(|(name, args)| Value::from(vec![Value::from(*name), args.clone()])).collect();
    let out = mcp_client_of(sdk, url, token, &["calls", &Value::from(list).to_string()]).await?;
    match out.get("results").and_then(Value::as_array) {
        Some(results) if results.len() == calls.len() => Ok(results.clone()),
        _ => Err(anyhow!("the MCP client did not answer every call: {out}")),
    }
}

/// The session's tools endpoint, as the notes agent (`revealEndpoint`) was handed it: its URL and
/// token.
pub async fn endpoint(client: &mut crate::TestClient, chat: &str) -> anyhow::Result<(String, String)> {
    let said = crate::turn_text(&client.turn(chat, "endpoint").await?);
    let mut words = said.split_whitespace().skip(1);
    let (Some(url), Some(token)) = (words.next(), words.next()) else { anyhow::bail!("no endpoint: {said}") };
    Ok((url.to_owned(), token.to_owned()))
}

/// What one MCP call answered: its text, or a failure naming why not.
pub fn text(result: &Value) -> &str {
    result["text"].as_str().or_else(|| result["rpcError"].as_str()).unwrap_or_default()
}

/// A call's text, which must be a success.
pub fn ok_text(result: &Value) -> anyhow::Result<&str> {
    anyhow::ensure!(result["isError"] == false, "expected success, got {result}");
    Ok(text(result))
}

/// Checks a call was refused with exactly `sentence`.
pub fn refused(result: &Value, sentence: &str) {
    assert_eq!(result["isError"], true, "expected the refusal {sentence:?}, got {result}");
    assert_eq!(text(result), sentence);
}

/// A successful call's text read as JSON.
pub fn json_of(result: &Value) -> anyhow::Result<Value> {
    use anyhow::Context;
    serde_json::from_str(ok_text(result)?).with_context(|| format!("not JSON: {result}"))
}

/// Sends a POST's head to `url` with `headers` and a `Content-Length` of `length`, and none of its
/// body; answers the status line's code, the response's headers (names lower-cased), and whether
/// the server then closed the connection. What a client's keep-alive connection meets when its
/// body is still on the way as the server answers.
pub async fn post_head_only(
    url: &str,
    headers: &[(&str, &str)],
    length: usize,
) -> anyhow::Result<(u16, Vec<(String, String)>, bool)> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let rest = url.trim_start_matches("http://");
    let (addr, path) = rest.split_once('/').map(|(a, p)| (a, format!("/{p}"))).unwrap_or((rest, "/".into()));
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let mut stream = tokio::io::BufReader::new(stream);
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {length}\r\n"
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.get_mut().write_all(head.as_bytes()).await?;
    let mut status_line = String::new();
    stream.read_line(&mut status_line).await?;
    let status = status_line.split_whitespace().nth(1).ok_or_else(|| anyhow!("no status line"))?.parse()?;
    let mut response_headers = Vec::new();
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).await?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            response_headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    let body_length: usize = response_headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; body_length];
    stream.read_exact(&mut body).await?;
    let mut more = [0u8; 1];
    let closed = matches!(tokio::time::timeout(crate::PATIENCE, stream.read(&mut more)).await, Ok(Ok(0)) | Ok(Err(_)));
    Ok((status, response_headers, closed))
}
