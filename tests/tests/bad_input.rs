//! Bad input at the door and on the wire: each gets its error (or is dropped where the spec says
//! so), and the connection lives on.

use serde_json::{json, Value};
use tests::raw::{http_status, upgrade, RawSocket};
use tests::{Daemon, DaemonOptions, TestClient};

async fn initialized(url: &str, client_id: &str) -> anyhow::Result<RawSocket> {
    let mut ws = RawSocket::connect(url).await?;
    let init = ws
        .call(
            1,
            "initialize",
            json!({ "channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": client_id }),
        )
        .await?;
    assert_eq!(init["result"]["protocolVersion"], "1.0.0", "{init}");
    Ok(ws)
}

fn error_code(message: &Value) -> i64 {
    message["error"]["code"].as_i64().unwrap_or(0)
}

#[tokio::test]
async fn malformed_frames_get_their_errors_and_the_connection_lives_on() -> anyhow::Result<()> {
    let daemon = Daemon::start().await?;
    let mut ws = RawSocket::connect(&daemon.url).await?;

    // Only ping before the handshake.
    let pong = ws.call(1, "ping", json!({ "channel": "ahp-root://" })).await?;
    assert_eq!(pong["result"], Value::Null);
    assert!(pong.as_object().is_some_and(|o| o.contains_key("result")), "ping answers result: null");
    let early = ws.call(2, "listSessions", json!({ "channel": "ahp-root://" })).await?;
    assert_eq!(error_code(&early), -32600);

    let init = ws
        .call(3, "initialize", json!({ "channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "raw" }))
        .await?;
    assert_eq!(init["result"]["protocolVersion"], "1.0.0");
    let twice = ws
        .call(4, "initialize", json!({ "channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "raw" }))
        .await?;
    assert_eq!(error_code(&twice), -32600);

    ws.send_text("this is not json").await?;
    let parse = ws.response().await?;
    assert_eq!(error_code(&parse), -32700);
    assert_eq!(parse["id"], Value::Null);

    ws.send(json!({ "jsonrpc": "2.0", "id": "seven", "method": "ping", "params": { "channel": "ahp-root://" } }))
        .await?;
    let string_id = ws.response().await?;
    assert_eq!(error_code(&string_id), -32600);
    assert_eq!(string_id["id"], "seven");

    ws.send(json!([{ "jsonrpc": "2.0", "id": 5, "method": "ping", "params": { "channel": "ahp-root://" } }])).await?;
    let batch = ws.response().await?;
    assert_eq!(error_code(&batch), -32600);

    let unknown = ws.call(6, "frobnicate", json!({ "channel": "ahp-root://" })).await?;
    assert_eq!(error_code(&unknown), -32601);

    let no_channel = ws.call(7, "subscribe", json!({})).await?;
    assert_eq!(error_code(&no_channel), -32602);

    let wrong_params = ws.call(8, "listSessions", json!({ "channel": "ahp-root://", "limit": "many" })).await?;
    assert_eq!(error_code(&wrong_params), -32602);

    let no_such = ws.call(9, "subscribe", json!({ "channel": "ahp-session:/nope" })).await?;
    assert_eq!(error_code(&no_such), -32008);

    let bad_scheme = ws.call(10, "subscribe", json!({ "channel": "ftp://x" })).await?;
    assert_eq!(error_code(&bad_scheme), -32602);

    let big = format!(
        r#"{{"jsonrpc":"2.0","id":11,"method":"ping","params":{{"channel":"ahp-root://","pad":"{}"}}}}"#,
        "x".repeat(10 << 20)
    );
    ws.send_text(big).await?;
    let too_big = ws.response().await?;
    assert_eq!(error_code(&too_big), -32600, "{too_big}");
    assert_eq!(too_big["id"], 11);

    let still = ws.call(12, "ping", json!({ "channel": "ahp-root://" })).await?;
    assert_eq!(still["result"], Value::Null, "ping still answers after all that");
    Ok(())
}

#[tokio::test]
async fn refused_actions_come_back_with_a_reason_and_change_nothing() -> anyhow::Result<()> {
    let daemon = Daemon::start().await?;
    let mut owner = TestClient::connect(&daemon.url, "owner").await?;
    let (session, chat) = owner.create_session("echo", None).await?;
    let mut ws = initialized(&daemon.url, "raw").await?;

    // An action for a chat this connection does not watch.
    let turn = json!({ "type": "chat/turnStarted", "turnId": "t1", "startedAt": "2026-01-01T00:00:00.000Z",
        "message": { "text": "hi", "origin": { "kind": "user" } } });
    ws.send(json!({ "jsonrpc": "2.0", "method": "dispatchAction", "params": { "channel": chat, "clientSeq": 1, "action": turn } })).await?;
    let rejected = ws.recv().await?;
    assert_eq!(rejected["method"], "action");
    assert_eq!(rejected["params"]["origin"]["clientSeq"], 1);
    assert!(rejected["params"]["rejectionReason"].as_str().is_some_and(|r| r.contains("Subscribe")), "{rejected}");

    // Subscribed now: a host-only action, a bad timestamp, an agent-origin message.
    let sub = ws.call(20, "subscribe", json!({ "channel": chat })).await?;
    assert!(sub["result"]["snapshot"].is_object());
    let cases = [
        json!({ "type": "chat/turnComplete", "turnId": "t1", "duration": 1 }),
        json!({ "type": "chat/turnStarted", "turnId": "t2", "startedAt": "yesterday", "message": { "text": "hi", "origin": { "kind": "user" } } }),
        json!({ "type": "chat/turnStarted", "turnId": "t3", "startedAt": "2026-01-01T00:00:00.000Z", "message": { "text": "hi", "origin": { "kind": "agent" } } }),
        json!({ "type": "chat/turnComplete", "turnId": "t1" }),
        json!({ "type": "chat/noSuchThing" }),
        json!({ "type": "session/titleChanged", "title": "wrong channel" }),
    ];
    for (i, action) in cases.iter().enumerate() {
        let seq = 2 + i as i64;
        ws.send(json!({ "jsonrpc": "2.0", "method": "dispatchAction", "params": { "channel": chat, "clientSeq": seq, "action": action } })).await?;
        let reply = ws.recv().await?;
        assert_eq!(reply["params"]["origin"]["clientSeq"], seq, "{reply}");
        assert!(reply["params"]["rejectionReason"].is_string(), "case {i} {action} was not refused: {reply}");
    }
    // An action for a channel that does not exist is ignored: the next thing we hear is the ping.
    ws.send(json!({ "jsonrpc": "2.0", "method": "dispatchAction", "params": { "channel": "ahp-chat:/nowhere", "clientSeq": 99, "action": turn } })).await?;
    let pong = ws.call(30, "ping", json!({ "channel": "ahp-root://" })).await?;
    assert_eq!(pong["id"], 30);

    owner.pump()?;
    owner.check_against_snapshot(&chat).await?;
    owner.check_against_snapshot(&session).await?;
    assert_eq!(owner.mirror.chat(&chat).map(|c| c.turns.len()), Some(0), "nothing changed");
    Ok(())
}

#[tokio::test]
async fn version_negotiation_refuses_what_it_cannot_speak_and_closes() -> anyhow::Result<()> {
    let daemon = Daemon::start().await?;
    let mut ws = RawSocket::connect(&daemon.url).await?;
    let refused = ws
        .call(1, "initialize", json!({ "channel": "ahp-root://", "protocolVersions": ["0.9.0"], "clientId": "old" }))
        .await?;
    assert_eq!(error_code(&refused), -32005);
    assert!(refused["error"]["data"]["supportedVersions"].as_array().is_some_and(|v| !v.is_empty()));
    assert!(ws.closed().await, "the connection closes after -32005");

    let mut ws = RawSocket::connect(&daemon.url).await?;
    let malformed = ws
        .call(1, "initialize", json!({ "channel": "ahp-root://", "protocolVersions": ["1.0"], "clientId": "x" }))
        .await?;
    assert_eq!(error_code(&malformed), -32602);
    let newer = ws
        .call(
            2,
            "initialize",
            json!({ "channel": "ahp-root://", "protocolVersions": ["1.3.0", "0.9.0"], "clientId": "x" }),
        )
        .await?;
    assert_eq!(newer["result"]["protocolVersion"], "1.3.0", "the highest 1.x offered, verbatim");
    Ok(())
}

#[tokio::test]
async fn the_door_refuses_web_pages_rebound_hosts_and_wrong_tokens() -> anyhow::Result<()> {
    let daemon = Daemon::start().await?;
    assert_eq!(upgrade(&daemon.url, &[("origin", "https://evil.example")]).await.err(), Some(403));
    assert_eq!(upgrade(&daemon.url, &[("host", "evil.example:80")]).await.err(), Some(403));
    assert!(upgrade(&daemon.url, &[("host", "localhost")]).await.is_ok());
    assert_eq!(http_status(&daemon.url, "/nothing-here").await?, 404);

    let guarded = Daemon::start_with(DaemonOptions {
        args: vec!["--connection-token".into(), "s3cret".into()],
        ..Default::default()
    })
    .await?;
    assert_eq!(upgrade(&guarded.url, &[]).await.err(), Some(401));
    assert_eq!(upgrade(&format!("{}/?tkn=wrong", guarded.url), &[]).await.err(), Some(401));
    assert!(upgrade(&format!("{}/?tkn=s3cret", guarded.url), &[]).await.is_ok());
    assert!(upgrade(&guarded.url, &[("authorization", "Bearer s3cret")]).await.is_ok());
    assert!(!guarded.log().contains("s3cret"), "the token is never logged");
    // Announced once, in the web window's address a person opens from the terminal.
    let said = announcement(&guarded).await?;
    let page = format!("web: {}/?tkn=s3cret", guarded.url.replace("ws://", "http://"));
    let with_token: Vec<&str> = said.lines().filter(|l| l.contains("s3cret")).collect();
    assert_eq!(with_token, [page.as_str()], "only on the web: line: {said}");
    Ok(())
}

/// The daemon's announcement after its first line, once its last line (`pid N`) is in.
async fn announcement(daemon: &Daemon) -> anyhow::Result<String> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let said = daemon.stdout.lock().map(|l| l.join("\n")).unwrap_or_default();
        if said.lines().any(|l| l.starts_with("pid ")) {
            return Ok(said);
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "no whole announcement: {said}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_public_address_without_a_token_choice_is_refused() -> anyhow::Result<()> {
    let out = tokio::process::Command::new(tests::daemon::ahpd_bin())
        .args(["--host", "0.0.0.0", "--port", "0"])
        .env("XDG_CONFIG_HOME", std::env::temp_dir().join("ahpd-none-config"))
        .output()
        .await?;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Binding 0.0.0.0 exposes this host beyond this machine."), "{err}");
    Ok(())
}

#[tokio::test]
async fn config_completions_for_an_unknown_provider_are_refused_and_the_host_lives_on() -> anyhow::Result<()> {
    // Found by the ahp_frames fuzz target: this request once deadlocked the whole host.
    let daemon = Daemon::start().await?;
    let mut ws = initialized(&daemon.url, "raw").await?;
    let unknown = ws
        .call(
            2,
            "sessionConfigCompletions",
            json!({ "channel": "ahp-root://", "provider": "nobody", "property": "x", "query": "y" }),
        )
        .await?;
    assert_eq!(error_code(&unknown), -32002, "{unknown}");
    let mut other = initialized(&daemon.url, "other").await?;
    let pong = other.call(2, "ping", json!({ "channel": "ahp-root://" })).await?;
    assert_eq!(pong["id"], 2, "another connection is still served");
    Ok(())
}
