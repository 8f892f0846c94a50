//! The sessions an ACP agent keeps itself (`session/list`), end to end through the official AHP
//! client over a real daemon: the real claude-agent-acp, against the scripted Anthropic mock, lists
//! a conversation Claude Code made in a terminal; opening it reads its turns back from the agent's
//! `session/load` replay, and a message resumes it (the mock is sent the earlier exchange).

use ahp_types::state::TurnState;
use serde_json::json;
use tests::installed::{acp_adapter_entry, claude_agent_acp, claude_by_hand};
use tests::mocks::anthropic::{MockAnthropic, HELLO};
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

#[tokio::test]
async fn a_conversation_the_acp_agent_keeps_is_listed_read_back_and_resumed() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    // The adapter's HOME, where Claude Code keeps its conversations, and a project in it.
    let home = tempfile::Builder::new().prefix("ahpd-acp-catalogue-").tempdir()?;
    let folder = home.path().join("project");
    std::fs::create_dir_all(&folder)?;
    let id = claude_by_hand(&mock, home.path(), &folder, "remember the word MANGO").await?;

    let daemon_home = tempfile::Builder::new().prefix("ahpd-acp-sessions-").tempdir()?;
    let entry = acp_adapter_entry(&claude_agent_acp(), &mock, home.path());
    let daemon =
        Daemon::start_in(daemon_home.path(), DaemonOptions::with_config(json!({ "agents": { "claude-acp": entry } })))
            .await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    // Listed at once after the daemon starts: the listing asks an agent process of its own.
    let items = a.listed_sessions(None).await?;
    let foreign = format!("ahp-session:/{id}");
    let row = items.iter().find(|i| i["resource"] == foreign.as_str());
    let row = row.ok_or_else(|| anyhow::anyhow!("the adapter's session/list lists it: {items:?}"))?;
    assert_eq!(row["provider"], "claude-acp");
    assert_eq!(row["workingDirectories"], json!([format!("file://{}", folder.display())]), "{row}");

    // Opening it reads its turn back from the agent's replay; the model is asked nothing.
    let asked = mock.turn_requests().len();
    a.subscribe(&foreign).await?;
    let chat = a.mirror.session(&foreign).and_then(|s| s.default_chat.clone()).expect("a default chat");
    a.subscribe(&chat).await?;
    let turns = a.mirror.chat(&chat).map(|c| c.turns.clone()).unwrap_or_default();
    assert_eq!(turns.len(), 1, "the conversation's turn was read back: {turns:?}");
    assert_eq!(turns[0].message.text, "remember the word MANGO");
    assert_eq!(turn_text(&turns[0]), format!("{HELLO}remember the word MANGO"));
    assert_eq!(mock.turn_requests().len(), asked, "reading it back asked the model nothing");

    // A message resumes the agent's conversation: the model sees the earlier exchange.
    let turn = a.turn(&chat, "what was the word?").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    let seen = mock.turn_requests().last().map(|r| r.transcript_text()).unwrap_or_default();
    assert!(seen.contains("remember the word MANGO"), "the earlier prompt was sent again: {seen}");
    assert!(seen.contains(&format!("{HELLO}remember the word MANGO")), "and the earlier answer: {seen}");
    assert!(seen.contains("what was the word?"), "{seen}");

    // It is the daemon's now: listed once.
    let again = a.listed_sessions(None).await?;
    assert_eq!(again.iter().filter(|i| i["resource"] == foreign.as_str()).count(), 1, "{again:?}");
    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&foreign).await?;
    Ok(())
}
