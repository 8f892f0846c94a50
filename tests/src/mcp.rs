//! The official Python MCP SDK as a client of ahpd's tools endpoints (`tests/mcp/client.py`,
//! installed by `scripts/deps/mcp.sh`).

use std::path::PathBuf;

use anyhow::{anyhow, Context};
use serde_json::Value;

/// The venv's python with the `mcp` package.
pub fn python() -> PathBuf {
    let cache = std::env::var_os("AHPD_TEST_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(".cache"));
    let python = cache.join("mcp-venv/bin/python");
    assert!(python.exists(), "{} is missing: run scripts/test (or scripts/deps/mcp.sh) first", python.display());
    python
}

/// Runs the client; answers its one line of JSON.
pub async fn mcp_client(url: &str, token: &str, args: &[&str]) -> anyhow::Result<Value> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp/client.py");
    let out = tokio::process::Command::new(python()).arg(script).arg(url).arg(token).args(args).output().await?;
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

/// Calls a tool; answers `{isError, text}` (or `{httpError}`).
pub async fn call_tool(url: &str, token: &str, name: &str, arguments: &Value) -> anyhow::Result<Value> {
    mcp_client(url, token, &["call", name, &arguments.to_string()]).await
}

/// Calls several tools in order over one MCP session; answers each `{isError, text}`.
pub async fn call_tools(url: &str, token: &str, calls: &[(&str, Value)]) -> anyhow::Result<Vec<Value>> {
    let list: Vec<Value> =
        calls.iter().map(|(name, args)| Value::from(vec![Value::from(*name), args.clone()])).collect();
    let out = mcp_client(url, token, &["calls", &Value::from(list).to_string()]).await?;
    match out.get("results").and_then(Value::as_array) {
        Some(results) if results.len() == calls.len() => Ok(results.clone()),
        _ => Err(anyhow!("the MCP client did not answer every call: {out}")),
    }
}
