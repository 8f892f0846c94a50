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
    found(env, relative, script).unwrap_or_else(|why| panic!("{why}"))
}

/// `$<env>`, else `relative` under the cache, or why it is not there and how to install it.
fn found(env: &str, relative: &str, script: &str) -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(env) {
        return Ok(PathBuf::from(path));
    }
    let bin = cache().join(relative);
    if !bin.exists() {
        return Err(format!(
            "{} is not installed: run scripts/test (or scripts/deps/{script}) to install it, or set {env}",
            bin.display()
        ));
    }
    Ok(bin)
}

/// `program` on the PATH.
pub fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| p.is_file())
}

/// bubblewrap (`scripts/deps/sandbox.sh` installs Debian's), or why this machine has none.
pub fn bwrap() -> Result<PathBuf, String> {
    on_path("bwrap").ok_or_else(|| "bubblewrap (bwrap) is not installed: run scripts/deps/sandbox.sh".to_owned())
}

/// The real Claude Code CLI.
pub fn claude_bin() -> PathBuf {
    installed("AHPD_CLAUDE_BIN", "claude/node_modules/.bin/claude", "claude.sh")
}

/// Runs `claude -p PROMPT` in `folder` with `home` as its `HOME`, the way a person would outside
/// the daemon; answers the conversation id the CLI chose.
pub async fn claude_by_hand(mock: &MockAnthropic, home: &Path, folder: &Path, prompt: &str) -> anyhow::Result<String> {
    let output = tokio::process::Command::new(claude_bin())
        .args(["-p", prompt, "--output-format", "json"])
        .envs(mock.cli_env())
        .env("HOME", home)
        .current_dir(folder)
        .stdin(std::process::Stdio::null())
        .output()
        .await?;
    anyhow::ensure!(
        output.status.success(),
        "claude -p failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: Value = serde_json::from_slice(&output.stdout)?;
    answer["session_id"].as_str().map(str::to_owned).ok_or_else(|| anyhow::anyhow!("no session_id in {answer}"))
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
    write_pi_agent_dir(mock, agent_dir)?;
    Ok(json!({ "kind": "pi", "options": { "command": pi_bin(), "agentDir": agent_dir.display().to_string() } }))
}

/// pi's own folder with its models and settings pointing at `mock`.
pub fn write_pi_agent_dir(mock: &crate::mocks::openai::MockOpenAi, agent_dir: &Path) -> std::io::Result<()> {
    std::fs::write(agent_dir.join("models.json"), mock.pi_models_json("mock").to_string())?;
    let settings = json!({
        "defaultProvider": "mock", "defaultModel": "mock-model", "quietStartup": true,
        "retry": {"enabled": true, "maxRetries": 1, "baseDelayMs": 50, "provider": {"maxRetries": 0}}
    });
    std::fs::write(agent_dir.join("settings.json"), settings.to_string())
}

/// Zed's Codex ACP adapter (`scripts/deps/codex.sh`), or why it is not installed (its tests skip, saying so).
pub fn codex_acp() -> Result<PathBuf, String> {
    found("AHPD_CODEX_ACP_BIN", "codex/node_modules/.bin/codex-acp", "codex.sh")
}

/// The ACP adapter for pi (`scripts/deps/pi-acp.sh`), or why it is not installed. Its folder also
/// holds the pi it drives and the Node that runs both.
pub fn pi_acp() -> Result<PathBuf, String> {
    found("AHPD_PI_ACP_BIN", "pi-acp/node_modules/.bin/pi-acp", "pi-acp.sh")
}

/// GitHub Copilot CLI (`scripts/deps/copilot.sh`), or why it is not installed.
pub fn copilot_bin() -> Result<PathBuf, String> {
    found("AHPD_COPILOT_BIN", "copilot/node_modules/.bin/copilot", "copilot.sh")
}

/// The real Gemini CLI, run as `gemini --acp` by the `gemini` preset, or why it is not installed
/// (its tests skip, saying so).
pub fn gemini_bin() -> Result<PathBuf, String> {
    found("AHPD_GEMINI_BIN", "gemini/node_modules/.bin/gemini", "gemini.sh")
}

/// The `PATH` with the folder of `command` first, so a preset naming the program finds this one.
pub fn path_with(command: &Path) -> String {
    let folder = command.parent().map(Path::to_path_buf).unwrap_or_default();
    let rest = std::env::var_os("PATH").unwrap_or_default();
    let paths = std::iter::once(folder).chain(std::env::split_paths(&rest));
    std::env::join_paths(paths).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Qwen Code, run as `qwen --acp` by the `qwen` preset, or why it is not installed (its tests
/// skip, saying so).
pub fn qwen_bin() -> Result<PathBuf, String> {
    found("AHPD_QWEN_BIN", "qwen/node_modules/.bin/qwen", "qwen.sh")
}

/// opencode (`opencode-ai`), run as `opencode acp` by the `opencode` preset, or why it is not
/// installed (its tests skip, saying so).
pub fn opencode_bin() -> Result<PathBuf, String> {
    found("AHPD_OPENCODE_BIN", "opencode/node_modules/.bin/opencode", "opencode.sh")
}

/// Kilo (`@kilocode/cli`, a fork of opencode), run as `kilo acp` by the `kilo` preset, or why it is
/// not installed (its tests skip, saying so).
pub fn kilo_bin() -> Result<PathBuf, String> {
    found("AHPD_KILO_BIN", "kilo/node_modules/.bin/kilo", "opencode.sh")
}
