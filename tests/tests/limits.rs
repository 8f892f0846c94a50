//! Limits against abuse, through the real daemon on a raw socket: a message nested too deep, too
//! many subscriptions, too many requests in flight, too many sessions in a minute, and a line too
//! long on `--stdio`. Each refusal is -32600 with `data: {limit, value}` and a sentence, and the
//! connection lives on.

use std::path::PathBuf;
use std::process::Stdio;

use serde_json::{json, Value};
use tests::raw::RawSocket;
use tests::{Daemon, DaemonOptions, PATIENCE};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const ROOT: &str = "ahp-root://";

async fn initialized(url: &str, client_id: &str) -> anyhow::Result<RawSocket> {
    let mut ws = RawSocket::connect(url).await?;
    let init = ws
        .call(1, "initialize", json!({ "channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": client_id }))
        .await?;
    anyhow::ensure!(init["result"]["protocolVersion"] == "1.0.0", "initialize failed: {init}");
    Ok(ws)
}

/// Asserts `answer` is the refusal of limit `key`, and answers its sentence.
fn refused_by(answer: &Value, key: &str) -> String {
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert_eq!(answer["error"]["data"]["limit"], key, "{answer}");
    answer["error"]["message"].as_str().unwrap_or_default().to_owned()
}

async fn still_alive(ws: &mut RawSocket, id: u64) -> anyhow::Result<()> {
    let pong = ws.call(id, "ping", json!({ "channel": ROOT })).await?;
    anyhow::ensure!(pong.get("result") == Some(&Value::Null), "ping after a refusal: {pong}");
    Ok(())
}

fn nested(levels: usize) -> String {
    format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
}

#[tokio::test]
async fn a_message_nested_too_deep_is_refused_before_it_is_read() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(DaemonOptions::with_config(json!({ "maxJsonDepth": 32 }))).await?;
    let mut ws = initialized(&daemon.url, "deep").await?;

    // Within the limit: the ping's params hold 30 levels (31 with the params object, 32 with the
    // message itself) and it is answered.
    ws.send_text(format!(r#"{{"jsonrpc":"2.0","id":2,"method":"ping","params":{{"x":{}}}}}"#, nested(30))).await?;
    let fine = ws.response().await?;
    assert_eq!(fine["id"], 2);
    assert!(fine.get("error").is_none(), "{fine}");

    ws.send_text(format!(r#"{{"jsonrpc":"2.0","id":3,"method":"ping","params":{{"x":{}}}}}"#, nested(31))).await?;
    let deep = ws.response().await?;
    assert_eq!(deep["id"], 3, "answered under its own id");
    let said = refused_by(&deep, "maxJsonDepth");
    assert_eq!(said, "A message nested deeper than this host's limit of 32 levels (maxJsonDepth) was not read");
    assert_eq!(deep["error"]["data"]["value"], 32);

    // Far deeper than any JSON parser here would go: refused all the same, not a parse error.
    ws.send_text(format!(r#"{{"jsonrpc":"2.0","id":4,"method":"ping","params":{}}}"#, nested(100_000))).await?;
    let abyss = ws.response().await?;
    refused_by(&abyss, "maxJsonDepth");

    // Brackets inside strings are text, not nesting.
    let text = "[".repeat(1000);
    let ok = ws.call(5, "ping", json!({ "channel": ROOT, "note": text })).await?;
    assert!(ok.get("error").is_none(), "{ok}");
    still_alive(&mut ws, 6).await
}

#[tokio::test]
async fn subscriptions_per_connection_are_limited() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(DaemonOptions::with_config(json!({ "maxSubscriptionsPerConnection": 3 }))).await?;
    let mut ws = RawSocket::connect(&daemon.url).await?;
    let four = ["ahp-root://", "ahp-session:/a", "ahp-session:/b", "ahp-session:/c"];
    let too_many = ws
        .call(
            1,
            "initialize",
            json!({ "channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": "subs", "initialSubscriptions": four }),
        )
        .await?;
    let said = refused_by(&too_many, "maxSubscriptionsPerConnection");
    assert_eq!(
        said,
        "initialize names 4 channels, over this host's limit of 3 subscriptions per connection (maxSubscriptionsPerConnection)"
    );
    // The connection is not initialized and may try again.
    let init = ws
        .call(
            2,
            "initialize",
            json!({ "channel": ROOT, "protocolVersions": ["1.0.0"], "clientId": "subs", "initialSubscriptions": [ROOT] }),
        )
        .await?;
    assert_eq!(init["result"]["protocolVersion"], "1.0.0", "{init}");

    let session = "ahp-session:/limits-subs";
    let created = ws.call(3, "createSession", json!({ "channel": session, "provider": "echo" })).await?;
    assert!(created.get("error").is_none(), "{created}");
    let chat = "ahp-chat:/limits-subs";
    for (id, uri) in [(4, session.to_owned()), (5, format!("{session}/annotations"))] {
        let sub = ws.call(id, "subscribe", json!({ "channel": uri })).await?;
        assert!(sub["result"]["snapshot"].is_object(), "{sub}");
    }
    let fourth = ws.call(6, "subscribe", json!({ "channel": chat })).await?;
    let said = refused_by(&fourth, "maxSubscriptionsPerConnection");
    assert_eq!(
        said,
        format!(
            "This connection watches 3 channels, this host's limit (maxSubscriptionsPerConnection); unsubscribe from one before subscribing to {chat}"
        )
    );
    // One it holds already is refreshed, not counted again.
    let again = ws.call(7, "subscribe", json!({ "channel": session })).await?;
    assert!(again["result"]["snapshot"].is_object(), "{again}");
    ws.send(
        json!({ "jsonrpc": "2.0", "method": "unsubscribe", "params": { "channel": format!("{session}/annotations") } }),
    )
    .await?;
    let now = ws.call(8, "subscribe", json!({ "channel": chat })).await?;
    assert!(now["result"]["snapshot"].is_object(), "room after an unsubscribe: {now}");

    // reconnect is held to the same count.
    let mut other = RawSocket::connect(&daemon.url).await?;
    let back = other
        .call(
            1,
            "reconnect",
            json!({ "channel": ROOT, "clientId": "subs2", "lastSeenServerSeq": 0, "subscriptions": four }),
        )
        .await?;
    refused_by(&back, "maxSubscriptionsPerConnection");
    still_alive(&mut other, 2).await?;
    still_alive(&mut ws, 9).await
}

fn workers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("workers")
}

#[tokio::test]
async fn requests_in_flight_per_connection_are_limited() -> anyhow::Result<()> {
    let config = json!({
        "maxPendingRequestsPerConnection": 2,
        "agents": { "py": { "kind": "command", "command": "python3", "args": [workers_dir().join("echo.py")],
                            "options": { "heldCompletions": true } } },
    });
    let daemon = Daemon::start_with(DaemonOptions::with_config(config)).await?;
    let mut ws = initialized(&daemon.url, "busy").await?;
    // The key the worker answers completions for is marked for clients to ask about.
    let resolved = ws.call(9, "resolveSessionConfig", json!({ "channel": ROOT, "provider": "py" })).await?;
    assert_eq!(resolved["result"]["schema"]["properties"]["target"]["enumDynamic"], true, "{resolved}");
    let ask = |id: u64, query: &str| {
        json!({ "jsonrpc": "2.0", "id": id, "method": "sessionConfigCompletions",
                "params": { "channel": ROOT, "provider": "py", "property": "target", "query": query } })
    };
    // Two the worker holds: both wait for their answers.
    ws.send(ask(10, "a")).await?;
    ws.send(ask(11, "b")).await?;
    ws.send(ask(12, "c")).await?;
    let third = ws.response().await?;
    assert_eq!(third["id"], 12, "the third is answered at once, before the two held ones: {third}");
    let said = refused_by(&third, "maxPendingRequestsPerConnection");
    assert_eq!(
        said,
        "This connection has 2 requests waiting for their answers, this host's limit (maxPendingRequestsPerConnection); send sessionConfigCompletions again once one is answered"
    );
    // ping is always answered; so is anything once the held ones are.
    still_alive(&mut ws, 13).await?;

    // Another connection is not held to this one's count: its `release` answers everything held.
    let mut other = initialized(&daemon.url, "releaser").await?;
    let released = other.call(1, "sessionConfigCompletions", ask(1, "release")["params"].clone()).await?;
    assert_eq!(released["result"]["items"][0]["value"], "main", "{released}");
    let mut answered = Vec::new();
    while answered.len() < 2 {
        let answer = ws.response().await?;
        assert!(answer.get("error").is_none(), "{answer}");
        answered.push(answer["id"].as_u64().unwrap_or(0));
    }
    answered.sort_unstable();
    assert_eq!(answered, vec![10, 11]);
    let after = ws.call(14, "sessionConfigCompletions", ask(14, "release")["params"].clone()).await?;
    assert!(after.get("error").is_none(), "taken once the others were answered: {after}");
    Ok(())
}

#[tokio::test]
async fn sessions_created_per_minute_are_limited_and_free_a_minute_later() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(DaemonOptions {
        config: Some(json!({ "maxSessionsPerMinute": 2 })),
        env: vec![("AHPD_TEST_CLOCK".into(), "manual".into())],
        ..Default::default()
    })
    .await?;
    let mut ws = initialized(&daemon.url, "maker").await?;
    let create = |n: u32| json!({ "channel": format!("ahp-session:/rate-{n}"), "provider": "echo" });
    for n in 0..2 {
        let made = ws.call(10 + u64::from(n), "createSession", create(n)).await?;
        assert!(made.get("error").is_none(), "{made}");
    }
    let third = ws.call(20, "createSession", create(2)).await?;
    let said = refused_by(&third, "maxSessionsPerMinute");
    assert_eq!(
        said,
        "This connection created 2 sessions in the last minute, this host's limit (maxSessionsPerMinute); the next one may be created in 60 s"
    );
    assert_eq!(third["error"]["data"]["retryAfterMs"], 60_000);
    still_alive(&mut ws, 21).await?;

    // Another connection has its own minute.
    let mut other = initialized(&daemon.url, "other-maker").await?;
    let theirs = other.call(1, "createSession", create(100)).await?;
    assert!(theirs.get("error").is_none(), "{theirs}");

    tests::clock::advance_raw(&mut ws, 22, 45_000).await?;
    let still = ws.call(23, "createSession", create(2)).await?;
    assert!(refused_by(&still, "maxSessionsPerMinute").ends_with("the next one may be created in 15 s"), "{still}");
    tests::clock::advance_raw(&mut ws, 24, 15_000).await?;
    let freed = ws.call(25, "createSession", create(2)).await?;
    assert!(freed.get("error").is_none(), "a minute after the first, one more may be made: {freed}");
    // The refused attempts were not counted: the session it names was made once, now.
    let listed = ws.call(26, "listSessions", json!({ "channel": ROOT })).await?;
    assert_eq!(listed["result"]["items"].as_array().map(Vec::len), Some(4), "{listed}");
    Ok(())
}

async fn next_line(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> anyhow::Result<Value> {
    let line = tokio::time::timeout(PATIENCE, lines.next_line()).await??;
    let line = line.ok_or_else(|| anyhow::anyhow!("ahpd --stdio closed its output"))?;
    Ok(serde_json::from_str(&line)?)
}

#[tokio::test]
async fn a_line_too_long_on_stdio_is_skipped_and_answered() -> anyhow::Result<()> {
    let home = tempfile::tempdir()?;
    let mut child = tokio::process::Command::new(tests::daemon::ahpd_bin())
        .arg("--stdio")
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env("HOME", home.path())
        .env_remove("AHPD_CONFIG")
        .current_dir(home.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or_else(|| anyhow::anyhow!("no stdin"))?;
    let mut lines = BufReader::new(child.stdout.take().ok_or_else(|| anyhow::anyhow!("no stdout"))?).lines();
    // Over 16 MiB, the line limit for the default maxFrameBytes of 4 MiB: never held whole.
    let huge = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#, "x".repeat(17 << 20));
    let writer = tokio::spawn(async move {
        stdin.write_all(huge.as_bytes()).await?;
        stdin.write_all(b"\n").await?;
        stdin.write_all(br#"{"jsonrpc":"2.0","id":2,"method":"ping","params":{"channel":"ahp-root://"}}"#).await?;
        stdin.write_all(b"\n").await?;
        anyhow::Ok(stdin)
    });
    let refused = next_line(&mut lines).await?;
    refused_by(&refused, "maxFrameBytes");
    let pong = next_line(&mut lines).await?;
    assert_eq!(pong["id"], 2, "the next line is read: {pong}");
    drop(writer.await??);
    let status = tokio::time::timeout(PATIENCE, child.wait()).await??;
    assert!(status.success(), "stdin closed: a clean stop");
    Ok(())
}
