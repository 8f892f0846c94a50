//! The ACP backend end to end: `ahpd` running two ACP providers side by side - the real
//! claude-agent-acp on the mock Anthropic API, and the scripted ACP agent - through the official
//! client, every action folded through the official reducers and checked against the host's
//! snapshots.
//!
//! The providers are config entries of kind `acp` (the daemon runs `ahpd worker acp`). The
//! adapters are installed by `scripts/deps/acp.sh` (run by `scripts/test`): claude-agent-acp
//! (`$AHPD_CLAUDE_AGENT_ACP_BIN`) runs its tools itself; claude-code-acp (`$AHPD_CLAUDE_CODE_ACP_BIN`)
//! reads, writes and runs commands through the worker's `fs/*` and `terminal/*`.

use std::path::{Path, PathBuf};

use ahp_types::actions::{ChatTurnCancelledAction, SessionConfigChangedAction, StateAction};
use ahp_types::state::{SnapshotState, ToolCallState, TurnState};
use serde_json::json;
use tests::installed::{acp_adapter_entry, claude_agent_acp, claude_code_acp};
use tests::mocks::anthropic::{MockAnthropic, THINKING};
use tests::plugins::{publish_plugins, team_plugin};
use tests::turns::{active_text, deny_a_destructive_call, reasoning, stop, tool_calls, turn_allowing};
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// An adapter home whose Claude settings start every session in `mode` (claude-agent-acp starts in
/// `auto`, where a model classifier answers instead of the person).
fn home_starting_in(mode: &str) -> anyhow::Result<tempfile::TempDir> {
    let home = tempfile::Builder::new().prefix("ahpd-acp-home-").tempdir()?;
    std::fs::create_dir_all(home.path().join(".claude"))?;
    let settings = json!({ "permissions": { "defaultMode": mode } });
    std::fs::write(home.path().join(".claude/settings.json"), settings.to_string())?;
    Ok(home)
}

/// Creates a session on `provider` in folder `dir`, waits until it is ready and subscribes to it
/// and its default chat. Answers (session, chat).
async fn create_in(client: &mut TestClient, provider: &str, dir: &Path) -> anyhow::Result<(String, String)> {
    let session = format!("ahp-session:/{}", uuid::Uuid::new_v4());
    let params = json!({ "channel": session, "provider": provider,
                         "workingDirectories": [format!("file://{}", dir.display())] });
    client.request("createSession", params).await.map_err(|e| anyhow::anyhow!("createSession: {e}"))?;
    client.subscribe(&session).await?;
    let s = session.clone();
    client
        .until("the session to be ready", move |m| {
            m.session(&s).is_some_and(|st| {
                st.lifecycle == ahp_types::state::SessionLifecycle::Ready && st.default_chat.is_some()
            })
        })
        .await?;
    let chat = client.mirror.session(&session).and_then(|s| s.default_chat.clone()).unwrap_or_default();
    client.subscribe(&chat).await?;
    Ok((session, chat))
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
    client.until("the scripted turn to stream", move |m| active_text(m, &chat) == "waiting for claude").await?;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_agent_acp_streams_asks_the_client_and_is_cancelled() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-acp-home-").tempdir()?;
    let folder = tempfile::Builder::new().prefix("ahpd-acp-folder-").tempdir()?;
    let config = json!({ "agents": { "claude-acp": acp_adapter_entry(&claude_agent_acp(), &mock, home.path()) } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = create_in(&mut a, "claude-acp", folder.path()).await?;

    // The agent named its modes when the session opened (it starts in `auto`, where a model
    // classifier answers instead of the person); once its offer reached the host, the client
    // picks `default`, where the agent asks the client.
    a.until("the adapter's offer", |m| match m.states.get(ahp_types::ROOT_RESOURCE_URI) {
        Some(SnapshotState::Root(root)) => {
            root.agents.iter().any(|x| x.provider == "claude-acp" && !x.models.is_empty())
        }
        _ => false,
    })
    .await?;
    let mode = |m: &tests::Mirror, s: &str| {
        m.session(s).and_then(|st| st.config.as_ref()).and_then(|c| c.values.get("permissionMode").cloned())
    };
    assert_eq!(mode(&a.mirror, &session), Some(json!("auto")), "the agent's own starting mode");
    let pick = [("permissionMode".to_owned(), json!("default"))].into_iter().collect();
    let seq = a
        .dispatch(
            &session,
            StateAction::SessionConfigChanged(SessionConfigChangedAction { config: pick, replace: None }),
        )
        .await?;

    // A streamed turn, thinking first.
    let one = a.turn(&chat, "THINK REPLY:the answer is forty-two").await?;
    assert_eq!(one.state, TurnState::Complete, "{one:?}");
    assert!(turn_text(&one).starts_with("the answer is forty-two"), "{one:?}");
    assert!(reasoning(&one).contains(THINKING), "{one:?}");
    let deltas = a.envelopes.iter().filter(|e| e.channel == chat && matches!(e.action, StateAction::ChatDelta(_)));
    assert!(deltas.count() >= 2, "the answer streamed in pieces");

    let taken =
        a.envelopes.iter().find(|e| e.origin.as_ref().is_some_and(|o| o.client_id == "a" && o.client_seq == seq));
    assert_eq!(taken.map(|e| e.rejection_reason.clone()), Some(None), "the mode change was taken: {taken:?}");
    assert_eq!(mode(&a.mirror, &session), Some(json!("default")));

    // A permission asked in the client, allowed once (the command runs in the session's folder) and denied once.
    let bash = |file: &str| format!(r#"TOOL:Bash ARGS:{{"command":"touch {file}","description":"Make a file"}}"#);
    tests::turns::one_allowed_one_denied(&mut a, &session, &chat, folder.path(), bash).await?;

    // A cancel mid-turn (dispatched while the answer streams), and the next turn runs.
    let long = a.send(&chat, "SLOW REPLY:one two three four five six seven eight nine ten eleven twelve").await?;
    let c = chat.clone();
    a.until("the answer to start streaming", move |m| !active_text(m, &c).is_empty()).await?;
    a.dispatch(&chat, stop(&long)).await?;
    let stopped = a.finished(&chat, &long).await?;
    assert_eq!(stopped.state, TurnState::Cancelled, "{stopped:?}");
    let next = a.turn(&chat, "REPLY:still here").await?;
    assert_eq!(next.state, TurnState::Complete, "{next:?}");
    assert!(turn_text(&next).starts_with("still here"), "{next:?}");

    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claude_preset_starts_a_session_where_the_person_is_asked_unless_they_chose_auto() -> anyhow::Result<()> {
    // claude-agent-acp's own start is `auto`, where a model classifier allows a command in the
    // person's place (the mock's side calls all say "allow"); the preset starts it in `default`.
    let mock = MockAnthropic::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-acp-home-").tempdir()?;
    let folder = tempfile::Builder::new().prefix("ahpd-acp-folder-").tempdir()?;
    let mut entry = acp_adapter_entry(&claude_agent_acp(), &mock, home.path());
    let env = entry["options"]["env"].take();
    let entry = json!({ "kind": "acp", "preset": "claude", "env": env });
    let mut options = DaemonOptions::with_config(json!({ "agents": { "claude": entry } }));
    options.env.push(("PATH".into(), tests::installed::path_with(&claude_agent_acp())));
    let daemon = Daemon::start_with(options).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = create_in(&mut a, "claude", folder.path()).await?;
    let mode = |m: &tests::Mirror, s: &str| {
        m.session(s).and_then(|st| st.config.as_ref()).and_then(|c| c.values.get("permissionMode").cloned())
    };
    let s = session.clone();
    a.until("the session's mode", move |m| mode(m, &s).is_some()).await?;
    assert_eq!(mode(&a.mirror, &session), Some(json!("default")), "the preset's start, not the adapter's `auto`");
    let bash = |file: &str| format!(r#"TOOL:Bash ARGS:{{"command":"touch {file}","description":"Make a file"}}"#);
    tests::turns::one_allowed_one_denied(&mut a, &session, &chat, folder.path(), bash).await?;
    a.check_against_snapshot(&chat).await?;

    // The person may choose `auto` for a session of their own.
    let chosen = format!("ahp-session:/{}", uuid::Uuid::new_v4());
    let params = json!({ "channel": chosen, "provider": "claude", "config": { "permissionMode": "auto" },
                         "workingDirectories": [format!("file://{}", folder.path().display())] });
    a.request("createSession", params).await.map_err(|e| anyhow::anyhow!("createSession: {e}"))?;
    a.subscribe(&chosen).await?;
    let c = chosen.clone();
    a.until("the chosen mode", move |m| mode(m, &c) == Some(json!("auto"))).await?;
    a.check_against_snapshot(&chosen).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_agent_acp_calls_a_host_tool_and_resumes_after_an_ahpd_restart() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let home = home_starting_in("default")?;
    let folder = tempfile::Builder::new().prefix("ahpd-acp-folder-").tempdir()?;
    let daemon_home = tempfile::Builder::new().prefix("ahpd-acp-restart-").tempdir()?;
    let options = || {
        let entry = acp_adapter_entry(&claude_agent_acp(), &mock, home.path());
        DaemonOptions::with_config(json!({ "agents": { "claude-acp": entry } }))
    };

    let mut first = Daemon::start_in(daemon_home.path(), options()).await?;
    let mut a = TestClient::connect(&first.url, "a").await?;
    let (session, chat) = create_in(&mut a, "claude-acp", folder.path()).await?;
    let session_id = session.trim_start_matches("ahp-session:/").to_owned();

    // The model calls a host tool through the session's /ahp-mcp endpoint and gets its real answer.
    let listed = turn_allowing(&mut a, &chat, "TOOL:mcp__ahp__list_sessions ARGS:{}").await?;
    assert_eq!(listed.state, TurnState::Complete, "{listed:?}");
    assert!(
        matches!(tool_calls(&listed.response_parts)[..], [ToolCallState::Completed(c)] if c.success),
        "{:?}",
        tool_calls(&listed.response_parts)
    );
    assert!(turn_text(&listed).contains("Tool result received:"), "{listed:?}");
    let requests = mock.turn_requests();
    assert!(
        requests[0].tool_names().iter().any(|n| n == "mcp__ahp__list_sessions"),
        "offered up front, no tool search: {:?}",
        requests[0].tool_names()
    );
    let answered = requests.last().map(|r| r.transcript_text()).unwrap_or_default();
    assert!(answered.contains(&session_id), "list_sessions named this very session to the model: {answered}");
    a.check_against_snapshot(&chat).await?;
    drop(a);
    first.terminate().await?;

    // After the restart the agent loads its conversation: the model sees the earlier messages,
    // and the history the agent replays is not shown again.
    let second = Daemon::start_in(daemon_home.path(), options()).await?;
    let mut b = TestClient::connect(&second.url, "b").await?;
    b.subscribe(&session).await?;
    b.subscribe(&chat).await?;
    assert_eq!(b.mirror.chat(&chat).map(|c| c.turns.len()), Some(1), "the store kept the first turn");
    let next = b.turn(&chat, "REPLY:still here").await?;
    assert_eq!(next.state, TurnState::Complete, "{next:?}");
    assert_eq!(turn_text(&next), "still here", "{next:?}");
    let seen = mock.turn_requests().last().map(|r| r.transcript_text()).unwrap_or_default();
    assert!(seen.contains("TOOL:mcp__ahp__list_sessions"), "the earlier prompt was sent again: {seen}");
    assert!(seen.contains(&session_id), "and the tool's answer: {seen}");
    b.check_against_snapshot(&chat).await?;
    b.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_tool_declared_destructive_waits_for_a_person_and_a_denial_lets_the_turn_go_on() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let home = home_starting_in("default")?;
    let folder = tempfile::Builder::new().prefix("ahpd-acp-folder-").tempdir()?;
    let entry = acp_adapter_entry(&claude_agent_acp(), &mock, home.path());
    let config = json!({ "agents": { "claude-acp": entry, "echo": { "kind": "echo" } } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (victim, _) = a.create_session("echo", None).await?;
    let (_session, chat) = create_in(&mut a, "claude-acp", folder.path()).await?;

    // The agent asks before it calls the host's delete_session through /ahp-mcp; the person denies.
    let call = format!("TOOL:mcp__ahp__delete_session ARGS:{}", json!({ "session": victim }));
    let turn = deny_a_destructive_call(&mut a, &chat, &call, &victim).await?;
    assert!(turn_text(&turn).contains("Tool result received:"), "the model heard the denial: {turn:?}");
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

/// The text of a call's result content, joined.
fn result_text(call: &ToolCallState) -> String {
    let ToolCallState::Completed(done) = call else { return String::new() };
    done.content
        .iter()
        .flatten()
        .filter_map(|c| match c {
            ahp_types::state::ToolResultContent::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_acp_reads_writes_and_runs_through_the_worker() -> anyhow::Result<()> {
    let mock = MockAnthropic::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-acp-home-").tempdir()?;
    let folder = tempfile::Builder::new().prefix("ahpd-acp-folder-").tempdir()?;
    let elsewhere = tempfile::Builder::new().prefix("ahpd-acp-elsewhere-").tempdir()?;
    let config = json!({ "agents": { "code-acp": acp_adapter_entry(&claude_code_acp(), &mock, home.path()) } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = create_in(&mut a, "code-acp", folder.path()).await?;

    // fs/write_text_file, served by the worker in the session's folder.
    let inside = folder.path().join("written.txt");
    let args = json!({ "file_path": inside, "content": "hello via acp\n" });
    let wrote = turn_allowing(&mut a, &chat, &format!("TOOL:mcp__acp__Write ARGS:{args}")).await?;
    assert_eq!(wrote.state, TurnState::Complete, "{wrote:?}");
    assert_eq!(std::fs::read_to_string(&inside)?, "hello via acp\n", "written through fs/write_text_file");
    // One call, asked about in the client first (the adapter asks before it writes).
    let asked = ahp_types::state::ToolCallConfirmationReason::UserAction;
    assert!(
        matches!(tool_calls(&wrote.response_parts)[..], [ToolCallState::Completed(c)] if c.success && c.confirmed == asked),
        "{wrote:?}"
    );

    // fs/read_text_file: the model gets the file's words.
    let args = json!({ "file_path": inside });
    let read = turn_allowing(&mut a, &chat, &format!("TOOL:mcp__acp__Read ARGS:{args}")).await?;
    assert!(turn_text(&read).contains("hello via acp"), "read through fs/read_text_file: {read:?}");

    // A write outside the session's folders is refused.
    let outside = elsewhere.path().join("outside.txt");
    let args = json!({ "file_path": outside, "content": "nope" });
    let refused = turn_allowing(&mut a, &chat, &format!("TOOL:mcp__acp__Write ARGS:{args}")).await?;
    assert!(!outside.exists(), "nothing was written outside");
    assert!(
        matches!(tool_calls(&refused.response_parts)[..], [ToolCallState::Completed(c)] if !c.success),
        "the call failed: {refused:?}"
    );
    assert!(turn_text(&refused).contains("outside this session's folders"), "{refused:?}");

    // terminal/*: a shell line runs in the session's folder; its output is the call's result.
    let args = json!({ "command": "echo $((6 * 7)) > answer.txt && cat answer.txt", "description": "Compute", "timeout": 10000 });
    let ran = turn_allowing(&mut a, &chat, &format!("TOOL:mcp__acp__Bash ARGS:{args}")).await?;
    assert_eq!(ran.state, TurnState::Complete, "{ran:?}");
    assert_eq!(std::fs::read_to_string(folder.path().join("answer.txt"))?.trim(), "42", "ran in the session's folder");
    let calls = tool_calls(&ran.response_parts);
    assert!(
        matches!(calls[..], [call] if result_text(call).contains("42")),
        "the terminal's output in the folded call: {calls:?}"
    );
    assert!(turn_text(&ran).contains("42"), "and it reached the model: {ran:?}");

    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_rule_added_later_reaches_the_resumed_acp_conversation_once() -> anyhow::Result<()> {
    let state = tempfile::Builder::new().prefix("ahpd-acp-state-").tempdir()?;
    let fake = repo().join("agent-acp/tests/fixtures/fake_acp_agent.py").display().to_string();
    let args = json!([fake, "--state-dir", state.path().display().to_string()]);
    let config =
        json!({ "agents": { "scripted": { "kind": "acp", "options": { "command": "python3", "args": args } } } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut c1 = TestClient::connect(&daemon.url, "c1").await?;
    c1.client.set_resource_request_handlers(team_plugin());
    let (session, chat) = c1.create_session("scripted", None).await?;
    let before = turn_text(&c1.turn(&chat, "prompt").await?);
    assert!(!before.contains("RULE-ALWAYS"), "{before}");

    // The client's plugin is copied; its rule changes the instructions, so the chat's conversation
    // is closed and loaded again (session/load) before the next turn. The history the agent
    // replays never heard the rule: it opens the next prompt, once.
    let plugin = json!([{ "type": "plugin", "id": "team", "uri": "virtual://c1/team", "name": "Team rules" }]);
    publish_plugins(&c1, &session, plugin).await?;
    let s = session.clone();
    c1.until("the plugin copied", move |m| {
        m.session(&s).and_then(|x| x.customizations.as_ref()).is_some_and(|list| !list.is_empty())
    })
    .await?;
    let said = turn_text(&c1.turn(&chat, "prompt").await?);
    assert!(said.contains("RULE-ALWAYS"), "the rule opens the prompt after the load: {said}");
    assert_eq!(turn_text(&c1.turn(&chat, "history").await?), "2 prompts before this", "the conversation went on");
    let again = turn_text(&c1.turn(&chat, "prompt").await?);
    assert!(!again.contains("RULE-ALWAYS"), "said once: {again}");
    c1.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_the_host_does_not_map_leaves_the_turn_going_and_is_logged_once() -> anyhow::Result<()> {
    let fake = repo().join("agent-acp/tests/fixtures/fake_acp_agent.py").display().to_string();
    let config =
        json!({ "agents": { "scripted": { "kind": "acp", "options": { "command": "python3", "args": [fake] } } } });
    let mut options = DaemonOptions::with_config(config);
    options.env.push(("AHPD_LOG".into(), "info,agent_acp=debug".into()));
    let daemon = Daemon::start_with(options).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_, chat) = a.create_session("scripted", None).await?;

    // A kind newer than the schema, twice, and one the schema knows and the host shows nothing for.
    let script = "say before; update made_up_update; update made_up_update; title Named; say after";
    let first = a.turn(&chat, script).await?;
    assert_eq!(first.state, TurnState::Complete, "{first:?}");
    let text = turn_text(&first);
    assert!(text.starts_with("before") && text.ends_with("after"), "{text}");
    let second = a.turn(&chat, "update made_up_update; update later_update; say again").await?;
    assert_eq!(second.state, TurnState::Complete, "{second:?}");
    assert_eq!(turn_text(&second), "again");
    a.check_against_snapshot(&chat).await?;

    // The worker's log is one stream the daemon passes on in order: once the last kind is in, any
    // line about the earlier ones is too.
    daemon.wait_for_log("later_update", tests::PATIENCE).await?;
    let said = |kind: &str| -> Vec<String> {
        let named = format!("\"{kind}\""); // the line's kind field, not the schema's list of kinds
        daemon.log().lines().filter(|l| l.contains("does not map") && l.contains(&named)).map(str::to_owned).collect()
    };
    assert_eq!(said("made_up_update").len(), 1, "once for three of them:\n{}", daemon.log());
    assert_eq!(said("session_info_update").len(), 1, "the known kind not shown is said too:\n{}", daemon.log());
    Ok(())
}

/// An ACP agent in a mode of its own that never asks calls the host's tools over the session's
/// `/ahp-mcp` endpoint without asking first (the scripted agent's `mcpcall`), so no worker can hold
/// the call: the host holds a destructive one for a person itself, a denial lets the turn go on
/// with the denial as the call's answer, and an allowed one runs; one that declares nothing
/// destructive runs as asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destructive_host_tool_an_acp_agent_calls_without_asking_is_held_for_a_person() -> anyhow::Result<()> {
    let fake = repo().join("agent-acp/tests/fixtures/fake_acp_agent.py").display().to_string();
    let config = json!({ "agents": {
        "scripted": { "kind": "acp", "options": { "command": "python3", "args": [fake] } },
        "echo": { "kind": "echo" } } });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (victim, _) = a.create_session("echo", None).await?;
    let (_, chat) = a.create_session("scripted", None).await?;

    let listed = a.turn(&chat, "mcpcall ahp list_sessions {}").await?;
    assert_eq!(listed.state, TurnState::Complete, "{listed:?}");
    assert!(turn_text(&listed).contains(&victim), "list_sessions ran without a person: {listed:?}");

    // The agent names no call in its request, so the host draws the call it holds beside the
    // agent's own: that one waits for the person, who denies it.
    let call = format!("mcpcall ahp delete_session {}", json!({ "session": victim }));
    let turn_id = a.send(&chat, &call).await?;
    let waiting = a.until_waiting_calls(&chat, 1).await?;
    let held = a.mirror.chat(&chat).and_then(|c| c.active_turn.clone()).map(|t| t.response_parts);
    let held: Vec<String> = tool_calls(&held.unwrap_or_default())
        .into_iter()
        .filter_map(|call| match call {
            ToolCallState::PendingConfirmation(p) => Some(p.tool_name.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(held, ["delete_session"], "the host holds the destructive call");
    a.confirm(&chat, &waiting[0].0, &waiting[0].1, false).await?;
    let denied = a.finished(&chat, &turn_id).await?;
    assert_eq!(denied.state, TurnState::Complete, "a denial lets the turn go on: {denied:?}");
    let calls = tool_calls(&denied.response_parts);
    let cancelled = calls.iter().filter(|c| matches!(c, ToolCallState::Cancelled(_))).count();
    let failed = calls.iter().filter(|c| matches!(c, ToolCallState::Completed(c) if !c.success)).count();
    assert_eq!(
        (calls.len(), cancelled, failed),
        (2, 1, 1),
        "the held call is denied, the agent's fails with it: {calls:?}"
    );
    assert!(
        turn_text(&denied).contains(agent_runner::engine::policy::DENIED),
        "the agent was answered the denial: {denied:?}"
    );
    let listed = a.listed_sessions(None).await?;
    assert!(listed.iter().any(|row| row["resource"] == victim.as_str()), "a denied delete deletes nothing: {listed:?}");
    a.check_against_snapshot(&chat).await?;

    let allowed = turn_allowing(&mut a, &chat, &call).await?;
    assert_eq!(allowed.state, TurnState::Complete, "{allowed:?}");
    assert!(turn_text(&allowed).starts_with("result:"), "the allowed call ran: {allowed:?}");
    assert!(
        tool_calls(&allowed.response_parts).iter().all(|c| matches!(c, ToolCallState::Completed(c) if c.success)),
        "the held call and the agent's completed: {:?}",
        tool_calls(&allowed.response_parts)
    );
    let listed = a.listed_sessions(None).await?;
    assert!(!listed.iter().any(|row| row["resource"] == victim.as_str()), "the session was deleted: {listed:?}");
    a.check_against_snapshot(&chat).await?;
    Ok(())
}
