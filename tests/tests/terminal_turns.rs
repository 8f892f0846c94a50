//! Terminals in a chat (issue 21), with the real Claude Code CLI on the scripted Anthropic mock:
//! a `!` command runs as the host's own turn in a terminal the turn names — the model never sees
//! it, and after `ahpd restart` the chat reads back with it in its place and its terminal exited
//! with what it printed; a Bash call the model makes shows its output as a terminal part.

use ahp_types::state::{
    ResponsePart, TerminalLifecycleState, ToolCallState, ToolResultContent, ToolResultTerminalContent, Turn, TurnState,
};
use ahp_types::ROOT_RESOURCE_URI;
use serde_json::{json, Value};
use tests::client::terminal_output;
use tests::daemon::Home;
use tests::installed::claude_entry;
use tests::mocks::anthropic::MockAnthropic;
use tests::{turn_text, TestClient};

/// A config whose `claude` agent talks to `mock`, whose terminals run `/bin/sh`.
fn claude_config(mock: &MockAnthropic) -> Value {
    json!({ "agents": { "claude": claude_entry(mock) }, "defaultShell": "/bin/sh" })
}

/// `ahpd on ws://… (pid N)…` → the url.
fn announced(stdout: &str) -> anyhow::Result<String> {
    let first = stdout.lines().next().unwrap_or_default();
    let rest = first.strip_prefix("ahpd on ").ok_or_else(|| anyhow::anyhow!("not an announcement: {stdout}"))?;
    Ok(rest.split_once(" (pid ").map_or(rest, |(url, _)| url).to_owned())
}

/// The terminal parts of a turn's tool calls, completed, with the call's success.
fn terminal_parts(turn: &Turn) -> Vec<(bool, ToolResultTerminalContent)> {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::ToolCall(tc) => match &tc.tool_call {
                ToolCallState::Completed(c) => Some(c),
                _ => None,
            },
            _ => None,
        })
        .flat_map(|c| {
            c.content.iter().flatten().filter_map(move |content| match content {
                ToolResultContent::Terminal(t) => Some((c.success, t.clone())),
                _ => None,
            })
        })
        .collect()
}

fn chat_turns(client: &TestClient, chat: &str) -> Vec<Turn> {
    client.mirror.chat(chat).map(|c| c.turns.clone()).unwrap_or_default()
}

#[tokio::test]
async fn a_bang_command_is_the_hosts_turn_unseen_by_the_model_and_read_back_in_its_place() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let home = Home::new()?;
    home.write_config(&claude_config(&mock))?;
    let folder = home.path().join("project");
    std::fs::create_dir_all(&folder)?;
    for name in ["alpha.txt", "beta.txt"] {
        std::fs::write(folder.join(name), "x")?;
    }
    let started = home.expect(0, &["start", "--port", "0"]).await?;
    let url = announced(&started.stdout)?;
    let mut a = TestClient::connect(&url, "a").await?;
    let (_, chat) = a.create_session_in("claude", &folder).await?;

    let first = a.turn(&chat, "before the command").await?;
    assert_eq!(first.state, TurnState::Complete);
    let command = a.turn(&chat, "!ls").await?;
    assert_eq!(command.state, TurnState::Complete, "{command:?}");
    let parts = terminal_parts(&command);
    let [(success, terminal)] = &parts[..] else { anyhow::bail!("one terminal part: {:?}", command.response_parts) };
    assert!(success);
    assert_eq!(terminal.result.as_ref().and_then(|r| r.exit_code), Some(0), "its exit code is in the turn");
    let preview = terminal.result.as_ref().and_then(|r| r.preview.clone()).unwrap_or_default();
    assert!(preview.contains("alpha.txt") && preview.contains("beta.txt"), "{preview:?}");
    a.subscribe(&terminal.resource).await?;
    let listed = a.mirror.terminal(&terminal.resource).map(terminal_output).unwrap_or_default();
    assert!(listed.contains("alpha.txt") && listed.contains("beta.txt"), "the terminal lists the folder: {listed:?}");
    let after = a.turn(&chat, "after the command").await?;
    assert_eq!(turn_text(&after), format!("{}after the command", tests::mocks::anthropic::HELLO));

    // The model saw the turns around the command, never the command or what it printed.
    let requests = mock.turn_requests();
    assert!(!requests.is_empty());
    for request in &requests {
        let text = request.transcript_text();
        assert!(!text.contains("!ls") && !text.contains("alpha.txt"), "the model saw the command: {text}");
    }
    assert!(requests.last().is_some_and(|r| r.transcript_text().contains("before the command")));
    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&terminal.resource).await?;
    let before: Vec<String> = chat_turns(&a, &chat).iter().map(|t| t.id.clone()).collect();
    assert_eq!(before, [first.id.clone(), command.id.clone(), after.id.clone()]);
    drop(a);

    let restarted = home.expect(0, &["restart"]).await?;
    let url = announced(&restarted.stdout)?;
    let mut b = TestClient::connect(&url, "b").await?;
    b.subscribe(&chat).await?;
    let turns = chat_turns(&b, &chat);
    let ids: Vec<String> = turns.iter().map(|t| t.id.clone()).collect();
    assert_eq!(ids, before, "the chat reads back with the command's turn in its place");
    assert_eq!(turns[1].message.text, "!ls");
    assert_eq!(terminal_parts(&turns[1]).len(), 1);
    b.subscribe(&terminal.resource).await?;
    let state = b.mirror.terminal(&terminal.resource).cloned().ok_or_else(|| anyhow::anyhow!("no terminal"))?;
    assert!(matches!(&state.lifecycle, TerminalLifecycleState::Exited(e) if e.exit_code == Some(0)), "{state:?}");
    assert!(terminal_output(&state).contains("alpha.txt"), "what it printed is kept: {state:?}");
    // Not a terminal somebody has open any more.
    let root = b.mirror.root().and_then(|r| r.terminals.clone()).unwrap_or_default();
    assert!(root.iter().all(|t| t.resource != terminal.resource), "{root:?}");
    b.check_against_snapshot(ROOT_RESOURCE_URI).await?;
    home.expect(0, &["stop"]).await?;
    Ok(())
}

#[tokio::test]
async fn a_command_claude_runs_shows_its_output_as_a_terminal_readable_after_a_restart() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-test-").tempdir()?;
    let options = tests::DaemonOptions::with_config(claude_config(&mock));
    let mut daemon = tests::Daemon::start_in(home.path(), options.clone()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_, chat) = a.create_session("claude", None).await?;
    let args = json!({ "command": "echo from-bash; exit 3", "description": "Say where it is from" });
    let turn_id = a.send(&chat, &format!("run it TOOL:Bash ARGS:{args}")).await?;
    let waiting = a.until_waiting_calls(&chat, 1).await?;
    a.confirm(&chat, &waiting[0].0, &waiting[0].1, true).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    let parts = terminal_parts(&turn);
    let [(success, terminal)] = &parts[..] else { anyhow::bail!("one terminal part: {:?}", turn.response_parts) };
    assert!(!success, "a command that exited 3 failed");
    assert_eq!(terminal.title, "echo from-bash; exit 3");
    assert_eq!(terminal.result.as_ref().and_then(|r| r.exit_code), Some(3));
    a.subscribe(&terminal.resource).await?;
    let state = a.mirror.terminal(&terminal.resource).cloned().ok_or_else(|| anyhow::anyhow!("no terminal"))?;
    assert!(terminal_output(&state).contains("from-bash"), "{state:?}");
    a.check_against_snapshot(&chat).await?;
    drop(a);

    daemon.terminate().await?;
    let daemon = tests::Daemon::start_in(home.path(), options).await?;
    let mut b = TestClient::connect(&daemon.url, "b").await?;
    b.subscribe(&terminal.resource).await?;
    let state = b.mirror.terminal(&terminal.resource).cloned().ok_or_else(|| anyhow::anyhow!("no terminal"))?;
    assert!(matches!(&state.lifecycle, TerminalLifecycleState::Exited(e) if e.exit_code == Some(3)), "{state:?}");
    assert!(terminal_output(&state).contains("from-bash"), "kept across the restart: {state:?}");
    Ok(())
}

#[tokio::test]
async fn a_command_a_claude_subagent_runs_shows_its_output_as_a_terminal_in_its_own_chat() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let daemon = tests::Daemon::start_with(tests::DaemonOptions::with_config(claude_config(&mock))).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session("claude", None).await?;
    assert_eq!(a.turn(&chat, "hello").await?.state, TurnState::Complete);
    let offered = mock.turn_requests().last().map(|r| r.tool_names()).unwrap_or_default();
    let task = ["Agent", "Task"].into_iter().find(|t| offered.iter().any(|o| o == t)).expect("a Task tool");

    let bash = json!({ "command": "echo from-the-subagent", "description": "Say where it is from" });
    let args = json!({ "description": "Run a command", "prompt": format!("TOOL:Bash ARGS:{bash}"),
                       "subagent_type": "general-purpose", "run_in_background": false });
    let turn_id = a.send(&chat, &format!("delegate TOOL:{task} ARGS:{args}")).await?;
    let (s, c) = (session.clone(), chat.clone());
    a.until("the subagent's chat", move |m| {
        m.session(&s).is_some_and(|st| {
            st.chats
                .iter()
                .any(|x| matches!(&x.origin, Some(ahp_types::state::ChatOrigin::Tool { chat: p, .. }) if *p == c))
        })
    })
    .await?;
    let sub = a
        .mirror
        .session(&session)
        .and_then(|st| st.chats.iter().find(|x| x.origin.is_some()).map(|x| x.resource.clone()))
        .ok_or_else(|| anyhow::anyhow!("no subagent chat"))?;
    a.subscribe(&sub).await?;
    // The CLI lets a subagent run this command without asking.
    assert_eq!(a.finished(&chat, &turn_id).await?.state, TurnState::Complete);

    let done = a.mirror.chat(&sub).and_then(|c| c.turns.last().cloned()).ok_or_else(|| anyhow::anyhow!("no turn"))?;
    let parts = terminal_parts(&done);
    let [(success, terminal)] = &parts[..] else { anyhow::bail!("one terminal part: {:?}", done.response_parts) };
    assert!(success, "{done:?}");
    assert_eq!(terminal.title, "echo from-the-subagent");
    a.subscribe(&terminal.resource).await?;
    let state = a.mirror.terminal(&terminal.resource).cloned().ok_or_else(|| anyhow::anyhow!("no terminal"))?;
    assert!(terminal_output(&state).contains("from-the-subagent"), "{state:?}");
    a.check_against_snapshot(&sub).await?;
    a.check_against_snapshot(&terminal.resource).await?;
    Ok(())
}
