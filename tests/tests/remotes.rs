//! Issue 31's remote hosts with two real daemons on this machine (`tests::remotes`): a local
//! daemon whose config names a remote one, reached as a child `ahpd --stdio` (the command form)
//! and as a `ws://` URL with a token file (the URL form). Each scenario runs in both forms
//! (`command::…`, `url::…`): the remote's agents and sessions offered here; a turn streamed from
//! there folding here into what the remote snapshots; a confirmation and a `!` command's terminal
//! across the link; the link cut mid-turn and caught up with nothing lost or doubled; the local
//! daemon killed with SIGKILL and the remote's sessions found again; `create_session` from a local
//! session's tools made there and counted here; the remote's state in `ahpd status`/`ahpd agents`,
//! and actions refused while it is down.

use ahp::SubscriptionEvent;
use ahp_types::state::{ResponsePart, SessionLifecycle, ToolCallState, ToolResultContent, TurnState};
use ahp_types::ROOT_RESOURCE_URI;
use anyhow::anyhow;
use serde_json::{json, Value};
use tests::client::{terminal_output, PATIENCE};
use tests::daemon::{alive, descendants, until_all_gone, until_exited};
use tests::remotes::{
    snapshot_state, turn_actions, until_connected, until_listed, until_mirrors, until_state, Form, Pair, Setup, NAME,
};
use tests::turns::{active_text, link_in, refusals, session_of, stop, successes};
use tests::{turn_text, user_message, Mirror, TestClient};

/// Runs each scenario in both forms, as `command::<name>` and `url::<name>`.
macro_rules! in_both_forms {
    ($($name:ident),* $(,)?) => {
        mod command {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() -> anyhow::Result<()> {
                    super::$name(tests::remotes::Form::Command).await
                }
            )*
        }
        mod url {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() -> anyhow::Result<()> {
                    super::$name(tests::remotes::Form::Url).await
                }
            )*
        }
    };
}

in_both_forms!(
    a_local_client_lists_the_remotes_agents_and_sessions_and_streams_a_reply_from_there,
    a_remote_confirmation_is_allowed_and_a_remote_commands_terminal_is_read_from_here,
    a_link_cut_mid_turn_is_caught_up_with_nothing_lost_or_doubled,
    the_remotes_sessions_outlive_a_killed_local_daemon_and_show_again_after_its_restart,
    create_session_on_a_remote_agent_from_a_local_sessions_tools_counts_in_the_calling_tree,
    status_and_agents_name_the_remote_and_a_remote_that_is_down_refuses_actions,
    a_remote_restarted_is_found_again_and_its_sessions_go_on_from_here,
);

/// `words` words, long enough at the remote echo's pace for a test to act while it streams.
fn long_reply(words: usize) -> String {
    (0..words).map(|i| format!("word{i}")).collect::<Vec<_>>().join(" ")
}

/// Waits until the running turn of `chat` has streamed some of its reply.
async fn until_streaming(client: &mut TestClient, chat: &str) -> anyhow::Result<()> {
    let c = chat.to_owned();
    client.until("the reply to stream", move |m| !active_text(m, &c).is_empty()).await
}

/// Subscribes to `session` (a session made elsewhere), waits until it is ready, and subscribes to
/// its default chat; answers the chat.
async fn watch_session(client: &mut TestClient, session: &str) -> anyhow::Result<String> {
    client.subscribe(session).await?;
    let s = session.to_owned();
    client
        .until("the session to be ready", move |m| {
            m.session(&s).is_some_and(|st| st.lifecycle == SessionLifecycle::Ready && st.default_chat.is_some())
        })
        .await?;
    let chat = client.mirror.session(session).and_then(|s| s.default_chat.clone()).ok_or_else(|| anyhow!("no chat"))?;
    client.subscribe(&chat).await?;
    Ok(chat)
}

/// The first scenario through a real `ssh 127.0.0.1 ahpd --stdio` (a private sshd whose key's
/// forced command is the remote's `ahpd --stdio`), where this machine can run an sshd (as root);
/// skipped with the reason printed otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_real_ssh_a_local_client_lists_the_remotes_agents_and_sessions_and_streams_a_reply(
) -> anyhow::Result<()> {
    a_local_client_lists_the_remotes_agents_and_sessions_and_streams_a_reply_from_there(Form::Ssh).await
}

async fn a_local_client_lists_the_remotes_agents_and_sessions_and_streams_a_reply_from_there(
    form: Form,
) -> anyhow::Result<()> {
    let Some(pair) = Pair::start_if_possible(form).await? else { return Ok(()) };
    // A session made on the remote directly, before the local daemon looks.
    let mut there = pair.remote_client("there").await?;
    let (existing, existing_chat) = there.create_session("echo", None).await?;
    there.turn(&existing_chat, "made over there").await?;

    let mut here = pair.local_client("here").await?;
    until_connected(&mut here).await?;
    let (ours, theirs) = (here.mirror.root().cloned(), there.mirror.root().cloned());
    let (ours, theirs) = (ours.ok_or_else(|| anyhow!("no root"))?, theirs.ok_or_else(|| anyhow!("no root"))?);
    for (provider, display) in [("echo", "Echo"), ("notes", "Notes")] {
        let far = format!("{provider}@{NAME}");
        let offered = ours.agents.iter().find(|a| a.provider == far).ok_or_else(|| anyhow!("{far} not offered"))?;
        let original = theirs
            .agents
            .iter()
            .find(|a| a.provider == provider)
            .ok_or_else(|| anyhow!("the remote has no {provider}"))?;
        assert_eq!(offered.display_name, format!("{display} ({NAME})"));
        assert_eq!(offered.description, original.description);
        assert_eq!(serde_json::to_value(&offered.models)?, serde_json::to_value(&original.models)?);
        assert_eq!(
            serde_json::to_value(&offered.capabilities)?,
            serde_json::to_value(&original.capabilities)?,
            "{far}'s capabilities as the remote says them"
        );
        // Its schema is the remote's.
        let resolve = |p: &str| json!({ "channel": ROOT_RESOURCE_URI, "provider": p });
        let ours = here.request("resolveSessionConfig", resolve(&far)).await.map_err(|e| anyhow!("{far}: {e}"))?;
        let theirs = there.request("resolveSessionConfig", resolve(provider)).await.map_err(|e| anyhow!("{e}"))?;
        assert_eq!(ours["schema"], theirs["schema"], "{far}'s schema");
    }

    // The remote's session is listed here under its own URI, its machine in its provider.
    let row = until_listed(&mut here, &existing).await?;
    assert_eq!(row["provider"], format!("echo@{NAME}"), "{row}");
    here.subscribe(&existing).await?;
    here.subscribe(&existing_chat).await?;
    until_mirrors(&mut here, &there, &existing).await?;
    until_mirrors(&mut here, &there, &existing_chat).await?;

    // A session made there now is announced to root watchers here.
    let (later, _) = there.create_session("echo", None).await?;
    let added = until_added(&mut here, &later).await?;
    assert_eq!(added["provider"], format!("echo@{NAME}"), "{added}");

    // A session started here on echo@remote is made there under the same URI, and streams here.
    let (session, chat) = here.create_session(&format!("echo@{NAME}"), None).await?;
    let row = until_listed(&mut there, &session).await?;
    assert_eq!(row["provider"], "echo", "{row}");
    let said = "a reply from the other machine, word by word";
    let turn = here.turn(&chat, said).await?;
    assert_eq!(turn.state, TurnState::Complete);
    assert_eq!(turn_text(&turn), said);
    let deltas = here
        .envelopes
        .iter()
        .filter(|e| e.channel == chat)
        .filter(|e| serde_json::to_value(&e.action).is_ok_and(|a| a["type"] == "chat/delta" && a["turnId"] == turn.id))
        .count();
    assert!(deltas > 1, "the reply streamed here in pieces, got {deltas} deltas");

    // What the local client folded equals what the remote daemon snapshots of its own.
    until_mirrors(&mut here, &there, &session).await?;
    until_mirrors(&mut here, &there, &chat).await?;
    // And the local daemon's own snapshot of it agrees with the fold.
    here.check_against_snapshot(&chat).await?;
    here.check_against_snapshot(&session).await?;
    Ok(())
}

/// Waits until `client` is told `root/sessionAdded` of session `uri`; answers its summary.
async fn until_added(client: &mut TestClient, uri: &str) -> anyhow::Result<Value> {
    let added = |client: &TestClient| {
        client.notifications.iter().find_map(|n| match n {
            SubscriptionEvent::SessionAdded(p) if p.summary.resource == uri => serde_json::to_value(&p.summary).ok(),
            _ => None,
        })
    };
    loop {
        client.pump()?;
        if let Some(summary) = added(client) {
            return Ok(summary);
        }
        client.next_event(tests::PATIENCE).await.map_err(|e| anyhow!("no root/sessionAdded of {uri}: {e}"))?;
    }
}

/// The live terminal of the running turn's `!` command, once it shows one.
fn command_terminal(m: &Mirror, chat: &str) -> Option<String> {
    let turn = m.chat(chat)?.active_turn.as_ref()?;
    turn.response_parts.iter().find_map(|p| match p {
        ResponsePart::ToolCall(tc) => match &tc.tool_call {
            ToolCallState::Running(r) => r.content.iter().flatten().find_map(|c| match c {
                ToolResultContent::Terminal(t) => Some(t.resource.clone()),
                _ => None,
            }),
            _ => None,
        },
        _ => None,
    })
}

/// The number printed after `label` in `output`.
fn number_after(output: &str, label: &str) -> Option<i32> {
    output.match_indices(label).find_map(|(at, _)| {
        let digits: String = output[at + label.len()..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}

async fn a_remote_confirmation_is_allowed_and_a_remote_commands_terminal_is_read_from_here(
    form: Form,
) -> anyhow::Result<()> {
    let pair = Pair::start(form).await?;
    let mut here = pair.local_client("here").await?;
    let mut there = pair.remote_client("there").await?;
    until_connected(&mut here).await?;

    // The remote's notes asks before it writes; the local client allows it.
    let (notes, notes_chat) = here.create_session(&format!("notes@{NAME}"), None).await?;
    let turn_id = here.send(&notes_chat, "write far.txt written-from-afar").await?;
    let waiting = here.until_waiting_calls(&notes_chat, 1).await?;
    let (turn, call) = waiting.first().cloned().ok_or_else(|| anyhow!("no call waits"))?;
    let seq = here.confirm(&notes_chat, &turn, &call, true).await?;
    assert_eq!(here.refusal(seq).await?, "(accepted)");
    let done = here.finished(&notes_chat, &turn_id).await?;
    assert!(turn_text(&done).contains("Wrote far.txt."), "{}", turn_text(&done));
    assert_eq!(std::fs::read_to_string(pair.notes_dir.path().join("far.txt"))?, "written-from-afar");
    there.subscribe(&notes).await?;
    there.subscribe(&notes_chat).await?;
    until_mirrors(&mut here, &there, &notes).await?;
    until_mirrors(&mut here, &there, &notes_chat).await?;

    // A `!` command runs there; its terminal is read here.
    let (echo, chat) = here.create_session(&format!("echo@{NAME}"), None).await?;
    let turn_id = here.send(&chat, "!echo command-pid=$$; sleep 1000").await?;
    let c = chat.clone();
    here.until("the command's live terminal in its turn", move |m| command_terminal(m, &c).is_some()).await?;
    let terminal = command_terminal(&here.mirror, &chat).unwrap_or_default();
    here.subscribe(&terminal).await?;
    let t = terminal.clone();
    let printed = here
        .until("the command's pid printed in its terminal", move |m| {
            m.terminal(&t).is_some_and(|st| number_after(&terminal_output(st), "command-pid=").is_some())
        })
        .await;
    let output = here.mirror.terminal(&terminal).map(terminal_output).unwrap_or_default();
    printed.map_err(|e| anyhow!("{e}; it printed {output:?}"))?;
    let pid = number_after(&output, "command-pid=").ok_or_else(|| anyhow!("no pid in {output:?}"))?;
    assert!(alive(pid));
    assert!(descendants(pair.remote.pid()).contains(&pid), "the command runs under the remote daemon");
    assert!(!descendants(pair.local.pid()).contains(&pid), "and not under the local one");

    // Stopped from here, it ends there.
    here.dispatch(&chat, stop(&turn_id)).await?;
    let turn = here.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Cancelled);
    until_exited(pid).await?;
    let t = terminal.clone();
    here.until("the command's terminal to exit here", move |m| {
        m.terminal(&t).is_some_and(|st| matches!(st.lifecycle, ahp_types::state::TerminalLifecycleState::Exited(_)))
    })
    .await?;
    there.subscribe(&echo).await?;
    there.subscribe(&chat).await?;
    until_mirrors(&mut here, &there, &chat).await?;
    until_mirrors(&mut here, &there, &terminal).await?;
    Ok(())
}

async fn a_link_cut_mid_turn_is_caught_up_with_nothing_lost_or_doubled(form: Form) -> anyhow::Result<()> {
    let pair = Pair::start_with(form, Setup { echo_pace_ms: 20 }).await?;
    // A client of the remote itself sees every action of the turn, link or no link.
    let (mut here, mut there, session, chat) = pair.opened("echo").await?;

    let said = long_reply(150);
    let turn_id = here.send(&chat, &said).await?;
    until_streaming(&mut here, &chat).await?;
    let cut = pair.stdio_links();
    assert_eq!(form == Form::Command, !cut.is_empty(), "a `--stdio` child is the link in the command form alone");
    pair.hold_down()?;
    pair.cut().await?;
    let state = until_state(&mut here, "reconnecting: ").await?;
    eprintln!("while cut, the remote is {state:?}");
    assert!(state.contains("; next try at "), "when the next try is: {state}");
    if form == Form::Command {
        // The cut is said as the link process ended, not as the last thing it printed.
        pair.local.wait_for_log("the link process was killed by signal 9 (SIGKILL)", PATIENCE).await?;
    }

    // The turn goes on there while the link is down.
    let finished_there = there.finished(&chat, &turn_id).await?;
    assert_eq!(turn_text(&finished_there), said);
    here.pump()?;
    let still = here.mirror.chat(&chat).and_then(|c| c.active_turn.as_ref()).map(|t| t.id.clone());
    assert_eq!(still.as_deref(), Some(turn_id.as_str()), "the local view cannot have seen the end yet");

    // When the link is back, the local view catches up.
    pair.bring_up()?;
    let finished_here = here.finished(&chat, &turn_id).await?;
    until_state(&mut here, "connected").await?;
    assert_eq!(turn_text(&finished_here), said, "every word once");
    let relinked = pair.stdio_links();
    assert_eq!(form == Form::Command, !relinked.is_empty(), "the command form links again through a new child");
    assert!(relinked.iter().all(|pid| !cut.contains(pid)), "{relinked:?} after {cut:?} was cut");
    until_mirrors(&mut here, &there, &chat).await?;
    until_mirrors(&mut here, &there, &session).await?;

    // Nothing lost or doubled: the local client received the turn's actions exactly as the remote
    // said them, each once, in order.
    let ours = turn_actions(&here, &chat, &turn_id);
    let theirs = turn_actions(&there, &chat, &turn_id);
    if ours != theirs {
        let first = ours.iter().zip(&theirs).position(|(a, b)| a != b).unwrap_or(ours.len().min(theirs.len()));
        panic!(
            "the local client received {} actions of the turn, the remote said {}; first difference at {first}: {:?} here, {:?} there",
            ours.len(),
            theirs.len(),
            ours.get(first),
            theirs.get(first)
        );
    }
    let parts: Vec<&Value> = ours.iter().filter(|a| a["type"] == "chat/responsePart").map(|a| &a["part"]).collect();
    let mut ids: Vec<String> = parts.iter().map(|p| p.to_string()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), parts.len(), "each part once: {parts:?}");

    // The chat goes on over the new link.
    let next = here.turn(&chat, "after the cut").await?;
    assert_eq!(turn_text(&next), "after the cut");
    until_mirrors(&mut here, &there, &chat).await?;
    Ok(())
}

async fn the_remotes_sessions_outlive_a_killed_local_daemon_and_show_again_after_its_restart(
    form: Form,
) -> anyhow::Result<()> {
    let mut pair = Pair::start_with(form, Setup { echo_pace_ms: 20 }).await?;
    let (mut here, mut there, session, chat) = pair.opened("echo").await?;

    let said = long_reply(150);
    let turn_id = here.send(&chat, &said).await?;
    until_streaming(&mut here, &chat).await?;
    let links = pair.stdio_links();
    assert_eq!(form == Form::Command, !links.is_empty(), "a `--stdio` child is the link in the command form alone");
    pair.kill9_local().await?;
    drop(here);

    // The turn started before completes on the remote.
    let finished = there.finished(&chat, &turn_id).await?;
    assert_eq!(finished.state, TurnState::Complete);
    assert_eq!(turn_text(&finished), said);

    pair.restart_local().await?;
    let left = until_all_gone(&links, "the local daemon's restart").await;
    assert!(left.is_empty(), "the killed daemon's `--stdio` children {left:?} are still running");
    let mut again = pair.local_client("again").await?;
    until_connected(&mut again).await?;
    let row = until_listed(&mut again, &session).await?;
    assert_eq!(row["provider"], format!("echo@{NAME}"), "{row}");
    again.subscribe(&session).await?;
    again.subscribe(&chat).await?;
    until_mirrors(&mut again, &there, &session).await?;
    until_mirrors(&mut again, &there, &chat).await?;
    let shown = again.mirror.chat(&chat).map(|c| c.turns.iter().any(|t| t.id == turn_id)).unwrap_or(false);
    assert!(shown, "the turn that finished while the local daemon was gone shows here");

    // And it goes on from here.
    let next = again.turn(&chat, "after the restart").await?;
    assert_eq!(turn_text(&next), "after the restart");
    Ok(())
}

/// `count` copies of a `call` command, one per line.
fn calls(count: usize, tool: &str, input: impl Fn(usize) -> Value) -> String {
    (0..count).map(|i| format!("call {tool} {}", input(i))).collect::<Vec<_>>().join("\n")
}

async fn create_session_on_a_remote_agent_from_a_local_sessions_tools_counts_in_the_calling_tree(
    form: Form,
) -> anyhow::Result<()> {
    let pair = Pair::start(form).await?;
    let mut here = pair.local_client("here").await?;
    until_connected(&mut here).await?;
    let (_caller, chat) = here.create_session("notes", Some(json!({ "ask": "never" }))).await?;

    let far = json!({ "relationship": "independent", "agent": format!("echo@{NAME}"),
                      "prompt": "hello from a tool", "title": "far child" });
    let turn = here.turn(&chat, &format!("call create_session {far}")).await?;
    let made = successes(&turn);
    assert_eq!(made.len(), 1, "{:?}", refusals(&turn));
    let session = session_of(&link_in(&made[0])?);

    // It is a session of the remote, and its prompt ran there.
    let mut there = pair.remote_client("there").await?;
    let row = until_listed(&mut there, &session).await?;
    assert_eq!(row["provider"], "echo", "{row}");
    let far_chat = watch_session(&mut there, &session).await?;
    let c = far_chat.clone();
    there
        .until("the prompt's turn there", move |m| {
            m.chat(&c).is_some_and(|st| st.turns.iter().any(|t| turn_text(t) == "hello from a tool"))
        })
        .await?;

    // The session tools list it here.
    let listed = here.turn(&chat, "call list_sessions {}").await?;
    let id = session.trim_start_matches("ahp-session:/");
    assert!(successes(&listed).iter().any(|t| t.contains(id)), "list_sessions here lists it: {:?}", successes(&listed));

    // It counts in the calling tree: 49 more made here reach the limit of 50, and one more is
    // refused.
    let here_too = |i: usize| json!({ "relationship": "independent", "agent": "echo", "prompt": "hi", "title": format!("child {i}") });
    let turn = here.turn(&chat, &calls(50, "create_session", here_too)).await?;
    assert_eq!(successes(&turn).len(), 49, "{:?}", refusals(&turn));
    let refused = refusals(&turn);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].starts_with(
            "Refusing to create more sessions: this session tree already used 50 of 50 allowed in the last 60 minutes."
        ),
        "{refused:?}"
    );
    Ok(())
}

async fn status_and_agents_name_the_remote_and_a_remote_that_is_down_refuses_actions(form: Form) -> anyhow::Result<()> {
    let pair = Pair::start(form).await?;
    let mut here = pair.local_client("here").await?;
    until_connected(&mut here).await?;
    let (session, chat) = here.create_session(&format!("echo@{NAME}"), None).await?;

    let reached = pair.reached_by();
    let status = pair.local_verb(&["status"]).await?;
    assert_eq!(status.code, 0, "{}", status.stderr);
    for needle in [NAME, reached.trim_end_matches('/'), "connected"] {
        assert!(status.stdout.contains(needle), "ahpd status names {needle:?}:\n{}", status.stdout);
    }
    let sessions = pair.local_verb(&["sessions"]).await?;
    assert_eq!(sessions.code, 0, "{}", sessions.stderr);
    assert!(sessions.stdout.contains(&format!("@{NAME}")), "ahpd sessions shows the machine:\n{}", sessions.stdout);
    let agents = pair.local_verb(&["agents"]).await?;
    assert_eq!(agents.code, 0, "{}", agents.stderr);
    for needle in [NAME, reached.trim_end_matches('/'), "connected", "echo", "notes"] {
        assert!(agents.stdout.contains(needle), "ahpd agents names {needle:?}:\n{}", agents.stdout);
    }

    // Down: the state says so, and an action or a command on the remote's session is refused.
    pair.hold_down()?;
    pair.cut().await?;
    let state = until_state(&mut here, "reconnecting: ").await?;
    let status = pair.local_verb(&["status"]).await?;
    assert!(status.stdout.contains("reconnecting"), "ahpd status says the remote is reconnecting:\n{}", status.stdout);
    let (_, seq) = here.send_message(&chat, user_message("while it is down")).await?;
    let reason = here.refusal(seq).await?;
    let refusal = format!("{NAME} is not connected (reconnecting: ");
    assert!(reason.starts_with(&refusal), "refused with {reason:?} (the state was {state:?})");
    let new_chat = format!("ahp-chat:/{}", uuid::Uuid::new_v4());
    match here.request("createChat", json!({ "channel": session, "chat": new_chat })).await {
        Err(ahp::ClientError::Rpc(e)) => assert!(e.message.starts_with(&refusal), "{}", e.message),
        other => panic!("createChat on a remote that is down answered {other:?}"),
    }

    // Back up: connected again, and the session takes a turn.
    pair.bring_up()?;
    until_state(&mut here, "connected").await?;
    let turn = here.turn(&chat, "back again").await?;
    assert_eq!(turn_text(&turn), "back again");
    let status = pair.local_verb(&["status"]).await?;
    assert!(!status.stdout.contains("reconnecting"), "{}", status.stdout);
    let there = pair.remote_client("there").await?;
    let theirs = snapshot_state(&there, &chat).await?;
    assert!(theirs["turns"].as_array().is_some_and(|t| t.len() == 1), "only the turn taken once back: {theirs}");
    until_mirrors(&mut here, &there, &chat).await?;
    Ok(())
}

/// The harness's relay (the URL form's network) against one daemon: a client passes through it,
/// a cut drops the connection, and while it is held down no connection gets through.
#[tokio::test]
async fn the_relay_the_url_form_runs_through_passes_cuts_and_holds_down_a_link() -> anyhow::Result<()> {
    let daemon = tests::Daemon::start().await?;
    let authority = daemon.url.trim_start_matches("ws://").trim_end_matches('/').to_owned();
    let relay = tests::remotes::Relay::start(authority).await?;
    let token = daemon.token.clone().ok_or_else(|| anyhow!("the daemon keeps no token"))?;
    let through = format!("ws://127.0.0.1:{}/?tkn={token}", relay.port);

    let mut client = TestClient::connect(&through, "through").await?;
    let (_, chat) = client.create_session("echo", None).await?;
    assert_eq!(turn_text(&client.turn(&chat, "through the relay").await?), "through the relay");

    relay.cut();
    let ended = loop {
        if let Err(e) = client.next_event(tests::PATIENCE).await {
            break e;
        }
    };
    assert!(ended.to_string().contains("closed"), "a cut closes the connection: {ended}");
    relay.set_up(false);
    assert!(TestClient::connect(&through, "refused").await.is_err(), "no connection while it is down");
    relay.set_up(true);
    let mut again = TestClient::connect(&through, "again").await?;
    again.subscribe(&chat).await?;
    assert_eq!(again.mirror.chat(&chat).map(|c| c.turns.len()), Some(1));
    Ok(())
}

/// The web window of the local daemon shows a remote session's machine beside its agent, and,
/// while the link is down, the remote's state above the panes and on the session's machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_shows_the_machine_and_a_remote_that_is_reconnecting() -> anyhow::Result<()> {
    let pair = Pair::start(Form::Url).await?;
    let mut here = pair.local_client("here").await?;
    until_connected(&mut here).await?;
    let (session, _chat) = here.create_session(&format!("echo@{NAME}"), None).await?;
    let page = tests::browser::announced_page(&pair.local).await?;
    let mut browser = tests::browser::Browser::launch().await?;
    browser.open(&page, 1280, 700).await?;
    tests::browser::online(&mut browser).await?;
    let item = format!("document.querySelector('li.session[data-session=\"{session}\"]')");
    let machine = browser.wait_for(&format!("{item}?.querySelector('.machine')?.textContent")).await?;
    assert_eq!(machine, json!(NAME), "the list names the machine the session runs on");
    let agent = browser.eval(&format!("{item}.querySelector('.provider').textContent")).await?;
    assert_eq!(agent, json!("echo"));
    let notice = "document.querySelector('#store-notice')";
    assert_eq!(browser.eval(&format!("{notice}.hidden")).await?, json!(true), "no notice while the link is up");
    let shots = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join("target").join("window-shots");
    std::fs::create_dir_all(&shots)?;
    browser.screenshot(&shots.join("remote-connected.png")).await?;

    pair.hold_down()?;
    pair.cut().await?;
    let said = browser.wait_for(&format!("!{notice}.hidden && {notice}.textContent")).await?;
    let said = said.as_str().unwrap_or_default().to_owned();
    assert!(said.starts_with(&format!("{NAME}: reconnecting: ")), "the notice says the remote's state: {said:?}");
    browser.wait_for(&format!("{item}.querySelector('.machine.down')?.textContent === '{NAME}: reconnecting'")).await?;
    browser.screenshot(&shots.join("remote-reconnecting.png")).await?;

    pair.bring_up()?;
    browser.wait_for(&format!("{notice}.hidden && !{item}.querySelector('.machine.down')")).await?;
    browser.close().await?;
    Ok(())
}

/// The remote restarted (a new process on the same port, as its own `ahpd restart` makes): the
/// link finds it again, the remote's numbering starts afresh, and what is mirrored here is its new
/// state (the link's `reconnect` answered with snapshots): a local client reads the chat as the
/// remote holds it and its next turn runs there.
async fn a_remote_restarted_is_found_again_and_its_sessions_go_on_from_here(form: Form) -> anyhow::Result<()> {
    let mut pair = Pair::start(form).await?;
    let mut watcher = pair.local_client("watcher").await?;
    until_connected(&mut watcher).await?;
    let mut here = pair.local_client("here").await?;
    let (session, chat) = here.create_session(&format!("echo@{NAME}"), None).await?;
    let first = here.turn(&chat, "before the restart").await?;
    assert_eq!(turn_text(&first), "before the restart");

    pair.restart_remote().await?;
    until_state(&mut watcher, "reconnecting: ").await?;
    until_state(&mut watcher, "connected").await?;

    let mut again = pair.local_client("again").await?;
    let there = pair.remote_client("there").await?;
    again.subscribe(&session).await?;
    again.subscribe(&chat).await?;
    until_mirrors(&mut again, &there, &chat).await?;
    let second = again.turn(&chat, "after the restart").await?;
    assert_eq!(turn_text(&second), "after the restart");
    until_mirrors(&mut again, &there, &chat).await?;
    let turns = again.mirror.chat(&chat).map(|c| c.turns.len()).unwrap_or(0);
    assert_eq!(turns, 2, "both turns, as the remote keeps them");
    Ok(())
}

/// A remote session's changes and their operations from here: a notes session on the remote
/// working in a Git folder edits a file; its uncommitted changeset, watched here, folds into what
/// the remote's own client folds; "commit", invoked here, commits there and answers in the
/// remote's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_sessions_changeset_is_watched_and_committed_from_here() -> anyhow::Result<()> {
    let pair = Pair::start(Form::Url).await?;
    let mut here = pair.local_client("here").await?;
    until_connected(&mut here).await?;
    let repo = tempfile::Builder::new().prefix("ahpd-remote-repo-").tempdir()?;
    let folder = repo.path().canonicalize()?;
    let git = |args: &[&str]| tests::git::git(&folder, args);
    git(&["init", "-q", "-b", "main"]);
    std::fs::write(folder.join("a.txt"), "one\n")?;
    git(&["add", "a.txt"]);
    git(&["commit", "-q", "-m", "first"]);

    let session = format!("ahp-session:/{}", uuid::Uuid::new_v4());
    let params = json!({
        "channel": session, "provider": format!("notes@{NAME}"),
        "workingDirectories": [format!("file://{}", folder.display())],
        "config": { "ask": "never" },
    });
    here.request("createSession", params).await.map_err(|e| anyhow!("createSession: {e}"))?;
    let chat = tests::turns::watch_session(&mut here, &session).await?;
    here.turn(&chat, "edit a.txt in the folder").await?;
    assert_eq!(git(&["status", "--porcelain"]), " M a.txt\n", "the remote's agent wrote in the folder");

    let id = session.trim_start_matches("ahp-session:/");
    let changeset = format!("ahp-changeset:/session/{id}/uncommitted");
    here.subscribe(&changeset).await?;
    let there = pair.remote_client("there").await?;
    until_mirrors(&mut here, &there, &changeset).await?;
    let c = changeset.clone();
    here.until("a.txt among the changes", move |m| {
        m.changeset(&c)
            .is_some_and(|cs| cs.files.iter().any(|f| serde_json::to_string(f).unwrap_or_default().contains("a.txt")))
    })
    .await?;

    let answer = here
        .request("invokeChangesetOperation", json!({ "channel": changeset, "operationId": "commit" }))
        .await
        .map_err(|e| anyhow!("commit: {e}"))?;
    let said = answer["message"].as_str().map(str::to_owned).unwrap_or_else(|| answer["message"].to_string());
    assert!(said.contains("Committed the changes on main"), "answered in the remote's words: {answer}");
    assert_eq!(git(&["status", "--porcelain"]), "", "committed there");
    assert_eq!(git(&["show", "HEAD:a.txt"]), "in the folder\n");
    let refused =
        here.request("invokeChangesetOperation", json!({ "channel": changeset, "operationId": "nothing-such" })).await;
    assert!(matches!(refused, Err(ahp::ClientError::Rpc(_))), "a refusal there is an error here: {refused:?}");
    Ok(())
}

/// A question the remote's agent asks is answered from here, and a message queued here behind the
/// running turn runs next there: the chat's pending messages and the answer are relayed as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_question_is_answered_from_here_and_a_message_queued_here_runs_next_there() -> anyhow::Result<()> {
    use ahp_types::actions::{ChatPendingMessageSetAction, StateAction};
    use ahp_types::state::PendingMessageKind;
    let pair = Pair::start(Form::Command).await?;
    let (mut here, mut there, _session, chat) = pair.opened("notes").await?;

    let asking = here.send(&chat, "ask Shall I go on?").await?;
    let questions = here.until_questions(&chat, 1).await?;
    there.until_questions(&chat, 1).await?;
    let queued = StateAction::ChatPendingMessageSet(ChatPendingMessageSetAction {
        kind: PendingMessageKind::Queued,
        id: uuid::Uuid::new_v4().to_string(),
        message: user_message("list"),
    });
    here.dispatch(&chat, queued).await?;
    let c = chat.clone();
    there
        .until("the message queued there", move |m| {
            m.chat(&c).is_some_and(|s| s.queued_messages.as_ref().is_some_and(|q| q.len() == 1))
        })
        .await?;
    here.answer(&chat, &questions[0], Some("yes")).await?;
    let answered = here.finished(&chat, &asking).await?;
    assert_eq!(answered.state, TurnState::Complete, "{answered:?}");
    let c = chat.clone();
    here.until("the queued message run as the next turn", move |m| {
        m.chat(&c).is_some_and(|s| {
            s.turns.len() == 2 && s.active_turn.is_none() && s.queued_messages.as_ref().is_none_or(|q| q.is_empty())
        })
    })
    .await?;
    let next = here.mirror.chat(&chat).map(|s| s.turns[1].message.text.clone()).unwrap_or_default();
    assert_eq!(next, "list");
    until_mirrors(&mut here, &there, &chat).await?;
    Ok(())
}

/// An action the link loses on its way (sent, never received there) is not left waiting for an
/// echo that cannot come: once the link is back and caught up without it, its sender is told, and
/// the chat goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_the_link_lost_is_refused_to_its_sender_once_the_link_is_back() -> anyhow::Result<()> {
    let pair = Pair::start(Form::Url).await?;
    let relay = pair.relay().ok_or_else(|| anyhow!("the URL form runs through a relay"))?;
    let mut here = pair.local_client("here").await?;
    until_connected(&mut here).await?;
    let (_session, chat) = here.create_session(&format!("echo@{NAME}"), None).await?;
    assert_eq!(turn_text(&here.turn(&chat, "first").await?), "first");

    relay.stall(true);
    let (_, seq) = here.send_message(&chat, user_message("lost on the way")).await?;
    relay.until_swallowed().await?;
    pair.hold_down()?;
    pair.cut().await?;
    relay.stall(false);
    until_state(&mut here, "reconnecting: ").await?;
    pair.bring_up()?;
    let reason = here.refusal(seq).await?;
    assert_eq!(
        reason,
        format!("the link to {NAME} dropped before {NAME} answered this; look at the session before sending it again")
    );
    until_state(&mut here, "connected").await?;
    assert_eq!(turn_text(&here.turn(&chat, "again").await?), "again");
    let turns = here.mirror.chat(&chat).map(|c| c.turns.len()).unwrap_or(0);
    assert_eq!(turns, 2, "the lost message never ran there");
    Ok(())
}

/// A remote that refuses the link's token is shown as refused, with its words, in the root's
/// `remoteLinks`, `ahpd status` and `ahpd agents`; nothing of it is offered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_refusing_the_token_is_shown_refused() -> anyhow::Result<()> {
    let remote = tests::Daemon::start().await?;
    let wrong = tempfile::Builder::new().prefix("ahpd-wrong-token-").tempdir()?;
    let token_file = wrong.path().join("token");
    std::fs::write(&token_file, "not-the-remotes-token\n")?;
    let config = json!({ "remotes": { NAME: { "url": remote.url.clone(), "tokenFile": token_file } } });
    let local = tests::Daemon::start_with(tests::DaemonOptions::with_config(config)).await?;
    let mut here = TestClient::connect(&local.url, "here").await?;
    let state = until_state(&mut here, "refused: ").await?;
    assert!(state.contains("HTTP 401"), "{state}");
    let offered = here.mirror.root().map(|r| r.agents.iter().any(|a| a.provider.ends_with(&format!("@{NAME}"))));
    assert_eq!(offered, Some(false), "nothing of a remote that refused is offered");
    let status = tests::daemon::run_ahpd(&local.home, &["status"]).await?;
    assert!(
        status.stdout.contains(&format!("remote {NAME} (")) && status.stdout.contains("refused: "),
        "{}",
        status.stdout
    );
    let agents = tests::daemon::run_ahpd(&local.home, &["agents"]).await?;
    assert!(agents.stdout.contains("refused: "), "{}", agents.stdout);
    Ok(())
}
