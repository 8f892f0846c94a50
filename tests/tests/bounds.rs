//! A tool call is bounded (seed 003), end to end through the real daemon: a host tool past its
//! deadline is stopped and the turn goes on; a successful result longer than the cap is cut with
//! a sentence saying what was cut, a host tool's and a client's alike; an error longer than the cap
//! arrives whole; a `!` command past `shellCommandTimeoutMs` is stopped, one that prints more than
//! its terminal keeps says what was let go, and one that closes its output early is not finished
//! until its process exits. Deadlines run on the manual clock the tests move, never by waiting.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use ahp::ResourceRequestHandlers;
use ahp_types::actions::{ChatToolCallCompleteAction, SessionActiveClientSetAction, StateAction};
use ahp_types::commands::ResourceReadResult;
use ahp_types::common::StringOrMarkdown;
use ahp_types::messages::JsonRpcError;
use ahp_types::state::{
    ResponsePart, SessionActiveClient, SessionInputRequest, TerminalLifecycleState, ToolCallCompletedState,
    ToolCallResult, ToolCallState, ToolDefinition, ToolResultContent, ToolResultTextContent, Turn, TurnState,
};
use serde_json::{json, Value};
use tests::client::terminal_output;
use tests::daemon::{alive, until_exited};
use tests::mcp::call_tools;
use tests::mcp::endpoint;
use tests::{turn_text, Daemon, DaemonOptions, Mirror, TestClient};

/// The host's cap on a tool's result, in bytes.
const CAP: usize = 64 * 1024;

/// A daemon on the manual clock with the notes agent (whose `call` runs any offered tool) and
/// echo, `extra` keys on top; `!` commands run `/bin/sh`.
fn options(extra: Value) -> DaemonOptions {
    let mut config = json!({
        "agents": {
            "notes": tests::agents::notes_revealing_endpoint(),
            "echo": tests::agents::echo_paced(0) },
        "defaultShell": "/bin/sh",
    });
    if let (Some(keys), Value::Object(extra)) = (config.as_object_mut(), extra) {
        keys.extend(extra);
    }
    let mut options = DaemonOptions::with_config(config);
    options.env.push(("AHPD_TEST_CLOCK".into(), "manual".into()));
    options
}

/// The completed tool call of a finished turn.
fn completed_call(turn: &Turn) -> anyhow::Result<ToolCallCompletedState> {
    turn.response_parts
        .iter()
        .find_map(|p| match p {
            ResponsePart::ToolCall(tc) => match &tc.tool_call {
                ToolCallState::Completed(c) => Some(c.clone()),
                _ => None,
            },
            _ => None,
        })
        .ok_or_else(|| anyhow::anyhow!("no completed call in {:?}", turn.response_parts))
}

/// What the notes agent's model was handed by `name`: the text after `<name> said: `.
fn said_by(turn: &Turn, name: &str) -> String {
    let text = turn_text(turn);
    text.split_once(&format!("{name} said: ")).map(|(_, t)| t.to_owned()).unwrap_or(text)
}

/// The sentence a result of `total` bytes cut at the cap ends with.
fn cut_sentence(total: usize) -> String {
    format!(
        "[Output cut: this result was {total} bytes; the first {CAP} are shown and the last {} were left out, past this host's cap of {CAP} bytes on a tool's result.]",
        total - CAP
    )
}

#[tokio::test]
async fn a_host_tool_past_its_deadline_is_stopped_and_the_turn_goes_on() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(options(json!({}))).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("notes", None).await?;
    // A client that publishes a resource and never answers for it: the call hangs until its
    // deadline. The client says when the host asked, which is after the call's dispatch.
    let editor = TestClient::connect(&daemon.url, "editor").await?;
    let (asked, mut was_asked) = tokio::sync::mpsc::unbounded_channel();
    editor.client.set_resource_request_handlers(ResourceRequestHandlers::new().on_resource_read(move |params| {
        let asked = asked.clone();
        async move {
            let _ = asked.send(params.uri);
            std::future::pending::<Result<ResourceReadResult, JsonRpcError>>().await
        }
    }));

    let turn_id = a.send(&chat, r#"call ahp_resource {"uri": "virtual://editor/hangs.ts"}"#).await?;
    let uri = was_asked.recv().await.ok_or_else(|| anyhow::anyhow!("the host never asked the client"))?;
    assert_eq!(uri, "virtual://editor/hangs.ts");
    tests::clock::advance(&a, 59_000).await?;
    a.request("ping", json!({ "channel": "ahp-root://" })).await?;
    a.pump()?;
    assert!(a.mirror.chat(&chat).and_then(|c| c.active_turn.as_ref()).is_some(), "59 s in, the call still runs");
    tests::clock::advance(&a, 1_000).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete, "the turn goes on past the failed call");
    let call = completed_call(&turn)?;
    assert!(!call.success);
    assert_eq!(said_by(&turn, "ahp_resource"), "ahp_resource did not finish within 60 s and was stopped.");
    a.check_against_snapshot(&chat).await?;
    // The next turn runs as ever.
    let next = a.turn(&chat, "hello").await?;
    assert_eq!(next.state, TurnState::Complete);
    Ok(())
}

#[tokio::test]
async fn a_long_result_is_cut_with_a_sentence_and_a_long_error_arrives_whole() -> anyhow::Result<()> {
    let folder = tempfile::tempdir()?;
    let long: String = (0..200_000).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    std::fs::write(folder.path().join("long.txt"), &long)?;
    let daemon = Daemon::start_with(options(json!({}))).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session_in("notes", folder.path()).await?;
    let (url, token) = endpoint(&mut a, &chat).await?;
    // A client refuses a read with an explanation longer than the cap.
    let why = format!("the buffer is locked: {}", "x".repeat(100_000));
    let editor = TestClient::connect(&daemon.url, "editor").await?;
    let refusal = why.clone();
    editor.client.set_resource_request_handlers(ResourceRequestHandlers::new().on_resource_read(move |_| {
        let message = refusal.clone();
        async move { Err::<ResourceReadResult, _>(JsonRpcError { code: -32008, message, data: None }) }
    }));

    let file = format!("file://{}/long.txt", folder.path().display());
    let expected = format!("{}\n{}", &long[..CAP], cut_sentence(long.len()));
    let refused = format!("editor could not read virtual://editor/locked.ts: {why}");
    // Through the session's MCP endpoint (the official Python SDK)…
    let results = call_tools(
        &url,
        &token,
        &[("ahp_resource", json!({ "uri": file })), ("ahp_resource", json!({ "uri": "virtual://editor/locked.ts" }))],
    )
    .await?;
    assert_eq!(results[0]["isError"], false, "{}", results[0]["isError"]);
    assert_eq!(results[0]["text"].as_str().unwrap_or_default(), expected, "cut at the cap, saying what was cut");
    assert_eq!(results[1]["isError"], true);
    let text = results[1]["text"].as_str().unwrap_or_default();
    assert_eq!(text.len(), refused.len(), "an error is never cut");
    assert_eq!(text, refused);

    // …and by a backend's model through the worker protocol.
    let turn = a.turn(&chat, &format!(r#"call ahp_resource {{"uri": "{file}"}}"#)).await?;
    assert!(completed_call(&turn)?.success);
    assert_eq!(said_by(&turn, "ahp_resource"), expected);
    let turn = a.turn(&chat, r#"call ahp_resource {"uri": "virtual://editor/locked.ts"}"#).await?;
    assert!(!completed_call(&turn)?.success);
    assert_eq!(said_by(&turn, "ahp_resource"), refused, "the model reads the whole explanation");
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

fn open_file_tool() -> ToolDefinition {
    ToolDefinition {
        name: "openFile".into(),
        title: None,
        description: Some("Open a file in the editor".into()),
        input_schema: Some(json!({ "type": "object", "properties": { "path": { "type": "string" } } })),
        output_schema: None,
        annotations: None,
        meta: None,
    }
}

/// Waits until the session reports a call waiting for `client`; answers (turn id, tool call id).
async fn waiting_for(observer: &mut TestClient, session: &str, client: &str) -> anyhow::Result<(String, String)> {
    let found = |m: &Mirror, s: &str, c: &str| {
        m.session(s).and_then(|x| x.input_needed.clone()).unwrap_or_default().into_iter().find_map(|r| match r {
            SessionInputRequest::ToolClientExecution(e) if e.client_id == c => {
                Some((e.turn_id, e.tool_call.tool_call_id))
            }
            _ => None,
        })
    };
    let (s, c) = (session.to_owned(), client.to_owned());
    observer.until("a call waiting for the client", move |m| found(m, &s, &c).is_some()).await?;
    found(&observer.mirror, session, client).ok_or_else(|| anyhow::anyhow!("no call waiting"))
}

fn complete(turn_id: &str, tool_call_id: &str, success: bool, text: &str) -> StateAction {
    StateAction::ChatToolCallComplete(ChatToolCallCompleteAction {
        turn_id: turn_id.into(),
        tool_call_id: tool_call_id.into(),
        meta: None,
        result: ToolCallResult {
            success,
            past_tense_message: StringOrMarkdown::Plain(if success { "Opened it" } else { "Could not open it" }.into()),
            content: Some(vec![ToolResultContent::Text(ToolResultTextContent { text: text.into() })]),
            structured_content: None,
            error: (!success).then(|| json!("it failed")),
        },
        requires_result_confirmation: None,
    })
}

#[tokio::test]
async fn a_clients_long_result_is_cut_as_a_host_tools_is_and_its_long_error_arrives_whole() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(options(json!({ "clientToolTimeoutMs": 600_000 }))).await?;
    let mut editor = TestClient::connect(&daemon.url, "c1").await?;
    let (session, chat) = editor.create_session("notes", None).await?;
    let active = SessionActiveClient {
        client_id: "c1".into(),
        display_name: Some("c1 editor".into()),
        tools: vec![open_file_tool()],
        customizations: None,
    };
    editor
        .dispatch(&session, StateAction::SessionActiveClientSet(SessionActiveClientSetAction { active_client: active }))
        .await?;

    let long = "y".repeat(300_000);
    let turn_id = editor.send(&chat, r#"call c1__openFile {"path": "big.txt"}"#).await?;
    let (_, call_id) = waiting_for(&mut editor, &session, "c1").await?;
    editor.dispatch(&chat, complete(&turn_id, &call_id, true, &long)).await?;
    let turn = editor.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete);
    assert_eq!(
        said_by(&turn, "openFile"),
        format!("{}\n{}", &long[..CAP], cut_sentence(long.len())),
        "the backend is handed the result cut at the cap, saying what was cut"
    );

    let why = format!("the disk is full: {}", "z".repeat(100_000));
    let turn_id = editor.send(&chat, r#"call c1__openFile {"path": "other.txt"}"#).await?;
    let (_, call_id) = waiting_for(&mut editor, &session, "c1").await?;
    editor.dispatch(&chat, complete(&turn_id, &call_id, false, &why)).await?;
    let turn = editor.finished(&chat, &turn_id).await?;
    assert_eq!(said_by(&turn, "openFile"), why, "a failure is handed on whole");
    editor.check_against_snapshot(&chat).await?;
    Ok(())
}

/// The terminal a running `!` command's turn names.
fn live_terminal(mirror: &Mirror, chat: &str) -> Option<String> {
    let turn = mirror.chat(chat)?.active_turn.as_ref()?;
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

/// Sends a `!` command and waits for its live terminal; subscribes to it and answers its uri.
async fn run_command(client: &mut TestClient, chat: &str, command: &str) -> anyhow::Result<(String, String)> {
    let turn_id = client.send(chat, &format!("!{command}")).await?;
    let c = chat.to_owned();
    client.until("the command's live terminal", move |m| live_terminal(m, &c).is_some()).await?;
    let uri = live_terminal(&client.mirror, chat).unwrap_or_default();
    client.subscribe(&uri).await?;
    Ok((turn_id, uri))
}

/// Waits until the terminal printed `label` and a number after it; answers the number.
async fn until_number(client: &mut TestClient, uri: &str, label: &str) -> anyhow::Result<i32> {
    let number = |m: &Mirror, u: &str, l: &str| {
        let output = m.terminal(u).map(terminal_output)?;
        let rest = output.split_once(l)?.1;
        rest.chars().take_while(char::is_ascii_digit).collect::<String>().parse::<i32>().ok()
    };
    let (u, l) = (uri.to_owned(), label.to_owned());
    client.until(&format!("{label} in {uri}"), move |m| number(m, &u, &l).is_some()).await?;
    number(&client.mirror, uri, label).ok_or_else(|| anyhow::anyhow!("no number after {label}"))
}

fn exit_code_of(mirror: &Mirror, uri: &str) -> Option<Option<i64>> {
    match &mirror.terminal(uri)?.lifecycle {
        TerminalLifecycleState::Exited(e) => Some(e.exit_code),
        _ => None,
    }
}

/// The terminal content of a completed `!` command's call: its exit code, and any text beside it.
fn command_result(call: &ToolCallCompletedState) -> (Option<i64>, Vec<String>) {
    let mut code = None;
    let mut texts = Vec::new();
    for content in call.content.iter().flatten() {
        match content {
            ToolResultContent::Terminal(t) => code = t.result.as_ref().and_then(|r| r.exit_code),
            ToolResultContent::Text(t) => texts.push(t.text.clone()),
            _ => {}
        }
    }
    (code, texts)
}

#[tokio::test]
async fn a_bang_command_past_its_deadline_is_stopped_and_its_turn_says_so() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(options(json!({ "shellCommandTimeoutMs": 5_000 }))).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_, chat) = a.create_session("echo", None).await?;
    let command = "echo command-pid=$$; sleep 1000";
    let (turn_id, uri) = run_command(&mut a, &chat, command).await?;
    let pid = until_number(&mut a, &uri, "command-pid=").await?;
    tests::clock::advance(&a, 4_999).await?;
    a.request("ping", json!({ "channel": "ahp-root://" })).await?;
    a.pump()?;
    assert!(alive(pid), "before its deadline the command runs");
    tests::clock::advance(&a, 1).await?;
    let turn = a.finished(&chat, &turn_id).await?;
    assert_eq!(turn.state, TurnState::Complete);
    let call = completed_call(&turn)?;
    assert!(!call.success);
    assert_eq!(
        call.error,
        Some(json!(format!("`{command}` did not finish within 5 s (shellCommandTimeoutMs) and was stopped.")))
    );
    assert_eq!(
        call.past_tense_message.as_text(),
        format!("Ran `{command}`, which ran past its deadline and was stopped")
    );
    assert_eq!(command_result(&call).0, Some(137), "killed");
    until_exited(pid).await?;
    a.check_against_snapshot(&chat).await?;
    // The chat goes on.
    assert_eq!(turn_text(&a.turn(&chat, "after").await?), "after");
    Ok(())
}

#[tokio::test]
async fn a_bang_command_that_prints_more_than_its_terminal_keeps_says_what_was_let_go() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(options(json!({ "terminalScrollbackBytes": 4096 }))).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_, chat) = a.create_session("echo", None).await?;
    let command = r"head -c 100000 /dev/zero | tr '\0' x";
    let turn = a.turn(&chat, &format!("!{command}")).await?;
    let call = completed_call(&turn)?;
    assert!(call.success, "{call:?}");
    let (code, texts) = command_result(&call);
    assert_eq!(code, Some(0));
    let [sentence] = &texts[..] else { anyhow::bail!("one sentence beside the terminal: {texts:?}") };
    let prefix = format!("[Output cut: `{command}` printed 100000 bytes; its terminal keeps the last ");
    let kept: usize = sentence
        .strip_prefix(&prefix)
        .and_then(|rest| rest.split_once(' '))
        .and_then(|(n, _)| n.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("{sentence}"))?;
    assert!(kept <= 4096, "{sentence}");
    assert!(
        sentence.ends_with(&format!("(terminalScrollbackBytes) and the first {} were let go.]", 100_000 - kept)),
        "{sentence}"
    );
    Ok(())
}

#[tokio::test]
async fn a_bang_commands_cut_output_counts_the_bytes_it_printed_not_the_terminals_line_ends() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(options(json!({ "terminalScrollbackBytes": 4096 }))).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_, chat) = a.create_session("echo", None).await?;
    // 100 000 lines of `y\n`: 200 000 bytes, which the terminal shows as 300 000 (`y\r\n`).
    let command = "yes | head -c 200000";
    let turn = a.turn(&chat, &format!("!{command}")).await?;
    let call = completed_call(&turn)?;
    let (code, texts) = command_result(&call);
    assert_eq!(code, Some(0));
    let [sentence] = &texts[..] else { anyhow::bail!("one sentence beside the terminal: {texts:?}") };
    let prefix = format!("[Output cut: `{command}` printed 200000 bytes; its terminal keeps the last ");
    let kept: u64 = sentence
        .strip_prefix(&prefix)
        .and_then(|rest| rest.split_once(' '))
        .and_then(|(n, _)| n.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("{sentence}"))?;
    assert!(kept <= 4096, "{sentence}");
    assert!(
        sentence.ends_with(&format!("(terminalScrollbackBytes) and the first {} were let go.]", 200_000 - kept)),
        "{sentence}"
    );
    Ok(())
}

#[tokio::test]
async fn a_bang_command_that_closes_its_output_early_is_not_finished_until_it_exits() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(options(json!({}))).await?;
    let work = tempfile::tempdir()?;
    let fifo = work.path().join("go");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status()?;
    anyhow::ensure!(made.success(), "mkfifo failed");
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_, chat) = a.create_session_in("echo", work.path()).await?;
    // It prints, closes every descriptor on its terminal, then goes on running until the test
    // writes to the fifo, and exits with 7.
    let command = "echo command-pid=$$; exec 0<&- 1>&- 2>&-; read line < go; exit 7";
    let (turn_id, uri) = run_command(&mut a, &chat, command).await?;
    let pid = until_number(&mut a, &uri, "command-pid=").await?;
    // Opening the fifo to write meets the command opening it to read: by then its output is
    // closed. A turn that ended first was reported finished at the end of its output.
    let opener = {
        let fifo = fifo.clone();
        tokio::task::spawn_blocking(move || std::fs::OpenOptions::new().write(true).open(fifo))
    };
    let opened = tokio::select! {
        opened = opener => opened??,
        ended = a.finished(&chat, &turn_id) => {
            // Meet the opener, so it does not wait for ever.
            let _reader = std::fs::OpenOptions::new().read(true).custom_flags(libc_nonblock()).open(&fifo);
            anyhow::bail!("the turn ended when the command closed its output, before it exited: {ended:?}");
        }
    };
    a.request("ping", json!({ "channel": "ahp-root://" })).await?;
    a.pump()?;
    assert!(alive(pid), "the command runs on with its output closed");
    assert!(a.mirror.chat(&chat).and_then(|c| c.active_turn.as_ref()).is_some(), "its turn is not finished");
    assert_eq!(exit_code_of(&a.mirror, &uri), None, "its terminal has not exited");

    let mut opened = opened;
    tokio::task::spawn_blocking(move || opened.write_all(b"go\n")).await??;
    let turn = a.finished(&chat, &turn_id).await?;
    let call = completed_call(&turn)?;
    assert_eq!(command_result(&call).0, Some(7), "the call completes with the exit code, known only at the exit");
    assert_eq!(call.error, Some(json!("exit code 7")));
    let u = uri.clone();
    a.until("the terminal to exit", move |m| exit_code_of(m, &u).is_some()).await?;
    assert_eq!(exit_code_of(&a.mirror, &uri), Some(Some(7)));
    until_exited(pid).await?;
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

/// `O_NONBLOCK`, so opening a fifo to read does not wait for a writer.
fn libc_nonblock() -> i32 {
    nix::fcntl::OFlag::O_NONBLOCK.bits()
}
