//! `ahpd changes SESSION [--merge|--commit|--discard] [--json] [--diff] [--comment FILE:LINE TEXT]
//! [--comments]`: what a session changed, as its changesets say (`docs/worktrees.md`), getting the
//! work back from a script (the operations a client runs with `invokeChangesetOperation`), and the
//! line comments the agent's `listComments` sees (seed 000's, on the session's annotations
//! channel, as the web window's Changes view writes them), through the official client.

use std::process::ExitCode;

use ahp::SubscriptionEvent;
use ahp_types::state::{Annotation, ChangesetFile, ChangesetState, SnapshotState};
use serde_json::{json, Value};

use super::follow::{action, session_uri};
use super::remote::{self as client, Connection, Target};
use super::say;
use crate::cli::ChangesArgs;

/// Runs `ahpd changes`.
pub async fn run(args: &ChangesArgs) -> ExitCode {
    client::run(&args.client, |target| changes(target, args)).await
}

async fn changes(target: Target, args: &ChangesArgs) -> Result<ExitCode, String> {
    let mut conn = client::connect(&target).await?;
    let answer = act(&mut conn, args).await;
    conn.client.shutdown().await;
    answer
}

async fn act(conn: &mut Connection, args: &ChangesArgs) -> Result<ExitCode, String> {
    let session = session_uri(&args.session);
    if args.comments {
        comments(conn, &session).await?;
        return Ok(ExitCode::SUCCESS);
    }
    let (uri, label) = changeset_of(conn, &session).await?;
    if let Some([place, text]) = args.comment.as_deref() {
        let state = snapshot(conn, &uri).await?;
        say(&comment(conn, &session, &state, place, text).await?);
        return Ok(ExitCode::SUCCESS);
    }
    match args.operation() {
        Some(operation) => say(&invoke(conn, &uri, operation).await?),
        None => {
            let state = snapshot(conn, &uri).await?;
            if args.json {
                say(&serde_json::to_string_pretty(&state).map_err(|e| e.to_string())?);
            } else {
                say(&format!("{label} ({uri})"));
                if state.files.is_empty() {
                    say("No changes.");
                }
                state.files.iter().for_each(|file| say(&line(file)));
                if args.diff {
                    state.files.iter().for_each(|file| say(&diff(file)));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The changeset a person reviews for `session`: its worktree's branch when it has one, else its
/// folder's uncommitted changes. Answers its URI and label.
async fn changeset_of(conn: &Connection, session: &str) -> Result<(String, String), String> {
    let SnapshotState::Session(state) = snapshot_of(conn, session).await? else {
        return Err(format!("{session} is not a session."));
    };
    let listed = state.changesets.unwrap_or_default();
    ["branch", "uncommitted"]
        .iter()
        .find_map(|kind| listed.iter().find(|c| c.change_kind == *kind))
        .map(|c| (c.uri_template.clone(), c.label.clone()))
        .ok_or_else(|| format!("{session} works in no Git folder, so it has no changes to show."))
}

async fn snapshot_of(conn: &Connection, uri: &str) -> Result<SnapshotState, String> {
    let (result, _handle) = conn.client.subscribe(uri.to_owned()).await.map_err(|e| format!("{uri}: {e}"))?;
    result.snapshot.map(|s| s.state).ok_or_else(|| format!("{uri} has no state to show."))
}

async fn snapshot(conn: &Connection, uri: &str) -> Result<ChangesetState, String> {
    match snapshot_of(conn, uri).await? {
        SnapshotState::Changeset(state) => Ok(*state),
        _ => Err(format!("{uri} is not a changeset.")),
    }
}

/// Runs `operation` on the changeset at `uri`; answers what it said, or its refusal's words.
async fn invoke(conn: &Connection, uri: &str, operation: &str) -> Result<String, String> {
    let params = json!({ "channel": uri, "operationId": operation });
    match conn.client.request::<Value, Value>("invokeChangesetOperation", params).await {
        Ok(answer) => Ok(answer["message"].as_str().unwrap_or("Done.").to_owned()),
        Err(ahp::ClientError::Rpc(e)) => Err(e.message),
        Err(e) => Err(format!("invokeChangesetOperation: {e}")),
    }
}

/// `+3 -1  src/main.rs`, or `binary  logo.png`.
fn line(file: &ChangesetFile) -> String {
    let meta = file.meta.as_ref();
    let path = meta.and_then(|m| m.get("ahpd.path")).and_then(Value::as_str).unwrap_or(&file.id);
    if meta.and_then(|m| m.get("ahpd.binary")).and_then(Value::as_bool) == Some(true) {
        return format!("binary  {path}");
    }
    let diff = file.edit.diff.as_ref();
    let (added, removed) = (diff.and_then(|d| d.added).unwrap_or(0), diff.and_then(|d| d.removed).unwrap_or(0));
    format!("+{added} -{removed}  {path}")
}

/// A file's diff as the host gave it (cut with a sentence past its cap), or why there is none.
fn diff(file: &ChangesetFile) -> String {
    let meta = file.meta.as_ref();
    let path = path_of(file);
    match meta.and_then(|m| m.get("ahpd.patch")).and_then(Value::as_str) {
        Some(patch) => format!("--- {path}\n{}", patch.trim_end()),
        None if meta.and_then(|m| m.get("ahpd.binary")).and_then(Value::as_bool) == Some(true) => {
            format!("--- {path}\n(binary: no text to compare)")
        }
        None => format!("--- {path}\n(no diff text: read the file's sides)"),
    }
}

fn path_of(file: &ChangesetFile) -> &str {
    file.meta.as_ref().and_then(|m| m.get("ahpd.path")).and_then(Value::as_str).unwrap_or(&file.id)
}

/// `FILE:LINE` or `FILE:START-END`, lines one-based.
fn place(at: &str) -> Result<(String, i64, i64), String> {
    let bad = || format!("--comment takes FILE:LINE (or FILE:START-END), lines from 1, not {at}");
    let (file, lines) = at.rsplit_once(':').ok_or_else(bad)?;
    let (start, end) = lines.split_once('-').unwrap_or((lines, lines));
    let (start, end): (i64, i64) = (start.parse().map_err(|_| bad())?, end.parse().map_err(|_| bad())?);
    if file.is_empty() || start < 1 || end < start {
        return Err(bad());
    }
    Ok((file.to_owned(), start, end))
}

/// Writes a comment as seed 000's: an annotation on the session's annotations channel whose
/// `_meta['vscode.agentFeedback']` says it is the person's, accepted (the agent sees it at once).
/// Answers once the daemon took it, or its refusal.
async fn comment(
    conn: &mut Connection,
    session: &str,
    state: &ChangesetState,
    at: &str,
    text: &str,
) -> Result<String, String> {
    let (file, start, end) = place(at)?;
    if text.trim().is_empty() {
        return Err("--comment needs the comment's text after FILE:LINE".into());
    }
    let entry = state.files.iter().find(|f| path_of(f) == file).ok_or_else(|| {
        let listed: Vec<&str> = state.files.iter().map(path_of).collect();
        format!(
            "{file} is not a file of this changeset (it has {})",
            if listed.is_empty() { "none".to_owned() } else { listed.join(", ") }
        )
    })?;
    let resource =
        entry.edit.after.as_ref().or(entry.edit.before.as_ref()).map(|s| s.uri.clone()).unwrap_or(entry.id.clone());
    let channel = format!("{session}/annotations");
    snapshot_of(conn, &channel).await?;
    let id = uuid::Uuid::new_v4().to_string();
    let annotation = json!({
        "id": id,
        "origin": { "session": session },
        "resource": resource,
        "range": { "start": { "line": start - 1, "character": 0 }, "end": { "line": end - 1, "character": 0 } },
        "resolved": false,
        "entries": [{ "id": format!("{id}:0"), "text": text, "_meta": { "vscode.agentFeedback": { "author": "user" } } }],
        "_meta": { "vscode.agentFeedback": { "kind": "user", "state": "accepted", "sessionResource": session } },
    });
    let handle = conn
        .client
        .dispatch(channel.clone(), action(json!({ "type": "annotations/set", "annotation": annotation }))?)
        .await
        .map_err(|e| format!("could not write the comment: {e}"))?;
    loop {
        let (on, event) = conn.next().await?;
        let SubscriptionEvent::Action(env) = event else { continue };
        let ours =
            env.origin.as_ref().is_some_and(|o| o.client_id == conn.client_id && o.client_seq == handle.client_seq);
        if on != channel || !ours {
            continue;
        }
        if let Some(why) = env.rejection_reason {
            return Err(format!("The daemon refused the comment: {why}"));
        }
        let lines = if start == end { format!("line {start}") } else { format!("lines {start}-{end}") };
        return Ok(format!("Commented on {file} {lines} ({id}); the agent's listComments sees it."));
    }
}

/// Every comment of the session: where, its state, and each entry with who wrote it.
async fn comments(conn: &Connection, session: &str) -> Result<(), String> {
    let channel = format!("{session}/annotations");
    let SnapshotState::Annotations(state) = snapshot_of(conn, &channel).await? else {
        return Err(format!("{channel} is not an annotations channel."));
    };
    let shown: Vec<&Annotation> = state.annotations.iter().filter(|a| feedback(a).is_some()).collect();
    if shown.is_empty() {
        say("No comments.");
    }
    for a in shown {
        say(&thread(a));
    }
    Ok(())
}

fn feedback(a: &Annotation) -> Option<&Value> {
    a.meta.as_ref().and_then(|m| m.get("vscode.agentFeedback")).filter(|f| f.get("kind").is_some())
}

/// `a.txt:3 [sent] (id)` then `  you: …`, `  agent: …`.
fn thread(a: &Annotation) -> String {
    let slot = feedback(a);
    let state = if a.resolved { "resolved" } else { slot.and_then(|f| f["state"].as_str()).unwrap_or("") };
    let lines = a.range.as_ref().map_or("1".to_owned(), |r| {
        if r.start.line == r.end.line {
            (r.start.line + 1).to_string()
        } else {
            format!("{}-{}", r.start.line + 1, r.end.line + 1)
        }
    });
    let file = a.resource.strip_prefix("file://").unwrap_or(&a.resource);
    let mut out = format!("{file}:{lines} [{state}] ({})", a.id);
    let kind = slot.and_then(|f| f["kind"].as_str()).unwrap_or("user");
    for (i, entry) in a.entries.iter().enumerate() {
        let stamped =
            entry.meta.as_ref().and_then(|m| m.get("vscode.agentFeedback")).and_then(|f| f["author"].as_str());
        let who = stamped.unwrap_or(match (i, kind) {
            (0, "codeReview") => "agent",
            (0, "prReview") => "prReviewer",
            _ => "user",
        });
        let words = match &entry.text {
            ahp_types::common::StringOrMarkdown::Plain(t) => t.as_str(),
            ahp_types::common::StringOrMarkdown::Markdown { markdown } => markdown.as_str(),
        };
        out.push_str(&format!("\n  {}: {words}", if who == "user" { "you" } else { who }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::place;

    #[test]
    fn a_comments_place_is_a_file_and_a_line_or_a_range() {
        assert_eq!(place("src/a.rs:3"), Ok(("src/a.rs".into(), 3, 3)));
        assert_eq!(place("c:/x.txt:2-5"), Ok(("c:/x.txt".into(), 2, 5)));
        for bad in ["a.rs", "a.rs:0", "a.rs:5-2", ":3", "a.rs:x"] {
            assert!(place(bad).is_err(), "{bad}");
        }
    }
}
