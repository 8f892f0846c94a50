//! The pi backend end to end: the real `ahpd` running its pi worker (kind `pi`), the real pi 0.73.1
//! and the project's mock OpenAI API, through the official client.
//!
//! pi is found at `$AHPD_PI_BIN`, else `$AHPD_TEST_CACHE/pi/node_modules/.bin/pi`, else
//! `<checkout>/.cache/pi/node_modules/.bin/pi` (`scripts/deps/pi.sh` installs it there).

use std::path::{Path, PathBuf};

use ahp_types::actions::{ChatTurnCancelledAction, StateAction};
use ahp_types::state::{PendingMessageKind, ResponsePart, ToolCallState, ToolResultContent, Turn, TurnState};
use serde_json::json;
use tests::daemon::children_of;
use tests::installed::pi_bin;
use tests::mocks::openai::MockOpenAi;
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

/// The mock, pi's own folder pointing at it, and a daemon whose `pi` agent runs the pi worker.
struct World {
    mock: MockOpenAi,
    daemon: Daemon,
    agent_dir: tempfile::TempDir,
}

impl World {
    async fn start() -> anyhow::Result<Self> {
        let mock = MockOpenAi::start().await?;
        let agent_dir = tempfile::Builder::new().prefix("ahpd-pi-agent-").tempdir()?;
        std::fs::write(agent_dir.path().join("models.json"), mock.pi_models_json("mock").to_string())?;
        let settings = json!({
            "defaultProvider": "mock", "defaultModel": "mock-model", "quietStartup": true,
            "retry": {"enabled": true, "maxRetries": 1, "baseDelayMs": 50, "provider": {"maxRetries": 0}}
        });
        std::fs::write(agent_dir.path().join("settings.json"), settings.to_string())?;
        let daemon = Daemon::start_with(daemon_options(agent_dir.path())).await?;
        Ok(Self { mock, daemon, agent_dir })
    }
}

fn daemon_options(agent_dir: &Path) -> DaemonOptions {
    DaemonOptions::with_config(json!({ "agents": { "pi": {
        "kind": "pi",
        "options": {
            "command": pi_bin().display().to_string(),
            "agentDir": agent_dir.display().to_string(),
        }
    } } }))
}

fn tool_calls(turn: &Turn) -> Vec<&ToolCallState> {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::ToolCall(tc) => Some(&tc.tool_call),
            _ => None,
        })
        .collect()
}

fn output(call: &ToolCallState) -> Option<String> {
    let ToolCallState::Completed(done) = call else { return None };
    Some(
        done.content
            .iter()
            .flatten()
            .filter_map(|c| match c {
                ToolResultContent::Text(t) => Some(t.text.as_str()),
                _ => None,
            })
            .collect(),
    )
}

fn streaming_text(client: &tests::Mirror, chat: &str) -> String {
    client
        .chat(chat)
        .and_then(|s| s.active_turn.as_ref())
        .map(|t| {
            t.response_parts
                .iter()
                .filter_map(|p| match p {
                    ResponsePart::Markdown(m) => Some(m.content.as_str()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until the host removed steering message `id` from the chat: the backend took it.
async fn taken(client: &mut TestClient, id: &str) -> anyhow::Result<()> {
    loop {
        client.pump()?;
        let removed = client.envelopes.iter().any(|e| {
            matches!(&e.action, StateAction::ChatPendingMessageRemoved(r) if r.kind == PendingMessageKind::Steering && r.id == id)
        });
        if removed {
            return Ok(());
        }
        client.next_event(tests::PATIENCE).await?;
    }
}

#[tokio::test]
async fn pi_streams_thinking_and_runs_a_tool_that_shows_its_output() -> anyhow::Result<()> {
    let world = World::start().await?;
    let mut a = TestClient::connect(&world.daemon.url, "a").await?;
    let (_session, chat) = a.create_session("pi", None).await?;

    let turn = a.turn(&chat, "[[think]] about it").await?;
    assert_eq!(turn.state, TurnState::Complete);
    assert!(turn
        .response_parts
        .iter()
        .any(|p| matches!(p, ResponsePart::Reasoning(r) if r.content == "Let me think about this. ")));
    assert_eq!(turn_text(&turn), "thought done");

    let turn = a.turn(&chat, "please [[bash echo hi]]").await?;
    assert_eq!(turn.state, TurnState::Complete);
    let calls = tool_calls(&turn);
    assert_eq!(calls.len(), 1);
    assert_eq!(output(calls[0]).as_deref(), Some("hi\n"));
    assert!(turn_text(&turn).contains("tool said: hi"));
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn pi_asks_before_a_command_and_the_client_denies_it() -> anyhow::Result<()> {
    let world = World::start().await?;
    let mut a = TestClient::connect(&world.daemon.url, "a").await?;
    let (_session, chat) = a.create_session("pi", Some(json!({"ask": "writes"}))).await?;
    let turn_id = a.send(&chat, "[[bash echo hi]]").await?;
    let waiting = a.until_waiting_calls(&chat, 1).await?;
    a.confirm(&chat, &waiting[0].0, &waiting[0].1, false).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete);
    assert!(matches!(tool_calls(&turn)[0], ToolCallState::Cancelled(_)), "a denied call is cancelled");
    assert!(turn_text(&turn).contains("tool said: The user denied this tool call."));
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn a_host_tool_declared_destructive_waits_for_a_person_and_a_denial_lets_the_turn_go_on() -> anyhow::Result<()> {
    let world = World::start().await?;
    let mut a = TestClient::connect(&world.daemon.url, "a").await?;
    let (victim, _) = a.create_session("pi", None).await?;
    // pi's own tools run without asking in this session; the host's destructive one still waits.
    let (_session, chat) = a.create_session("pi", Some(json!({"ask": "never"}))).await?;
    let call = format!("[[call delete_session {}]]", json!({ "session": victim }));
    let turn = tests::turns::deny_a_destructive_call(&mut a, &chat, &call, &victim).await?;
    assert!(turn_text(&turn).contains("tool said: The user denied this tool call."), "{}", turn_text(&turn));
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn pi_stops_a_turn_and_takes_a_steering_message() -> anyhow::Result<()> {
    let world = World::start().await?;
    let mut a = TestClient::connect(&world.daemon.url, "a").await?;
    let (_session, chat) = a.create_session("pi", None).await?;

    let turn_id = a.send(&chat, "[[hold]] and wait").await?;
    let c = chat.clone();
    a.until("the reply to stream", move |m| streaming_text(m, &c).starts_with("holding")).await?;
    let stop = ChatTurnCancelledAction { turn_id: turn_id.clone(), duration: 5, meta: None };
    a.dispatch(&chat, StateAction::ChatTurnCancelled(stop)).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Cancelled);

    let turn_id = a.send(&chat, "[[hold]] go").await?;
    let c = chat.clone();
    a.until("the reply to stream", move |m| streaming_text(m, &c).starts_with("holding")).await?;
    a.pending(&chat, PendingMessageKind::Steering, "s1", "steered: say bye").await?;
    taken(&mut a, "s1").await?;
    world.mock.release();
    let turn = a.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete);
    assert!(turn_text(&turn).ends_with("mock reply to: steered: say bye"), "{}", turn_text(&turn));
    assert_eq!(a.mirror.chat(&chat).map(|s| s.turns.len()), Some(2), "taken into the turn, not run as another");
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn pi_resumes_its_conversation_in_a_new_worker() -> anyhow::Result<()> {
    let world = World::start().await?;
    let mut a = TestClient::connect(&world.daemon.url, "a").await?;
    let (_session, chat) = a.create_session("pi", None).await?;
    let turn = a.turn(&chat, "remember the word zebra").await?;
    assert_eq!(turn.state, TurnState::Complete);

    // The worker (and the pi it runs) dies mid-turn; the daemon fails that turn, starts the worker
    // again, and the next message resumes the conversation from pi's session file.
    let turn_id = a.send(&chat, "[[hold]] and wait").await?;
    let c = chat.clone();
    a.until("the reply to stream", move |m| streaming_text(m, &c).starts_with("holding")).await?;
    let worker = children_of(world.daemon.pid())
        .into_iter()
        .find(|pid| std::fs::read_to_string(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.contains("worker\0pi")))
        .expect("the pi worker runs");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker), nix::sys::signal::Signal::SIGKILL)?;
    let killed = a.finished(&chat, &turn_id).await?;
    assert_eq!(killed.state, TurnState::Error);
    let turn = a.turn(&chat, "what was the word").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:#?}");
    let asked = world.mock.requests().last().map(|r| r.all_text()).unwrap_or_default();
    assert!(asked.contains("remember the word zebra"), "the model sees the earlier messages: {asked}");
    Ok(())
}

#[tokio::test]
async fn pi_resumes_its_conversation_after_ahpd_restarts() -> anyhow::Result<()> {
    let world = World::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-pi-home-").tempdir()?;
    let mut daemon = Daemon::start_in(home.path(), daemon_options(world.agent_dir.path())).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session("pi", None).await?;
    let turn = a.turn(&chat, "remember the word zebra").await?;
    assert_eq!(turn.state, TurnState::Complete);
    drop(a);
    daemon.terminate().await?;

    let daemon = Daemon::start_in(home.path(), daemon_options(world.agent_dir.path())).await?;
    let mut b = TestClient::connect(&daemon.url, "b").await?;
    b.subscribe(&session).await?;
    b.subscribe(&chat).await?;
    let history = b.mirror.chat(&chat).map(|c| c.turns.clone()).unwrap_or_default();
    assert_eq!(history.len(), 1, "the earlier turn is there after the restart");
    let turn = b.turn(&chat, "what was the word").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:#?}");
    let asked = world.mock.requests().last().map(|r| r.all_text()).unwrap_or_default();
    assert!(asked.contains("remember the word zebra"), "the model sees the earlier messages: {asked}");
    b.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn pi_resumes_its_conversation_after_its_session_left_memory() -> anyhow::Result<()> {
    let world = World::start().await?;
    let daemon = Daemon::start_with(daemon_options(world.agent_dir.path()).unloading_idle_after(60_000)).await?;
    let clock = TestClient::connect(&daemon.url, "clock").await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("pi", None).await?;
    assert_eq!(a.turn(&chat, "remember the word zebra").await?.state, TurnState::Complete);
    a.client.shutdown().await;

    // Nobody watches it, nothing runs: it leaves memory and pi's session for it is closed.
    daemon.advance_until_loaded(&clock, 60_000, 0).await?;

    let mut b = TestClient::connect(&daemon.url, "b").await?;
    b.subscribe(&chat).await?;
    assert_eq!(b.mirror.chat(&chat).map(|c| c.turns.len()), Some(1), "the turn came back from the store");
    let turn = b.turn(&chat, "what was the word").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:#?}");
    let asked = world.mock.requests().last().map(|r| r.all_text()).unwrap_or_default();
    assert!(asked.contains("remember the word zebra"), "the model sees the earlier messages: {asked}");
    b.check_against_snapshot(&chat).await?;
    Ok(())
}

/// The opening of the instruction the artifact tools carry (offered to every session): words of
/// the session's instructions that no tool description holds.
const ARTIFACT_INSTRUCTION: &str = "Record notable artifacts and references with `add_artifact_or_reference`";

#[tokio::test]
async fn pi_calls_a_host_tool_and_the_hidden_instructions_reach_the_model_alone() -> anyhow::Result<()> {
    let world = World::start().await?;
    let mut a = TestClient::connect(&world.daemon.url, "a").await?;
    let (session, chat) = a.create_session("pi", None).await?;

    let turn = a.turn(&chat, "[[call list_sessions {}]]").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:#?}");
    let calls = tool_calls(&turn);
    assert!(
        matches!(calls[..], [ToolCallState::Completed(c)] if c.success && c.tool_name == "list_sessions"),
        "{calls:?}"
    );
    let requests = world.mock.requests();
    let after = requests.last().expect("the model was asked again with the result");
    let results: Vec<String> = after
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| match &m["content"] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    let [listed] = &results[..] else { anyhow::bail!("one tool result: {results:?}") };
    let listed: serde_json::Value = serde_json::from_str(listed)?;
    let title = a.mirror.session(&session).map(|s| s.title.clone()).unwrap_or_default();
    assert!(
        listed["sessions"]
            .as_array()
            .is_some_and(|rows| rows.iter().any(|r| r["session"] == session.as_str() && r["title"] == title.as_str())),
        "the real answer, naming this very session: {listed}"
    );
    assert!(turn_text(&turn).starts_with("tool said: {\"sessions\""), "{}", turn_text(&turn));

    // The session's instructions reach the model in the prompt it starts with ...
    let system: String = requests[0]
        .messages()
        .iter()
        .filter(|m| m["role"] == "system" || m["role"] == "developer")
        .map(|m| m["content"].to_string())
        .collect();
    assert!(system.contains(ARTIFACT_INSTRUCTION), "the model sees the instructions: {system}");
    // ... and no client is shown them: not in any state it folded, nor in any action it was sent.
    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&session).await?;
    a.check_against_snapshot(ahp_types::ROOT_RESOURCE_URI).await?;
    let folded = serde_json::to_string(&a.mirror.states)?;
    assert!(folded.contains("add_artifact_or_reference"), "the folded state holds the offered tools");
    assert!(!folded.contains(ARTIFACT_INSTRUCTION), "no client's state holds the instructions");
    let sent = serde_json::to_string(&a.envelopes)?;
    assert!(!sent.contains(ARTIFACT_INSTRUCTION), "no action carried them");
    Ok(())
}

/// pi's own folder as a person keeps it: `models.json` naming the mock (and `settings` when given).
fn pi_folder(dir: &Path, mock: &MockOpenAi, settings: Option<serde_json::Value>) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("models.json"), mock.pi_models_json("mock").to_string())?;
    if let Some(settings) = settings {
        std::fs::write(dir.join("settings.json"), settings.to_string())?;
    }
    Ok(())
}

#[tokio::test]
async fn pi_runs_with_the_agent_folder_the_entrys_env_names() -> anyhow::Result<()> {
    let mock = MockOpenAi::start().await?;
    let folder = tempfile::Builder::new().prefix("ahpd-pi-own-").tempdir()?;
    pi_folder(folder.path(), &mock, None)?;
    let daemon = Daemon::start_with(DaemonOptions::with_config(json!({ "agents": { "pi": {
        "kind": "pi",
        "env": { "PI_CODING_AGENT_DIR": folder.path().display().to_string() },
        "options": { "command": pi_bin().display().to_string(), "model": "mock/mock-model" }
    } } })))
    .await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("pi", None).await?;
    let turn = a.turn(&chat, "hello from my own models").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:#?}");
    assert_eq!(turn_text(&turn), "mock reply to: hello from my own models");
    let asked = mock.requests().into_iter().rev().find(|r| r.body.get("messages").is_some()).expect("asked");
    assert_eq!(asked.body["model"], "mock-model", "the model the person's models.json names");
    Ok(())
}

#[tokio::test]
async fn with_nothing_set_pi_runs_with_the_persons_own_folder_in_their_home() -> anyhow::Result<()> {
    let mock = MockOpenAi::start().await?;
    let home = tempfile::Builder::new().prefix("ahpd-pi-home-").tempdir()?;
    let settings = json!({ "defaultProvider": "mock", "defaultModel": "mock-model", "quietStartup": true });
    pi_folder(&home.path().join(".pi/agent"), &mock, Some(settings))?;
    // The daemon's HOME is this folder (the harness points it there).
    let options = DaemonOptions::with_config(json!({ "agents": { "pi": {
        "kind": "pi", "options": { "command": pi_bin().display().to_string() }
    } } }));
    let daemon = Daemon::start_in(home.path(), options).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("pi", None).await?;
    let turn = a.turn(&chat, "hello from home").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:#?}");
    assert_eq!(turn_text(&turn), "mock reply to: hello from home");
    assert!(!home.path().join("data/ahpd/workers/pi/agent").exists(), "no folder of the worker's own");
    Ok(())
}

/// Runs the real `pi` as a person would in a terminal, in `folder`, with pi's folder `agent_dir`:
/// `pi -p <args…>` (waited for without blocking the mock). Answers what it printed.
async fn pi_by_hand(agent_dir: &Path, folder: &Path, args: &[&str]) -> anyhow::Result<String> {
    let output = tokio::process::Command::new(pi_bin())
        .arg("-p")
        .args(args)
        .current_dir(folder)
        .env("PI_CODING_AGENT_DIR", agent_dir)
        .env("PI_OFFLINE", "1")
        .env("PI_TELEMETRY", "0")
        .env("PI_SKIP_VERSION_CHECK", "1")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await?;
    anyhow::ensure!(output.status.success(), "pi failed: {}", String::from_utf8_lossy(&output.stderr));
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The session files under pi's folder `agent_dir`, each with what it holds.
fn pi_records(agent_dir: &Path) -> Vec<(PathBuf, String)> {
    let Ok(dirs) = std::fs::read_dir(agent_dir.join("sessions")) else { return Vec::new() };
    dirs.flatten()
        .filter_map(|d| std::fs::read_dir(d.path()).ok())
        .flat_map(|files| files.flatten().map(|f| f.path()))
        .filter_map(|p| Some((p.clone(), std::fs::read_to_string(&p).ok()?)))
        .collect()
}

#[tokio::test]
async fn a_conversation_made_in_ahpd_goes_on_with_pi_in_a_terminal_in_the_same_folder() -> anyhow::Result<()> {
    let world = World::start().await?;
    let folder = tempfile::Builder::new().prefix("ahpd-pi-folder-").tempdir()?;
    let mut a = TestClient::connect(&world.daemon.url, "a").await?;
    let (_session, chat) = a.create_session_in("pi", folder.path()).await?;
    let turn = a.turn(&chat, "remember the word plum").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:#?}");

    // The conversation is where pi keeps the folder's: `pi --continue` there goes on with it.
    let printed = pi_by_hand(world.agent_dir.path(), folder.path(), &["--continue", "what was the word"]).await?;
    assert!(printed.contains("mock reply to: what was the word"), "{printed}");
    let asked = world.mock.requests().last().map(|r| r.all_text()).unwrap_or_default();
    assert!(asked.contains("remember the word plum"), "pi sent the turn made in ahpd: {asked}");
    let records = pi_records(world.agent_dir.path());
    let [(file, record)] = &records[..] else { anyhow::bail!("one conversation in pi's folder: {records:?}") };
    assert!(record.contains("remember the word plum"), "{}", file.display());
    assert!(record.contains("mock reply to: what was the word"), "pi's answer is in the same file: {record}");
    Ok(())
}

#[tokio::test]
async fn a_conversation_pi_made_in_a_terminal_is_listed_opened_and_resumed_in_ahpd() -> anyhow::Result<()> {
    let world = World::start().await?;
    let folder = tempfile::Builder::new().prefix("ahpd-pi-folder-").tempdir()?;
    pi_by_hand(world.agent_dir.path(), folder.path(), &["remember the word kiwi"]).await?;

    let mut a = TestClient::connect(&world.daemon.url, "a").await?;
    // A conversation of the daemon's own, so pi's folder holds two.
    let (own_session, own_chat) = a.create_session("pi", None).await?;
    assert_eq!(a.turn(&own_chat, "hello").await?.state, TurnState::Complete);

    let items = a.listed_sessions(Some(1)).await?;
    let resources: Vec<&str> = items.iter().filter_map(|i| i["resource"].as_str()).collect();
    assert_eq!(resources.len(), 2, "pi's own and the daemon's, each once: {items:?}");
    assert!(resources.contains(&own_session.as_str()), "{items:?}");
    let row = items.iter().find(|i| i["resource"] != own_session.as_str()).expect("pi's conversation");
    assert_eq!(row["provider"], "pi");
    assert_eq!(row["title"], "remember the word kiwi");
    let foreign = row["resource"].as_str().expect("a resource").to_owned();

    // Opening it reads its turn back; nothing runs.
    let asked = world.mock.requests().len();
    a.subscribe(&foreign).await?;
    let chat = a.mirror.session(&foreign).and_then(|s| s.default_chat.clone()).expect("a default chat");
    a.subscribe(&chat).await?;
    let turns = a.mirror.chat(&chat).map(|c| c.turns.clone()).unwrap_or_default();
    assert_eq!(turns.len(), 1, "the conversation's turn was read back: {turns:?}");
    assert_eq!(turns[0].message.text, "remember the word kiwi");
    assert_eq!(turn_text(&turns[0]), "mock reply to: remember the word kiwi");
    assert_eq!(world.mock.requests().len(), asked, "reading it back asked the model nothing");

    // Saying something resumes pi's conversation: the model sees the earlier exchange.
    let turn = a.turn(&chat, "what was the word?").await?;
    assert_eq!(turn.state, TurnState::Complete, "{turn:?}");
    let seen = world.mock.requests().last().map(|r| r.all_text()).unwrap_or_default();
    assert!(seen.contains("remember the word kiwi"), "the earlier prompt was sent again: {seen}");
    assert!(seen.contains("mock reply to: remember the word kiwi"), "and the earlier answer: {seen}");
    let records = pi_records(world.agent_dir.path());
    assert_eq!(records.len(), 2, "it went on in pi's own file: {records:?}");
    assert!(records.iter().any(|(_, r)| r.contains("remember the word kiwi") && r.contains("what was the word?")));

    // It is the daemon's now: listed once.
    let again = a.listed_sessions(Some(1)).await?;
    assert_eq!(again.iter().filter(|i| i["resource"] == foreign.as_str()).count(), 1, "{again:?}");
    assert_eq!(again.len(), 2, "{again:?}");
    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&foreign).await?;
    Ok(())
}
