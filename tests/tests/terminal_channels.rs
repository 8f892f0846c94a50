//! Terminal channels (issue 21) through the official client: a real shell on a real pty per
//! terminal, its output folded through the official reducers and held against the host's
//! snapshot; input, resize and exit; dispose and a killed daemon leaving no process behind
//! (checked by pid in /proc); grants, folders and limits refused in the host's words; the
//! scrollback bounding memory however much a terminal prints.

use std::path::Path;

use ahp_types::actions::{StateAction, TerminalInputAction, TerminalResizedAction};
use ahp_types::state::{TerminalLifecycleState, TerminalState};
use serde_json::{json, Value};
use tests::client::terminal_output;
use tests::daemon::{alive, until_exited};
use tests::{Daemon, DaemonOptions, TestClient};

/// A daemon whose terminals run bash (`$SHELL`), with `config` on top of echo alone.
fn options(config: Value) -> DaemonOptions {
    let mut config = config;
    config["agents"] = json!({ "echo": tests::agents::echo_paced(0) });
    DaemonOptions { config: Some(config), env: vec![("SHELL".into(), "/bin/bash".into())], ..DaemonOptions::default() }
}

fn new_terminal() -> String {
    format!("ahp-terminal:/{}", uuid::Uuid::new_v4())
}

fn file_uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// Creates a terminal the client claims, in `cwd`, and subscribes to it.
async fn open(client: &mut TestClient, cwd: &Path, size: Option<(i64, i64)>) -> anyhow::Result<String> {
    let uri = new_terminal();
    let mut params = json!({
        "channel": uri, "claim": { "kind": "client", "clientId": client.client_id }, "cwd": file_uri(cwd),
    });
    if let Some((cols, rows)) = size {
        params["cols"] = json!(cols);
        params["rows"] = json!(rows);
    }
    client.request("createTerminal", params).await.map_err(|e| anyhow::anyhow!("createTerminal: {e}"))?;
    client.subscribe(&uri).await?;
    Ok(uri)
}

/// Types `line` and Enter.
async fn type_line(client: &TestClient, uri: &str, line: &str) -> anyhow::Result<()> {
    let data = format!("{line}\r");
    client.dispatch(uri, StateAction::TerminalInput(TerminalInputAction { data })).await?;
    Ok(())
}

/// Waits until the folded terminal's output holds `needle`; answers the output.
async fn until_printed(client: &mut TestClient, uri: &str, needle: &str) -> anyhow::Result<String> {
    let (u, n) = (uri.to_owned(), needle.to_owned());
    let waited = client
        .until(&format!("{needle:?} in {uri}"), move |m| {
            m.terminal(&u).is_some_and(|t| terminal_output(t).contains(&n))
        })
        .await;
    let output = client.mirror.terminal(uri).map(terminal_output).unwrap_or_default();
    waited.map_err(|e| anyhow::anyhow!("{e}; it printed {output:?}"))?;
    Ok(output)
}

/// The number printed after `label` (`pid=1234`), skipping the echo of the line that asked for
/// it (`pid=$$`).
fn number_after(output: &str, label: &str) -> Option<i32> {
    output.match_indices(label).find_map(|(at, _)| {
        let digits: String = output[at + label.len()..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}

/// Waits until the terminal printed a number after `label`; answers it.
async fn until_number(client: &mut TestClient, uri: &str, label: &str) -> anyhow::Result<i32> {
    let (u, l) = (uri.to_owned(), label.to_owned());
    let waited = client
        .until(&format!("a number after {label}"), move |m| {
            m.terminal(&u).is_some_and(|t| number_after(&terminal_output(t), &l).is_some())
        })
        .await;
    let output = client.mirror.terminal(uri).map(terminal_output).unwrap_or_default();
    waited.map_err(|e| anyhow::anyhow!("{e}; it printed {output:?}"))?;
    number_after(&output, label).ok_or_else(|| anyhow::anyhow!("no number in {output:?}"))
}

/// Asks the shell its pid (and what else `extra` prints), waits for the answer; answers the pid.
async fn shell_pid(client: &mut TestClient, uri: &str) -> anyhow::Result<i32> {
    type_line(client, uri, "echo shell-pid=$$").await?;
    until_number(client, uri, "shell-pid=").await
}

fn exited_with(state: &TerminalState) -> Option<Option<i64>> {
    match &state.lifecycle {
        TerminalLifecycleState::Exited(e) => Some(e.exit_code),
        _ => None,
    }
}

/// The error a request ended in, as (code, message, data).
async fn error_of(client: &TestClient, method: &str, params: Value) -> (i32, String, Value) {
    match client.request(method, params).await {
        Err(ahp::ClientError::Rpc(e)) => (e.code, e.message, e.data.unwrap_or(Value::Null)),
        other => (0, format!("not an error: {other:?}"), Value::Null),
    }
}

#[tokio::test]
async fn a_shell_prints_takes_a_size_and_exits_with_its_code() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(options(json!({}))).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    assert_eq!(
        a.init.as_ref().and_then(|i| i.terminal_command_prefix.as_deref()),
        Some("!"),
        "the host announces its command prefix"
    );
    let uri = open(&mut a, &daemon.home, Some((80, 24))).await?;
    let listed = |m: &tests::Mirror, uri: &str| {
        m.root().and_then(|r| r.terminals.as_ref()).is_some_and(|t| t.iter().any(|i| i.resource == uri))
    };
    let u = uri.clone();
    a.until("the terminal in the root's list", move |m| listed(m, &u)).await?;

    // $COLUMNS follows the pty's size.
    type_line(&a, &uri, "echo cols=$COLUMNS").await?;
    until_printed(&mut a, &uri, "cols=80").await?;
    a.dispatch(&uri, StateAction::TerminalResized(TerminalResizedAction { cols: 132, rows: 40 })).await?;
    type_line(&a, &uri, "echo cols=$COLUMNS").await?;
    until_printed(&mut a, &uri, "cols=132").await?;
    let pid = shell_pid(&mut a, &uri).await?;
    assert!(alive(pid), "the shell runs");

    type_line(&a, &uri, "echo hi; exit 3").await?;
    let u = uri.clone();
    a.until("the shell to exit", move |m| m.terminal(&u).and_then(exited_with).is_some()).await?;
    let state = a.mirror.terminal(&uri).cloned().ok_or_else(|| anyhow::anyhow!("no terminal"))?;
    assert_eq!(exited_with(&state), Some(Some(3)), "the exit code: {state:?}");
    let output = terminal_output(&state);
    assert!(output.contains("hi\r\n"), "the shell printed hi: {output:?}");
    assert_eq!((state.cols, state.rows), (Some(132), Some(40)));
    until_exited(pid).await?;
    a.check_against_snapshot(&uri).await?;
    a.check_against_snapshot(ahp_types::ROOT_RESOURCE_URI).await?;

    // Exited, it takes no more input.
    let seq = a.dispatch(&uri, StateAction::TerminalInput(TerminalInputAction { data: "x".into() })).await?;
    let reason = a.refusal(seq).await?;
    assert_eq!(reason, format!("The terminal at {uri} has exited; it takes no input and no size"));
    Ok(())
}

#[tokio::test]
async fn dispose_kills_the_shell_and_what_it_started() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(options(json!({}))).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let uri = open(&mut a, &daemon.home, None).await?;
    type_line(&a, &uri, "sleep 1000 & echo job-pid=$!").await?;
    let job = until_number(&mut a, &uri, "job-pid=").await?;
    let shell = shell_pid(&mut a, &uri).await?;
    assert!(alive(shell) && alive(job));

    a.request("disposeTerminal", json!({ "channel": uri })).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    until_exited(shell).await?;
    until_exited(job).await?;
    let u = uri.clone();
    a.until("the terminal off the root's list", move |m| {
        m.root().and_then(|r| r.terminals.as_ref()).is_some_and(|t| t.iter().all(|i| i.resource != u))
    })
    .await?;
    a.check_against_snapshot(ahp_types::ROOT_RESOURCE_URI).await?;
    let (code, message, _) = error_of(&a, "subscribe", json!({ "channel": uri })).await;
    assert_eq!(code, ahp_types::errors::ahp_error_codes::NOT_FOUND, "{message}");
    let (code, message, _) = error_of(&a, "disposeTerminal", json!({ "channel": uri })).await;
    assert_eq!((code, message), (ahp_types::errors::ahp_error_codes::NOT_FOUND, format!("No terminal at {uri}")));
    Ok(())
}

/// The process groups the daemon's record names.
fn recorded_groups(home: &Path) -> Vec<i64> {
    let record = std::fs::read(home.join("data").join("ahpd").join("daemon.json")).unwrap_or_default();
    let record: Value = serde_json::from_slice(&record).unwrap_or(Value::Null);
    record["groups"].as_array().map(|g| g.iter().filter_map(|g| g["pgid"].as_i64()).collect()).unwrap_or_default()
}

#[tokio::test]
async fn a_killed_daemon_leaves_no_shell_at_the_next_start() -> anyhow::Result<()> {
    let home = tempfile::Builder::new().prefix("ahpd-test-").tempdir()?;
    let mut daemon = Daemon::start_in(home.path(), options(json!({}))).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let mut shells = Vec::new();
    for _ in 0..2 {
        let uri = open(&mut a, home.path(), None).await?;
        shells.push((uri.clone(), shell_pid(&mut a, &uri).await?));
    }
    // The second shell becomes a program the pty's hangup does not end: only the record does.
    let (stubborn_uri, stubborn) = shells[1].clone();
    type_line(&a, &stubborn_uri, "trap '' HUP; exec sleep 1000").await?;
    let deadline = tokio::time::Instant::now() + tests::PATIENCE;
    while !shells.iter().all(|(_, pid)| recorded_groups(home.path()).contains(&i64::from(*pid))) {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "the record never named {shells:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    while !std::fs::read_to_string(format!("/proc/{stubborn}/cmdline")).unwrap_or_default().starts_with("sleep") {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "the shell never became sleep");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    drop(a);
    daemon.kill9().await?;
    until_exited(shells[0].1).await?;
    assert!(alive(stubborn), "the hangup alone leaves a program that ignores it");
    let _next = Daemon::start_in(home.path(), options(json!({}))).await?;
    until_exited(stubborn).await?;
    Ok(())
}

#[tokio::test]
async fn terminals_are_refused_outside_their_session_and_past_their_limits() -> anyhow::Result<()> {
    let config = json!({ "maxTerminalsPerConnection": 2, "maxTerminalsPerSession": 1 });
    let daemon = Daemon::start_with(options(config)).await?;
    let folder = daemon.home.join("project");
    std::fs::create_dir_all(folder.join("src"))?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session_in("echo", &folder).await?;
    let claim = json!({ "kind": "session", "session": session, "chat": chat });

    let outside = json!({ "channel": new_terminal(), "claim": claim, "cwd": file_uri(&daemon.home) });
    let (code, message, _) = error_of(&a, "createTerminal", outside).await;
    assert_eq!(code, ahp_types::errors::ahp_error_codes::PERMISSION_DENIED, "{message}");
    assert!(message.contains("is outside this session's folders"), "{message}");

    // Inside its folder, the session's terminal runs there.
    let inside = new_terminal();
    let params = json!({ "channel": inside, "claim": claim, "cwd": file_uri(&folder.join("src")) });
    a.request("createTerminal", params).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    a.subscribe(&inside).await?;
    type_line(&a, &inside, "pwd").await?;
    until_printed(&mut a, &inside, &format!("{}\r\n", folder.join("src").display())).await?;

    // The session's one terminal is the one above; a second is past maxTerminalsPerSession.
    let (code, message, data) =
        error_of(&a, "createTerminal", json!({ "channel": new_terminal(), "claim": claim })).await;
    assert_eq!((code, &data["limit"]), (-32600, &json!("maxTerminalsPerSession")), "{message}");
    assert!(message.starts_with("This session has 1 terminals running"), "{message}");
    // The client opened that one; with one of its own it is at maxTerminalsPerConnection.
    open(&mut a, &daemon.home, None).await?;
    let mine = json!({ "kind": "client", "clientId": "a" });
    let (code, message, data) =
        error_of(&a, "createTerminal", json!({ "channel": new_terminal(), "claim": mine })).await;
    assert_eq!((code, &data["limit"]), (-32600, &json!("maxTerminalsPerConnection")), "{message}");
    assert!(message.contains("maxTerminalsPerConnection"), "{message}");

    // Another client may not claim for this one.
    let foreign = json!({ "channel": new_terminal(), "claim": { "kind": "client", "clientId": "b" } });
    let (code, message, _) = error_of(&a, "createTerminal", foreign).await;
    assert_eq!(code, -32602, "{message}");
    a.check_against_snapshot(&inside).await?;
    Ok(())
}

/// The daemon's peak resident memory, in bytes (`VmHWM`).
fn peak_memory(pid: i32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).ok_or_else(|| anyhow::anyhow!("no VmHWM"))?;
    let kib: u64 = line.split_whitespace().nth(1).unwrap_or("0").parse()?;
    Ok(kib * 1024)
}

#[tokio::test]
async fn a_hundred_megabytes_of_output_leave_memory_bounded_by_the_scrollback() -> anyhow::Result<()> {
    const SCROLLBACK: usize = 1 << 20;
    let config = json!({ "terminalScrollbackBytes": SCROLLBACK, "replayBufferSize": 1000 });
    let daemon = Daemon::start_with(options(config)).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let uri = open(&mut a, &daemon.home, None).await?;
    shell_pid(&mut a, &uri).await?;
    let before = peak_memory(daemon.pid())?;
    type_line(&a, &uri, "head -c 100000000 /dev/zero | tr '\\0' x; echo; echo end-of-$((6*7)); exit 0").await?;
    // Watched from the root alone while it prints: the terminal's own watcher would be sent it all.
    a.client.unsubscribe(uri.clone()).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    a.mirror.states.remove(&uri);
    let u = uri.clone();
    a.until("the shell to exit", move |m| {
        m.root().and_then(|r| r.terminals.as_ref()).is_some_and(|t| {
            t.iter().any(|i| i.resource == u && matches!(i.lifecycle, TerminalLifecycleState::Exited(_)))
        })
    })
    .await?;
    a.subscribe(&uri).await?;
    let output = a.mirror.terminal(&uri).map(terminal_output).unwrap_or_default();
    assert!(output.len() <= SCROLLBACK, "the terminal keeps at most its scrollback: {} bytes", output.len());
    assert!(output.contains("end-of-42"), "and the newest output: {:?}", &output[output.len().saturating_sub(80)..]);
    assert!(output.contains("xxxxxxxx"));
    let grew = peak_memory(daemon.pid())?.saturating_sub(before);
    assert!(grew < 64 << 20, "the daemon's peak memory grew by {} MiB for 100 MB of output", grew >> 20);
    Ok(())
}

#[tokio::test]
async fn a_guest_cannot_open_watch_or_type_into_a_terminal_and_a_member_can() -> anyhow::Result<()> {
    const ROOT_TOKEN: &str = "root-secret-token";
    let home = tests::Home::new()?;
    let mut tokens = Vec::new();
    for (id, role) in [("gus", "guest"), ("mia", "member")] {
        let run = home.expect(0, &["user", "add", id, "--role", role, "--users", "users.json"]).await?;
        tokens.push(run.stdout.trim().to_owned());
    }
    let mut opts = options(json!({}));
    opts.args = vec!["--users".into(), "users.json".into(), "--connection-token".into(), ROOT_TOKEN.into()];
    let daemon = Daemon::start_in(home.path(), opts).await?;
    let url = |token: &str| format!("{}/?tkn={token}", daemon.url.trim_end_matches('/'));
    let mut guest = TestClient::connect(&url(&tokens[0]), "gus-window").await?;
    let mut member = TestClient::connect(&url(&tokens[1]), "mia-window").await?;

    let params = json!({ "channel": new_terminal(), "claim": { "kind": "client", "clientId": "gus-window" } });
    let (code, message, _) = error_of(&guest, "createTerminal", params).await;
    assert_eq!(code, ahp_types::errors::ahp_error_codes::PERMISSION_DENIED);
    assert_eq!(message, "gus may not terminal:create here");

    let uri = open(&mut member, home.path(), None).await?;
    shell_pid(&mut member, &uri).await?;
    let (code, message, _) = error_of(&guest, "subscribe", json!({ "channel": uri })).await;
    assert_eq!(
        (code, message.as_str()),
        (ahp_types::errors::ahp_error_codes::PERMISSION_DENIED, "gus may not terminal:output here")
    );
    let (code, message, _) = error_of(&guest, "disposeTerminal", json!({ "channel": uri })).await;
    assert_eq!(
        (code, message.as_str()),
        (ahp_types::errors::ahp_error_codes::PERMISSION_DENIED, "gus may not terminal:dispose here")
    );
    let typed = StateAction::TerminalInput(TerminalInputAction { data: "echo typed-by-gus\r".into() });
    let seq = guest.dispatch(&uri, typed).await?;
    assert_eq!(guest.refusal(seq).await?, "gus may not terminal:write here");
    member.check_against_snapshot(&uri).await?;
    assert!(!member.mirror.terminal(&uri).map(terminal_output).unwrap_or_default().contains("typed-by-gus"));
    Ok(())
}

#[tokio::test]
async fn the_models_ahp_terminals_lists_an_open_terminal_with_its_last_lines() -> anyhow::Result<()> {
    let mut opts = options(json!({}));
    if let Some(config) = opts.config.as_mut() {
        config["agents"]["notes"] = json!(tests::agents::notes());
    }
    let daemon = Daemon::start_with(opts).await?;
    let folder = daemon.home.join("work");
    let elsewhere = daemon.home.join("elsewhere");
    std::fs::create_dir_all(&folder)?;
    std::fs::create_dir_all(&elsewhere)?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_, chat) = a.create_session_in("notes", &folder).await?;
    let before = tests::turn_text(&a.turn(&chat, "call ahp_terminals {}").await?);
    assert!(before.ends_with("This host has no terminal open."), "{before}");

    let uri = open(&mut a, &folder, None).await?;
    type_line(&a, &uri, "echo marker-$((40+2))").await?;
    until_printed(&mut a, &uri, "marker-42").await?;
    // A terminal in another folder is not this session's.
    let other = open(&mut a, &elsewhere, None).await?;
    let said = tests::turn_text(&a.turn(&chat, "call ahp_terminals {}").await?);
    let title = a.mirror.terminal(&uri).map(|t| t.title.clone()).unwrap_or_default();
    let line = format!("{uri}\t{title}\t{}\trunning", std::fs::canonicalize(&folder)?.display());
    assert!(said.contains(&line), "the terminal's line {line:?} in {said:?}");
    assert!(said.contains("\n  marker-42"), "its last lines: {said}");
    assert!(!said.contains(&other), "{said}");
    Ok(())
}

#[tokio::test]
async fn a_sessions_terminal_ends_with_the_session_and_every_terminal_with_the_daemon() -> anyhow::Result<()> {
    let mut daemon = Daemon::start_with(options(json!({}))).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session("echo", None).await?;
    let theirs = new_terminal();
    let claim = json!({ "kind": "session", "session": session, "chat": chat });
    a.request("createTerminal", json!({ "channel": theirs, "claim": claim }))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    a.subscribe(&theirs).await?;
    let session_shell = shell_pid(&mut a, &theirs).await?;
    let mine = open(&mut a, &daemon.home, None).await?;
    let client_shell = shell_pid(&mut a, &mine).await?;

    a.request("disposeSession", json!({ "channel": session })).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    until_exited(session_shell).await?;
    assert!(alive(client_shell), "a client's terminal is not the session's");
    let t = theirs.clone();
    a.until("the session's terminal off the root's list", move |m| {
        m.root().and_then(|r| r.terminals.as_ref()).is_some_and(|list| list.iter().all(|i| i.resource != t))
    })
    .await?;
    a.check_against_snapshot(ahp_types::ROOT_RESOURCE_URI).await?;
    drop(a);
    daemon.terminate().await?;
    until_exited(client_shell).await?;
    Ok(())
}

#[tokio::test]
async fn a_bang_command_runs_as_the_hosts_turn_and_a_stop_ends_its_process() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(options(json!({}))).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_, chat) = a.create_session("echo", None).await?;
    let turn_id = a.send(&chat, "!echo command-pid=$$; sleep 1000").await?;
    let c = chat.clone();
    let live = move |m: &tests::Mirror| -> Option<String> {
        let turn = m.chat(&c)?.active_turn.as_ref()?;
        turn.response_parts.iter().find_map(|p| match p {
            ahp_types::state::ResponsePart::ToolCall(tc) => match &tc.tool_call {
                ahp_types::state::ToolCallState::Running(r) => r.content.iter().flatten().find_map(|c| match c {
                    ahp_types::state::ToolResultContent::Terminal(t) => Some(t.resource.clone()),
                    _ => None,
                }),
                _ => None,
            },
            _ => None,
        })
    };
    let probe = live.clone();
    a.until("the command's live terminal in its turn", move |m| probe(m).is_some()).await?;
    let uri = live(&a.mirror).unwrap_or_default();
    a.subscribe(&uri).await?;
    let pid = until_number(&mut a, &uri, "command-pid=").await?;
    assert!(alive(pid));
    let stop = StateAction::ChatTurnCancelled(ahp_types::actions::ChatTurnCancelledAction {
        turn_id: turn_id.clone(),
        duration: 0,
        meta: None,
    });
    a.dispatch(&chat, stop).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, ahp_types::state::TurnState::Cancelled);
    until_exited(pid).await?;
    let u = uri.clone();
    a.until("the command's terminal to exit", move |m| m.terminal(&u).and_then(exited_with).is_some()).await?;
    a.check_against_snapshot(&chat).await?;
    a.check_against_snapshot(&uri).await?;
    // The chat goes on with the backend, which never heard of the command.
    let next = a.turn(&chat, "hello after").await?;
    assert_eq!(tests::turn_text(&next), "hello after");
    Ok(())
}

#[tokio::test]
async fn a_claim_moves_only_from_its_holder_and_to_a_session_only_inside_its_folder() -> anyhow::Result<()> {
    use ahp_types::actions::TerminalClaimedAction;
    use ahp_types::state::{TerminalClaim, TerminalClientClaim, TerminalSessionClaim};
    let daemon = Daemon::start_with(options(json!({}))).await?;
    let folder = daemon.home.join("project");
    std::fs::create_dir_all(&folder)?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let mut b = TestClient::connect(&daemon.url, "b").await?;
    let (session, chat) = a.create_session_in("echo", &folder).await?;
    let inside = open(&mut a, &folder, None).await?;
    let outside = open(&mut a, &daemon.home, None).await?;
    b.subscribe(&inside).await?;

    let to_b = StateAction::TerminalClaimed(TerminalClaimedAction {
        claim: TerminalClaim::Client(TerminalClientClaim { client_id: "b".into() }),
    });
    let seq = b.dispatch(&inside, to_b).await?;
    assert_eq!(b.refusal(seq).await?, "Only the client that holds a terminal's claim may hand it on");

    let to_session = || {
        StateAction::TerminalClaimed(TerminalClaimedAction {
            claim: TerminalClaim::Session(TerminalSessionClaim {
                session: session.clone(),
                chat: chat.clone(),
                turn_id: None,
                tool_call_id: None,
            }),
        })
    };
    let seq = a.dispatch(&outside, to_session()).await?;
    let reason = a.refusal(seq).await?;
    assert!(reason.contains(&format!("outside {session}'s folders")), "{reason}");
    let seq = a.dispatch(&inside, to_session()).await?;
    assert_eq!(a.refusal(seq).await?, "(accepted)");
    let (u, s) = (inside.clone(), session.clone());
    a.until("the root to list the session's claim", move |m| {
        m.root().and_then(|r| r.terminals.as_ref()).is_some_and(|list| {
            list.iter().any(|i| i.resource == u && matches!(&i.claim, TerminalClaim::Session(c) if c.session == s))
        })
    })
    .await?;
    a.check_against_snapshot(ahp_types::ROOT_RESOURCE_URI).await?;
    b.check_against_snapshot(&inside).await?;
    Ok(())
}
