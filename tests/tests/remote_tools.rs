//! Seed 000's session tools across machines (issue 31): two real daemons on this machine, a remote
//! one in a home of its own (echo and notes) and a local one that reaches it by its `ws://` URL and
//! token file. The official Python MCP client calls the local session's `/ahp-mcp` endpoint:
//! `list_sessions` lists the remote's sessions, `create_session` with agent `echo@remote` makes one
//! there (the remote's own client sees it and its reply) and counts it in the calling tree's
//! limits, `send_message` reaches it, `get_session_context` reads its turns, and what the remote's
//! token may not do there is refused in the remote's words.

use std::path::Path;

use ahp_types::state::SnapshotState;
use ahp_types::ROOT_RESOURCE_URI;
use anyhow::anyhow;
use serde_json::{json, Value};
use tests::mcp::call_tools;
use tests::mcp::{endpoint, json_of, ok_text, refused, text};
use tests::turns::{until_turns, watch_session};
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

/// The remote: echo (at once) and notes, on the real clock.
fn remote_options() -> DaemonOptions {
    DaemonOptions::with_config(json!({ "agents": {
        "echo": tests::agents::echo_paced(0),
        "notes": tests::agents::notes() } }))
}

/// The local daemon: notes (which reveals its tools endpoint) and echo, on a clock the test moves,
/// with the remote named `remote` by its URL and the token in `token_file`.
fn local_options(remote_url: &str, token_file: &Path) -> DaemonOptions {
    let url = if remote_url.ends_with('/') { remote_url.to_owned() } else { format!("{remote_url}/") };
    let mut options = DaemonOptions::with_config(json!({
        "agents": {
            "notes": tests::agents::notes_revealing_endpoint(),
            "echo": tests::agents::echo_paced(0) },
        "remotes": { "remote": { "url": url, "tokenFile": token_file } } }));
    options.env.push(("AHPD_TEST_CLOCK".into(), "manual".into()));
    options
}

/// The token file a daemon started by the harness keeps in its data folder.
fn token_file_of(daemon: &Daemon) -> std::path::PathBuf {
    daemon.home.join("data").join("ahpd").join("connection-token")
}

/// Waits until the local daemon's root offers the remote's echo (its link is up and its sessions
/// listed: the agents are published once the handshake listed them).
async fn until_linked(client: &mut TestClient) -> anyhow::Result<()> {
    client
        .until("the remote's agents on the local root", |m| match m.states.get(ROOT_RESOURCE_URI) {
            Some(SnapshotState::Root(root)) => root.agents.iter().any(|a| a.provider == "echo@remote"),
            _ => false,
        })
        .await
}

/// The session an answer such as `New session created (<link>).` links to.
fn session_in(text: &str) -> anyhow::Result<String> {
    let start = text.find("agent-host-session://").ok_or_else(|| anyhow!("no link in {text:?}"))?;
    let link = text[start..].trim_end_matches(").").trim_end_matches(')');
    let id = link.split('/').nth(3).unwrap_or_default().split('?').next().unwrap_or_default();
    Ok(format!("ahp-session:/{id}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_tools_list_make_message_and_read_sessions_on_a_remote_host() -> anyhow::Result<()> {
    let remote = Daemon::start_with(remote_options()).await?;
    let mut r = TestClient::connect(&remote.url, "r").await?;
    let (there, there_chat) = r.create_session("echo", None).await?;
    r.turn(&there_chat, "hello from afar").await?;
    // A notes turn there that waits for an answer (a message to it waits behind it).
    let (asking, asking_chat) = r.create_session("notes", None).await?;
    r.send(&asking_chat, "ask may I go on?").await?;
    let local = Daemon::start_with(local_options(&remote.url, &token_file_of(&remote))).await?;
    let mut a = TestClient::connect(&local.url, "a").await?;
    until_linked(&mut a).await?;
    let (here, chat) = a.create_session("notes", None).await?;
    let (url, token) = endpoint(&mut a, &chat).await?;

    // The agents a session may start include the remote's, as this host names them.
    let listed_tools = tests::mcp::list_tools(&url, &token).await?;
    let create = listed_tools["tools"].as_array().into_iter().flatten().find(|t| t["name"] == "create_session");
    let agents = create.map(|t| t["inputSchema"]["properties"]["agent"]["enum"].clone()).unwrap_or_default();
    assert_eq!(agents, json!(["notes", "echo", "echo@remote", "notes@remote"]));

    let first = call_tools(
        &url,
        &token,
        &[
            ("list_sessions", json!({})),
            (
                "create_session",
                json!({ "relationship": "independent", "agent": "echo@remote", "prompt": "hi there", "title": "Far away" }),
            ),
            (
                "create_session",
                json!({ "relationship": "independent", "agent": "echo@remote", "prompt": "p", "title": "t", "config": { "voice": "nonsense" } }),
            ),
            ("create_session", json!({ "agent": "echo@remote", "prompt": "p", "title": "t" })),
            ("create_session", json!({ "relationship": "independent", "agent": "nobody@remote", "prompt": "p", "title": "t" })),
            ("list_agents", json!({})),
            ("list_models", json!({ "agent": "notes@remote" })),
        ],
    )
    .await?;

    // The remote's session is listed beside the local ones, its machine and agent there shown.
    let listed = json_of(&first[0])?;
    let rows = listed["sessions"].as_array().cloned().unwrap_or_default();
    let row = rows.iter().find(|row| row["session"] == there).ok_or_else(|| anyhow!("no row for {there}: {listed}"))?;
    assert_eq!(row["remote"], "remote", "{row}");
    assert_eq!(
        row["openLink"],
        format!("agent-host-session://echo@remote/{}", there.trim_start_matches("ahp-session:/"))
    );
    assert_eq!(row["title"], "hello from afar");
    let local_row = rows.iter().find(|row| row["session"] == here).ok_or_else(|| anyhow!("no row for {here}"))?;
    assert!(local_row.get("remote").is_none(), "a local session names no remote: {local_row}");

    // create_session with echo@remote made a session there, which its own client lists, and
    // which replied to the prompt.
    let made_text = ok_text(&first[1])?;
    assert!(made_text.starts_with("New session created (agent-host-session://echo@remote/"), "{made_text}");
    let made = session_in(made_text)?;
    let made_chat = watch_session(&mut r, &made).await?;
    until_turns(&mut r, &made_chat, 1).await?;
    let m = made.clone();
    r.until("the title the tool gave", move |mirror| mirror.session(&m).is_some_and(|s| s.title == "Far away")).await?;
    let listed_there = r.listed_sessions(None).await?;
    let summary = listed_there
        .iter()
        .find(|s| s["resource"] == made.as_str())
        .ok_or_else(|| anyhow!("the remote does not list {made}: {listed_there:?}"))?;
    assert_eq!(summary["provider"], "echo");
    assert_eq!(summary["title"], "Far away");
    let turns = r.mirror.chat(&made_chat).map(|c| c.turns.clone()).unwrap_or_default();
    assert_eq!(turns[0].message.text, "hi there");
    assert!(turn_text(&turns[0]).contains("hi there"), "echo replied: {:?}", turn_text(&turns[0]));

    // The remote's refusal, in its words; a chat of this session cannot run another host's agent;
    // an agent the remote does not offer is refused here, naming the ones offered.
    refused(&first[2], "Session configuration 'voice' does not offer 'nonsense'.");
    refused(
        &first[3],
        "Invalid create_session input: echo@remote runs on another host, in a session of its own there; use relationship \"independent\".",
    );
    refused(
        &first[4],
        "Invalid create_session input: agent must be one of the agents this host offers (notes, echo, echo@remote, notes@remote).",
    );

    // The readers show the remote's agents as this host names them.
    let agents = json_of(&first[5])?;
    let far = agents["agents"].as_array().into_iter().flatten().find(|a| a["agent"] == "echo@remote").cloned();
    assert_eq!(far.as_ref().map(|a| a["remote"].clone()), Some(json!("remote")), "{agents}");
    assert!(far.is_some_and(|a| a["name"].as_str().unwrap_or_default().ends_with("(remote)")));
    let models = json_of(&first[6])?;
    assert!(models["models"].as_array().into_iter().flatten().all(|m| m["agent"] == "notes@remote"), "{models}");

    // send_message reaches the remote chat (seen here, through the local daemon's mirror, and there).
    let local_chat = watch_session(&mut a, &made).await?;
    until_turns(&mut a, &local_chat, 1).await?;
    let sent =
        call_tools(&url, &token, &[("send_message", json!({ "session": made, "message": "once more" }))]).await?;
    let link = format!("agent-host-session://echo@remote/{}", made.trim_start_matches("ahp-session:/"));
    assert_eq!(ok_text(&sent[0])?, format!("Message sent ({link})."));
    until_turns(&mut r, &made_chat, 2).await?;
    until_turns(&mut a, &local_chat, 2).await?;
    let turns = r.mirror.chat(&made_chat).map(|c| c.turns.clone()).unwrap_or_default();
    assert_eq!(turns[1].message.text, "once more");
    assert!(turn_text(&turns[1]).contains("once more"));

    // A message to a remote chat whose turn runs waits behind it there, as a queued message.
    let local_asking = watch_session(&mut a, &asking).await?;
    let c = local_asking.clone();
    a.until("the remote turn running, seen here", move |m| m.chat(&c).is_some_and(|st| st.active_turn.is_some()))
        .await?;
    let sent =
        call_tools(&url, &token, &[("send_message", json!({ "session": asking, "message": "after that" }))]).await?;
    let asking_link = format!("agent-host-session://notes@remote/{}", asking.trim_start_matches("ahp-session:/"));
    assert_eq!(ok_text(&sent[0])?, format!("Message queued ({asking_link})."));
    let c = asking_chat.clone();
    r.until("the message queued there", move |m| {
        m.chat(&c).is_some_and(|st| {
            st.active_turn.is_some() && st.queued_messages.iter().flatten().any(|q| q.message.text == "after that")
        })
    })
    .await?;

    // get_session_context reads the remote chat's turns, by its URI and by its link.
    let read = call_tools(
        &url,
        &token,
        &[
            ("get_session_context", json!({ "session": made, "detail": "digest" })),
            ("get_session_context", json!({ "session": made_chat })),
            ("get_session_context", json!({ "session": there })),
            ("delete_session", json!({ "session": made })),
        ],
    )
    .await?;
    let context = json_of(&read[0])?;
    assert_eq!(context["session"], made);
    assert_eq!(context["openLink"], link);
    let transcript = context["transcript"].as_array().cloned().unwrap_or_default();
    assert_eq!(transcript.len(), 2, "{context}");
    assert_eq!(transcript[0]["user"], "hi there");
    assert_eq!(transcript[1]["user"], "once more");
    assert_eq!(transcript[1]["state"], "complete");
    assert!(transcript[1]["assistant"].as_str().unwrap_or_default().contains("once more"), "{context}");
    let by_chat = json_of(&read[1])?;
    assert_eq!(by_chat["session"], made, "a bare chat URI names its remote session");
    assert_eq!(by_chat["transcript"].as_array().map(Vec::len), Some(2), "{by_chat}");
    let other = json_of(&read[2])?;
    assert_eq!(other["transcript"][0]["user"], "hello from afar");
    // The tools that change what a session is reach only this host's.
    refused(
        &read[3],
        &format!("{made} runs on another host, which this tool does not reach (list_sessions, get_session_context, send_message and create_session do)."),
    );
    assert!(r.listed_sessions(None).await?.iter().any(|s| s["resource"] == made.as_str()));
    Ok(())
}

/// Each host tool call of a turn, in order: (succeeded, what it answered).
fn tool_results(turn: &ahp_types::state::Turn) -> Vec<(bool, String)> {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ahp_types::state::ResponsePart::ToolCall(tc) => serde_json::to_value(&tc.tool_call).ok(),
            _ => None,
        })
        .map(|v| {
            let text = v.pointer("/content/0/text").and_then(Value::as_str).unwrap_or_default().to_owned();
            (v["success"].as_bool().unwrap_or(false), text)
        })
        .collect()
}

fn budget_refusal(act: &str, used: usize, noun: &str, seconds: u64) -> String {
    format!(
        "Refusing to {act}: this {noun} already used {used} of {used} allowed in the last 60 minutes. The limit applies to each {noun} separately and frees up as older actions leave that window. Retry after {seconds} seconds, or turn off agent orchestration limits in settings."
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_made_on_a_remote_host_counts_in_the_calling_tree_and_its_depth() -> anyhow::Result<()> {
    let remote = Daemon::start_with(remote_options()).await?;
    let r = TestClient::connect(&remote.url, "r").await?;
    let local = Daemon::start_with(local_options(&remote.url, &token_file_of(&remote))).await?;
    let mut a = TestClient::connect(&local.url, "a").await?;
    until_linked(&mut a).await?;
    let (_tree, chat) = a.create_session("notes", None).await?;
    let (url, token) = endpoint(&mut a, &chat).await?;

    // One session made there and 49 here fill the tree's 50: the next, here or there, is refused.
    let far = json!({ "relationship": "independent", "agent": "echo@remote", "prompt": "far", "title": "Far child" });
    let near = |i: usize| json!({ "relationship": "independent", "agent": "echo", "prompt": "near", "title": format!("near {i}") });
    let mut calls = vec![("create_session", far.clone())];
    calls.extend((0..50).map(|i| ("create_session", near(i))));
    calls.push(("create_session", far.clone()));
    let answers = call_tools(&url, &token, &calls).await?;
    assert!(ok_text(&answers[0])?.starts_with("New session created (agent-host-session://echo@remote/"));
    for (i, answer) in answers[1..50].iter().enumerate() {
        assert!(ok_text(answer)?.starts_with("New session created (agent-host-session://echo/"), "{i}: {answer}");
    }
    let full = budget_refusal("create more sessions", 50, "session tree", 3600);
    refused(&answers[50], &full);
    refused(&answers[51], &full);
    let there = r.listed_sessions(None).await?;
    assert_eq!(there.len(), 1, "the remote holds the one session made there: {there:?}");
    assert_eq!(there[0]["resource"], session_in(text(&answers[0]))?.as_str());

    // Three links down (in another tree), a session on the remote is refused as a local one is.
    let (_root, mut chat) = a.create_session("notes", None).await?;
    let deeper = json!({ "relationship": "independent", "agent": "notes", "prompt": "list", "title": "deeper" });
    for _depth in 1..=3 {
        let turn = a.turn(&chat, &format!("call create_session {deeper}")).await?;
        let made = tool_results(&turn);
        anyhow::ensure!(made.len() == 1 && made[0].0, "{made:?}");
        chat = watch_session(&mut a, &session_in(&made[0].1)?).await?;
        until_turns(&mut a, &chat, 1).await?;
    }
    let turn = a.turn(&chat, &format!("call create_session {far}")).await?;
    assert_eq!(
        tool_results(&turn),
        vec![(
            false,
            "Refusing to create a session: recursion limit reached (max spawn depth 3). This session was itself created 3 level(s) deep.".to_owned()
        )]
    );
    assert_eq!(r.listed_sessions(None).await?.len(), 1, "nothing more was made there");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_remotes_token_may_not_do_there_is_refused_in_the_remotes_words() -> anyhow::Result<()> {
    const ROOT: &str = "remote-root-token";
    let home = tests::Home::new()?;
    let run = home.expect(0, &["user", "add", "gus", "--role", "guest", "--users", "users.json"]).await?;
    let guest_token = run.stdout.trim().to_owned();
    let mut options = remote_options();
    options.args.extend(["--users", "users.json", "--connection-token", ROOT].map(str::to_owned));
    let remote = Daemon::start_in(home.path(), options).await?;
    let mut r = TestClient::connect(&format!("{}/?tkn={ROOT}", remote.url), "r").await?;
    let (there, there_chat) = r.create_session("echo", None).await?;
    r.turn(&there_chat, "hello from afar").await?;

    // This host reaches the remote as its guest, who may read there and not write.
    let token_file = home.path().join("guest.token");
    std::fs::write(&token_file, &guest_token)?;
    let local = Daemon::start_with(local_options(&remote.url, &token_file)).await?;
    let mut a = TestClient::connect(&local.url, "a").await?;
    until_linked(&mut a).await?;
    let (_s, chat) = a.create_session("notes", None).await?;
    let (url, token) = endpoint(&mut a, &chat).await?;
    let answers = call_tools(
        &url,
        &token,
        &[
            ("list_sessions", json!({})),
            ("get_session_context", json!({ "session": there })),
            ("send_message", json!({ "session": there, "message": "let me in" })),
            (
                "create_session",
                json!({ "relationship": "independent", "agent": "echo@remote", "prompt": "p", "title": "t" }),
            ),
        ],
    )
    .await?;
    let listed = json_of(&answers[0])?;
    assert!(listed["sessions"].as_array().into_iter().flatten().any(|row| row["session"] == there), "{listed}");
    assert_eq!(json_of(&answers[1])?["transcript"][0]["user"], "hello from afar");
    refused(&answers[2], "gus may not session:write here");
    refused(&answers[3], "gus may not session:write here");
    let turns = r.mirror.chat(&there_chat).map(|c| c.turns.len());
    assert_eq!(turns, Some(1), "nothing reached the remote's chat");
    assert_eq!(r.listed_sessions(None).await?.len(), 1, "nothing was made there");
    Ok(())
}
