//! The ACP backend end to end: `ahpd` running two ACP providers side by side - the real
//! claude-agent-acp on the mock Anthropic API, and the scripted ACP agent - through the official
//! client, every action folded through the official reducers and checked against the host's
//! snapshots.
//!
//! The providers are config entries of kind `acp` (the daemon runs `ahpd worker acp`). The adapter
//! is installed by `scripts/deps/acp.sh` (run by `scripts/test`).

use std::path::{Path, PathBuf};

use ahp_types::actions::{ChatTurnCancelledAction, StateAction};
use ahp_types::state::{ChatState, TurnState};
use serde_json::json;
use tests::mocks::anthropic::MockAnthropic;
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The installed claude-agent-acp: `$AHPD_CLAUDE_AGENT_ACP_BIN`, else under `$AHPD_TEST_CACHE`.
fn claude_agent_acp() -> PathBuf {
    if let Some(path) = std::env::var_os("AHPD_CLAUDE_AGENT_ACP_BIN") {
        return PathBuf::from(path);
    }
    let cache = std::env::var_os("AHPD_TEST_CACHE").map(PathBuf::from).unwrap_or_else(|| repo().join(".cache"));
    let bin = cache.join("acp/node_modules/.bin/claude-agent-acp");
    assert!(bin.exists(), "{} is not installed: run scripts/test (or scripts/deps/acp.sh) first", bin.display());
    bin
}

fn active_text(chat: Option<&ChatState>) -> String {
    chat.and_then(|c| c.active_turn.as_ref())
        .map(|t| {
            t.response_parts
                .iter()
                .filter_map(|p| match p {
                    ahp_types::state::ResponsePart::Markdown(m) => Some(m.content.as_str()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_acp_providers_run_turns_at_the_same_time() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let adapter_home = tempfile::Builder::new().prefix("ahpd-acp-home-").tempdir()?;
    let mut adapter_env: serde_json::Map<String, serde_json::Value> =
        mock.cli_env().into_iter().map(|(k, v)| (k, json!(v))).collect();
    adapter_env.insert("HOME".into(), json!(adapter_home.path().display().to_string()));
    adapter_env.insert("IS_SANDBOX".into(), json!("1"));
    let fake = repo().join("agent-acp/tests/fixtures/fake_acp_agent.py").display().to_string();
    let config = json!({ "agents": {
        "claude-acp": { "kind": "acp", "displayName": "Claude (ACP)",
                        "options": { "command": claude_agent_acp().display().to_string(), "env": adapter_env } },
        "scripted": { "kind": "acp", "displayName": "Scripted ACP",
                      "options": { "command": "python3", "args": [fake] } },
    }});
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut client = TestClient::connect(&daemon.url, "client-a").await?;
    let (_, scripted) = client.create_session("scripted", None).await?;
    let (_, claude) = client.create_session("claude-acp", None).await?;

    // The scripted agent's turn runs until it is stopped...
    let waiting = client.send(&scripted, "say waiting for claude; hang").await?;
    let chat = scripted.clone();
    client.until("the scripted turn to stream", move |m| active_text(m.chat(&chat)) == "waiting for claude").await?;

    // ...while the real adapter's turn, in another session, runs to its end.
    let answered = client.turn(&claude, "REPLY:hello from the side").await?;
    assert_eq!(answered.state, TurnState::Complete, "{answered:?}");
    // (The adapter's default mode adds a billing notice after the answer when the API is not
    // Anthropic's own.)
    assert!(turn_text(&answered).starts_with("hello from the side"), "{answered:?}");
    let still = client.mirror.chat(&scripted).and_then(|c| c.active_turn.as_ref()).map(|t| t.id.clone());
    assert_eq!(still.as_deref(), Some(waiting.as_str()), "the scripted turn was running all along");

    client
        .dispatch(
            &scripted,
            StateAction::ChatTurnCancelled(ChatTurnCancelledAction {
                turn_id: waiting.clone(),
                duration: 0,
                meta: None,
            }),
        )
        .await?;
    let stopped = client.finished(&scripted, &waiting).await?;
    assert_eq!(stopped.state, TurnState::Cancelled);
    let next = client.turn(&scripted, "say still here").await?;
    assert_eq!(turn_text(&next), "still here");

    client.check_against_snapshot(&scripted).await?;
    client.check_against_snapshot(&claude).await?;
    Ok(())
}
