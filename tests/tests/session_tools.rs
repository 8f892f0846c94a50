//! The reference host's session tools through the real daemon: every tool's success path and every
//! refusal seed 000 gives them, called by the official Python MCP client through a session's
//! `/ahp-mcp` endpoint and through the sessionless `/mcp` door, and by a backend's model through
//! the worker protocol (the notes agent's `call`); the limits against a runaway agent under the
//! manual clock; what a session is offered changing while the daemon runs (a root config push).

use ahp_types::actions::{RootConfigChangedAction, StateAction};
use ahp_types::state::{MessageKind, SnapshotState, TurnState};
use ahp_types::ROOT_RESOURCE_URI;
use anyhow::anyhow;
use serde_json::{json, Value};
use tests::mcp::{call_tools, list_tools};
use tests::mcp::{endpoint, json_of, ok_text, refused, text};
use tests::turns::{link_in, refusals, session_of, successes, tool_results};
use tests::turns::{turn_allowing, until_turns, watch_session};
use tests::{turn_text, Daemon, DaemonOptions, TestClient, PATIENCE};

/// The session group's names (the twelve and the two readers), in seed 000's order.
const SESSION_TOOLS: [&str; 14] = [
    "list_sessions",
    "list_agents",
    "list_models",
    "get_current_session",
    "get_session_context",
    "send_message",
    "create_session",
    "create_chat",
    "rename_chat",
    "archive_chat",
    "set_workspace",
    "isolate_session",
    "delete_session",
    "move_session",
];

const MOVES_OFF: &str = "Moving chats is turned off on this host (chatMoves.enabled is off), so nothing was moved.";

/// notes (which reveals its endpoint) and echo, on a clock the test moves.
fn options() -> DaemonOptions {
    let mut options = DaemonOptions::with_config(tests::agents::notes_and_echo());
    options.env.push(("AHPD_TEST_CLOCK".into(), "manual".into()));
    options
}

/// The chat a `?chat=` link names.
fn chat_of(link: &str) -> String {
    format!("ahp-chat:/{}", link.split("?chat=").nth(1).unwrap_or_default())
}

/// Pushes daemon keys that apply live as root config, and waits until the root state holds them.
async fn set_live(client: &mut TestClient, settings: Value) -> anyhow::Result<()> {
    let config = settings.as_object().cloned().ok_or_else(|| anyhow!("settings must be an object"))?;
    let action = StateAction::RootConfigChanged(RootConfigChangedAction { config: config.clone(), replace: None });
    client.dispatch(ROOT_RESOURCE_URI, action).await?;
    client
        .until("the pushed keys on the root state", move |m| match m.states.get(ROOT_RESOURCE_URI) {
            Some(SnapshotState::Root(root)) => {
                root.config.as_ref().is_some_and(|c| config.iter().all(|(key, value)| c.values.get(key) == Some(value)))
            }
            _ => false,
        })
        .await
}

fn names(listed: &Value) -> Vec<String> {
    listed["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect()
}

#[tokio::test]
async fn every_session_tool_answers_a_real_mcp_client_through_the_sessions_endpoint() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(options()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (s, c) = a.create_session("notes", None).await?;
    let (e, ec) = a.create_session("echo", None).await?;
    a.turn(&ec, "hello there").await?;
    let (url, token) = endpoint(&mut a, &c).await?;
    let sid = s.trim_start_matches("ahp-session:/");
    let s_link = format!("agent-host-session://notes/{sid}");
    let e_link = format!("agent-host-session://echo/{}", e.trim_start_matches("ahp-session:/"));

    // What the endpoint lists is serverTools, with this host's wording for a session.
    let listed = list_tools(&url, &token).await?;
    let listed_names = names(&listed);
    let session_group: Vec<&str> =
        listed_names.iter().map(String::as_str).filter(|n| SESSION_TOOLS.contains(n)).collect();
    assert_eq!(
        session_group,
        [
            "list_sessions",
            "list_agents",
            "list_models",
            "get_current_session",
            "get_session_context",
            "send_message",
            "create_session",
            "create_chat",
            "rename_chat",
            "archive_chat",
            "set_workspace",
            "isolate_session",
            "delete_session",
            "move_session"
        ],
        "isolate_session is offered: notes holds several chats, each a conversation started in its own folder"
    );
    let tool = |name: &str| listed["tools"].as_array().into_iter().flatten().find(|t| t["name"] == name).cloned();
    let rename = tool("rename_chat").unwrap_or_default();
    assert!(rename["inputSchema"]["properties"].get("automatic").is_none(), "deferred titles: {rename}");
    assert!(rename["description"]
        .as_str()
        .unwrap_or_default()
        .starts_with("Rename one specific chat when the user explicitly asks"));
    let create = tool("create_session").unwrap_or_default();
    assert_eq!(create["inputSchema"]["properties"]["agent"]["enum"], json!(["notes", "echo"]));
    let server_tools: Vec<String> = a
        .mirror
        .session(&s)
        .and_then(|st| st.server_tools.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(server_tools, listed_names);

    // While no other chat of the session runs, a call here comes from its default chat.
    let r = call_tools(
        &url,
        &token,
        &[
            ("get_current_session", json!({})),
            ("send_message", json!({ "session": s, "message": "to myself" })),
            ("delete_session", json!({ "session": s_link })),
            ("archive_chat", json!({ "chat": s_link })),
            ("set_workspace", json!({ "workspaceFolder": "/tmp", "isolation": false })),
            ("rename_chat", json!({ "title": "  Planning \n ahead " })),
            ("rename_chat", json!({})),
            ("get_session_context", json!({ "session": e, "detail": "bogus" })),
            ("get_session_context", json!({ "session": "ahp-session:/nope" })),
            ("get_session_context", json!({ "session": e_link })),
            ("list_sessions", json!({})),
            ("list_sessions", json!({ "status": ["busy"] })),
            ("move_session", json!({ "session": e_link, "relationship": "independent" })),
            ("move_session", json!({ "session": e_link })),
            ("create_session", json!({ "relationship": "sideways", "prompt": "p", "title": "t" })),
            ("create_session", json!({ "relationship": "independent", "agent": "nobody", "prompt": "p", "title": "t" })),
            ("create_session", json!({ "relationship": "independent", "prompt": "p", "title": "t", "config": { "ask": "sometimes" } })),
            ("create_session", json!({ "relationship": "independent", "prompt": "p", "title": "t", "model": "gpt-9" })),
            ("create_session", json!({ "prompt": "p", "title": "t", "workspace": "/tmp" })),
            ("create_session", json!({ "relationship": "independent", "prompt": "p", "title": "x".repeat(201) })),
            ("create_session", json!({ "relationship": "independent", "prompt": "p", "title": "t", "workspace": "/tmp", "worktree": true })),
            ("isolate_session", json!({})),
            ("send_message", json!({ "session": e_link, "message": "ping" })),
            ("create_session", json!({ "relationship": "independent", "agent": "notes", "prompt": "list", "title": "Sibling", "config": { "ask": "never" } })),
            ("list_agents", json!({})),
        ],
    )
    .await?;
    let current = json_of(&r[0])?;
    assert_eq!(current["session"], s);
    assert_eq!(current["openLink"], s_link);
    assert_eq!(current["status"], "idle");
    refused(&r[1], "Invalid send_message input: refusing to send a message to the current chat.");
    refused(&r[2], "Invalid delete_session input: refusing to delete the current session.");
    refused(&r[3], "Invalid archive_chat input: refusing to archive the main chat of the current session.");
    refused(&r[4], "set_workspace must run from an active chat turn.");
    assert_eq!(ok_text(&r[5])?, "Renamed chat to \"Planning ahead\".");
    refused(&r[6], "Invalid rename_chat input: title must be a non-empty string.");
    refused(&r[7], "Invalid get_session_context input: detail must be one of summary, digest, full.");
    refused(
        &r[8],
        "Invalid get_session_context input: session must match the URI of a known session (see list_sessions).",
    );
    let context = json_of(&r[9])?;
    assert_eq!(context["session"], e);
    assert_eq!(context["openLink"], e_link);
    assert_eq!(context["detail"], "summary");
    assert_eq!(context["transcript"][0]["turn"], 1);
    assert_eq!(context["transcript"][0]["state"], "complete");
    assert_eq!(context["transcript"][0]["user"], "hello there");
    assert!(context["transcript"][0]["assistant"].as_str().unwrap_or_default().contains("hello there"), "{context}");
    assert_eq!(context["hasMoreHistory"], false);
    assert_eq!(context["messagesSentByMe"], json!([]));
    assert!(context.get("harness").is_none());
    let listed = json_of(&r[10])?;
    let rows = listed["sessions"].as_array().cloned().unwrap_or_default();
    let row_s = rows.iter().find(|row| row["session"] == s).ok_or_else(|| anyhow!("no row for {s}: {listed}"))?;
    assert_eq!(row_s["openLink"], s_link);
    assert_eq!(row_s["title"], "Planning ahead", "renaming the default chat names the session");
    assert_eq!(row_s["status"], "idle");
    assert!(row_s.get("chats").is_none(), "a session whose only chat is its default has no chats: {row_s}");
    assert!(row_s["workingDirectory"].as_str().unwrap_or_default().starts_with("file:///"));
    assert!(rows.iter().any(|row| row["session"] == e && row["openLink"] == e_link));
    refused(
        &r[11],
        "Invalid list_sessions input: unknown status value(s) busy. Valid values: idle, inProgress, inputNeeded, error, archived.",
    );
    refused(&r[12], MOVES_OFF);
    refused(
        &r[13],
        "Invalid move_session input: pass into for the destination session, or relationship \"independent\" for a session of its own.",
    );
    refused(&r[14], "Invalid create_session input: relationship must be \"currentSession\" or \"independent\".");
    refused(&r[15], "Invalid create_session input: agent must be one of the agents this host offers (notes, echo).");
    refused(&r[16], "Invalid create_session input: Session configuration 'ask' does not offer 'sometimes'.");
    refused(&r[17], "Invalid create_session input: model must match an available model id or name.");
    refused(
        &r[18],
        "Invalid create_session input: workspace and worktree are only valid with relationship \"independent\".",
    );
    refused(&r[19], "Invalid create_session input: title must not exceed 200 characters.");
    refused(
        &r[20],
        "Invalid create_session input: /tmp is not in a Git repository, so no worktree can be cut from it. Work in the folder itself (isolation \"folder\"), or make it a repository first (git init, and a first commit).",
    );
    refused(&r[21], "isolate_session must run from an active chat turn.");
    assert_eq!(ok_text(&r[22])?, format!("Message sent ({e_link})."));
    let sibling_link = link_in(ok_text(&r[23])?)?;
    assert!(ok_text(&r[23])?.starts_with("New session created (agent-host-session://notes/"), "{}", r[23]);
    let agents = json_of(&r[24])?;
    assert_eq!(agents["agents"][0]["agent"], "notes");

    // The sibling runs on the settings asked for, with the title given, and its first turn is the
    // prompt, as the agent's own message marked with where it came from.
    let sibling = session_of(&sibling_link);
    let sibling_chat = watch_session(&mut a, &sibling).await?;
    until_turns(&mut a, &sibling_chat, 1).await?;
    let state = a.mirror.session(&sibling).cloned().ok_or_else(|| anyhow!("no sibling"))?;
    assert_eq!(state.title, "Sibling");
    assert_eq!(state.config.map(|c| c.values["ask"].clone()), Some(json!("never")));
    let first =
        a.mirror.chat(&sibling_chat).and_then(|ch| ch.turns.first().cloned()).ok_or_else(|| anyhow!("no turn"))?;
    assert_eq!(first.message.text, "list");
    assert_eq!(first.message.origin.kind, MessageKind::Agent);
    let delegation = first.message.meta.as_ref().and_then(|m| m.get("vscode.chat.delegation")).cloned();
    assert_eq!(delegation.as_ref().and_then(|d| d.get("sourceSession")), Some(&json!(s)));

    // Chats in the current session: one by create_chat, one by create_session, one on another agent.
    let r = call_tools(
        &url,
        &token,
        &[
            ("create_chat", json!({ "prompt": "list", "title": "Side work" })),
            ("create_session", json!({ "prompt": "list", "title": "Helper" })),
            ("create_session", json!({ "agent": "echo", "prompt": "hello from the helper", "title": "Echo helper" })),
        ],
    )
    .await?;
    let side = link_in(ok_text(&r[0])?)?;
    assert!(ok_text(&r[0])?.starts_with(&format!("Chat created ({s_link}?chat=")), "{}", r[0]);
    let helper = link_in(ok_text(&r[1])?)?;
    assert!(ok_text(&r[1])?.starts_with(&format!("Chat created in the current session ({s_link}?chat=")), "{}", r[1]);
    let echo_helper = link_in(ok_text(&r[2])?)?;
    for link in [&side, &helper, &echo_helper] {
        let chat = chat_of(link);
        a.subscribe(&chat).await?;
        until_turns(&mut a, &chat, 1).await?;
    }
    let echoed = a
        .mirror
        .chat(&chat_of(&echo_helper))
        .and_then(|ch| ch.turns.first().cloned())
        .ok_or_else(|| anyhow!("no turn"))?;
    assert!(turn_text(&echoed).contains("hello from the helper"), "the harness chat runs echo: {}", turn_text(&echoed));

    let r = call_tools(
        &url,
        &token,
        &[
            ("list_sessions", json!({ "session": s_link })),
            ("get_session_context", json!({ "session": echo_helper })),
            ("rename_chat", json!({ "chat": side, "title": "Side quest" })),
            ("rename_chat", json!({ "chat": "agent-host-session://notes/nope", "title": "x" })),
            ("rename_chat", json!({ "chat": side, "session": e_link, "title": "x" })),
            ("archive_chat", json!({ "chat": helper })),
            ("delete_session", json!({ "session": sibling_link })),
            ("archive_chat", json!({ "chat": e_link })),
            ("list_sessions", json!({})),
            ("list_sessions", json!({ "includeArchived": true })),
            ("get_session_context", json!({ "session": sibling_link })),
            ("delete_session", json!({ "session": sibling_link })),
            ("archive_chat", json!({})),
        ],
    )
    .await?;
    let row = json_of(&r[0])?["sessions"][0].clone();
    let chats = row["chats"].as_array().cloned().unwrap_or_default();
    assert_eq!(chats.len(), 4, "{row}");
    assert_eq!(chats[0], json!({ "title": "Planning ahead", "openLink": s_link, "main": true, "status": "idle" }));
    assert_eq!(chats[1]["title"], "Side work");
    assert_eq!(chats[1]["openLink"], side);
    assert_eq!(chats[2]["title"], "Helper");
    assert_eq!(chats[3]["title"], "Echo helper");
    assert_eq!(chats[3]["harness"], "echo");
    assert!(chats[1].get("harness").is_none());
    let context = json_of(&r[1])?;
    assert_eq!(context["harness"], "echo");
    assert_eq!(context["openLink"], echo_helper);
    assert_eq!(context["transcript"][0]["user"], "hello from the helper");
    assert_eq!(ok_text(&r[2])?, "Renamed chat to \"Side quest\".");
    refused(&r[3], "Invalid rename_chat input: chat must be an agent-host-session:// link targeting a known chat.");
    refused(&r[4], "Invalid rename_chat input: session must match the owning session of chat.");
    assert_eq!(ok_text(&r[5])?, format!("Archived chat ({helper})."));
    assert_eq!(
        ok_text(&r[6])?,
        format!("Deleted session {sibling}. Reply with one short sentence confirming the session was deleted.")
    );
    assert_eq!(ok_text(&r[7])?, format!("Archived session ({e_link})."));
    let live: Vec<Value> = json_of(&r[8])?["sessions"].as_array().cloned().unwrap_or_default();
    assert!(live.iter().all(|row| row["session"] != e && row["session"] != sibling), "archived and deleted left out");
    let all: Vec<Value> = json_of(&r[9])?["sessions"].as_array().cloned().unwrap_or_default();
    let archived = all.iter().find(|row| row["session"] == e).ok_or_else(|| anyhow!("archived row missing"))?;
    assert_eq!(archived["status"], "idle,archived");
    refused(
        &r[10],
        "Invalid get_session_context input: session must match the URI of a known session (see list_sessions).",
    );
    refused(&r[11], "Invalid delete_session input: session must match the URI of a known session (see list_sessions).");
    refused(&r[12], "Invalid archive_chat input: chat must be a non-empty string.");

    // What the tools did is what a client folds.
    a.until("the archived chat", |m| m.session(&s).is_some_and(|st| st.chats.iter().any(|c| c.title == "Side quest")))
        .await?;
    a.check_against_snapshot(&s).await?;
    a.check_against_snapshot(&chat_of(&helper)).await?;
    assert!(a.mirror.chat(&chat_of(&helper)).is_some_and(|ch| ch.status & 64 != 0), "the chat is archived");
    Ok(())
}

#[tokio::test]
async fn the_sessionless_door_answers_root_with_the_eleven_and_refuses_what_needs_a_session() -> anyhow::Result<()> {
    let mut options = options();
    options.args.extend(["--connection-token".to_owned(), "s3cret".to_owned()]);
    let daemon = Daemon::start_with(options).await?;
    let mut a = TestClient::connect(&format!("{}/?tkn=s3cret", daemon.url), "a").await?;
    let mcp = format!("{}/mcp", daemon.url.replace("ws://", "http://"));

    let listed = list_tools(&mcp, "s3cret").await?;
    assert_eq!(
        names(&listed),
        [
            "list_sessions",
            "list_agents",
            "list_models",
            "get_session_context",
            "send_message",
            "create_session",
            "create_chat",
            "rename_chat",
            "archive_chat",
            "delete_session",
            "move_session"
        ]
    );
    assert_eq!(list_tools(&mcp, "").await?["httpError"], 401, "no token");
    assert_eq!(list_tools(&mcp, "wrong").await?["httpError"], 401, "a wrong token");

    let r = call_tools(
        &mcp,
        "s3cret",
        &[
            ("create_session", json!({ "relationship": "currentSession", "prompt": "p", "title": "t" })),
            ("create_session", json!({ "prompt": "p", "title": "t" })),
            ("create_chat", json!({ "prompt": "p" })),
            ("rename_chat", json!({ "title": "t" })),
            ("send_message", json!({ "message": "m" })),
            ("get_session_context", json!({})),
            ("get_current_session", json!({})),
            ("set_workspace", json!({ "workspaceFolder": "/tmp", "isolation": false })),
            (
                "create_session",
                json!({ "relationship": "independent", "agent": "echo", "prompt": "from outside", "title": "Outside" }),
            ),
            ("list_models", json!({})),
        ],
    )
    .await?;
    refused(&r[0], "currentSession needs a calling session; use independent");
    refused(&r[1], "currentSession needs a calling session; use independent");
    refused(&r[2], "Invalid create_chat input: no session provided and the current session could not be determined.");
    refused(&r[3], "Invalid rename_chat input: chat must target a known chat, or the tool must run inside that chat.");
    refused(&r[4], "Invalid send_message input: session must be a non-empty string.");
    refused(&r[5], "Invalid get_session_context input: session must be a non-empty string.");
    assert_eq!(text(&r[6]), "No tool named get_current_session");
    assert_eq!(text(&r[7]), "No tool named set_workspace");
    let link = link_in(ok_text(&r[8])?)?;
    assert!(link.starts_with("agent-host-session://echo/"), "{link}");
    assert_eq!(json_of(&r[9])?["models"], json!([]));

    // What it made is the caller's: a session with no parent, and a turn that is the caller's own.
    let session = session_of(&link);
    let chat = watch_session(&mut a, &session).await?;
    until_turns(&mut a, &chat, 1).await?;
    let first = a.mirror.chat(&chat).and_then(|c| c.turns.first().cloned()).ok_or_else(|| anyhow!("no turn"))?;
    assert_eq!(first.message.origin.kind, MessageKind::User);
    assert!(first.message.meta.is_none(), "no delegation: {:?}", first.message.meta);
    assert_eq!(a.mirror.session(&session).map(|s| s.title.clone()), Some("Outside".to_owned()));

    let r = call_tools(
        &mcp,
        "s3cret",
        &[
            ("send_message", json!({ "session": link, "message": "again" })),
            ("get_session_context", json!({ "session": link, "detail": "digest" })),
            ("rename_chat", json!({ "chat": link, "title": "Renamed outside" })),
            ("list_sessions", json!({ "session": session })),
            ("move_session", json!({ "session": link, "relationship": "independent" })),
            ("archive_chat", json!({ "chat": link })),
            ("delete_session", json!({ "session": link })),
        ],
    )
    .await?;
    assert!(ok_text(&r[0])?.starts_with("Message "), "{}", r[0]);
    let context = json_of(&r[1])?;
    assert!(context.get("messagesSentByMe").is_none(), "a call with no session gets none: {context}");
    assert_eq!(context["transcript"][0]["user"], "from outside");
    assert_eq!(ok_text(&r[2])?, "Renamed chat to \"Renamed outside\".");
    assert_eq!(json_of(&r[3])?["sessions"][0]["title"], "Renamed outside");
    refused(&r[4], MOVES_OFF);
    assert_eq!(ok_text(&r[5])?, format!("Archived session ({link})."));
    assert!(ok_text(&r[6])?.starts_with(&format!("Deleted session {session}.")));
    Ok(())
}

#[tokio::test]
async fn with_no_token_the_sessionless_door_answers_this_machine_and_says_when_its_list_changes() -> anyhow::Result<()>
{
    let mut options = options();
    options.args.push("--without-connection-token".into());
    let daemon = Daemon::start_with(options).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let mcp = format!("{}/mcp", daemon.url.replace("ws://", "http://"));
    let listed = list_tools(&mcp, "").await?;
    assert_eq!(names(&listed).len(), 11, "{listed}");
    let mut stream = EventStream::open(&mcp, "").await?;
    set_live(&mut a, json!({ "sessionTools": false })).await?;
    stream.until("notifications/tools/list_changed").await?;
    assert!(names(&list_tools(&mcp, "").await?).is_empty(), "sessionTools: false offers them to no caller");
    Ok(())
}

#[tokio::test]
async fn the_sessionless_door_answers_the_newest_sdk_at_the_newest_revision() -> anyhow::Result<()> {
    let mut options = options();
    options.args.extend(["--connection-token".to_owned(), "s3cret".to_owned()]);
    let daemon = Daemon::start_with(options).await?;
    let mcp = format!("{}/mcp", daemon.url.replace("ws://", "http://"));
    let sdk = tests::mcp::Sdk::Latest("auto");
    let listed = tests::mcp::list_tools_of(sdk, &mcp, "s3cret").await?;
    assert_eq!(listed["protocolVersion"], "2026-07-28", "{listed}");
    assert_eq!(names(&listed).len(), 11, "{listed}");
    let r = tests::mcp::call_tools_of(
        sdk,
        &mcp,
        "s3cret",
        &[("list_models", json!({})), ("get_current_session", json!({})), ("send_message", json!({ "message": "m" }))],
    )
    .await?;
    assert_eq!(json_of(&r[0])?["models"], json!([]));
    assert_eq!(r[1]["rpcError"], "No tool named get_current_session");
    refused(&r[2], "Invalid send_message input: session must be a non-empty string.");
    let wrong = tests::mcp::list_tools_of(sdk, &mcp, "wrong").await?;
    assert_eq!(wrong["refused"], "Refused: wrong connection token.", "{wrong}");
    Ok(())
}

/// People in a users directory, by `ahpd user add`: their tokens by id.
async fn people(home: &tests::daemon::Home, who: &[(&str, &str)]) -> anyhow::Result<Vec<String>> {
    let mut tokens = Vec::new();
    for (id, role) in who {
        let run = home.expect(0, &["user", "add", id, "--role", role, "--users", "users.json"]).await?;
        tokens.push(run.stdout.trim().to_owned());
    }
    Ok(tokens)
}

#[tokio::test]
async fn under_a_users_directory_a_tool_acts_as_its_turns_person_and_the_door_as_the_tokens() -> anyhow::Result<()> {
    const ROOT: &str = "root-secret-token";
    let home = tests::daemon::Home::new()?;
    let tokens = people(&home, &[("ana", "member"), ("bob", "member"), ("gus", "guest")]).await?;
    let (ana_token, bob_token, gus_token) = (&tokens[0], &tokens[1], &tokens[2]);
    let mut options = options();
    options.args.extend(["--users", "users.json", "--connection-token", ROOT].map(str::to_owned));
    let daemon = Daemon::start_in(home.path(), options).await?;
    let mut ana = TestClient::connect(&format!("{}/?tkn={ana_token}", daemon.url), "ana").await?;
    let mut bob = TestClient::connect(&format!("{}/?tkn={bob_token}", daemon.url), "bob").await?;
    let (_a, ana_chat) = ana.create_session("notes", None).await?;
    let (bobs, bob_chat) = bob.create_session("notes", None).await?;

    // What ana's turn makes is ana's: bob may not delete it, and ana may not delete bob's.
    // (delete_session declares itself destructive, so notes asks first; each ask is allowed.)
    let spawn = json!({ "relationship": "independent", "agent": "echo", "prompt": "hi", "title": "Ana's" });
    let turn = ana.turn(&ana_chat, &format!("call create_session {spawn}")).await?;
    let made = session_of(&link_in(&successes(&turn)[0])?);
    let turn =
        turn_allowing(&mut bob, &bob_chat, &format!("call delete_session {}", json!({ "session": made }))).await?;
    assert_eq!(refusals(&turn), vec!["Only the session's owner can delete it."]);
    let turn =
        turn_allowing(&mut ana, &ana_chat, &format!("call delete_session {}", json!({ "session": bobs }))).await?;
    assert_eq!(refusals(&turn), vec!["Only the session's owner can delete it."]);
    let turn =
        turn_allowing(&mut ana, &ana_chat, &format!("call delete_session {}", json!({ "session": made }))).await?;
    assert!(successes(&turn)[0].starts_with(&format!("Deleted session {made}.")), "{:?}", tool_results(&turn));

    // The door: root sees the eleven, a person what their grants show, a guest the reading half.
    let mcp = format!("{}/mcp", daemon.url.replace("ws://", "http://"));
    assert_eq!(names(&list_tools(&mcp, ROOT).await?).len(), 11);
    assert_eq!(names(&list_tools(&mcp, ana_token).await?).len(), 11);
    assert_eq!(
        names(&list_tools(&mcp, gus_token).await?),
        ["list_sessions", "list_agents", "list_models", "get_session_context"]
    );
    assert_eq!(list_tools(&mcp, "").await?["httpError"], 401, "nobody signed in");
    assert_eq!(list_tools(&mcp, "not-a-token").await?["httpError"], 401);
    let r = call_tools(
        &mcp,
        gus_token,
        &[("create_session", json!({ "relationship": "independent", "prompt": "p", "title": "t" }))],
    )
    .await?;
    assert_eq!(text(&r[0]), "No tool named create_session");
    let r = call_tools(
        &mcp,
        ana_token,
        &[
            (
                "create_session",
                json!({ "relationship": "independent", "agent": "echo", "prompt": "p", "title": "By ana" }),
            ),
            ("delete_session", json!({ "session": bobs })),
        ],
    )
    .await?;
    let by_ana = session_of(&link_in(ok_text(&r[0])?)?);
    refused(&r[1], "Only the session's owner can delete it.");
    let turn =
        turn_allowing(&mut bob, &bob_chat, &format!("call delete_session {}", json!({ "session": by_ana }))).await?;
    assert_eq!(refusals(&turn), vec!["Only the session's owner can delete it."], "what /mcp made is its caller's");
    Ok(())
}

/// `count` copies of a `call` command, one per line.
fn calls(count: usize, tool: &str, input: impl Fn(usize) -> Value) -> String {
    (0..count).map(|i| format!("call {tool} {}", input(i))).collect::<Vec<_>>().join("\n")
}

fn budget_refusal(act: &str, used: usize, noun: &str, seconds: u64) -> String {
    format!(
        "Refusing to {act}: this {noun} already used {used} of {used} allowed in the last 60 minutes. The limit applies to each {noun} separately and frees up as older actions leave that window. Retry after {seconds} seconds, or turn off agent orchestration limits in settings."
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_agent_stops_at_the_limits_and_its_budget_frees_up_as_the_hour_slides() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(options()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_runaway, chat) = a.create_session("notes", None).await?;
    let (target, _) = a.create_session("echo", None).await?;

    // 51 sessions: fifty are made, the fifty-first is refused with the seconds to wait.
    let spawn = |i: usize| json!({ "relationship": "independent", "prompt": "list", "title": format!("child {i}") });
    let turn = a.turn(&chat, &calls(51, "create_session", spawn)).await?;
    let made = successes(&turn);
    assert_eq!(made.len(), 50, "{:?}", refusals(&turn));
    assert!(made.iter().all(|t| t.starts_with("New session created (agent-host-session://notes/")));
    assert_eq!(refusals(&turn), vec![budget_refusal("create more sessions", 50, "session tree", 3600)]);

    // 51 chats, by create_chat and by create_session in the current session alike.
    let mixed = (0..51)
        .map(|i| {
            if i % 2 == 0 {
                format!("call create_chat {}", json!({ "prompt": "list", "title": format!("chat {i}") }))
            } else {
                format!("call create_session {}", json!({ "prompt": "list", "title": format!("chat {i}") }))
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let turn = a.turn(&chat, &mixed).await?;
    assert_eq!(successes(&turn).len(), 50);
    assert_eq!(refusals(&turn), vec![budget_refusal("create more chats", 50, "session tree", 3600)]);

    // 101 messages to another session's chat: sent or queued, and the last refused.
    let message = |i: usize| json!({ "session": target, "message": format!("message {i}") });
    let turn = a.turn(&chat, &calls(101, "send_message", message)).await?;
    let sent = successes(&turn);
    assert_eq!(sent.len(), 100);
    assert!(sent.iter().all(|t| t.starts_with("Message sent (") || t.starts_with("Message queued (")), "{sent:?}");
    assert_eq!(refusals(&turn), vec![budget_refusal("send more messages", 100, "session tree", 3600)]);

    // A session the runaway made is in its tree, and spends the same budget.
    let child = session_of(&link_in(&made[0])?);
    let child_chat = watch_session(&mut a, &child).await?;
    until_turns(&mut a, &child_chat, 1).await?;
    let turn = a.turn(&child_chat, &calls(1, "create_session", spawn)).await?;
    assert_eq!(refusals(&turn), vec![budget_refusal("create more sessions", 50, "session tree", 3600)]);

    // Another tree is unaffected.
    let (_other, other_chat) = a.create_session("notes", None).await?;
    let turn = a
        .turn(&other_chat, &format!("{}\n{}", calls(1, "create_session", spawn), calls(1, "send_message", message)))
        .await?;
    assert_eq!(refusals(&turn), Vec::<String>::new());
    assert_eq!(successes(&turn).len(), 2);

    // Counted per session, the refusal says the session.
    set_live(&mut a, json!({ "agentOrchestrationLimitsScope": "session" })).await?;
    let turn = a.turn(&chat, &calls(1, "create_session", spawn)).await?;
    assert_eq!(refusals(&turn), vec![budget_refusal("create more sessions", 50, "session", 3600)]);
    let turn = a.turn(&child_chat, &calls(1, "create_chat", |_| json!({ "prompt": "list" }))).await?;
    assert_eq!(refusals(&turn), Vec::<String>::new(), "the child's own count is its own");
    set_live(&mut a, json!({ "agentOrchestrationLimitsScope": "tree" })).await?;

    // Off, nothing is bounded and nothing is counted; on again, the spent budget is as it was.
    set_live(&mut a, json!({ "agentOrchestrationLimits": "off" })).await?;
    let turn = a.turn(&chat, &calls(2, "create_chat", |_| json!({ "prompt": "list" }))).await?;
    assert_eq!(successes(&turn).len(), 2, "{:?}", refusals(&turn));
    set_live(&mut a, json!({ "agentOrchestrationLimits": "on" })).await?;
    let turn = a.turn(&chat, &calls(1, "create_chat", |_| json!({ "prompt": "list" }))).await?;
    assert_eq!(refusals(&turn), vec![budget_refusal("create more chats", 50, "session tree", 3600)]);

    // The hour slides: a second before the oldest leaves, still refused; at the hour, made again.
    tests::clock::advance(&a, 3_599_000).await?;
    let turn = a.turn(&chat, &calls(1, "create_session", spawn)).await?;
    assert_eq!(refusals(&turn), vec![budget_refusal("create more sessions", 50, "session tree", 1)]);
    tests::clock::advance(&a, 1_000).await?;
    let turn =
        a.turn(&chat, &format!("{}\n{}", calls(1, "create_session", spawn), calls(1, "send_message", message))).await?;
    assert_eq!(refusals(&turn), Vec::<String>::new());
    assert_eq!(successes(&turn).len(), 2);
    Ok(())
}

#[tokio::test]
async fn a_chain_of_sessions_stops_three_links_down() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(options()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_root, mut chat) = a.create_session("notes", Some(json!({ "ask": "never" }))).await?;
    let spawn = json!({ "relationship": "independent", "prompt": "list", "title": "deeper" });
    for _depth in 1..=3 {
        let turn = a.turn(&chat, &format!("call create_session {spawn}")).await?;
        let made = successes(&turn);
        assert_eq!(made.len(), 1, "{:?}", refusals(&turn));
        let session = session_of(&link_in(&made[0])?);
        chat = watch_session(&mut a, &session).await?;
        // What the maker's chat ran on is inherited where the agent says it is.
        let ask = a.mirror.session(&session).and_then(|s| s.config.as_ref().map(|c| c.values["ask"].clone()));
        assert_eq!(ask, Some(json!("never")));
        until_turns(&mut a, &chat, 1).await?;
    }
    let turn = a.turn(&chat, &format!("call create_session {spawn}")).await?;
    assert_eq!(
        refusals(&turn),
        vec!["Refusing to create a session: recursion limit reached (max spawn depth 3). This session was itself created 3 level(s) deep."]
    );
    // Three links down may still make a chat of its own, and with the limits off, a session.
    let turn =
        a.turn(&chat, &format!("call create_session {}", json!({ "prompt": "list", "title": "beside" }))).await?;
    assert_eq!(successes(&turn).len(), 1);
    set_live(&mut a, json!({ "agentOrchestrationLimits": "off" })).await?;
    let turn = a.turn(&chat, &format!("call create_session {spawn}")).await?;
    assert_eq!(successes(&turn).len(), 1, "{:?}", refusals(&turn));
    Ok(())
}

#[tokio::test]
async fn a_changed_offer_reaches_the_session_its_backend_and_its_endpoint() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(options()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (s, c) = a.create_session("notes", None).await?;
    let (url, token) = endpoint(&mut a, &c).await?;
    let before = turn_text(&a.turn(&c, "tools").await?);
    assert!(before.contains("list_sessions") && before.contains("create_session"), "{before}");

    let mut stream = EventStream::open(&url, &token).await?;
    set_live(&mut a, json!({ "sessionToolsProviders": ["echo"] })).await?;
    a.until("serverTools without the session tools", |m| {
        m.session(&s)
            .and_then(|st| st.server_tools.as_ref())
            .is_some_and(|t| !t.iter().any(|t| t.name == "list_sessions"))
    })
    .await?;
    stream.until("notifications/tools/list_changed").await?;
    let after = turn_text(&a.turn(&c, "tools").await?);
    assert!(
        !after.contains("list_sessions") && !after.contains("list_agents"),
        "the backend was handed the new set: {after}"
    );
    let refused = a.turn(&c, "call list_sessions {}").await?;
    assert!(turn_text(&refused).contains("No tool named list_sessions is offered in this session."));
    assert!(!names(&list_tools(&url, &token).await?).iter().any(|n| n == "list_sessions"));

    // Both keys narrow rather than replace: an echo session keeps them, and false offers none.
    let (e, _) = a.create_session("echo", None).await?;
    let offered = |m: &tests::Mirror, session: &str| {
        m.session(session)
            .and_then(|st| st.server_tools.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.name == "list_sessions"))
    };
    assert!(offered(&a.mirror, &e), "echo is in the list");
    set_live(&mut a, json!({ "sessionTools": false })).await?;
    let e2 = e.clone();
    a.until("no session tools for echo either", move |m| !offered(m, &e2)).await?;
    set_live(&mut a, json!({ "sessionTools": true, "sessionToolsProviders": [] })).await?;
    let s2 = s.clone();
    a.until("the tools back", move |m| offered(m, &s2)).await?;
    let back = turn_text(&a.turn(&c, "tools").await?);
    assert!(back.contains("move_session"), "{back}");
    a.check_against_snapshot(&s).await?;
    Ok(())
}

#[tokio::test]
async fn set_workspace_moves_the_session_when_its_turn_completes_and_not_when_it_fails() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(options()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (s, c) = a.create_session("notes", None).await?;
    let folder = tempfile::tempdir()?;
    let path = folder.path().display().to_string();
    let before = a.mirror.session(&s).and_then(|st| st.working_directories.clone());

    // A turn that fails drops the request.
    let failed = a
        .turn(&c, &format!("call set_workspace {}\nerror", json!({ "workspaceFolder": path, "isolation": false })))
        .await?;
    assert_eq!(failed.state, TurnState::Error);
    assert_eq!(successes(&failed).len(), 1);
    a.check_against_snapshot(&s).await?;
    assert_eq!(a.mirror.session(&s).and_then(|st| st.working_directories.clone()), before);

    // Refusals: a worktree, a relative path, a folder that is not there.
    let turn = a
        .turn(
            &c,
            &[
                json!({ "workspaceFolder": path, "isolation": true }),
                json!({ "workspaceFolder": "relative/dir", "isolation": false }),
                json!({ "workspaceFolder": format!("{path}/missing"), "isolation": false }),
                json!({ "workspaceFolder": path }),
            ]
            .iter()
            .map(|input| format!("call set_workspace {input}"))
            .collect::<Vec<_>>()
            .join("\n"),
        )
        .await?;
    let mut said = refusals(&turn);
    said.sort();
    let real = folder.path().canonicalize()?.display().to_string();
    let mut expected = vec![
        format!("Invalid set_workspace input: {real} is not in a Git repository, so no worktree can be cut from it. Work in the folder itself (isolation \"folder\"), or make it a repository first (git init, and a first commit)."),
        "Invalid set_workspace input: workspaceFolder must be an absolute local path or file URI.".to_owned(),
        format!("Invalid set_workspace input: {path}/missing is not a directory."),
        "Invalid set_workspace input: isolation must be a boolean.".to_owned(),
    ];
    expected.sort();
    assert_eq!(said, expected);

    // A turn that completes moves the session, restarts its agent there, and continues the task.
    let done = a
        .turn(
            &c,
            &format!(
                "call set_workspace {}",
                json!({ "workspaceFolder": format!("file://{path}"), "isolation": false })
            ),
        )
        .await?;
    assert_eq!(
        successes(&done),
        vec![format!("Workspace will be set to file://{path} after this turn ends. End this turn now without calling more tools or replying; the host will continue the original task automatically in the selected workspace.")]
    );
    let want = vec![format!("file://{path}")];
    a.until("the new workspace", |m| m.session(&s).and_then(|st| st.working_directories.as_ref()) == Some(&want))
        .await?;
    let (cc, done_id) = (c.clone(), done.id.clone());
    a.until("the continuation to end", move |m| {
        m.chat(&cc)
            .is_some_and(|ch| ch.active_turn.is_none() && ch.turns.iter().skip_while(|t| t.id != done_id).count() == 2)
    })
    .await?;
    let continued = a.mirror.chat(&c).and_then(|ch| ch.turns.last().cloned()).ok_or_else(|| anyhow!("no turn"))?;
    assert_eq!(continued.message.origin.kind, MessageKind::Agent);
    assert!(continued.message.text.starts_with(&format!("The workspace is now file://{path}.")));
    // The agent took the move: the next message runs in the restarted backend session.
    let after = a.turn(&c, "list").await?;
    assert_eq!(after.state, TurnState::Complete);
    a.check_against_snapshot(&s).await?;
    Ok(())
}

#[tokio::test]
async fn get_session_context_reads_tool_calls_long_replies_in_pages_and_my_pending_messages() -> anyhow::Result<()> {
    let daemon = Daemon::start_with(options()).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (_s, reader) = a.create_session("notes", None).await?;
    let (e, ec) = a.create_session("echo", None).await?;
    let (t, tc) = a.create_session("notes", None).await?;

    // A long reply, cut at each level's cap and read whole in pages.
    let long: String = (0..2500).map(|i| format!("w{i:04} ")).collect();
    a.turn(&ec, long.trim()).await?;
    let ask = |input: Value| format!("call get_session_context {input}");
    let turn = a.turn(&reader, &ask(json!({ "session": e, "detail": "digest" }))).await?;
    let context: Value = serde_json::from_str(&successes(&turn)[0])?;
    let first = &context["transcript"][0];
    assert_eq!(first["assistantTruncated"], true);
    assert_eq!(first["assistant"].as_str().map(|a| a.chars().count()), Some(800));
    assert_eq!(first["user"].as_str().map(|a| a.chars().count()), Some(300));
    assert_eq!(context["truncated"], true);
    let turn_id = first["responseTurnId"].as_str().unwrap_or_default().to_owned();
    let whole = turn_text(a.mirror.chat(&ec).and_then(|ch| ch.turns.first()).ok_or_else(|| anyhow!("no turn"))?);
    let mut read = String::new();
    let mut offset = 0;
    loop {
        let turn =
            a.turn(&reader, &ask(json!({ "session": e, "responseTurnId": turn_id, "responseOffset": offset }))).await?;
        let page: Value = serde_json::from_str(&successes(&turn)[0])?;
        assert_eq!(page["responseLength"], whole.trim().chars().count());
        let chunk = page["response"].as_str().unwrap_or_default();
        assert!(chunk.chars().count() <= 8000);
        read.push_str(chunk);
        if page["truncated"] == false {
            assert!(page.get("nextResponseOffset").is_none());
            break;
        }
        offset = page["nextResponseOffset"].as_u64().unwrap_or_default();
    }
    assert_eq!(read, whole.trim(), "the pages put back the whole reply");
    let turn = a.turn(&reader, &ask(json!({ "session": e, "responseTurnId": "nope" }))).await?;
    assert_eq!(
        refusals(&turn),
        vec!["Invalid get_session_context input: responseTurnId must name a turn of this chat."]
    );

    // Tool calls at digest (names, ok, error) and full (input too).
    a.turn(&tc, "list\nfail\nread missing-note").await?;
    let turn = a.turn(&reader, &ask(json!({ "session": t, "detail": "full" }))).await?;
    let context: Value = serde_json::from_str(&successes(&turn)[0])?;
    let calls = context["transcript"][0]["toolCalls"].clone();
    assert_eq!(calls[0], json!({ "name": "list", "status": "completed", "ok": true }));
    assert_eq!(calls[1]["ok"], false);
    assert_eq!(calls[1]["error"], "This tool always fails.");
    assert_eq!(calls[2]["input"], json!({ "name": "missing-note" }).to_string());
    let turn = a.turn(&reader, &ask(json!({ "session": t, "transcriptLimit": 0 }))).await?;
    assert_eq!(refusals(&turn), vec!["Invalid get_session_context input: transcriptLimit must be a positive number."]);
    let turn = a.turn(&reader, &ask(json!({ "session": t, "detail": "summary" }))).await?;
    let context: Value = serde_json::from_str(&successes(&turn)[0])?;
    assert!(context["transcript"][0].get("toolCalls").is_none(), "summary lists no tool calls");

    // A message left in a busy chat is the caller's to see, with the id and revision to manage it.
    let asking = a.send(&tc, "ask what now?").await?;
    a.until_questions(&tc, 1).await?;
    let turn = a
        .turn(&reader, &format!("call send_message {}", json!({ "session": t, "message": "when you are free" })))
        .await?;
    assert!(
        successes(&turn)[0].starts_with("Message queued (agent-host-session://notes/"),
        "{:?}",
        tool_results(&turn)
    );
    let turn = a.turn(&reader, &ask(json!({ "session": t }))).await?;
    let context: Value = serde_json::from_str(&successes(&turn)[0])?;
    let mine = context["messagesSentByMe"].as_array().cloned().unwrap_or_default();
    assert_eq!(mine.len(), 1, "{context}");
    assert_eq!(mine[0]["delivery"], "queue");
    assert_eq!(mine[0]["revision"], 1);
    assert_eq!(mine[0]["status"], "pending");
    assert_eq!(mine[0]["message"], "when you are free");
    assert!(mine[0]["messageId"].as_str().is_some_and(|id| !id.is_empty()));
    assert_eq!(context["transcript"].as_array().map(Vec::len), Some(2), "the running turn is last");
    assert_eq!(context["transcript"][1]["state"], "inProgress");
    // The queued message runs once the busy turn ends.
    let questions = a.until_questions(&tc, 1).await?;
    a.answer(&tc, &questions[0], Some("carry on")).await?;
    a.finished(&tc, &asking).await?;
    until_turns(&mut a, &tc, 3).await?;
    let last = a.mirror.chat(&tc).and_then(|ch| ch.turns.last().cloned()).ok_or_else(|| anyhow!("no turn"))?;
    assert_eq!(last.message.text, "when you are free");
    Ok(())
}

/// A raw `GET` on a tools endpoint, held open to read its event stream.
struct EventStream {
    stream: tokio::net::TcpStream,
    seen: String,
}

impl EventStream {
    async fn open(url: &str, token: &str) -> anyhow::Result<Self> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let rest = url.trim_start_matches("http://");
        let (addr, path) = rest.split_once('/').map(|(a, p)| (a, format!("/{p}"))).unwrap_or((rest, "/".into()));
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let auth = if token.is_empty() { String::new() } else { format!("Authorization: Bearer {token}\r\n") };
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n{auth}\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut this = Self { stream, seen: String::new() };
        // Once the headers came, the stream is listening.
        while !this.seen.contains("\r\n\r\n") {
            let mut buf = [0u8; 1024];
            let n = tokio::time::timeout(PATIENCE, this.stream.read(&mut buf)).await??;
            anyhow::ensure!(n > 0, "the stream closed: {}", this.seen);
            this.seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        anyhow::ensure!(this.seen.starts_with("HTTP/1.1 200"), "{}", this.seen);
        Ok(this)
    }

    async fn until(&mut self, needle: &str) -> anyhow::Result<()> {
        use tokio::io::AsyncReadExt;
        while !self.seen.contains(needle) {
            let mut buf = [0u8; 1024];
            let n = tokio::time::timeout(PATIENCE, self.stream.read(&mut buf)).await??;
            anyhow::ensure!(n > 0, "the stream closed before {needle}: {}", self.seen);
            self.seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        Ok(())
    }
}
