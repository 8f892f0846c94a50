//! Agent Merge through the real daemon: the notes agent's model calls the four tools in a chat
//! working in a real Git repository whose `origin` names a GitHub remote, and the test reads what
//! the daemon kept and shows (`ahpd status`).

use std::path::Path;

use ahp_types::state::{ResponsePart, ToolCallState, Turn};
use serde_json::{json, Value};
use tests::git::git;
use tests::{turn_text, Daemon, DaemonOptions, TestClient};

fn notes_config() -> Value {
    json!({ "agents": { "notes": { "kind": "notes" } } })
}

/// A repository on branch `feature` whose `origin` is `owner/repo` on GitHub.
fn repository(dir: &Path) {
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["commit", "-q", "--allow-empty", "-m", "first"]);
    git(dir, &["checkout", "-q", "-b", "feature"]);
    git(dir, &["remote", "add", "origin", "https://github.com/owner/repo.git"]);
}

/// What a tool call in a finished turn answered: whether it succeeded, and its text.
fn tool_said(turn: &Turn, name: &str) -> (bool, String) {
    let success = turn.response_parts.iter().find_map(|p| match p {
        ResponsePart::ToolCall(tc) => match &tc.tool_call {
            ToolCallState::Completed(c) => Some(c.success),
            _ => None,
        },
        _ => None,
    });
    let text = turn_text(turn);
    let text = text.split_once(&format!("{name} said: ")).map(|(_, t)| t.to_owned()).unwrap_or(text);
    (success.unwrap_or(false), text)
}

/// Has the notes agent's model call `name` with `args` in a turn of `chat`.
async fn call_in_turn(client: &mut TestClient, chat: &str, name: &str, args: Value) -> anyhow::Result<(bool, String)> {
    let turn = client.turn(chat, &format!("call {name} {args}")).await?;
    Ok(tool_said(&turn, name))
}

async fn configure(client: &mut TestClient, chat: &str, args: Value) -> anyhow::Result<Value> {
    let (success, text) = call_in_turn(client, chat, "setAgentMergeEnabled", args).await?;
    anyhow::ensure!(success, "setAgentMergeEnabled refused: {text}");
    Ok(serde_json::from_str(&text)?)
}

#[tokio::test]
async fn enabled_agent_merge_is_kept_for_the_folder_across_a_kill_and_shown_by_status() -> anyhow::Result<()> {
    let home = tempfile::Builder::new().prefix("ahpd-agent-merge-").tempdir()?;
    let repo = tempfile::tempdir()?;
    repository(repo.path());
    let folder = repo.path().canonicalize()?;
    let mut daemon = Daemon::start_in(home.path(), DaemonOptions::with_config(notes_config())).await?;
    let mut a = TestClient::connect(&daemon.url, "a").await?;
    let (session, chat) = a.create_session_in("notes", &folder).await?;
    let answer =
        configure(&mut a, &chat, json!({ "enabled": true, "fixCI": false, "mergePullRequest": "always" })).await?;
    assert_eq!(answer["enabled"], true);
    assert_eq!(answer["target"]["branchName"], "feature");
    assert_eq!(answer["configuration"]["mergePullRequest"], "always", "the answer says when it merges");

    let status = daemon.status().await?;
    let shown = &status["agentMerge"];
    assert_eq!(
        shown,
        &json!([{ "session": session, "folder": folder, "branch": "feature", "merges": "always",
                  "watches": ["reviews", "conflicts"], "monitoring": "waitingForPullRequest" }]),
        "{status}"
    );

    // Killed with SIGKILL: what the tool said is kept was kept.
    daemon.kill9().await?;
    let daemon = Daemon::start_in(home.path(), DaemonOptions::with_config(notes_config())).await?;
    let status = daemon.status().await?;
    assert_eq!(&status["agentMerge"], shown, "still in force after the restart, before any client came");
    let words = tests::daemon::run_ahpd(&daemon.home, &["status"]).await?;
    assert!(
        words.stdout.contains(&format!(
            "agent merge: {} on feature (watches reviews, conflicts; merges always; waitingForPullRequest), session {session}",
            folder.display()
        )),
        "{}",
        words.stdout
    );

    let mut b = TestClient::connect(&daemon.url, "b").await?;
    b.subscribe(&session).await?;
    b.subscribe(&chat).await?;
    // Calling again with only `enabled` keeps the options named before.
    let again = configure(&mut b, &chat, json!({ "enabled": true })).await?;
    assert_eq!(again["configuration"]["fixCI"], false);
    assert_eq!(again["configuration"]["mergePullRequest"], "always");
    assert_eq!(again["target"]["branchName"], "feature");

    // Turned off, it is no longer shown; its options stay for the next time.
    let off = configure(&mut b, &chat, json!({ "enabled": false })).await?;
    assert_eq!(off["monitoring"], "disabled");
    assert_eq!(daemon.status().await?["agentMerge"], json!([]));
    Ok(())
}
