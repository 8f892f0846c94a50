//! `ahpd changes SESSION [--merge|--commit|--discard] [--json]`: what a session changed, as its
//! changesets say (`docs/worktrees.md`), and getting the work back from a script: the operations
//! a client runs with `invokeChangesetOperation`, through the official client.

use std::process::ExitCode;

use ahp_types::state::{ChangesetFile, ChangesetState, SnapshotState};
use serde_json::{json, Value};

use super::follow::session_uri;
use super::remote::{self as client, Connection, Target};
use super::say;
use crate::cli::ChangesArgs;

/// Runs `ahpd changes`.
pub async fn run(args: &ChangesArgs) -> ExitCode {
    client::run(&args.client, |target| changes(target, args)).await
}

async fn changes(target: Target, args: &ChangesArgs) -> Result<ExitCode, String> {
    let conn = client::connect(&target).await?;
    let answer = act(&conn, args).await;
    conn.client.shutdown().await;
    answer
}

async fn act(conn: &Connection, args: &ChangesArgs) -> Result<ExitCode, String> {
    let session = session_uri(&args.session);
    let (uri, label) = changeset_of(conn, &session).await?;
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
