//! People and grants (seed 000 "Grants"): a daemon with a users directory, people made by
//! `ahpd user add`, each connecting with their own token through the official client. A guest
//! reads and is refused every write in the host's words; a member writes and deletes only their
//! own sessions; nobody signed in is asked to sign in, hears of no session and cannot watch one by
//! naming it in the handshake; a removed person is cut off at once; a tool call acts as the
//! person whose turn it is, so one in a turn a guest sent cannot write; a client id is the person's
//! who first claimed it.

use ahp_types::actions::{RootConfigChangedAction, SessionIsReadChangedAction, SessionTitleChangedAction, StateAction};
use ahp_types::state::PendingMessageKind;
use ahp_types::ROOT_RESOURCE_URI;
use serde_json::{json, Value};
use tests::daemon::Home;
use tests::raw::RawSocket;
use tests::{Daemon, DaemonOptions, TestClient};

const ROOT_TOKEN: &str = "root-secret-token";

/// A home with people in `users.json`, and their tokens by id.
async fn people(home: &Home, who: &[(&str, &str)]) -> anyhow::Result<Vec<(String, String)>> {
    let mut tokens = Vec::new();
    for (id, role) in who {
        let run = home.expect(0, &["user", "add", id, "--role", role, "--users", "users.json"]).await?;
        let token = run.stdout.trim().to_owned();
        assert!(!token.is_empty() && run.stderr.contains("shown this once"), "{run:?}");
        tokens.push(((*id).to_owned(), token));
    }
    Ok(tokens)
}

/// A daemon under `users.json` with the root token, offering `agents`.
fn users_options(agents: Value) -> DaemonOptions {
    DaemonOptions {
        args: vec!["--users".into(), "users.json".into(), "--connection-token".into(), ROOT_TOKEN.into()],
        config: Some(json!({ "agents": agents })),
        ..DaemonOptions::default()
    }
}

async fn daemon_for(home: &Home) -> anyhow::Result<Daemon> {
    let options = users_options(json!({ "echo": tests::agents::echo_paced(0) }));
    Daemon::start_in(home.path(), options).await
}

fn url_with(daemon: &Daemon, token: &str) -> String {
    format!("{}/?tkn={token}", daemon.url.trim_end_matches('/'))
}

fn token_of<'a>(tokens: &'a [(String, String)], id: &str) -> &'a str {
    tokens.iter().find(|(i, _)| i == id).map(|(_, t)| t.as_str()).unwrap_or("")
}

/// The error a request ended in, as (code, message).
async fn error_of(client: &TestClient, method: &str, params: Value) -> (i32, String) {
    match client.request(method, params).await {
        Err(ahp::ClientError::Rpc(e)) => (e.code, e.message),
        other => (0, format!("not an error: {other:?}")),
    }
}

/// The first tool call of `turn`, as JSON (null when it made none).
fn first_tool_call(turn: &ahp_types::state::Turn) -> serde_json::Value {
    turn.response_parts
        .iter()
        .find_map(|p| match p {
            ahp_types::state::ResponsePart::ToolCall(tc) => serde_json::to_value(&tc.tool_call).ok(),
            _ => None,
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_guest_reads_everything_and_every_write_is_refused_in_the_hosts_words() -> anyhow::Result<()> {
    let home = Home::new()?;
    let tokens = people(&home, &[("ana", "member"), ("gus", "guest")]).await?;
    let daemon = daemon_for(&home).await?;
    let mut ana = TestClient::connect(&url_with(&daemon, token_of(&tokens, "ana")), "ana-editor").await?;
    let (session, chat) = ana.create_session("echo", None).await?;
    ana.turn(&chat, "hello from ana").await?;

    let mut gus = TestClient::connect(&url_with(&daemon, token_of(&tokens, "gus")), "gus-editor").await?;
    let listed = gus.request("listSessions", json!({ "channel": ROOT_RESOURCE_URI })).await?;
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(1), "a guest lists: {listed}");
    gus.subscribe(&session).await?;
    gus.subscribe(&chat).await?;
    assert_eq!(gus.mirror.chat(&chat).map(|c| c.turns.len()), Some(1), "a guest reads the turns");
    gus.request("fetchTurns", json!({ "channel": chat })).await?;

    let refused = "gus may not session:write here";
    let (code, message) =
        error_of(&gus, "createSession", json!({ "channel": "ahp-session:/gus-1", "provider": "echo" })).await;
    assert_eq!((code, message.as_str()), (-32009, refused));
    let (code, message) = error_of(&gus, "disposeSession", json!({ "channel": session })).await;
    assert_eq!((code, message.as_str()), (-32009, refused));
    let (code, message) = error_of(&gus, "createChat", json!({ "channel": session, "chat": "ahp-chat:/gus-2" })).await;
    assert_eq!((code, message.as_str()), (-32009, refused));

    let turn = StateAction::ChatTurnStarted(ahp_types::actions::ChatTurnStartedAction {
        turn_id: "guest-turn".into(),
        started_at: tests::client::now_iso(),
        message: tests::user_message("a guest's turn"),
        queued_message_id: None,
        meta: None,
    });
    let seq = gus.dispatch(&chat, turn).await?;
    assert_eq!(gus.refusal(seq).await?, refused, "a guest can never send a turn for a tool to run in");
    let seq = gus
        .dispatch(&session, StateAction::SessionTitleChanged(SessionTitleChangedAction { title: "mine".into() }))
        .await?;
    assert_eq!(gus.refusal(seq).await?, refused);
    let seq =
        gus.dispatch(&session, StateAction::SessionIsReadChanged(SessionIsReadChangedAction { is_read: true })).await?;
    assert_eq!(gus.refusal(seq).await?, "gus may not session:mark here");
    let seq = gus
        .dispatch(
            ROOT_RESOURCE_URI,
            StateAction::RootConfigChanged(RootConfigChangedAction {
                config: serde_json::Map::from_iter([("clientToolTimeoutMs".to_owned(), json!(5))]),
                replace: None,
            }),
        )
        .await?;
    assert_eq!(gus.refusal(seq).await?, "gus may not config:write here");

    // Nothing a guest tried changed anything: one turn, the same title, and both mirrors agree
    // with the host.
    gus.check_against_snapshot(&chat).await?;
    gus.check_against_snapshot(&session).await?;
    assert_eq!(gus.mirror.chat(&chat).map(|c| c.turns.len()), Some(1));
    // The connection survives every refusal.
    gus.request("listSessions", json!({ "channel": ROOT_RESOURCE_URI })).await?;
    Ok(())
}

#[tokio::test]
async fn a_member_writes_and_deletes_only_their_own_sessions() -> anyhow::Result<()> {
    let home = Home::new()?;
    let tokens = people(&home, &[("ana", "member"), ("bo", "member")]).await?;
    let daemon = daemon_for(&home).await?;
    let mut ana = TestClient::connect(&url_with(&daemon, token_of(&tokens, "ana")), "ana-editor").await?;
    let mut bo = TestClient::connect(&url_with(&daemon, token_of(&tokens, "bo")), "bo-editor").await?;
    let (anas, chat) = ana.create_session("echo", None).await?;
    let turn = ana.turn(&chat, "ana writes").await?;
    assert_eq!(tests::turn_text(&turn), "ana writes");
    let (bos, _) = bo.create_session("echo", None).await?;

    let (code, message) = error_of(&bo, "disposeSession", json!({ "channel": anas })).await;
    assert_eq!((code, message.as_str()), (-32009, "Only the session's owner can delete it."));
    bo.request("disposeSession", json!({ "channel": bos })).await?;

    // Root (the deployment's own token) may delete anyone's.
    let root = TestClient::connect(&url_with(&daemon, ROOT_TOKEN), "root-editor").await?;
    root.request("disposeSession", json!({ "channel": anas })).await?;
    let listed = root.request("listSessions", json!({ "channel": ROOT_RESOURCE_URI })).await?;
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(0), "{listed}");
    Ok(())
}

#[tokio::test]
async fn nobody_signed_in_is_asked_to_and_a_removed_person_is_cut_off_at_once() -> anyhow::Result<()> {
    let home = Home::new()?;
    let tokens = people(&home, &[("ana", "member")]).await?;
    let daemon = daemon_for(&home).await?;

    // No token: the handshake works, every command asks for a sign-in.
    let nobody = TestClient::connect(&daemon.url, "anon").await?;
    let (code, _) = error_of(&nobody, "listSessions", json!({ "channel": ROOT_RESOURCE_URI })).await;
    assert_eq!(code, -32007, "AuthRequired");
    let resource = match nobody.request("listSessions", json!({ "channel": ROOT_RESOURCE_URI })).await {
        Err(ahp::ClientError::Rpc(e)) => e.data.and_then(|d| d["resources"][0]["resource"].as_str().map(str::to_owned)),
        _ => None,
    };
    let resource = resource.unwrap_or_default();
    let bad = nobody
        .request("authenticate", json!({ "channel": ROOT_RESOURCE_URI, "resource": resource, "token": "not-a-token" }))
        .await;
    assert!(matches!(&bad, Err(ahp::ClientError::Rpc(e)) if e.code == -32007), "{bad:?}");
    nobody
        .request(
            "authenticate",
            json!({ "channel": ROOT_RESOURCE_URI, "resource": resource, "token": token_of(&tokens, "ana") }),
        )
        .await?;
    nobody.request("listSessions", json!({ "channel": ROOT_RESOURCE_URI })).await?;

    // A token that is nobody's is refused at the door.
    let wrong = TestClient::connect(&url_with(&daemon, "wrong"), "w").await;
    assert!(wrong.is_err(), "a token nobody holds is refused");

    // Removed: the connection that is open is cut off at once, though it does nothing (what it
    // subscribed to streams to it no more), and the token no longer opens one.
    let mut ana = TestClient::connect(&url_with(&daemon, token_of(&tokens, "ana")), "ana-editor").await?;
    ana.create_session("echo", None).await?;
    home.expect(0, &["user", "rm", "ana", "--users", "users.json"]).await?;
    let closed = loop {
        match ana.next_event(tests::PATIENCE).await {
            Ok(()) => continue,
            Err(e) => break e.to_string(),
        }
    };
    assert!(closed.contains("the connection closed"), "{closed}");
    assert!(daemon.log().contains("the person may no longer read sessions; cut off"), "{}", daemon.log());
    assert!(TestClient::connect(&url_with(&daemon, token_of(&tokens, "ana")), "again").await.is_err());
    Ok(())
}

#[tokio::test]
async fn the_user_verbs_list_refuse_and_replace_tokens() -> anyhow::Result<()> {
    let home = Home::new()?;
    people(&home, &[("ana", "admin")]).await?;
    let listed = home.expect(0, &["user", "list", "--users", "users.json"]).await?;
    assert_eq!(listed.stdout.trim(), "ana\tadmin");
    let file = std::fs::read_to_string(home.path().join("users.json"))?;
    assert!(file.contains("sha256:"), "only hashes are kept: {file}");
    let again = home.ahpd(&["user", "add", "ana", "--users", "users.json"]).await?;
    assert_eq!((again.code, again.stderr.trim()), (1, "there is a user called ana already"));
    let wizard = home.ahpd(&["user", "add", "bo", "--role", "wizard", "--users", "users.json"]).await?;
    assert_eq!(wizard.code, 2);
    assert!(wizard.stderr.contains("there is no role called wizard; the roles are admin, member, guest"), "{wizard:?}");
    let gone = home.ahpd(&["user", "rm", "zed", "--users", "users.json"]).await?;
    assert_eq!((gone.code, gone.stderr.trim()), (1, "there is no user called zed"));
    let token = home.expect(0, &["user", "token", "ana", "--users", "users.json"]).await?;
    assert!(!file.contains(token.stdout.trim()));
    // With no --users and no "users" key, the file in the config folder is used, and the verb
    // says the daemon will not use it until told to.
    let default = home.expect(0, &["user", "add", "cy"]).await?;
    assert!(default.stderr.contains("--users"), "{default:?}");
    assert!(home.path().join("config/ahpd/users.json").exists());
    // A users directory that does not read stops the daemon from starting, with the reason.
    std::fs::write(home.path().join("broken.json"), "{ not json")?;
    let refused = home.ahpd(&["start", "--users", "broken.json", "--port", "0"]).await?;
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(refused.stderr.contains("broken.json is not a users directory"), "{refused:?}");
    Ok(())
}

#[tokio::test]
async fn a_tool_call_acts_as_the_person_whose_turn_runs_and_as_nobody_without_one() -> anyhow::Result<()> {
    let home = Home::new()?;
    let tokens = people(&home, &[("ana", "member")]).await?;
    let options = users_options(json!({
            "notes": tests::agents::notes_revealing_endpoint(),
            "echo": tests::agents::echo_paced(0) }));
    let daemon = Daemon::start_in(home.path(), options).await?;
    let mut ana = TestClient::connect(&url_with(&daemon, token_of(&tokens, "ana")), "ana-editor").await?;
    let (_, chat) = ana.create_session("notes", None).await?;
    let said = tests::turn_text(&ana.turn(&chat, "endpoint").await?);
    let words: Vec<&str> = said.split_whitespace().collect();
    let (url, token) = (words[1].to_owned(), words[2].to_owned());
    let spawn = json!({ "relationship": "independent", "agent": "echo", "prompt": "hi", "title": "Made" });
    let text = |v: &Value| v["text"].as_str().unwrap_or_default().to_owned();

    // No turn runs: the call is nobody's. It reads, and every write is refused about the turn.
    let r = tests::mcp::call_tools(&url, &token, &[("list_sessions", json!({})), ("create_session", spawn.clone())])
        .await?;
    assert_eq!(r[0]["isError"], false, "{}", r[0]);
    assert_eq!(
        (r[1]["isError"].clone(), text(&r[1])),
        (json!(true), "this turn may not session:write here".to_owned())
    );

    // While ana's turn runs, the call is ana's: she may write.
    let turn_id = ana.send(&chat, "ask Hold on?").await?;
    let questions = ana.until_questions(&chat, 1).await?;
    let r = tests::mcp::call_tool(&url, &token, "create_session", &spawn).await?;
    assert_eq!(r["isError"], false, "{r}");

    // Ana is made a guest while her turn runs: from then on its calls may not write, in her name.
    let file = home.path().join("users.json");
    let mut users: Value = serde_json::from_str(&std::fs::read_to_string(&file)?)?;
    users["users"][0]["roles"] = json!(["guest"]);
    std::fs::write(&file, serde_json::to_vec_pretty(&users)?)?;
    let r = tests::mcp::call_tool(&url, &token, "create_session", &spawn).await?;
    assert_eq!(text(&r), "ana may not session:write here", "{r}");

    // Root answers the question (ana may no longer), and the turn ends.
    let root = TestClient::connect(&url_with(&daemon, ROOT_TOKEN), "root-editor").await?;
    root.answer(&chat, &questions[0], Some("yes")).await?;
    ana.finished(&chat, &turn_id).await?;
    ana.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn a_wake_acts_as_the_person_whose_turn_asked_for_it() -> anyhow::Result<()> {
    let home = Home::new()?;
    let tokens = people(&home, &[("ana", "member")]).await?;
    let options = DaemonOptions {
        env: vec![("AHPD_TEST_CLOCK".into(), "manual".into())],
        ..users_options(json!({
            "notes": tests::agents::notes(),
            "echo": tests::agents::echo_paced(0) }))
    };
    let daemon = Daemon::start_in(home.path(), options).await?;
    let mut ana = TestClient::connect(&url_with(&daemon, token_of(&tokens, "ana")), "ana-editor").await?;
    let (_, chat) = ana.create_session("notes", None).await?;
    let spawn = json!({ "relationship": "independent", "agent": "echo", "prompt": "hi", "title": "Woken" });
    let wake = json!({ "delaySeconds": 60, "prompt": format!("call create_session {spawn}") });
    ana.turn(&chat, &format!("call schedule_wakeup {wake}")).await?;

    let root = TestClient::connect(&url_with(&daemon, ROOT_TOKEN), "root-editor").await?;
    tests::clock::advance(&root, 60_000).await?;
    let c = chat.clone();
    ana.until("the wake's turn to end", move |m| m.chat(&c).is_some_and(|x| x.turns.len() == 2)).await?;
    let woken = ana.mirror.chat(&chat).and_then(|x| x.turns.last().cloned()).expect("the wake's turn");
    let result = first_tool_call(&woken);
    assert_eq!(result["success"], true, "the wake's call is ana's, so it may write: {result}");
    Ok(())
}

/// Pings and collects the methods of every notification that arrived before the answer.
async fn notified_before_ping(ws: &mut RawSocket, id: u64) -> anyhow::Result<Vec<String>> {
    ws.send(json!({ "jsonrpc": "2.0", "id": id, "method": "ping", "params": { "channel": ROOT_RESOURCE_URI } }))
        .await?;
    let mut methods = Vec::new();
    loop {
        let message = ws.recv().await?;
        if message.get("id") == Some(&Value::from(id)) {
            return Ok(methods);
        }
        if let Some(method) = message.get("method").and_then(Value::as_str) {
            methods.push(method.to_owned());
        }
    }
}

fn initialize(client_id: &str, subscriptions: &[&str]) -> Value {
    json!({ "channel": ROOT_RESOURCE_URI, "protocolVersions": ["1.0.0"], "clientId": client_id,
            "initialSubscriptions": subscriptions })
}

#[tokio::test]
async fn nobody_signed_in_learns_of_no_session_and_cannot_watch_one_by_name() -> anyhow::Result<()> {
    let home = Home::new()?;
    let tokens = people(&home, &[("ana", "member"), ("gus", "guest")]).await?;
    let daemon = daemon_for(&home).await?;
    let mut nobody = RawSocket::connect(&daemon.url).await?;
    let init = nobody.call(1, "initialize", initialize("anon", &[ROOT_RESOURCE_URI])).await?;
    assert!(init.get("result").is_some(), "nobody may watch the root: {init}");
    let mut gus = RawSocket::connect(&url_with(&daemon, token_of(&tokens, "gus"))).await?;
    gus.call(1, "initialize", initialize("gus-editor", &[ROOT_RESOURCE_URI])).await?;

    let mut ana = TestClient::connect(&url_with(&daemon, token_of(&tokens, "ana")), "ana-editor").await?;
    let (session, chat) = ana.create_session("echo", None).await?;
    ana.turn(&chat, "ana's secret").await?;

    // The root announces the session to a guest, who may read it, and to nobody signed in not at all.
    let to_gus = notified_before_ping(&mut gus, 2).await?;
    assert!(to_gus.iter().any(|m| m == "root/sessionAdded"), "{to_gus:?}");
    let to_nobody = notified_before_ping(&mut nobody, 2).await?;
    assert!(!to_nobody.iter().any(|m| m.starts_with("root/session")), "{to_nobody:?}");

    // Naming the chat in the handshake is asked what subscribe asks: a sign-in, and no snapshot.
    let mut stranger = RawSocket::connect(&daemon.url).await?;
    let refused = stranger.call(1, "initialize", initialize("anon-2", &[ROOT_RESOURCE_URI, &session, &chat])).await?;
    assert_eq!(refused["error"]["code"], -32007, "AuthRequired: {refused}");
    let reconnect = json!({ "channel": ROOT_RESOURCE_URI, "clientId": "anon-2", "lastSeenServerSeq": 0,
                            "subscriptions": [chat] });
    let refused = stranger.call(2, "reconnect", reconnect).await?;
    assert_eq!(refused["error"]["code"], -32007, "AuthRequired: {refused}");
    assert!(!refused.to_string().contains("secret"), "{refused}");
    // The same stranger may still shake hands on the root alone, and then sign in.
    let init = stranger.call(3, "initialize", initialize("anon-2", &[ROOT_RESOURCE_URI])).await?;
    assert!(init.get("result").is_some(), "{init}");
    Ok(())
}

#[tokio::test]
async fn a_tool_call_in_a_turn_a_guest_sent_cannot_write() -> anyhow::Result<()> {
    let home = Home::new()?;
    let tokens = people(&home, &[("ana", "member")]).await?;
    let options = users_options(json!({
            "notes": tests::agents::notes(),
            "echo": tests::agents::echo_paced(0) }));
    let daemon = Daemon::start_in(home.path(), options).await?;
    let mut ana = TestClient::connect(&url_with(&daemon, token_of(&tokens, "ana")), "ana-editor").await?;
    let (_, chat) = ana.create_session("notes", None).await?;

    // Ana queues a message whose model writes (through the worker, as a backend calls host tools)
    // behind a turn that waits; then she becomes a guest, so the queued turn is a guest's.
    let first = ana.send(&chat, "ask Hold on?").await?;
    let questions = ana.until_questions(&chat, 1).await?;
    let spawn = json!({ "relationship": "independent", "agent": "echo", "prompt": "hi", "title": "Made" });
    ana.pending(&chat, PendingMessageKind::Queued, "q1", &format!("call create_session {spawn}")).await?;
    let c = chat.clone();
    ana.until("the message to be queued", move |m| {
        m.chat(&c).and_then(|s| s.queued_messages.as_ref()).is_some_and(|q| q.len() == 1)
    })
    .await?;
    let file = home.path().join("users.json");
    let mut users: Value = serde_json::from_str(&std::fs::read_to_string(&file)?)?;
    users["users"][0]["roles"] = json!(["guest"]);
    std::fs::write(&file, serde_json::to_vec_pretty(&users)?)?;

    let root = TestClient::connect(&url_with(&daemon, ROOT_TOKEN), "root-editor").await?;
    root.answer(&chat, &questions[0], Some("go on")).await?;
    ana.finished(&chat, &first).await?;
    let c = chat.clone();
    ana.until("the guest's turn to run and end", move |m| {
        m.chat(&c).is_some_and(|s| s.turns.len() == 2 && s.active_turn.is_none())
    })
    .await?;
    let turn = ana.mirror.chat(&chat).and_then(|s| s.turns.last().cloned()).expect("the guest's turn");
    let call = first_tool_call(&turn);
    assert_eq!(call["success"], false, "{call}");
    assert!(call.to_string().contains("ana may not session:write here"), "{call}");
    let listed = root.request("listSessions", json!({ "channel": ROOT_RESOURCE_URI })).await?;
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(1), "nothing was made: {listed}");
    ana.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn a_client_id_is_its_persons_and_nobody_else_takes_it_over() -> anyhow::Result<()> {
    let home = Home::new()?;
    let tokens = people(&home, &[("ana", "member"), ("bob", "member")]).await?;
    let daemon = daemon_for(&home).await?;
    let mut ana = TestClient::connect(&url_with(&daemon, token_of(&tokens, "ana")), "ana-editor").await?;
    let (_session, chat) = ana.create_session("echo", None).await?;

    // Bob, and nobody signed in, are refused Ana's client id, on initialize and on reconnect.
    let sentence = "Client id ana-editor belongs to ana; connect under a client id of your own";
    for url in [url_with(&daemon, token_of(&tokens, "bob")), daemon.url.clone()] {
        let mut ws = RawSocket::connect(&url).await?;
        let answer = ws.call(1, "initialize", initialize("ana-editor", &[])).await?;
        assert_eq!(answer["error"]["code"], -32009, "{answer}");
        assert_eq!(answer["error"]["message"], sentence, "{answer}");
        let reconnect = json!({ "channel": ROOT_RESOURCE_URI, "clientId": "ana-editor", "lastSeenServerSeq": 0, "subscriptions": [] });
        let answer = ws.call(2, "reconnect", reconnect).await?;
        assert_eq!(answer["error"]["message"], sentence, "{answer}");
    }
    // Ana's connection was never dropped: her turns go on.
    assert_eq!(ana.turn(&chat, "still mine").await?.state, ahp_types::state::TurnState::Complete);

    // Ana herself takes it back from a second connection (the first goes, as a half-open one would).
    let again = TestClient::connect(&url_with(&daemon, token_of(&tokens, "ana")), "ana-editor").await?;
    again.request("ping", json!({})).await?;
    Ok(())
}
