//! Agents side by side on one repository (issue 19), through the real daemon, real git and the
//! official client folding every envelope through the official reducers: a worktree each (notes,
//! the real Claude CLI, pi and an ACP agent each run in theirs), the changesets that show what changed (live while a turn runs, per turn, per branch), merging back
//! through `invokeChangesetOperation`, the session tools' isolation (and a message sent the moment
//! their turn completes), a `kill -9` mid-turn, and the refusals that leave nothing half-made.

use std::path::{Path, PathBuf};

use ahp_types::actions::{
    ChangesetFilesReviewChangedAction, ChatTurnCancelledAction, SessionIsArchivedChangedAction, StateAction,
};
use ahp_types::commands::ResourceReadParams;
use ahp_types::state::{ChangesetState, ResponsePart, SessionLifecycle, ToolCallState, Turn, TurnState};
use anyhow::{anyhow, bail, ensure, Context};
use serde_json::{json, Value};
use tests::git::git;
use tests::{turn_text, Daemon, DaemonOptions, TestClient, PATIENCE};

/// A repository with one commit (`a.txt` holding `one`), on `main`.
struct Repo {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

fn repo() -> Repo {
    let dir = tempfile::Builder::new().prefix("ahpd-repo-").tempdir().expect("temp dir");
    let path = dir.path().join("project").canonicalize().unwrap_or_else(|_| dir.path().join("project"));
    std::fs::create_dir_all(&path).expect("mkdir");
    let path = path.canonicalize().expect("canonical");
    git(&path, &["init", "-q", "-b", "main"]);
    std::fs::write(path.join("a.txt"), "one\n").expect("write");
    git(&path, &["add", "a.txt"]);
    git(&path, &["commit", "-q", "-m", "first"]);
    Repo { _dir: dir, path }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| format!("<{}: {e}>", path.display()))
}

/// The notes agent, worktrees made under `root`.
fn options(root: &Path) -> DaemonOptions {
    DaemonOptions::with_config(json!({
        "agents": { "notes": tests::agents::notes() },
        "worktreesRoot": root,
    }))
}

fn file_uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// `createSession` params for a session of `provider` in `folder` with `config`.
fn create_params(session: &str, provider: &str, folder: &Path, config: Value) -> Value {
    json!({ "channel": session, "provider": provider, "workingDirectories": [file_uri(folder)], "config": config })
}

/// Creates a session in `folder` and waits until it is ready, watching it and its default chat.
async fn create(c: &mut TestClient, provider: &str, folder: &Path, config: Value) -> anyhow::Result<(String, String)> {
    let session = format!("ahp-session:/{}", uuid::Uuid::new_v4());
    c.request("createSession", create_params(&session, provider, folder, config))
        .await
        .map_err(|e| anyhow!("createSession: {e}"))?;
    c.subscribe(&session).await?;
    let s = session.clone();
    c.until("the session to be ready", move |m| {
        m.session(&s).is_some_and(|st| st.lifecycle == SessionLifecycle::Ready && st.default_chat.is_some())
    })
    .await?;
    let chat = c.mirror.session(&session).and_then(|s| s.default_chat.clone()).ok_or_else(|| anyhow!("no chat"))?;
    c.subscribe(&chat).await?;
    Ok((session, chat))
}

/// An isolated notes session that writes without asking.
async fn isolated(c: &mut TestClient, folder: &Path) -> anyhow::Result<(String, String)> {
    create(c, "notes", folder, json!({ "ask": "never", "isolation": "worktree" })).await
}

/// A `createSession` that must be refused: its error's message.
async fn refused_create(c: &TestClient, folder: &Path, config: Value) -> anyhow::Result<String> {
    let session = format!("ahp-session:/{}", uuid::Uuid::new_v4());
    match c.request("createSession", create_params(&session, "notes", folder, config)).await {
        Ok(v) => bail!("createSession was not refused: {v}"),
        Err(ahp::ClientError::Rpc(e)) => {
            let listed = c.request("listSessions", json!({ "channel": "ahp-root://" })).await?;
            let kept = listed["items"].as_array().is_some_and(|items| items.iter().any(|i| i["resource"] == session));
            ensure!(!kept, "a refused session was kept: {listed}");
            Ok(e.message)
        }
        Err(e) => bail!("createSession failed otherwise: {e}"),
    }
}

/// A changeset URI a session or chat advertises, by kind, with `{turnId}`-style variables
/// filled from `vars`.
fn changeset_uri(c: &TestClient, channel: &str, kind: &str, vars: &[(&str, &str)]) -> anyhow::Result<String> {
    let listed = match c.mirror.session(channel) {
        Some(s) => s.changesets.clone(),
        None => c.mirror.chat(channel).and_then(|s| s.changesets.clone()),
    };
    let entry = listed
        .unwrap_or_default()
        .into_iter()
        .find(|e| e.change_kind == kind)
        .ok_or_else(|| anyhow!("{channel} advertises no {kind} changeset"))?;
    let mut uri = entry.uri_template;
    for (name, value) in vars {
        uri = uri.replace(&format!("{{{name}}}"), value);
    }
    Ok(uri)
}

/// The paths a changeset lists, from each file's `_meta`.
fn paths(state: &ChangesetState) -> Vec<String> {
    state.files.iter().filter_map(|f| f.meta.as_ref()?.get("ahpd.path")?.as_str().map(str::to_owned)).collect()
}

fn patch_of(state: &ChangesetState, path: &str) -> String {
    state
        .files
        .iter()
        .find(|f| f.meta.as_ref().and_then(|m| m.get("ahpd.path")).and_then(Value::as_str) == Some(path))
        .and_then(|f| f.meta.as_ref()?.get("ahpd.patch")?.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// Each tool call of a turn: (tool, succeeded, what it answered).
fn tool_results(turn: &Turn) -> Vec<(String, bool, String)> {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::ToolCall(tc) => serde_json::to_value(&tc.tool_call).ok(),
            _ => None,
        })
        .map(|v| {
            let text = v.pointer("/content/0/text").and_then(Value::as_str).unwrap_or_default().to_owned();
            let error = v.pointer("/error").map(|e| e.to_string()).unwrap_or_default();
            let name = v["toolName"].as_str().unwrap_or_default().to_owned();
            (name, v["success"].as_bool().unwrap_or(false), if text.is_empty() { error } else { text })
        })
        .collect()
}

/// Waits until every tool call of the chat's running turn has finished. The notes agent runs a
/// message's commands side by side, so its question can come while the tool still works (a
/// worktree being cut), or before the host has even taken the call.
async fn until_tools_done(c: &mut TestClient, chat: &str) -> anyhow::Result<()> {
    let ch = chat.to_owned();
    c.until("the turn's tool calls to finish", move |m| {
        m.chat(&ch).and_then(|s| s.active_turn.as_ref()).is_some_and(|turn| {
            let calls: Vec<Value> = turn
                .response_parts
                .iter()
                .filter_map(|p| match p {
                    ResponsePart::ToolCall(tc) => serde_json::to_value(&tc.tool_call).ok(),
                    _ => None,
                })
                .collect();
            !calls.is_empty() && calls.iter().all(|call| call["status"] == "completed")
        })
    })
    .await
}

/// Answers the one open question of the chat's running turn.
async fn answer_question(c: &mut TestClient, chat: &str) -> anyhow::Result<()> {
    let questions = c.until_questions(chat, 1).await?;
    c.answer(chat, &questions[0], Some("yes")).await?;
    Ok(())
}

/// Waits until the chat holds `n` ended turns and runs none (the host's continuation turn after a
/// workspace change among them).
async fn until_idle_after(c: &mut TestClient, chat: &str, n: usize) -> anyhow::Result<()> {
    let ch = chat.to_owned();
    c.until(&format!("{n} turns to end in {chat}"), move |m| {
        m.chat(&ch).is_some_and(|s| s.turns.len() == n && s.active_turn.is_none())
    })
    .await
}

/// Waits until the root says a session's summary counts `files` changed files.
async fn until_counted(c: &mut TestClient, session: &str, files: i64) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        c.pump()?;
        let counted = c.notifications.iter().rev().find_map(|n| match n {
            ahp::SubscriptionEvent::SessionSummaryChanged(p) if p.session == session => {
                p.changes.changes.as_ref().map(|ch| ch.files.unwrap_or(0))
            }
            _ => None,
        });
        if counted == Some(files) {
            return Ok(());
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        ensure!(!left.is_zero(), "{session} was never counted at {files} files (last: {counted:?})");
        let _ = c.next_event(left).await;
    }
}

#[tokio::test]
async fn two_isolated_sessions_write_the_same_file_apart() -> anyhow::Result<()> {
    let repo = repo();
    let root = tempfile::tempdir()?;
    let daemon = Daemon::start_with(options(root.path())).await?;
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let (s1, c1) = isolated(&mut c, &repo.path).await?;
    let (s2, c2) = isolated(&mut c, &repo.path).await?;
    let (w1, w2) = (c.folder_of(&s1)?, c.folder_of(&s2)?);
    ensure!(w1 != w2 && w1.starts_with(root.path()) && w2.starts_with(root.path()), "{w1:?} {w2:?}");

    let t1 = c.send(&c1, "edit a.txt from the first").await?;
    let t2 = c.send(&c2, "edit a.txt from the second").await?;
    for (chat, turn) in [(&c1, &t1), (&c2, &t2)] {
        let turn = c.finished(chat, turn).await?;
        ensure!(turn.state == TurnState::Complete, "{turn:?}");
        ensure!(tool_results(&turn).iter().all(|(_, ok, _)| *ok), "{:?}", tool_results(&turn));
    }
    assert_eq!(read(&repo.path.join("a.txt")), "one\n", "the base checkout is untouched");
    assert_eq!(git(&repo.path, &["status", "--porcelain"]), "", "and clean");
    assert_eq!(read(&w1.join("a.txt")), "from the first\n");
    assert_eq!(read(&w2.join("a.txt")), "from the second\n");
    // Each on a branch of its own, named so a person can find it.
    let branches = git(&repo.path, &["branch", "--format=%(refname:short)"]);
    assert_eq!(branches.lines().filter(|b| b.starts_with("ahpd/")).count(), 2, "{branches}");
    // The backend runs in the worktree.
    let said = turn_text(&c.turn(&c1, "where").await?);
    assert_eq!(said, format!("folder {}", w1.display()));
    for channel in [&s1, &c1, &s2, &c2] {
        c.check_against_snapshot(channel).await?;
    }
    Ok(())
}

#[tokio::test]
async fn changesets_show_what_changed_live_per_turn_and_per_branch() -> anyhow::Result<()> {
    let repo = repo();
    let root = tempfile::tempdir()?;
    let daemon = Daemon::start_with(options(root.path())).await?;
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = isolated(&mut c, &repo.path).await?;
    let worktree = c.folder_of(&session)?;
    let branch_uri = changeset_uri(&c, &session, "branch", &[])?;
    changeset_uri(&c, &session, "uncommitted", &[])?;
    c.subscribe(&branch_uri).await?;
    ensure!(c.mirror.changeset(&branch_uri).is_some_and(|s| s.files.is_empty()), "nothing changed yet");

    // The turn writes a file, then waits on a question: the branch shows the file meanwhile.
    let writing = c.send(&chat, "edit b.txt hello; ask go on?").await?;
    let (b, ch) = (branch_uri.clone(), chat.clone());
    c.until("the branch to show b.txt while the turn runs", move |m| {
        m.changeset(&b).is_some_and(|s| paths(s) == ["b.txt"]) && m.chat(&ch).is_some_and(|s| s.active_turn.is_some())
    })
    .await?;
    let live = c.mirror.changeset(&branch_uri).cloned().context("the branch")?;
    ensure!(patch_of(&live, "b.txt").contains("+hello"), "{}", patch_of(&live, "b.txt"));
    ensure!(live.files[0].edit.diff.as_ref().and_then(|d| d.added) == Some(1));
    let turn_uri = changeset_uri(&c, &chat, "turn", &[("turnId", &writing)])?;
    c.subscribe(&turn_uri).await?;
    ensure!(c.mirror.changeset(&turn_uri).is_some_and(|s| paths(s) == ["b.txt"]), "the running turn's own slice");
    c.check_against_snapshot(&branch_uri).await?;
    answer_question(&mut c, &chat).await?;
    c.finished(&chat, &writing).await?;

    // A turn that writes nothing has an empty slice; the writing one keeps its file.
    let quiet = c.send(&chat, "where").await?;
    c.finished(&chat, &quiet).await?;
    let quiet_uri = changeset_uri(&c, &chat, "turn", &[("turnId", &quiet)])?;
    c.subscribe(&quiet_uri).await?;
    ensure!(c.mirror.changeset(&quiet_uri).is_some_and(|s| s.files.is_empty()), "{:?}", c.mirror.changeset(&quiet_uri));
    c.subscribe(&turn_uri).await?;
    ensure!(c.mirror.changeset(&turn_uri).is_some_and(|s| paths(s) == ["b.txt"]));
    let compare =
        changeset_uri(&c, &chat, "compare-turns", &[("originalTurnId", &writing), ("modifiedTurnId", &quiet)])?;
    c.subscribe(&compare).await?;
    ensure!(c.mirror.changeset(&compare).is_some_and(|s| s.files.is_empty()), "nothing changed between them");

    // The file's sides are read with resourceRead.
    let after = c.mirror.changeset(&turn_uri).and_then(|s| s.files[0].edit.after.clone()).context("after")?;
    ensure!(after.uri == file_uri(&worktree.join("b.txt")));
    let params =
        ResourceReadParams { channel: "ahp-root://".into(), meta: None, uri: after.content.uri, encoding: None };
    let content = c.client.resource_read(params).await.map_err(|e| anyhow!("resourceRead: {e}"))?;
    assert_eq!(content.data, "hello\n");

    // A person marks the file reviewed: kept, and folded like everything else.
    let id = c.mirror.changeset(&branch_uri).map(|s| s.files[0].id.clone()).context("file")?;
    let reviewed = ChangesetFilesReviewChangedAction { files: vec![id], reviewed: true };
    c.dispatch(&branch_uri, StateAction::ChangesetFilesReviewChanged(reviewed)).await?;
    let b = branch_uri.clone();
    c.until("the review to land", move |m| m.changeset(&b).is_some_and(|s| s.files[0].reviewed == Some(true))).await?;
    c.check_against_snapshot(&branch_uri).await?;
    c.check_against_snapshot(&turn_uri).await?;
    c.check_against_snapshot(&chat).await?;
    c.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test]
async fn list_sessions_with_changes_answers_exactly_the_sessions_that_changed_something() -> anyhow::Result<()> {
    let repo = repo();
    let root = tempfile::tempdir()?;
    let daemon = Daemon::start_with(options(root.path())).await?;
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let (wrote, wrote_chat) = isolated(&mut c, &repo.path).await?;
    let (idle, idle_chat) = isolated(&mut c, &repo.path).await?;
    let (plain, plain_chat) = create(&mut c, "notes", &repo.path, json!({ "ask": "never" })).await?;
    c.turn(&wrote_chat, "edit c.txt changed").await?;
    c.turn(&idle_chat, "where").await?;
    c.turn(&plain_chat, "where").await?;
    until_counted(&mut c, &wrote, 1).await?;
    let turn = c.turn(&plain_chat, r#"call list_sessions {"withChanges": true}"#).await?;
    let results = tool_results(&turn);
    let (_, ok, text) = results.first().context("a call")?;
    ensure!(*ok, "{text}");
    let rows: Value = serde_json::from_str(text)?;
    let listed: Vec<&str> =
        rows["sessions"].as_array().into_iter().flatten().filter_map(|r| r["session"].as_str()).collect();
    assert_eq!(listed, vec![wrote.as_str()], "{rows}");
    assert_eq!(rows["sessions"][0]["changes"]["files"], 1);
    for session in [&wrote, &idle, &plain] {
        c.check_against_snapshot(session).await?;
    }
    Ok(())
}

#[tokio::test]
async fn workspace_changes_wait_for_the_turn_and_go_when_it_is_cancelled() -> anyhow::Result<()> {
    let repo = repo();
    let root = tempfile::tempdir()?;
    let daemon = Daemon::start_with(options(root.path())).await?;
    let mut c = TestClient::connect(&daemon.url, "a").await?;

    // set_workspace with isolation, mid-turn: the session moves when the turn ends.
    let (session, chat) = create(&mut c, "notes", &repo.path, json!({ "ask": "never" })).await?;
    let call = format!(
        r#"call set_workspace {{"workspaceFolder": "{}", "isolation": true}}; ask ready?"#,
        repo.path.display()
    );
    let turn = c.send(&chat, &call).await?;
    c.until_questions(&chat, 1).await?;
    assert_eq!(c.folder_of(&session)?, repo.path, "nothing moves while the turn runs");
    answer_question(&mut c, &chat).await?;
    let ended = c.finished(&chat, &turn).await?;
    ensure!(tool_results(&ended)[0].1, "{:?}", tool_results(&ended));
    let s = session.clone();
    let base = repo.path.clone();
    c.until("the session to move", move |m| {
        m.session(&s).and_then(|st| st.working_directories.clone()).is_some_and(|d| d[0] != file_uri(&base))
    })
    .await?;
    let moved = c.folder_of(&session)?;
    ensure!(moved.starts_with(root.path()), "{moved:?}");
    until_idle_after(&mut c, &chat, 2).await?;
    let said = turn_text(&c.turn(&chat, "where").await?);
    assert_eq!(said, format!("folder {}", moved.display()));
    changeset_uri(&c, &session, "branch", &[])?;

    // Cancelled: the request is dropped and the worktree it cut goes.
    let (other, other_chat) = create(&mut c, "notes", &repo.path, json!({ "ask": "never" })).await?;
    let turn = c.send(&other_chat, &call).await?;
    c.until_questions(&other_chat, 1).await?;
    until_tools_done(&mut c, &other_chat).await?;
    let stop = ChatTurnCancelledAction { turn_id: turn.clone(), duration: 1, meta: None };
    c.dispatch(&other_chat, StateAction::ChatTurnCancelled(stop)).await?;
    c.finished(&other_chat, &turn).await?;
    daemon.wait_for_log("a worktree nobody took up was removed", PATIENCE).await?;
    assert_eq!(c.folder_of(&other)?, repo.path, "the cancelled turn moved nothing");
    assert_eq!(git(&repo.path, &["worktree", "list", "--porcelain"]).matches("worktree ").count(), 2);

    // isolate_session moves the calling chat alone; the session's other chat keeps its folder.
    let second = format!("ahp-chat:/{}", uuid::Uuid::new_v4());
    c.request("createChat", json!({ "channel": other, "chat": second })).await?;
    c.subscribe(&second).await?;
    let turn = c.send(&second, "call isolate_session {}; ask ready?").await?;
    c.until_questions(&second, 1).await?;
    ensure!(c.mirror.chat(&second).is_some_and(|s| s.working_directories.is_none()), "not while the turn runs");
    answer_question(&mut c, &second).await?;
    let ended = c.finished(&second, &turn).await?;
    ensure!(tool_results(&ended)[0].1, "{:?}", tool_results(&ended));
    let ch = second.clone();
    c.until("the chat to move", move |m| m.chat(&ch).is_some_and(|s| s.working_directories.is_some())).await?;
    let own = c.mirror.chat(&second).and_then(|s| s.working_directories.clone()).context("dirs")?;
    let own = PathBuf::from(own[0].trim_start_matches("file://"));
    ensure!(own.starts_with(root.path()), "{own:?}");
    until_idle_after(&mut c, &second, 2).await?;
    assert_eq!(turn_text(&c.turn(&second, "where").await?), format!("folder {}", own.display()));
    assert_eq!(turn_text(&c.turn(&other_chat, "where").await?), format!("folder {}", repo.path.display()));
    changeset_uri(&c, &second, "branch", &[])?;

    // isolate_session in a turn that is cancelled: dropped, and its worktree goes.
    let third = format!("ahp-chat:/{}", uuid::Uuid::new_v4());
    c.request("createChat", json!({ "channel": other, "chat": third })).await?;
    c.subscribe(&third).await?;
    let turn = c.send(&third, "call isolate_session {}; ask ready?").await?;
    c.until_questions(&third, 1).await?;
    until_tools_done(&mut c, &third).await?;
    let stop = ChatTurnCancelledAction { turn_id: turn.clone(), duration: 1, meta: None };
    c.dispatch(&third, StateAction::ChatTurnCancelled(stop)).await?;
    c.finished(&third, &turn).await?;
    daemon.wait_for_log(&format!("a worktree nobody took up was removed owner=\"{third}\""), PATIENCE).await?;
    ensure!(c.mirror.chat(&third).is_some_and(|s| s.working_directories.is_none()), "the cancelled turn moved nothing");
    assert_eq!(turn_text(&c.turn(&third, "where").await?), format!("folder {}", repo.path.display()));
    for channel in [&session, &chat, &other, &other_chat, &second, &third] {
        c.check_against_snapshot(channel).await?;
    }
    Ok(())
}

/// Waits until `path` exists (a git hook says it got there).
async fn until_exists(path: &Path) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !path.exists() {
        ensure!(tokio::time::Instant::now() < deadline, "{} did not appear", path.display());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Ok(())
}

#[tokio::test]
async fn a_turn_cancelled_while_its_worktree_is_cut_leaves_no_worktree_and_the_next_message_works() -> anyhow::Result<()>
{
    let repo = repo();
    let root = tempfile::tempdir()?;
    // git runs `post-checkout` as it makes the worktree: held there, the cut is in progress.
    let (cutting, go) = (root.path().join("cutting"), root.path().join("go"));
    let hook = repo.path.join(".git/hooks/post-checkout");
    std::fs::write(
        &hook,
        format!("#!/bin/sh\ntouch '{}'\nwhile [ ! -f '{}' ]; do sleep 0.05; done\n", cutting.display(), go.display()),
    )?;
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let daemon = Daemon::start_with(options(root.path())).await?;
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = create(&mut c, "notes", &repo.path, json!({ "ask": "never" })).await?;

    let call = format!(r#"call set_workspace {{"workspaceFolder": "{}", "isolation": true}}"#, repo.path.display());
    let turn = c.send(&chat, &call).await?;
    until_exists(&cutting).await?;
    let stop = ChatTurnCancelledAction { turn_id: turn.clone(), duration: 1, meta: None };
    c.dispatch(&chat, StateAction::ChatTurnCancelled(stop)).await?;
    c.finished(&chat, &turn).await?;
    std::fs::write(&go, "")?;

    daemon.wait_for_log("a worktree nobody took up was removed", PATIENCE).await?;
    assert_eq!(git(&repo.path, &["worktree", "list", "--porcelain"]).matches("worktree ").count(), 1);
    assert_eq!(git(&repo.path, &["branch", "--list", "ahpd/*"]).trim(), "", "the branch cut for it is gone");
    assert_eq!(c.folder_of(&session)?, repo.path, "the cancelled turn moved nothing");
    assert_eq!(turn_text(&c.turn(&chat, "where").await?), format!("folder {}", repo.path.display()));
    for channel in [&session, &chat] {
        c.check_against_snapshot(channel).await?;
    }
    Ok(())
}

#[tokio::test]
async fn create_session_with_a_worktree_from_a_models_tool_call() -> anyhow::Result<()> {
    let repo = repo();
    let root = tempfile::tempdir()?;
    let daemon = Daemon::start_with(options(root.path())).await?;
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let (caller, chat) = create(&mut c, "notes", &repo.path, json!({ "ask": "never" })).await?;
    let call = r#"call create_session {"relationship": "independent", "prompt": "where", "title": "Side job", "worktree": true}"#;
    let turn = c.turn(&chat, call).await?;
    let (_, ok, text) = tool_results(&turn).into_iter().next().context("a call")?;
    ensure!(ok && text.starts_with("New session created"), "{text}");
    let made = c
        .notifications
        .iter()
        .find_map(|n| match n {
            ahp::SubscriptionEvent::SessionAdded(p) if p.summary.resource != caller => Some(p.summary.resource.clone()),
            _ => None,
        })
        .context("the new session was announced")?;
    c.subscribe(&made).await?;
    let folder = c.folder_of(&made)?;
    ensure!(folder.starts_with(root.path()), "{folder:?}");
    let branches = git(&repo.path, &["branch", "--format=%(refname:short)"]);
    ensure!(branches.lines().any(|b| b.starts_with("ahpd/side-job-")), "{branches}");
    // Its first turn ran in the worktree.
    let default = c.mirror.session(&made).and_then(|s| s.default_chat.clone()).context("chat")?;
    c.subscribe(&default).await?;
    let d = default.clone();
    c.until("its first turn", move |m| m.chat(&d).is_some_and(|s| !s.turns.is_empty())).await?;
    let first = c.mirror.chat(&default).map(|s| turn_text(&s.turns[0])).unwrap_or_default();
    assert_eq!(first, format!("folder {}", folder.display()));
    c.check_against_snapshot(&made).await?;
    Ok(())
}

/// Invokes an operation on a changeset; its answer, or its error's (code, message).
async fn invoke(c: &TestClient, uri: &str, operation: &str, target: Option<Value>) -> Result<Value, (i32, String)> {
    let mut params = json!({ "channel": uri, "operationId": operation });
    if let Some(target) = target {
        params["target"] = target;
    }
    match c.request("invokeChangesetOperation", params).await {
        Ok(v) => Ok(v),
        Err(ahp::ClientError::Rpc(e)) => Err((e.code, e.message)),
        Err(e) => Err((0, e.to_string())),
    }
}

#[tokio::test]
async fn merging_back_lands_the_first_and_refuses_the_conflict() -> anyhow::Result<()> {
    let repo = repo();
    let root = tempfile::tempdir()?;
    let daemon = Daemon::start_with(options(root.path())).await?;
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let (first, first_chat) = isolated(&mut c, &repo.path).await?;
    let (second, second_chat) = isolated(&mut c, &repo.path).await?;
    c.turn(&first_chat, "edit a.txt from the first").await?;
    c.turn(&second_chat, "edit a.txt from the second").await?;
    let (w1, w2) = (c.folder_of(&first)?, c.folder_of(&second)?);
    let first_branch = changeset_uri(&c, &first, "branch", &[])?;
    let second_branch = changeset_uri(&c, &second, "branch", &[])?;
    c.subscribe(&first_branch).await?;
    c.subscribe(&second_branch).await?;
    let offered: Vec<String> = c
        .mirror
        .changeset(&first_branch)
        .and_then(|s| s.operations.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|o| o.id)
        .collect();
    assert_eq!(offered, ["merge", "commit", "discard"]);

    let merged = invoke(&c, &first_branch, "merge", None).await.map_err(|e| anyhow!("merge: {e:?}"))?;
    ensure!(merged["message"].as_str().is_some_and(|m| m.starts_with("Merged ")), "{merged}");
    assert_eq!(read(&repo.path.join("a.txt")), "from the first\n", "the first merge lands in the base");
    assert_eq!(git(&repo.path, &["status", "--porcelain"]), "");
    let b = first_branch.clone();
    c.until("the merged branch to show nothing", move |m| m.changeset(&b).is_some_and(|s| s.files.is_empty())).await?;

    let base_head = git(&repo.path, &["rev-parse", "HEAD"]);
    let branch_name = c.mirror.session(&second).and_then(|s| s.changesets.clone()).unwrap_or_default()[0].label.clone();
    let branch_name = branch_name.split_whitespace().next().unwrap_or_default().to_owned();
    let branch_tip = git(&repo.path, &["rev-parse", &branch_name]);
    let (code, message) =
        invoke(&c, &second_branch, "merge", None).await.err().context("the second merge is refused")?;
    assert_eq!(code, -32011, "{message}");
    ensure!(message.contains("would conflict in a.txt") && message.contains("nothing was changed"), "{message}");
    assert_eq!(read(&repo.path.join("a.txt")), "from the first\n", "the base is as it was");
    assert_eq!(git(&repo.path, &["rev-parse", "HEAD"]), base_head);
    assert_eq!(git(&repo.path, &["status", "--porcelain"]), "");
    assert_eq!(read(&w2.join("a.txt")), "from the second\n", "the worktree is as it was");
    assert_eq!(git(&w2, &["status", "--porcelain"]), " M a.txt\n", "still uncommitted");
    assert_eq!(git(&repo.path, &["rev-parse", &branch_name]), branch_tip, "its branch did not move");
    c.check_against_snapshot(&second_branch).await?;
    c.check_against_snapshot(&first_branch).await?;

    // Archiving lets a worktree's folder go when nothing is left in it (its branch stays), and
    // bringing the session back brings it back; one with uncommitted work stays.
    let archive = |archived: bool| {
        StateAction::SessionIsArchivedChanged(SessionIsArchivedChangedAction { is_archived: archived })
    };
    c.dispatch(&second, archive(true)).await?;
    daemon.wait_for_log("an archived session's worktree stays", PATIENCE).await?;
    ensure!(w2.join("a.txt").exists(), "kept while archived");
    c.dispatch(&first, archive(true)).await?;
    daemon.wait_for_log("an archived session's worktree was removed", PATIENCE).await?;
    ensure!(!w1.exists(), "let go while archived");
    c.dispatch(&first, archive(false)).await?;
    daemon.wait_for_log("a worktree was brought back", PATIENCE).await?;
    assert_eq!(read(&w1.join("a.txt")), "from the first\n", "back as it was");

    // Deleting the session with uncommitted work keeps its worktree; the merged one's goes.
    c.request("disposeSession", json!({ "channel": second })).await?;
    daemon.wait_for_log("the deleted session's worktree was kept", PATIENCE).await?;
    ensure!(w2.join("a.txt").exists(), "kept");
    c.request("disposeSession", json!({ "channel": first })).await?;
    daemon.wait_for_log("removed the deleted session's worktree", PATIENCE).await?;
    ensure!(!w1.exists(), "the merged worktree went");
    Ok(())
}

#[tokio::test]
async fn kill_nine_while_an_isolated_session_runs_loses_nothing() -> anyhow::Result<()> {
    let repo = repo();
    let root = tempfile::tempdir()?;
    let home = tempfile::Builder::new().prefix("ahpd-test-").tempdir()?;
    let mut daemon = Daemon::start_in(home.path(), options(root.path())).await?;
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = isolated(&mut c, &repo.path).await?;
    let worktree = c.folder_of(&session)?;
    c.turn(&chat, "edit kept.txt before").await?;
    let running = c.send(&chat, "edit during.txt during; ask hold on?").await?;
    c.until_questions(&chat, 1).await?;
    let ch = chat.clone();
    c.until("the write to land", move |m| {
        m.chat(&ch).and_then(|s| s.active_turn.as_ref()).is_some_and(|t| {
            t.response_parts
                .iter()
                .any(|p| matches!(p, ResponsePart::ToolCall(tc) if matches!(tc.tool_call, ToolCallState::Completed(_))))
        })
    })
    .await?;
    drop(c);
    daemon.kill9().await?;

    let daemon = Daemon::start_in(home.path(), options(root.path())).await?;
    let mut c = TestClient::connect(&daemon.url, "b").await?;
    c.subscribe(&session).await?;
    c.subscribe(&chat).await?;
    assert_eq!(c.folder_of(&session)?, worktree, "the session resumes in its worktree");
    let turns = c.mirror.chat(&chat).map(|s| s.turns.clone()).unwrap_or_default();
    ensure!(turns.len() == 2 && turns[1].id == running && turns[1].state == TurnState::Error, "{turns:?}");
    assert_eq!(turn_text(&c.turn(&chat, "where").await?), format!("folder {}", worktree.display()));
    assert_eq!(read(&worktree.join("kept.txt")), "before\n");
    assert_eq!(read(&worktree.join("during.txt")), "during\n");
    // Git keeps exactly the base and the worktree, and no lock.
    let listed = git(&repo.path, &["worktree", "list", "--porcelain"]);
    assert_eq!(listed.matches("worktree ").count(), 2, "{listed}");
    assert_eq!(git(&repo.path, &["worktree", "prune", "--dry-run", "--verbose"]), "");
    let mut locks = Vec::new();
    find_locks(&repo.path.join(".git"), &mut locks);
    ensure!(locks.is_empty(), "git left locks behind: {locks:?}");
    let branch = changeset_uri(&c, &session, "branch", &[])?;
    c.subscribe(&branch).await?;
    let mut listed = c.mirror.changeset(&branch).map(paths).unwrap_or_default();
    listed.sort();
    assert_eq!(listed, ["during.txt", "kept.txt"]);
    c.check_against_snapshot(&chat).await?;
    c.check_against_snapshot(&session).await?;
    Ok(())
}

fn find_locks(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            find_locks(&path, out);
        } else if path.extension().is_some_and(|e| e == "lock") {
            out.push(path);
        }
    }
}

#[tokio::test]
async fn bad_input_is_refused_with_nothing_made() -> anyhow::Result<()> {
    let repo = repo();
    let root = tempfile::tempdir()?;
    let plain = tempfile::tempdir()?;
    let daemon = Daemon::start_with(options(root.path())).await?;
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let worktrees = |repo: &Path| git(repo, &["worktree", "list", "--porcelain"]).matches("worktree ").count();
    let isolation = json!({ "ask": "never", "isolation": "worktree" });

    let said = refused_create(&c, plain.path(), isolation.clone()).await?;
    ensure!(said.contains("is not in a Git repository"), "{said}");

    std::fs::write(repo.path.join("a.txt"), "dirty\n")?;
    let said = refused_create(&c, &repo.path, isolation.clone()).await?;
    ensure!(said.contains("has uncommitted changes (a.txt)"), "{said}");
    git(&repo.path, &["checkout", "--", "a.txt"]);

    git(&repo.path, &["branch", "taken"]);
    let said = refused_create(&c, &repo.path, json!({ "isolation": "worktree", "branch": "taken" })).await?;
    ensure!(said.contains("A branch called taken exists already"), "{said}");

    let outside = json!({ "isolation": "worktree", "worktreeIncludeFiles": ["../secret.env"] });
    let said = refused_create(&c, &repo.path, outside).await?;
    ensure!(said.contains("outside the folder the session works in"), "{said}");

    // Nothing was made: no worktree, no branch, nothing under the root.
    assert_eq!(worktrees(&repo.path), 1);
    let branches = git(&repo.path, &["branch", "--format=%(refname:short)"]);
    assert_eq!(branches.lines().collect::<Vec<_>>(), ["main", "taken"]);
    let made: Vec<_> =
        std::fs::read_dir(root.path()).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    ensure!(made.iter().all(|n| n == ".scratch"), "{made:?}");

    // An operation's target outside the session's folders, and one it does not offer.
    let (session, _chat) = isolated(&mut c, &repo.path).await?;
    let branch = changeset_uri(&c, &session, "branch", &[])?;
    let (code, said) =
        invoke(&c, &branch, "merge", Some(json!({ "kind": "resource", "resource": "file:///etc/passwd" })))
            .await
            .err()
            .context("refused")?;
    ensure!(code == -32602 && said.contains("is outside the folders this session works in"), "{said}");
    let (_, said) = invoke(&c, &branch, "rebase", None).await.err().context("refused")?;
    ensure!(said.contains("offers merge, commit, discard, not rebase"), "{said}");
    let (_, said) = invoke(&c, "ahp-changeset:/session/nobody/branch", "merge", None).await.err().context("refused")?;
    ensure!(said.contains("has no worktree"), "{said}");
    // The connection lives on.
    c.request("ping", json!({})).await?;
    assert_eq!(worktrees(&repo.path), 2, "the one isolated session's worktree, and the base");
    Ok(())
}

/// Each session's `branch` changeset lists `path` alone, its patch holding that session's line;
/// the sessions, their branches and `chats` all hold against fresh snapshots.
async fn branches_show(
    c: &mut TestClient,
    path: &str,
    written: &[(&String, &str)],
    chats: [&String; 2],
) -> anyhow::Result<()> {
    for (session, line) in written {
        let branch = changeset_uri(c, session, "branch", &[])?;
        c.subscribe(&branch).await?;
        let state = c.mirror.changeset(&branch).cloned().context("branch")?;
        ensure!(paths(&state) == [path] && patch_of(&state, path).contains(line), "{state:?}");
        c.check_against_snapshot(&branch).await?;
        c.check_against_snapshot(session).await?;
    }
    for chat in chats {
        c.check_against_snapshot(chat).await?;
    }
    Ok(())
}

#[tokio::test]
async fn two_isolated_claude_sessions_write_the_same_file_apart() -> anyhow::Result<()> {
    let mock = tests::mocks::anthropic::MockAnthropic::start().await?;
    let repo = repo();
    let root = tempfile::tempdir()?;
    let options = DaemonOptions::with_config(json!({
        "agents": { "claude": tests::installed::claude_entry(&mock) },
        "worktreesRoot": root.path(),
    }));
    let daemon = Daemon::start_with(options).await?;
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let config = json!({ "isolation": "worktree", "permissionMode": "acceptEdits" });
    let (s1, c1) = create(&mut c, "claude", &repo.path, config.clone()).await?;
    let (s2, c2) = create(&mut c, "claude", &repo.path, config).await?;
    let (w1, w2) = (c.folder_of(&s1)?, c.folder_of(&s2)?);
    ensure!(w1 != w2 && w1.starts_with(root.path()) && w2.starts_with(root.path()), "{w1:?} {w2:?}");
    // Both write the same file, each what it was told, through Claude's Write tool.
    let write = |folder: &Path, text: &str| {
        let args = json!({ "file_path": folder.join("notes.md"), "content": text });
        format!("write it down TOOL:Write ARGS:{args}")
    };
    let t1 = c.send(&c1, &write(&w1, "from the first claude")).await?;
    let t2 = c.send(&c2, &write(&w2, "from the second claude")).await?;
    for (chat, turn) in [(&c1, &t1), (&c2, &t2)] {
        let turn = c.finished(chat, turn).await?;
        ensure!(turn.state == TurnState::Complete, "{turn:?}");
        ensure!(tool_results(&turn).iter().any(|(name, ok, _)| name == "Write" && *ok), "{:?}", tool_results(&turn));
    }
    assert_eq!(read(&w1.join("notes.md")), "from the first claude");
    assert_eq!(read(&w2.join("notes.md")), "from the second claude");
    ensure!(!repo.path.join("notes.md").exists(), "the base checkout is untouched");
    assert_eq!(git(&repo.path, &["status", "--porcelain"]), "");
    // Each branch shows its own version.
    let written = [(&s1, "+from the first claude"), (&s2, "+from the second claude")];
    branches_show(&mut c, "notes.md", &written, [&c1, &c2]).await
}

#[tokio::test]
async fn a_providers_sessions_start_in_a_worktree_by_default() -> anyhow::Result<()> {
    let repo = repo();
    let root = tempfile::tempdir()?;
    let mut options = options(root.path());
    if let Some(config) = options.config.as_mut() {
        config["isolationProviders"] = json!(["notes"]);
    }
    let daemon = Daemon::start_with(options).await?;
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = create(&mut c, "notes", &repo.path, json!({ "ask": "never" })).await?;
    let folder = c.folder_of(&session)?;
    ensure!(folder.starts_with(root.path()), "{folder:?}");
    let config = c.mirror.session(&session).and_then(|s| s.config.clone()).context("config")?;
    assert_eq!(config.values["isolation"], "worktree");
    let property = &config.schema.properties["isolation"];
    assert_eq!(property.default, Some(json!("worktree")));
    assert_eq!(property.session_mutable, Some(false), "fixed once the session is made");
    // A session that names folder works in the folder itself.
    let (plain, _) = create(&mut c, "notes", &repo.path, json!({ "isolation": "folder" })).await?;
    assert_eq!(c.folder_of(&plain)?, repo.path);
    // The host's own settings are not the agent's: it was started without them.
    assert_eq!(turn_text(&c.turn(&chat, "where").await?), format!("folder {}", folder.display()));
    c.check_against_snapshot(&session).await?;
    Ok(())
}

#[tokio::test]
async fn pi_and_an_acp_agent_run_in_their_worktrees() -> anyhow::Result<()> {
    let openai = tests::mocks::openai::MockOpenAi::start().await?;
    let pi_dir = tempfile::Builder::new().prefix("ahpd-pi-agent-").tempdir()?;
    std::fs::write(pi_dir.path().join("models.json"), openai.pi_models_json("mock").to_string())?;
    let settings = json!({ "defaultProvider": "mock", "defaultModel": "mock-model", "quietStartup": true });
    std::fs::write(pi_dir.path().join("settings.json"), settings.to_string())?;
    let scripted = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent-acp/tests/fixtures/fake_acp_agent.py");
    let repo = repo();
    let root = tempfile::tempdir()?;
    let options = DaemonOptions::with_config(json!({
        "agents": {
            "pi": { "kind": "pi", "options": { "command": tests::installed::pi_bin(), "agentDir": pi_dir.path() } },
            "scripted": { "kind": "acp", "options": { "command": "python3", "args": [scripted] } },
        },
        "worktreesRoot": root.path(),
    }));
    let daemon = Daemon::start_with(options).await?;
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let isolation = json!({ "isolation": "worktree" });
    let (pi, pi_chat) = create(&mut c, "pi", &repo.path, isolation.clone()).await?;
    let (acp, acp_chat) = create(&mut c, "scripted", &repo.path, isolation).await?;
    let (pi_folder, acp_folder) = (c.folder_of(&pi)?, c.folder_of(&acp)?);
    ensure!(pi_folder.starts_with(root.path()) && acp_folder.starts_with(root.path()), "{pi_folder:?} {acp_folder:?}");

    // Each writes a file by a path relative to where its program runs: it lands in its worktree.
    let turn = c.turn(&pi_chat, "[[bash echo from pi > a.txt]]").await?;
    ensure!(turn.state == TurnState::Complete, "{turn:?}");
    let turn = c.turn(&acp_chat, "write a.txt from acp").await?;
    ensure!(turn_text(&turn) == "wrote a.txt", "{}", turn_text(&turn));
    assert_eq!(read(&pi_folder.join("a.txt")), "from pi\n");
    assert_eq!(read(&acp_folder.join("a.txt")), "from acp");
    assert_eq!(read(&repo.path.join("a.txt")), "one\n", "the base checkout is untouched");
    assert_eq!(git(&repo.path, &["status", "--porcelain"]), "");
    branches_show(&mut c, "a.txt", &[(&pi, "+from pi"), (&acp, "+from acp")], [&pi_chat, &acp_chat]).await
}

#[tokio::test]
async fn the_changes_verb_shows_and_merges_for_a_script() -> anyhow::Result<()> {
    let repo = repo();
    let root = tempfile::tempdir()?;
    let daemon = Daemon::start_with(options(root.path())).await?;
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let (first, first_chat) = isolated(&mut c, &repo.path).await?;
    let (second, second_chat) = isolated(&mut c, &repo.path).await?;
    let (plain, _) = create(&mut c, "notes", &repo.path, json!({ "ask": "never" })).await?;
    c.turn(&first_chat, "edit a.txt from the first").await?;
    c.turn(&second_chat, "edit a.txt from the second").await?;
    let ahpd = |args: Vec<String>| {
        let home = daemon.home.clone();
        async move { tests::daemon::run_ahpd(&home, &args.iter().map(String::as_str).collect::<Vec<_>>()).await }
    };
    let words = |line: &str| line.split_whitespace().map(str::to_owned).collect::<Vec<_>>();

    let shown = ahpd(words(&format!("changes {first}"))).await?;
    ensure!(shown.code == 0, "{}", shown.stderr);
    ensure!(shown.stdout.lines().nth(1) == Some("+1 -1  a.txt"), "{}", shown.stdout);
    let json = ahpd(words(&format!("changes {first} --json"))).await?;
    let state: ChangesetState = serde_json::from_str(&json.stdout).context("the changeset as JSON")?;
    assert_eq!(paths(&state), ["a.txt"]);
    let none = ahpd(words(&format!("changes {plain}"))).await?;
    ensure!(none.code == 0 && none.stdout.ends_with("No changes.\n"), "{}", none.stdout);

    let merged = ahpd(words(&format!("changes {first} --merge"))).await?;
    ensure!(merged.code == 0 && merged.stdout.starts_with("Merged "), "{} {}", merged.stdout, merged.stderr);
    assert_eq!(read(&repo.path.join("a.txt")), "from the first\n");
    let head = git(&repo.path, &["rev-parse", "HEAD"]);
    let refused = ahpd(words(&format!("changes {second} --merge"))).await?;
    ensure!(refused.code == 1 && refused.stderr.contains("would conflict in a.txt"), "{}", refused.stderr);
    assert_eq!(git(&repo.path, &["rev-parse", "HEAD"]), head, "the refused merge changed nothing");
    let nobody = ahpd(words("changes nobody")).await?;
    ensure!(nobody.code == 1 && nobody.stderr.contains("ahp-session:/nobody"), "{}", nobody.stderr);
    c.check_against_snapshot(&first).await?;
    c.check_against_snapshot(&second).await?;
    Ok(())
}

/// Folds the chat's events one at a time until turn `turn_id` has ended, and not one further:
/// what a client has seen at the moment it folds the turn's `chat/turnComplete`.
async fn until_just_ended(c: &mut TestClient, chat: &str, turn_id: &str) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !c.mirror.chat(chat).is_some_and(|s| s.turns.iter().any(|t| t.id == turn_id)) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        ensure!(!left.is_zero(), "turn {turn_id} never ended");
        c.next_event(left).await?;
    }
    Ok(())
}

/// Runs `call` (a workspace change) in `chat`, sends `where` the moment the client folds the
/// turn's completion, and answers the folder that message's turn said it ran in.
async fn send_as_soon_as_it_completes(c: &mut TestClient, chat: &str, call: &str) -> anyhow::Result<String> {
    let before = c.mirror.chat(chat).map_or(0, |s| s.turns.len());
    let turn = c.send(chat, call).await?;
    until_just_ended(c, chat, &turn).await?;
    let seen = c.mirror.chat(chat).context("the chat")?;
    ensure!(seen.active_turn.is_none(), "the client saw no turn running when it sent");
    let (mine, seq) = c.send_message(chat, tests::user_message("where")).await?;
    // Either taken as it came, or queued behind the host's own turn: never refused.
    let echo = c.echo_of(seq).await?;
    if let Some(reason) = &echo.rejection_reason {
        ensure!(reason.ends_with(&format!("your message is queued behind it as {mine}")), "refused: {reason}");
    }
    let ch = chat.to_owned();
    c.until("the message to have run", move |m| {
        m.chat(&ch).is_some_and(|s| {
            s.active_turn.is_none()
                && s.queued_messages.as_ref().is_none_or(Vec::is_empty)
                && s.turns.iter().any(|t| t.message.text == "where")
        })
    })
    .await?;
    let turns = &c.mirror.chat(chat).context("the chat")?.turns[before..];
    let texts: Vec<&str> = turns.iter().map(|t| t.message.text.as_str()).collect();
    ensure!(turns.len() == 3, "the call, the host's continuation, the message: {texts:?}");
    ensure!(turns[0].id == turn && turns[0].state == TurnState::Complete, "{:?}", turns[0]);
    ensure!(turns[1].message.origin.kind == ahp_types::state::MessageKind::Agent, "the continuation: {texts:?}");
    ensure!(turns[2].message.text == "where" && turns[2].state == TurnState::Complete, "{:?}", turns[2]);
    Ok(turn_text(&turns[2]))
}

#[tokio::test]
async fn a_message_sent_as_soon_as_a_workspace_change_completes_runs_after_the_move() -> anyhow::Result<()> {
    let repo = repo();
    let root = tempfile::tempdir()?;
    let daemon = Daemon::start_with(options(root.path())).await?;
    let mut c = TestClient::connect(&daemon.url, "a").await?;

    // set_workspace: the message runs in the session's new worktree.
    let (session, chat) = create(&mut c, "notes", &repo.path, json!({ "ask": "never" })).await?;
    let call = format!(r#"call set_workspace {{"workspaceFolder": "{}", "isolation": true}}"#, repo.path.display());
    let said = send_as_soon_as_it_completes(&mut c, &chat, &call).await?;
    let moved = c.folder_of(&session)?;
    ensure!(moved.starts_with(root.path()), "{moved:?}");
    assert_eq!(said, format!("folder {}", moved.display()));

    // isolate_session: the message runs in the chat's own worktree.
    let (other, _) = create(&mut c, "notes", &repo.path, json!({ "ask": "never" })).await?;
    let second = format!("ahp-chat:/{}", uuid::Uuid::new_v4());
    c.request("createChat", json!({ "channel": other, "chat": second })).await?;
    c.subscribe(&second).await?;
    let said = send_as_soon_as_it_completes(&mut c, &second, "call isolate_session {}").await?;
    let own = c.mirror.chat(&second).and_then(|s| s.working_directories.clone()).context("its own folder")?;
    let own = PathBuf::from(own[0].trim_start_matches("file://"));
    ensure!(own.starts_with(root.path()), "{own:?}");
    assert_eq!(said, format!("folder {}", own.display()));

    // A client's own running turn still refuses a second one, in the same words as before.
    let busy = c.send(&second, "ask busy?").await?;
    c.until_questions(&second, 1).await?;
    let (_, seq) = c.send_message(&second, tests::user_message("too soon")).await?;
    let refused = c.refusal(seq).await?;
    assert_eq!(refused, format!("Turn {busy} is running in this chat; send a steering or queued message instead"));
    for channel in [&session, &chat, &other, &second] {
        c.check_against_snapshot(channel).await?;
    }
    Ok(())
}

/// Every path under `dir` that the machine's other accounts may read, write or enter
/// (`find <dir> -perm /077`).
fn open_to_others(dir: &Path) -> Vec<String> {
    let found = std::process::Command::new("find").arg(dir).args(["-perm", "/077"]).output().expect("find runs");
    String::from_utf8_lossy(&found.stdout).lines().map(str::to_owned).collect()
}

#[tokio::test]
async fn a_worktree_in_the_data_folder_is_its_persons_alone() -> anyhow::Result<()> {
    let repo = repo();
    let home = tempfile::Builder::new().prefix("ahpd-wt-home-").tempdir()?;
    let options = DaemonOptions::with_config(json!({ "agents": { "notes": { "kind": "notes" } } }));
    let daemon = Daemon::start_in(home.path(), options).await?;
    let mut c = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = isolated(&mut c, &repo.path).await?;
    let data = home.path().join("data").join("ahpd");
    let folder = c.folder_of(&session)?;
    ensure!(folder.starts_with(data.join("worktrees")), "the worktree is in the data folder: {folder:?}");
    let turn = c.turn(&chat, "edit a.txt from the worktree").await?;
    ensure!(turn.state == TurnState::Complete, "{turn:?}");
    assert_eq!(read(&folder.join("a.txt")), "from the worktree\n");
    // The turn's changes were counted: the snapshot that counts them (its private index in a
    // scratch folder of the daemon's outside the data folder, where git writes it 0644) ran.
    until_counted(&mut c, &session, 1).await?;

    // The README's promise: the data folder is its person's alone, worktrees and all (they were
    // 0755 with 0644 files, readable by every account on the machine).
    assert_eq!(open_to_others(&data), Vec::<String>::new(), "nothing in {} is open to others", data.display());
    Ok(())
}
