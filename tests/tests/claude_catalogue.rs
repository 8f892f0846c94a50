//! Claude Code's own conversations, ones this daemon never held, end to end: the real `claude` CLI
//! writes one down in the daemon's `HOME` (run by hand, as a person would), the daemon lists it
//! beside its own sessions, opening it reads its turns back, and saying something resumes it.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use ahp_types::state::TurnState;
use serde_json::{json, Value};
use tests::mocks::anthropic::{MockAnthropic, HELLO};
use tests::{Daemon, DaemonOptions, TestClient};

/// The real Claude Code CLI: `$AHPD_CLAUDE_BIN`, else where `scripts/deps/claude.sh` installs it.
fn claude_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("AHPD_CLAUDE_BIN") {
        return PathBuf::from(bin);
    }
    let cache = std::env::var_os("AHPD_TEST_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(".cache"));
    let bin = cache.join("claude/node_modules/.bin/claude");
    assert!(
        bin.exists(),
        "the claude CLI is not installed at {}: run scripts/test (or scripts/deps/claude.sh) to install it",
        bin.display()
    );
    bin
}

/// Runs `claude -p PROMPT` in `folder` with `home` as its `HOME`, the way a person would outside
/// the daemon; answers the conversation id the CLI chose.
async fn claude_by_hand(mock: &MockAnthropic, home: &Path, folder: &Path, prompt: &str) -> anyhow::Result<String> {
    let output = tokio::process::Command::new(claude_bin())
        .args(["-p", prompt, "--output-format", "json"])
        .envs(mock.cli_env())
        .env("HOME", home)
        .current_dir(folder)
        .stdin(Stdio::null())
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

fn options(mock: &MockAnthropic) -> DaemonOptions {
    let env: serde_json::Map<String, Value> = mock.cli_env().into_iter().map(|(k, v)| (k, Value::String(v))).collect();
    DaemonOptions::with_config(json!({ "agents": { "claude": {
        "kind": "claude", "env": env, "options": { "command": claude_bin() }
    } } }))
}

/// The resources `listSessions` answers, every page.
async fn listed(client: &TestClient) -> anyhow::Result<Vec<Value>> {
    let mut items = Vec::new();
    let mut cursor = Value::Null;
    loop {
        let page =
            client.request("listSessions", json!({ "channel": "ahp-root://", "cursor": cursor, "limit": 1 })).await?;
        items.extend(page["items"].as_array().cloned().unwrap_or_default());
        match page.get("nextCursor") {
            Some(next) if !next.is_null() => cursor = next.clone(),
            _ => return Ok(items),
        }
    }
}

#[tokio::test]
async fn a_conversation_claude_kept_on_its_own_is_listed_read_back_and_resumed() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-claude-catalogue-").tempdir()?;
    let folder = home.path().join("project");
    std::fs::create_dir_all(&folder)?;
    let id = claude_by_hand(&mock, home.path(), &folder, "remember the word MANGO").await?;

    let daemon = Daemon::start_in(home.path(), options(&mock)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    // A session of the daemon's own, with a turn, so Claude's files hold two conversations.
    let (own_session, own_chat) = a.create_session("claude", None).await?;
    assert_eq!(a.turn(&own_chat, "hello").await?.state, TurnState::Complete);

    let items = listed(&a).await?;
    let resources: Vec<&str> = items.iter().filter_map(|i| i["resource"].as_str()).collect();
    let foreign = format!("ahp-session:/{id}");
    assert!(resources.contains(&foreign.as_str()), "Claude's own conversation is listed: {items:?}");
    assert!(resources.contains(&own_session.as_str()), "{items:?}");
    assert_eq!(resources.len(), 2, "the daemon's own conversation is not listed twice: {items:?}");
    let row = items.iter().find(|i| i["resource"] == foreign.as_str()).expect("listed");
    assert_eq!(row["provider"], "claude");

    // Opening it reads its turn back; nothing runs.
    a.subscribe(&foreign).await?;
    let chat = a.mirror.session(&foreign).and_then(|s| s.default_chat.clone()).expect("a default chat");
    a.subscribe(&chat).await?;
    let turns = a.mirror.chat(&chat).map(|c| c.turns.clone()).unwrap_or_default();
    assert_eq!(turns.len(), 1, "the conversation's turn was read back: {turns:?}");
    assert!(turns[0].message.text.contains("remember the word MANGO"), "{:?}", turns[0].message);
    let asked = mock.turn_requests().len();

    // Saying something resumes Claude's conversation: the model sees the earlier exchange.
    let turn = a.turn(&chat, "what was the word?").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    let requests = mock.turn_requests();
    assert!(requests.len() > asked, "the model was asked");
    let seen = requests.last().map(|r| r.transcript_text()).unwrap_or_default();
    assert!(seen.contains("remember the word MANGO"), "the earlier prompt was sent again: {seen}");
    assert!(seen.contains(&format!("{HELLO}remember the word MANGO")), "and the earlier answer: {seen}");

    // It is the daemon's now: listed once, and it stays after a restart.
    let again = listed(&a).await?;
    assert_eq!(again.iter().filter(|i| i["resource"] == foreign.as_str()).count(), 1, "{again:?}");
    assert_eq!(again.len(), 2, "{again:?}");
    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&foreign).await?;
    Ok(())
}
