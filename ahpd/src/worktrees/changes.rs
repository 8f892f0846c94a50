//! Changesets: what a session and its chats advertise, what each changeset URI names, computing
//! its state from git, and keeping the watched ones live.
//!
//! URIs (minted here, expanded from the templates the catalogue entries carry):
//!
//! - `ahp-changeset:/session/<id>/branch`: an isolated session's worktree (committed or not)
//!   against what its base branch holds of it (changeKind `branch`);
//! - `ahp-changeset:/session/<id>/uncommitted`: the session's folder against its `HEAD`
//!   (`uncommitted`);
//! - `ahp-changeset:/chat/<id>/branch`: a chat's own worktree (`isolate_session`);
//! - `ahp-changeset:/chat/<id>/turn/{turnId}`: what one turn changed (`turn`);
//! - `ahp-changeset:/chat/<id>/compare/{originalTurnId}/{modifiedTurnId}`: the files after one
//!   turn against after another (`compare-turns`).
//!
//! A file's sides name its blobs as `ahpd-blob:/<session id>/<sha>`, read with `resourceRead`;
//! its `_meta` carries the patch (`ahpd.patch`, cut at [`PATCH_CAP`] with a sentence saying so),
//! or `ahpd.binary: true` for a file that has none.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use ahp_types::actions::{
    ChangesetFileRemovedAction, ChangesetFileSetAction, ChangesetOperationsChangedAction, ChangesetStatusChangedAction,
    StateAction,
};
use ahp_types::commands::{ContentEncoding, ResourceReadResult};
use ahp_types::common::JsonObject;
use ahp_types::state::{
    ChangesSummary, Changeset, ChangesetCapabilities, ChangesetFile, ChangesetOperation, ChangesetState,
    ChangesetStatus, ContentRef, ErrorInfo, FileEdit, FileEditDiffStats, FileEditSide,
};
use base64::Engine;
use serde_json::Value;

use super::git::{self, FileDiff};
use super::turns::{in_git, side, top_of};
use super::{operations, Worktrees};
use crate::host::facade::{file_uri, uri_id, AhpError, CHANGESET_SCHEME};
use crate::host::{Core, Host};
use crate::store::records::WorktreeState;
use crate::store::WorktreeRecord;

/// The most of one file's patch a changeset carries.
pub const PATCH_CAP: usize = 64 * 1024;
/// The largest blob `resourceRead` sends.
pub const READ_CAP: usize = 8 * 1024 * 1024;
/// The scheme of a changeset file's content.
pub const BLOB_SCHEME: &str = "ahpd-blob:/";
/// Git's empty tree, the `before` of a folder with no commit.
const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// What a changeset URI names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// A worktree against its base (`owner`: the session or chat it was cut for).
    Branch { owner: String },
    /// A session's folder against its `HEAD`.
    Uncommitted { session: String },
    /// What one turn of a chat changed.
    Turn { chat: String, turn_id: String },
    /// The files after one turn against after another.
    Compare { chat: String, original: String, modified: String },
}

fn decode(part: &str) -> String {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%').then(|| part.get(i + 1..i + 3)).flatten();
        match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What a changeset URI names, when it is one of this feature's.
pub fn parse(uri: &str) -> Option<Scope> {
    let rest = uri.strip_prefix(CHANGESET_SCHEME)?;
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        ["session", id, "branch"] if !id.is_empty() => Some(Scope::Branch { owner: format!("ahp-session:/{id}") }),
        ["session", id, "uncommitted"] if !id.is_empty() => {
            Some(Scope::Uncommitted { session: format!("ahp-session:/{id}") })
        }
        ["chat", id, "branch"] if !id.is_empty() => Some(Scope::Branch { owner: format!("ahp-chat:/{id}") }),
        ["chat", id, "turn", turn] if !id.is_empty() && !turn.is_empty() => {
            Some(Scope::Turn { chat: format!("ahp-chat:/{id}"), turn_id: decode(turn) })
        }
        ["chat", id, "compare", a, b] if !id.is_empty() && !a.is_empty() && !b.is_empty() => {
            Some(Scope::Compare { chat: format!("ahp-chat:/{id}"), original: decode(a), modified: decode(b) })
        }
        _ => None,
    }
}

/// The session a scope belongs to (its chat's, or its worktree's).
fn session_of(worktrees: &Worktrees, core: &Core, scope: &Scope) -> Option<String> {
    match scope {
        Scope::Branch { owner } => worktrees.record(owner).map(|r| r.session),
        Scope::Uncommitted { session } => Some(session.clone()),
        Scope::Turn { chat, .. } | Scope::Compare { chat, .. } => core.chat(chat).map(|m| m.session.clone()),
    }
}

/// A worktree's record, while its session works in it (or its folder was let go).
fn usable(record: WorktreeRecord) -> Option<WorktreeRecord> {
    (record.state != WorktreeState::Creating).then_some(record)
}

fn entry(label: String, uri_template: String, change_kind: &str, description: String) -> Changeset {
    Changeset {
        label,
        uri_template,
        description: Some(description),
        change_kind: change_kind.to_owned(),
        capabilities: Some(ChangesetCapabilities { review: Some(JsonObject::new()) }),
    }
}

fn branch_entry(record: &WorktreeRecord, uri_template: String) -> Changeset {
    let base = record.base_branch.as_deref().unwrap_or("the commit it was cut from");
    entry(
        format!("{} (against {base})", record.branch),
        uri_template,
        "branch",
        format!(
            "Everything changed in the worktree {} on branch {}, committed or not, against {base}. Merge it back, commit it, or discard it.",
            record.path, record.branch
        ),
    )
}

/// The changesets a session advertises: its worktree's branch, and its folder's uncommitted
/// changes when the folder is in Git.
pub fn session_catalogue(worktrees: &Worktrees, core: &Core, session: &str) -> Option<Vec<Changeset>> {
    let id = uri_id(session);
    let mut list = Vec::new();
    if let Some(record) = worktrees.record(session).and_then(usable) {
        list.push(branch_entry(&record, format!("{CHANGESET_SCHEME}session/{id}/branch")));
    }
    let folder = core.session(session).and_then(|m| m.working_directory.clone());
    if folder.as_deref().is_some_and(in_git) {
        list.push(entry(
            "Uncommitted changes".into(),
            format!("{CHANGESET_SCHEME}session/{id}/uncommitted"),
            "uncommitted",
            "The session's folder against its last commit. Commit them from here.".into(),
        ));
    }
    (!list.is_empty()).then_some(list)
}

/// The changesets a chat advertises: its own worktree's branch, and, in a Git folder, what each
/// turn changed and the files after one turn against after another.
pub fn chat_catalogue(worktrees: &Worktrees, core: &Core, chat: &str) -> Option<Vec<Changeset>> {
    let id = uri_id(chat);
    let mut list = Vec::new();
    if let Some(record) = worktrees.record(chat).and_then(usable) {
        list.push(branch_entry(&record, format!("{CHANGESET_SCHEME}chat/{id}/branch")));
    }
    if core.chat_folder(chat).as_deref().is_some_and(in_git) {
        list.push(entry(
            "Changes of a turn".into(),
            format!("{CHANGESET_SCHEME}chat/{id}/turn/{{turnId}}"),
            "turn",
            "The files one turn changed, against the folder just before it.".into(),
        ));
        list.push(entry(
            "Changes between two turns".into(),
            format!("{CHANGESET_SCHEME}chat/{id}/compare/{{originalTurnId}}/{{modifiedTurnId}}"),
            "compare-turns",
            "The files after one turn against the files after another.".into(),
        ));
    }
    (!list.is_empty()).then_some(list)
}

/// A blob's URI.
pub fn blob_uri(session: &str, sha: &str) -> String {
    format!("{BLOB_SCHEME}{}/{sha}", uri_id(session))
}

/// The session and blob a blob URI names.
pub fn parse_blob_uri(uri: &str) -> Option<(String, String)> {
    let (id, sha) = uri.strip_prefix(BLOB_SCHEME)?.split_once('/')?;
    let plain = !id.is_empty() && !id.contains('/') && sha.len() >= 7 && sha.chars().all(|c| c.is_ascii_hexdigit());
    plain.then(|| (format!("ahp-session:/{id}"), sha.to_owned()))
}

/// A changeset's state and what it adds up to.
pub struct Computed {
    /// The state.
    pub state: ChangesetState,
    /// Its files' counts.
    pub counts: ChangesSummary,
}

/// What a set of files adds up to.
pub fn counts(files: &[FileDiff]) -> ChangesSummary {
    let (mut additions, mut deletions) = (0, 0);
    for file in files {
        if let Some((a, r)) = file.lines {
            additions += a;
            deletions += r;
        }
    }
    ChangesSummary {
        additions: Some(additions),
        deletions: Some(deletions),
        files: Some(i64::try_from(files.len()).unwrap_or(i64::MAX)),
    }
}

fn ready(files: Vec<ChangesetFile>, operations: Option<Vec<ChangesetOperation>>) -> ChangesetState {
    ChangesetState { status: ChangesetStatus::Ready, error: None, files, operations }
}

fn not_kept(message: String) -> ChangesetState {
    ChangesetState {
        status: ChangesetStatus::Error,
        error: Some(ErrorInfo { error_type: "notKept".into(), message, stack: None, meta: None }),
        files: Vec::new(),
        operations: None,
    }
}

fn failed(e: git::GitError) -> AhpError {
    AhpError::internal(format!("Git could not work out the changes: {e}"))
}

/// One file of a changeset: its sides as blob URIs, its line counts, its patch (cut at
/// [`PATCH_CAP`]) or, for a binary file, its name alone.
fn file_entry(session: &str, top: &Path, diff: FileDiff, reviewed: &HashMap<String, String>) -> ChangesetFile {
    let uri = file_uri(&top.join(&diff.path));
    let binary = diff.lines.is_none();
    let content_type = if binary { "application/octet-stream" } else { "text/plain" };
    let side = |sha: &Option<String>| {
        sha.as_ref().map(|sha| FileEditSide {
            uri: uri.clone(),
            content: ContentRef {
                uri: blob_uri(session, sha),
                size_hint: None,
                content_type: Some(content_type.into()),
                nonce: None,
            },
        })
    };
    let (before, after) = (side(&diff.before), side(&diff.after));
    let mut meta = JsonObject::new();
    meta.insert("ahpd.path".into(), Value::from(diff.path.clone()));
    if binary {
        meta.insert("ahpd.binary".into(), Value::from(true));
    } else if let Some(patch) = diff.patch {
        meta.insert("ahpd.patch".into(), Value::from(cap_patch(patch)));
    }
    let seen = reviewed_at(&after);
    ChangesetFile {
        reviewed: reviewed.get(&uri).filter(|at| **at == seen).map(|_| true),
        id: uri,
        edit: FileEdit {
            before,
            after,
            diff: diff.lines.map(|(added, removed)| FileEditDiffStats { added: Some(added), removed: Some(removed) }),
        },
        meta: Some(meta),
    }
}

/// What a file was reviewed at: its content after, or its deletion.
fn reviewed_at(after: &Option<FileEditSide>) -> String {
    after.as_ref().map(|s| s.content.uri.clone()).unwrap_or_else(|| "deleted".into())
}

/// A patch cut at [`PATCH_CAP`], with a sentence saying so.
pub fn cap_patch(patch: String) -> String {
    if patch.len() <= PATCH_CAP {
        return patch;
    }
    let mut end = PATCH_CAP;
    while !patch.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[ahpd: this diff is cut here: {end} of its {} bytes are shown; read the file's sides for the rest]\n",
        &patch[..end],
        patch.len()
    )
}

/// The files of a diff as a changeset's, with the reviews kept for it.
fn files_of(worktrees: &Worktrees, uri: &str, session: &str, top: &Path, diff: Vec<FileDiff>) -> Vec<ChangesetFile> {
    let reviewed = worktrees.state().reviews.get(uri).cloned().unwrap_or_default();
    diff.into_iter().map(|d| file_entry(session, top, d, &reviewed)).collect()
}

/// Computes the changeset `uri` names.
pub async fn compute(worktrees: &Worktrees, host: &Host, uri: &str) -> Result<Computed, AhpError> {
    let scope = parse(uri).ok_or_else(|| AhpError::not_found(format!("There is no changeset {uri}")))?;
    match scope {
        Scope::Branch { owner } => branch(worktrees, host, uri, &owner).await,
        Scope::Uncommitted { session } => uncommitted(worktrees, host, uri, &session).await,
        Scope::Turn { chat, turn_id } => turn(worktrees, host, uri, &chat, &turn_id).await,
        Scope::Compare { chat, original, modified } => compare(worktrees, host, uri, &chat, &original, &modified).await,
    }
}

/// What a worktree's branch holds that its base does not, and where its tip is: a snapshot of
/// the worktree's files when it has its folder, else the branch's commit.
pub struct BranchView {
    /// The files, against the base.
    pub files: Vec<FileDiff>,
    /// The commit the files are taken from.
    pub tip: String,
    /// The tip is a snapshot of uncommitted changes (a commit would keep them).
    pub uncommitted: bool,
    /// Where the base and the branch part.
    pub base: String,
}

/// Works out a worktree's [`BranchView`].
pub async fn branch_view(worktrees: &Worktrees, record: &WorktreeRecord) -> Result<BranchView, git::GitError> {
    let repo = Path::new(&record.repo);
    let path = Path::new(&record.path);
    let (tip, uncommitted) = if path.exists() {
        let snap = git::snapshot(path, worktrees.scratch(), "ahpd: a worktree's files").await?;
        let head = git::commit_of(path, "HEAD").await?.unwrap_or_default();
        let head_tree =
            git::git(path).args(["rev-parse", &format!("{head}^{{tree}}")]).text().await.unwrap_or_default();
        if head_tree == snap.tree {
            (head, false)
        } else {
            (snap.commit, true)
        }
    } else {
        let tip = git::commit_of(repo, &format!("refs/heads/{}", record.branch)).await?;
        (tip.unwrap_or_else(|| record.base_commit.clone()), false)
    };
    let base_ref = record.base_branch.as_deref().map(|b| format!("refs/heads/{b}"));
    let base = match base_ref {
        Some(base_ref) => git::merge_base(repo, &base_ref, &tip).await?.unwrap_or_else(|| record.base_commit.clone()),
        None => record.base_commit.clone(),
    };
    let files = git::diff(repo, &base, &tip).await?;
    Ok(BranchView { files, tip, uncommitted, base })
}

async fn branch(worktrees: &Worktrees, host: &Host, uri: &str, owner: &str) -> Result<Computed, AhpError> {
    let record = worktrees
        .record(owner)
        .and_then(usable)
        .ok_or_else(|| AhpError::not_found(format!("{owner} has no worktree, so there is no changeset {uri}")))?;
    let _ = host;
    let view = branch_view(worktrees, &record).await.map_err(failed)?;
    let counts = counts(&view.files);
    let files = files_of(worktrees, uri, &record.session, Path::new(&record.path), view.files);
    let operations = operations::for_branch(&record, view.uncommitted);
    Ok(Computed { state: ready(files, Some(operations)), counts })
}

async fn uncommitted(worktrees: &Worktrees, host: &Host, uri: &str, session: &str) -> Result<Computed, AhpError> {
    let folder = {
        let mut core = host.lock();
        if !host.ensure_loaded(&mut core, session) {
            return Err(AhpError::not_found(format!("There is no session {session}, so no changeset {uri}")));
        }
        core.session(session).and_then(|m| m.working_directory.clone())
    };
    let top = top_of(folder)
        .await
        .ok_or_else(|| AhpError::not_found(format!("{session} does not work in a Git folder, so there is no {uri}")))?;
    let snap = git::snapshot(&top, worktrees.scratch(), "ahpd: uncommitted files").await.map_err(failed)?;
    let head = git::commit_of(&top, "HEAD").await.map_err(failed)?;
    let files = git::diff(&top, head.as_deref().unwrap_or(EMPTY_TREE), &snap.commit).await.map_err(failed)?;
    let counts = counts(&files);
    let any = !files.is_empty();
    let files = files_of(worktrees, uri, session, &top, files);
    Ok(Computed { state: ready(files, Some(operations::for_uncommitted(any))), counts })
}

/// A chat's session and the top of the work tree it works in, with the chat loaded.
async fn chat_place(host: &Host, chat: &str, uri: &str) -> Result<(String, Option<PathBuf>, bool), AhpError> {
    let (session, folder, known) = {
        let mut core = host.lock();
        if !host.ensure_loaded(&mut core, chat) {
            return Err(AhpError::not_found(format!("There is no chat {chat}, so no changeset {uri}")));
        }
        let session = core.chat(chat).map(|m| m.session.clone()).unwrap_or_default();
        (session, core.chat_folder(chat), core.chat_state(chat).is_some())
    };
    Ok((session, top_of(folder).await, known))
}

/// True when `turn_id` is a turn of `chat` (ended or running); with `running` its turn runs.
fn turn_known(host: &Host, chat: &str, turn_id: &str) -> (bool, bool) {
    let core = host.lock();
    let Some(state) = core.chat_state(chat) else { return (false, false) };
    let running = state.active_turn.as_ref().is_some_and(|t| t.id == turn_id);
    (running || state.turns.iter().any(|t| t.id == turn_id), running)
}

async fn turn(worktrees: &Worktrees, host: &Host, uri: &str, chat: &str, turn_id: &str) -> Result<Computed, AhpError> {
    let (session, top, _) = chat_place(host, chat, uri).await?;
    let (known, _running) = turn_known(host, chat, turn_id);
    if !known {
        return Err(AhpError::not_found(format!("{chat} has no turn {turn_id}, so there is no changeset {uri}")));
    }
    let empty = ChangesSummary { additions: Some(0), deletions: Some(0), files: Some(0) };
    let Some(top) = top else {
        let why = "This chat does not work in a Git folder, so ahpd keeps no record of what its turns changed.";
        return Ok(Computed { state: not_kept(why.into()), counts: empty });
    };
    let Some(before) = side(&top, &session, chat, turn_id, "before").await else {
        let why = format!("ahpd kept no snapshot of the files before turn {turn_id} (it began before its folder was in Git, or before ahpd kept them).");
        return Ok(Computed { state: not_kept(why), counts: empty });
    };
    // A turn still running (or whose snapshot after is on its way) is measured against now.
    let after = match side(&top, &session, chat, turn_id, "after").await {
        Some(after) => after,
        None => git::snapshot(&top, worktrees.scratch(), "ahpd: a turn's files").await.map_err(failed)?.commit,
    };
    let files = git::diff(&top, &before, &after).await.map_err(failed)?;
    let counts = counts(&files);
    let files = files_of(worktrees, uri, &session, &top, files);
    Ok(Computed { state: ready(files, None), counts })
}

async fn compare(
    worktrees: &Worktrees,
    host: &Host,
    uri: &str,
    chat: &str,
    original: &str,
    modified: &str,
) -> Result<Computed, AhpError> {
    let (session, top, _) = chat_place(host, chat, uri).await?;
    for turn_id in [original, modified] {
        if !turn_known(host, chat, turn_id).0 {
            return Err(AhpError::not_found(format!("{chat} has no turn {turn_id}, so there is no changeset {uri}")));
        }
    }
    let empty = ChangesSummary::default();
    let Some(top) = top else {
        let why = "This chat does not work in a Git folder, so ahpd keeps no record of what its turns changed.";
        return Ok(Computed { state: not_kept(why.into()), counts: empty });
    };
    let (Some(a), Some(b)) =
        (side(&top, &session, chat, original, "after").await, side(&top, &session, chat, modified, "after").await)
    else {
        let why = "ahpd kept no snapshot of the files after one of these turns (it is still running, or it ran before ahpd kept them).".to_owned();
        return Ok(Computed { state: not_kept(why), counts: empty });
    };
    let files = git::diff(&top, &a, &b).await.map_err(failed)?;
    let counts = counts(&files);
    let files = files_of(worktrees, uri, &session, &top, files);
    Ok(Computed { state: ready(files, None), counts })
}

/// A changeset's state, for a client's first subscribe.
pub async fn open(worktrees: &Worktrees, host: &Host, uri: &str) -> Result<ChangesetState, AhpError> {
    Ok(compute(worktrees, host, uri).await?.state)
}

/// Says to a watched changeset's subscribers how its state moved to `new`: the files that
/// changed, those that went, its operations and status.
pub fn apply(core: &mut Core, uri: &str, new: ChangesetState) {
    let Some(old) = core.changeset_state(uri).cloned() else { return };
    let mut actions = Vec::new();
    if old.status != new.status || old.error != new.error {
        actions.push(StateAction::ChangesetStatusChanged(ChangesetStatusChangedAction {
            status: new.status.clone(),
            error: new.error.clone(),
        }));
    }
    for file in &new.files {
        if !old.files.contains(file) {
            actions.push(StateAction::ChangesetFileSet(ChangesetFileSetAction { file: file.clone() }));
        }
    }
    for file in &old.files {
        if !new.files.iter().any(|f| f.id == file.id) {
            actions.push(StateAction::ChangesetFileRemoved(ChangesetFileRemovedAction { file_id: file.id.clone() }));
        }
    }
    if old.operations != new.operations {
        actions.push(StateAction::ChangesetOperationsChanged(ChangesetOperationsChangedAction {
            operations: new.operations.clone(),
        }));
    }
    for action in actions {
        core.apply(uri, action, None, None);
    }
}

/// Recomputes the watched changesets of a session that can have moved, and an isolated
/// session's counts. A turn's slice moves while its turn runs, and once more when it ended
/// (`ended`: its snapshot after was just taken); a comparison, when one of its turns just ended.
pub async fn refresh(worktrees: &Worktrees, host: &Host, session: &str, ended: Option<&str>) {
    let watched: Vec<String> = {
        let core = host.lock();
        let running = |chat: &str, turn_id: &str| {
            core.chat_state(chat).and_then(|s| s.active_turn.as_ref()).is_some_and(|t| t.id == turn_id)
        };
        let moves = |scope: &Scope| match scope {
            Scope::Branch { .. } | Scope::Uncommitted { .. } => true,
            Scope::Turn { chat, turn_id } => ended == Some(turn_id.as_str()) || running(chat, turn_id),
            Scope::Compare { original, modified, .. } => {
                ended.is_some_and(|t| t == original.as_str() || t == modified.as_str())
            }
        };
        core.changeset_channels()
            .into_iter()
            .filter(|uri| {
                parse(uri).is_some_and(|scope| {
                    moves(&scope) && session_of(worktrees, &core, &scope).as_deref() == Some(session)
                })
            })
            .collect()
    };
    for uri in watched {
        match compute(worktrees, host, &uri).await {
            Ok(computed) => apply(&mut host.lock(), &uri, computed.state),
            Err(e) => tracing::debug!(changeset = uri, "could not recompute: {}", e.message),
        }
    }
    count_session(worktrees, host, session).await;
}

/// A session's counts: its worktree's branch when it has one, else what its chats changed.
pub async fn count_session(worktrees: &Worktrees, host: &Host, session: &str) {
    if let Some(record) = worktrees.record(session).and_then(usable) {
        match branch_view(worktrees, &record).await {
            Ok(view) => {
                let counts = counts(&view.files);
                let changes = (counts.files.unwrap_or(0) > 0).then_some(counts);
                host.lock().set_changes(session, None, changes);
            }
            Err(e) => tracing::debug!(session, "could not count the branch's changes: {e}"),
        }
        return;
    }
    let mut core = host.lock();
    let Some(state) = core.session_state(session) else { return };
    let mut total = ChangesSummary { additions: Some(0), deletions: Some(0), files: Some(0) };
    for chat in &state.chats {
        if let Some(c) = &chat.changes {
            total.additions = Some(total.additions.unwrap_or(0) + c.additions.unwrap_or(0));
            total.deletions = Some(total.deletions.unwrap_or(0) + c.deletions.unwrap_or(0));
            total.files = Some(total.files.unwrap_or(0) + c.files.unwrap_or(0));
        }
    }
    let changes = (total.files.unwrap_or(0) > 0).then_some(total);
    core.set_changes(session, None, changes);
}

/// What a chat changed, from before its first turn ahpd kept to after its last.
pub async fn count_chat(host: &Host, session: &str, chat: &str) {
    let (folder, turns) = {
        let core = host.lock();
        let Some(state) = core.chat_state(chat) else { return };
        (core.chat_folder(chat), state.turns.iter().map(|t| t.id.clone()).collect::<Vec<_>>())
    };
    let (Some(top), Some(last)) = (top_of(folder).await, turns.last()) else { return };
    let mut before = None;
    for turn_id in &turns {
        before = side(&top, session, chat, turn_id, "before").await;
        if before.is_some() {
            break;
        }
    }
    let (Some(before), Some(after)) = (before, side(&top, session, chat, last, "after").await) else { return };
    match git::diff(&top, &before, &after).await {
        Ok(files) => host.lock().set_changes(session, Some(chat), Some(counts(&files))),
        Err(e) => tracing::debug!(chat, "could not count what the chat changed: {e}"),
    }
}

/// Reads a blob a changeset names, from the folders of its session.
pub async fn read_blob(host: &Host, session: String, sha: String) -> Result<ResourceReadResult, AhpError> {
    let folders: Vec<PathBuf> = {
        let mut core = host.lock();
        if !host.ensure_loaded(&mut core, &session) {
            return Err(AhpError::not_found(format!("There is no session {session}")));
        }
        let mut folders: Vec<PathBuf> =
            core.session(&session).and_then(|m| m.working_directory.clone()).into_iter().collect();
        for chat in core.chats_of(&session) {
            folders.extend(core.chat_folder(&chat));
        }
        folders
    };
    for folder in folders.iter().filter(|f| in_git(f)) {
        match git::blob(folder, &sha, READ_CAP).await {
            Ok((_, true)) => {
                return Err(AhpError::invalid_params(format!(
                    "{sha} is larger than {} MiB; ahpd does not send it whole",
                    READ_CAP / (1024 * 1024)
                )))
            }
            Ok((bytes, false)) => {
                return Ok(match String::from_utf8(bytes) {
                    Ok(text) => ResourceReadResult {
                        data: text,
                        encoding: ContentEncoding::Utf8,
                        content_type: Some("text/plain".into()),
                    },
                    Err(e) => ResourceReadResult {
                        data: base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
                        encoding: ContentEncoding::Base64,
                        content_type: Some("application/octet-stream".into()),
                    },
                });
            }
            Err(_) => continue,
        }
    }
    Err(AhpError::not_found(format!("{sha} is not a file of {session}'s changesets")))
}

/// A chat went: its changesets are no longer watched.
pub fn forget_chat(worktrees: &Worktrees, core: &mut Core, chat: &str) {
    let mine = |scope: &Scope| match scope {
        Scope::Branch { owner } => owner == chat,
        Scope::Turn { chat: c, .. } | Scope::Compare { chat: c, .. } => c == chat,
        Scope::Uncommitted { .. } => false,
    };
    drop_where(worktrees, core, mine);
    let mut state = worktrees.state();
    state.running.remove(chat);
    state.pending_after.remove(chat);
    state.chat_locks.remove(chat);
}

/// A session went: its changesets are no longer watched.
pub fn forget_session(worktrees: &Worktrees, core: &mut Core, session: &str) {
    let mine = |scope: &Scope| match scope {
        Scope::Branch { owner } => owner == session,
        Scope::Uncommitted { session: s } => s == session,
        _ => false,
    };
    drop_where(worktrees, core, mine);
}

fn drop_where(worktrees: &Worktrees, core: &mut Core, mine: impl Fn(&Scope) -> bool) {
    for uri in core.changeset_channels() {
        if parse(&uri).as_ref().is_some_and(&mine) {
            core.drop_changeset(&uri);
            worktrees.state().reviews.remove(&uri);
        }
    }
}

/// A client marked files of a changeset reviewed (or not): kept at the content they had, so a
/// file that changes again comes back unreviewed.
pub fn reviewed(worktrees: &Worktrees, core: &Core, changeset: &str, files: &[String], reviewed: bool) {
    let Some(state) = core.changeset_state(changeset) else { return };
    let mut kept = worktrees.state();
    let marks = kept.reviews.entry(changeset.to_owned()).or_default();
    for id in files {
        if reviewed {
            if let Some(file) = state.files.iter().find(|f| &f.id == id) {
                marks.insert(id.clone(), reviewed_at(&file.edit.after));
            }
        } else {
            marks.remove(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changeset_uris_name_their_scope() {
        assert_eq!(parse("ahp-changeset:/session/s1/branch"), Some(Scope::Branch { owner: "ahp-session:/s1".into() }));
        assert_eq!(
            parse("ahp-changeset:/chat/c1/turn/t%2F1"),
            Some(Scope::Turn { chat: "ahp-chat:/c1".into(), turn_id: "t/1".into() })
        );
        assert_eq!(
            parse("ahp-changeset:/chat/c1/compare/a/b"),
            Some(Scope::Compare { chat: "ahp-chat:/c1".into(), original: "a".into(), modified: "b".into() })
        );
        assert_eq!(parse("ahp-changeset:/chat/c1/turn/"), None);
        assert_eq!(parse("ahp-changeset:/session/s1/other"), None);
        assert_eq!(parse_blob_uri("ahpd-blob:/s1/abcdef12"), Some(("ahp-session:/s1".into(), "abcdef12".into())));
        assert_eq!(parse_blob_uri("ahpd-blob:/s1/../etc"), None);
    }

    #[test]
    fn a_large_patch_is_cut_with_a_sentence() {
        let patch = "+x\n".repeat(PATCH_CAP);
        let cut = cap_patch(patch.clone());
        assert!(cut.len() < patch.len());
        assert!(cut.contains("[ahpd: this diff is cut here"), "the cut is said");
        assert_eq!(cap_patch("+a\n".into()), "+a\n");
    }
}
