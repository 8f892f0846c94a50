//! The host's tools: reported on `serverTools`, called by a backend's model through the worker
//! protocol, and reached through the session's `/ahp-mcp` endpoint by a real MCP client (the
//! official Python SDK), which another session's token cannot use, nor a web page or a rebound
//! host name with the right one.

use serde_json::{json, Value};
use tests::mcp::endpoint;
use tests::mcp::{call_tool, call_tools_of, list_tools, list_tools_of, Sdk};
use tests::raw::http_post;
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

fn notes_daemon() -> DaemonOptions {
    DaemonOptions::with_config(tests::agents::notes_and_echo())
}

/// The names of the host's tools the session reports (`serverTools`).
fn server_tool_names(client: &TestClient, session: &str) -> Vec<String> {
    let tools = client.mirror.session(session).and_then(|s| s.server_tools.clone()).unwrap_or_default();
    tools.into_iter().map(|t| t.name).collect()
}

#[tokio::test]
async fn a_real_mcp_client_lists_and_calls_a_sessions_tools() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(notes_daemon()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session("notes", None).await?;
    let server_tools = server_tool_names(&a, &session);
    assert!(server_tools.contains(&"list_agents".to_owned()), "{server_tools:?}");
    let (url, token) = endpoint(&mut a, &chat).await?;
    assert!(url.contains("/ahp-mcp/"), "{url}");

    let listed = list_tools(&url, &token).await?;
    assert_eq!(listed["protocolVersion"], "2025-06-18");
    let names: Vec<&str> =
        listed["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        server_tools.iter().map(String::as_str).collect::<Vec<_>>(),
        "the endpoint offers what serverTools says"
    );

    let called = call_tool(&url, &token, "list_agents", &json!({})).await?;
    assert_eq!(called["isError"], false, "{called}");
    let agents: Value = serde_json::from_str(called["text"].as_str().unwrap_or("{}"))?;
    let ids: Vec<&str> =
        agents["agents"].as_array().into_iter().flatten().filter_map(|a| a["agent"].as_str()).collect();
    assert_eq!(ids, vec!["notes", "echo"]);

    let refused = call_tool(&url, &token, "list_models", &json!({ "agent": "nobody" })).await?;
    assert_eq!(refused["isError"], true, "a refusal is an error result the model can read: {refused}");
    Ok(())
}

#[tokio::test]
async fn clients_at_2025_06_18_and_at_the_newest_revisions_list_and_call_a_sessions_tools() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(notes_daemon()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session("notes", None).await?;
    let server_tools = server_tool_names(&a, &session);
    let (url, token) = endpoint(&mut a, &chat).await?;
    // 1.22.0 and the newest SDK's handshake agree on the revision each asks for; the newest, in
    // auto mode, finds the host answers `server/discover` and speaks the per-request revision.
    let clients = [
        (Sdk::Pinned, "2025-06-18"),
        (Sdk::Latest("legacy"), "2025-11-25"),
        (Sdk::Latest("auto"), "2026-07-28"),
        (Sdk::Latest("2026-07-28"), "2026-07-28"),
    ];
    for (sdk, revision) in clients {
        let listed = list_tools_of(sdk, &url, &token).await?;
        assert_eq!(listed["protocolVersion"], revision, "{sdk:?}: {listed}");
        let names: Vec<&str> =
            listed["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
        assert_eq!(names, server_tools.iter().map(String::as_str).collect::<Vec<_>>(), "{sdk:?}");
        let r = call_tools_of(
            sdk,
            &url,
            &token,
            &[("list_agents", json!({})), ("list_models", json!({ "agent": "nobody" })), ("no_such_tool", json!({}))],
        )
        .await?;
        assert_eq!(r[0]["isError"], false, "{sdk:?}: {}", r[0]);
        let agents: Value = serde_json::from_str(r[0]["text"].as_str().unwrap_or("{}"))?;
        assert_eq!(agents["agents"][0]["agent"], "notes", "{sdk:?}: {agents}");
        assert_eq!(r[1]["isError"], true, "{sdk:?}: a refusal is an error result the model can read: {}", r[1]);
        assert_eq!(r[2]["rpcError"], "No tool named no_such_tool", "{sdk:?}: {}", r[2]);
        // 1.x says the status; 2.x reads the refusal's JSON-RPC error and says its words.
        let other = list_tools_of(sdk, &url, "wrong").await?;
        match sdk {
            Sdk::Pinned => assert_eq!(other["httpError"], 401, "a wrong token: {other}"),
            Sdk::Latest(_) => {
                assert_eq!(other["refused"], "This tools server answers only its own session's token", "{sdk:?}")
            }
        }
    }
    Ok(())
}

/// The cause of the flake this test once had: a 2.x client in auto mode is refused its
/// `server/discover` at the door and falls back to `initialize` on the same keep-alive connection.
/// The door answered before the request's body had arrived, so the server could not read the
/// body past it and closed the connection, without saying so; the client, which had been told
/// nothing, sent its `initialize` down the closed connection ("Server disconnected without
/// sending a response"). A refusal that leaves a body unread says `Connection: close`.
#[tokio::test]
async fn a_refusal_before_the_body_arrived_says_the_connection_closes() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(notes_daemon()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("notes", None).await?;
    let (url, _token) = endpoint(&mut a, &chat).await?;
    for (what, headers) in [("a wrong token", vec![("Authorization", "Bearer wrong")]), ("no token", vec![])] {
        let (status, headers, closed) = tests::mcp::post_head_only(&url, &headers, 64).await?;
        assert_eq!(status, 401, "{what}");
        let says_close =
            headers.iter().any(|(name, value)| name == "connection" && value.eq_ignore_ascii_case("close"));
        assert!(says_close, "{what}: the refusal says the connection closes: {headers:?}");
        assert!(closed, "{what}: and it does");
    }
    let unknown = format!("{}/nobody", url.rsplit_once('/').map(|(base, _)| base).unwrap_or(&url));
    let (status, headers, closed) = tests::mcp::post_head_only(&unknown, &[("Authorization", "Bearer x")], 64).await?;
    // A session that is not there is answered as a wrong token, so the door says nothing of which
    // sessions exist.
    assert_eq!(status, 401, "an unknown session");
    assert!(headers.iter().any(|(n, v)| n == "connection" && v.eq_ignore_ascii_case("close")) && closed, "{headers:?}");
    Ok(())
}

#[tokio::test]
async fn another_sessions_token_no_token_a_wrong_path_or_a_bad_body_touch_nothing() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(notes_daemon()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_s1, c1) = a.create_session("notes", None).await?;
    let (_s2, c2) = a.create_session("notes", None).await?;
    let (url1, _token1) = endpoint(&mut a, &c1).await?;
    let (_url2, token2) = endpoint(&mut a, &c2).await?;
    let other = list_tools(&url1, &token2).await?;
    assert_eq!(other["httpError"], 401, "another session's token: {other}");

    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }).to_string();
    let (status, body) = http_post(&url1, &[], &init).await?;
    assert_eq!(status, 401, "{body}");
    let (status, body) = http_post(&url1, &[("Authorization", &format!("Bearer {token2}"))], &init).await?;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("only its own session's token"), "{body}");
    // An id nobody has answers as a known one with a wrong token does: ids cannot be probed.
    let wrong_token = http_post(&url1, &[("Authorization", "Bearer nope")], &init).await?;
    let unknown = url1.rsplit_once('/').map(|(base, _)| format!("{base}/nope")).unwrap_or_default();
    let unknown_id = http_post(&unknown, &[("Authorization", &format!("Bearer {token2}"))], &init).await?;
    assert_eq!(unknown_id, wrong_token, "an unknown id and a wrong token answer alike");
    assert_eq!(unknown_id.0, 401);
    let (_, token1) = endpoint(&mut a, &c1).await?;
    let auth = format!("Bearer {token1}");
    let (status, body) = http_post(&url1, &[("Authorization", &auth)], "[1, 2]").await?;
    assert_eq!(status, 400, "a batch: {body}");
    assert!(body.contains("-32600"));
    let (status, body) = http_post(&url1, &[("Authorization", &auth)], "not json").await?;
    assert_eq!(status, 400, "a bad body: {body}");
    assert!(body.contains("-32700"));
    let note = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }).to_string();
    let (status, _) = http_post(&url1, &[("Authorization", &auth)], &note).await?;
    assert_eq!(status, 202);
    let (status, body) = http_post(
        &url1,
        &[("Authorization", &auth)],
        &json!({ "jsonrpc": "2.0", "id": 3, "method": "resources/list" }).to_string(),
    )
    .await?;
    assert_eq!(status, 200);
    assert!(body.contains("-32601"), "{body}");
    Ok(())
}

#[tokio::test]
async fn a_revision_the_host_does_not_speak_or_a_request_short_of_its_revisions_fields_is_refused_clearly(
) -> anyhow::Result<()> {
    let daemon = Daemon::start_with(notes_daemon()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_s, c) = a.create_session("notes", None).await?;
    let (url, token) = endpoint(&mut a, &c).await?;
    let auth = format!("Bearer {token}");
    let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }).to_string();
    let revision = |version| [("Authorization", auth.as_str()), ("MCP-Protocol-Version", version)];
    let (status, body) = http_post(&url, &revision("1999-01-01"), &list).await?;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("Unsupported MCP-Protocol-Version: 1999-01-01"), "{body}");
    // The per-request revision needs its headers and `_meta`; a request without them is told so.
    let (status, body) = http_post(&url, &revision("2026-07-28"), &list).await?;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("-32020") && body.contains("Mcp-Method"), "{body}");
    // An `initialize` naming a revision the host does not know is offered its newest handshake.
    let init = json!({ "jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
        "protocolVersion": "1999-01-01", "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } } });
    let (status, body) = http_post(&url, &[("Authorization", &auth)], &init.to_string()).await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(serde_json::from_str::<Value>(&body)?["result"]["protocolVersion"], "2025-11-25", "{body}");
    let call = json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": { "name": 7 } }).to_string();
    let (status, body) = http_post(&url, &[("Authorization", &auth)], &call).await?;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("-32602") && body.contains("tools/call needs a tool name"), "{body}");
    // None of it touched the endpoint.
    let (status, body) = http_post(&url, &[("Authorization", &auth)], &list).await?;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("list_agents"), "{body}");
    Ok(())
}

#[tokio::test]
async fn a_backends_model_calls_a_host_tool_through_the_worker_protocol() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(notes_daemon()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("notes", None).await?;
    let turn = a.turn(&chat, r#"call list_models {"agent": "echo"}"#).await?;
    assert!(turn_text(&turn).contains(r#"list_models said: {"models":[]}"#), "{}", turn_text(&turn));
    let turn = a.turn(&chat, "call no_such_tool {}").await?;
    assert!(
        turn_text(&turn).contains("No tool named no_such_tool is offered in this session."),
        "{}",
        turn_text(&turn)
    );
    a.check_against_snapshot(&chat).await?;
    Ok(())
}

#[tokio::test]
async fn a_plugin_whose_host_tools_are_off_is_offered_none_and_handed_no_endpoint() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(DaemonOptions::with_config(json!({
        "agents": {
            "notes": tests::agents::notes_revealing_endpoint(),
            "echo": tests::agents::echo_paced(0) },
        "plugins": { "notes": { "hostTools": false } } })))
    .await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session("notes", None).await?;
    let server_tools = server_tool_names(&a, &session);
    assert!(server_tools.is_empty(), "serverTools: {server_tools:?}");
    let said = turn_text(&a.turn(&chat, "endpoint").await?);
    assert!(said.contains("no endpoint"), "{said}");
    let said = turn_text(&a.turn(&chat, "tools").await?);
    assert!(!said.contains("list_agents"), "the backend is handed none of the host's tools: {said}");
    let turn = a.turn(&chat, "call list_agents {}").await?;
    assert!(turn_text(&turn).contains("No tool named list_agents is offered in this session."), "{}", turn_text(&turn));
    a.check_against_snapshot(&chat).await?;

    // Another agent's sessions are offered them as before.
    let (other, _) = a.create_session("echo", None).await?;
    let names = server_tool_names(&a, &other);
    assert!(names.contains(&"list_agents".to_owned()), "{names:?}");
    Ok(())
}

#[tokio::test]
async fn a_sessions_endpoint_refuses_a_rebound_host_and_a_web_page_whatever_the_token() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(notes_daemon()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_session, chat) = a.create_session("notes", None).await?;
    let (url, token) = endpoint(&mut a, &chat).await?;
    let auth = format!("Bearer {token}");
    let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }).to_string();
    let (status, body) = http_post(&url, &[("Authorization", &auth)], &list).await?;
    assert_eq!(status, 200, "the session's token at its own address: {body}");

    // A page on a name rebound to this machine, or any web page, is refused as at `/` and `/mcp`.
    let (status, body) = http_post(&url, &[("Authorization", &auth), ("Host", "evil.example")], &list).await?;
    assert_eq!(status, 403, "a rebound Host: {body}");
    assert!(body.contains("the Host evil.example is not this daemon's address"), "{body}");
    let (status, body) =
        http_post(&url, &[("Authorization", &auth), ("Origin", "https://evil.example")], &list).await?;
    assert_eq!(status, 403, "a web page's Origin: {body}");
    assert!(body.contains("a web page at https://evil.example may not connect"), "{body}");
    let (status, _) = http_post(&url, &[("Authorization", &auth), ("Host", "localhost")], &list).await?;
    assert_eq!(status, 200, "a loopback name is this daemon's");
    // The same holds for an id nobody has: the Host is refused before any token is read.
    let unknown = url.rsplit_once('/').map(|(base, _)| format!("{base}/nope")).unwrap_or_default();
    let (status, _) = http_post(&unknown, &[("Host", "evil.example")], &list).await?;
    assert_eq!(status, 403);
    Ok(())
}
