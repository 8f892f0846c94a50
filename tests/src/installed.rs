//! Where the real agent programs the tests run are installed (by `scripts/deps/*.sh` into
//! `$AHPD_TEST_CACHE`), and the config entries that run them against the mock model APIs.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::mocks::anthropic::MockAnthropic;

/// `$AHPD_TEST_CACHE`, else the workspace's `.cache`.
fn cache() -> PathBuf {
    std::env::var_os("AHPD_TEST_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(".cache"))
}

/// `$<env>`, else `relative` under the cache; a missing program says how to install it.
fn installed(env: &str, relative: &str, script: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env) {
        return PathBuf::from(path);
    }
    let bin = cache().join(relative);
    assert!(
        bin.exists(),
        "{} is not installed: run scripts/test (or scripts/deps/{script}) to install it, or set {env}",
        bin.display()
    );
    bin
}

/// The real Claude Code CLI.
pub fn claude_bin() -> PathBuf {
    installed("AHPD_CLAUDE_BIN", "claude/node_modules/.bin/claude", "claude.sh")
}

/// The current Claude ACP adapter, which runs its tools itself.
pub fn claude_agent_acp() -> PathBuf {
    installed("AHPD_CLAUDE_AGENT_ACP_BIN", "acp/node_modules/.bin/claude-agent-acp", "acp.sh")
}

/// The older Claude ACP adapter, which reads, writes and runs through its client.
pub fn claude_code_acp() -> PathBuf {
    installed("AHPD_CLAUDE_CODE_ACP_BIN", "acp/node_modules/.bin/claude-code-acp", "acp.sh")
}

/// An `agents` entry of kind `claude` whose CLI talks to `mock`.
pub fn claude_entry(mock: &MockAnthropic) -> Value {
    let env: serde_json::Map<String, Value> = mock.cli_env().into_iter().map(|(k, v)| (k, Value::String(v))).collect();
    json!({ "kind": "claude", "env": env, "options": { "command": claude_bin() } })
}

/// An `agents` entry of kind `acp` running the adapter `command` against `mock`, with `home` as its
/// own `HOME`.
pub fn acp_adapter_entry(command: &Path, mock: &MockAnthropic, home: &Path) -> Value {
    let mut env: serde_json::Map<String, Value> = mock.cli_env().into_iter().map(|(k, v)| (k, json!(v))).collect();
    env.insert("HOME".into(), json!(home.display().to_string()));
    // The adapters refuse to skip permissions as root unless told they are sandboxed.
    env.insert("IS_SANDBOX".into(), json!("1"));
    // MCP tools would hide behind tool search otherwise (ACP has no alwaysLoad).
    env.insert("ENABLE_TOOL_SEARCH".into(), json!("false"));
    json!({ "kind": "acp", "options": { "command": command.display().to_string(), "env": env } })
}

/// The real pi coding agent.
pub fn pi_bin() -> PathBuf {
    installed("AHPD_PI_BIN", "pi/node_modules/.bin/pi", "pi.sh")
}

/// An `agents` entry of kind `pi` whose pi talks to `mock`, with `agent_dir` as pi's own folder
/// (its models and settings are written there).
pub fn pi_entry(mock: &crate::mocks::openai::MockOpenAi, agent_dir: &Path) -> std::io::Result<Value> {
    std::fs::write(agent_dir.join("models.json"), mock.pi_models_json("mock").to_string())?;
    let settings = json!({
        "defaultProvider": "mock", "defaultModel": "mock-model", "quietStartup": true,
        "retry": {"enabled": true, "maxRetries": 1, "baseDelayMs": 50, "provider": {"maxRetries": 0}}
    });
    std::fs::write(agent_dir.join("settings.json"), settings.to_string())?;
    Ok(json!({ "kind": "pi", "options": { "command": pi_bin(), "agentDir": agent_dir.display().to_string() } }))
}

/// Zed's Codex ACP adapter (`scripts/deps/codex.sh`), or `None` with the reason printed when it is
/// not installed (its tests skip).
pub fn codex_acp() -> Option<PathBuf> {
    let bin = std::env::var_os("AHPD_CODEX_ACP_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache().join("codex/node_modules/.bin/codex-acp"));
    if bin.exists() {
        return Some(bin);
    }
    eprintln!("skipped: {} is not installed; run scripts/deps/codex.sh or set AHPD_CODEX_ACP_BIN", bin.display());
    None
}

/// `PATH` with `bin`'s folder first, so a preset naming the program finds this one.
pub fn path_with(bin: &Path) -> String {
    let folder = bin.parent().map(Path::to_path_buf).unwrap_or_default();
    let rest = std::env::var("PATH").unwrap_or_default();
    format!("{}:{rest}", folder.display())
}

/// An `agents` entry that is the `codex` preset (its program found on the PATH) with Codex talking
/// to `mock`: `codex_home` becomes its `CODEX_HOME`, with a `config.toml` naming the mock as its
/// model provider.
pub fn codex_entry(mock: &crate::mocks::responses::MockResponses, codex_home: &Path) -> std::io::Result<Value> {
    std::fs::write(codex_home.join("config.toml"), mock.codex_config_toml("gpt-5.4-mini"))?;
    let env = json!({ "CODEX_HOME": codex_home.display().to_string(), "MOCK_API_KEY": "mock-dummy-key" });
    Ok(json!({ "kind": "acp", "options": { "preset": "codex", "env": env } }))
}
