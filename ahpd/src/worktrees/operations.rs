//! Getting work back, the person's act: the operations a changeset offers, run with
//! `invokeChangesetOperation`. A worktree's `branch` offers `merge` (into the branch it was cut
//! from), `commit` (its uncommitted files, on its branch) and `discard` (back to where it parted
//! from its base); a folder's `uncommitted` offers `commit`. A merge that would not apply is
//! refused with the conflicting files named, and nothing — the base, the worktree, the branch —
//! is changed.

use std::path::{Path, PathBuf};

use ahp_types::actions::{ChangesetOperationStatusChangedAction, StateAction};
use ahp_types::commands::{ChangesetOperationTarget, InvokeChangesetOperationParams, InvokeChangesetOperationResult};
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{ChangesetOperation, ChangesetOperationScope, ChangesetOperationStatus, ErrorInfo};

use super::changes::{self, Scope};
use super::cut::shown;
use super::git::{self, GitError, Trial};
use super::Worktrees;
use crate::host::facade::{path_of, AhpError};
use crate::host::Host;
use crate::store::records::WorktreeState;
use crate::store::WorktreeRecord;

/// Merges a worktree's branch into its base.
pub const MERGE: &str = "merge";
/// Commits the uncommitted files.
pub const COMMIT: &str = "commit";
/// Throws a worktree's changes away.
pub const DISCARD: &str = "discard";

fn operation(id: &str, label: String, description: String, status: ChangesetOperationStatus) -> ChangesetOperation {
    ChangesetOperation {
        id: id.to_owned(),
        label,
        description: Some(description),
        scopes: vec![ChangesetOperationScope::Changeset],
        confirmation: None,
        icon: None,
        group: None,
        status,
        error: None,
    }
}

/// What a worktree's `branch` changeset offers.
pub fn for_branch(record: &WorktreeRecord, uncommitted: bool) -> Vec<ChangesetOperation> {
    let base = record.base_branch.as_deref();
    let mut merge = operation(
        MERGE,
        format!("Merge into {}", base.unwrap_or("its base")),
        format!(
            "Merges {} (its uncommitted files committed first) into {} in {}. Refused, with nothing changed, when it would conflict.",
            record.branch,
            base.unwrap_or("the branch it was cut from"),
            record.repo
        ),
        if base.is_some() { ChangesetOperationStatus::Idle } else { ChangesetOperationStatus::Disabled },
    );
    merge.icon = Some("git-merge".into());
    let mut list = vec![merge];
    if uncommitted {
        let mut commit = operation(
            COMMIT,
            "Commit the uncommitted changes".into(),
            format!("Commits every uncommitted file of the worktree on {}.", record.branch),
            ChangesetOperationStatus::Idle,
        );
        commit.icon = Some("check".into());
        list.push(commit);
    }
    let mut discard = operation(
        DISCARD,
        "Discard these changes".into(),
        format!(
            "Puts the worktree back to where {} parted from its base, committed changes and uncommitted alike.",
            record.branch
        ),
        ChangesetOperationStatus::Idle,
    );
    discard.icon = Some("trash".into());
    discard.confirmation = Some(StringOrMarkdown::Plain(format!(
        "Throw away every change on {} since it was cut, committed or not? This cannot be undone.",
        record.branch
    )));
    list.push(discard);
    list
}

/// What a folder's `uncommitted` changeset offers.
pub fn for_uncommitted(any: bool) -> Vec<ChangesetOperation> {
    let mut commit = operation(
        COMMIT,
        "Commit these changes".into(),
        "Commits every uncommitted file of the session's folder on the branch it has checked out.".into(),
        if any { ChangesetOperationStatus::Idle } else { ChangesetOperationStatus::Disabled },
    );
    commit.icon = Some("check".into());
    vec![commit]
}

fn conflict(message: String) -> AhpError {
    let mut e = AhpError::invalid_request(message);
    e.code = ahp_types::errors::ahp_error_codes::CONFLICT;
    e
}

fn failed(e: GitError) -> AhpError {
    AhpError::internal(format!("Git could not do it: {e}"))
}

/// Runs `invokeChangesetOperation`.
pub async fn invoke(
    worktrees: &Worktrees,
    host: &Host,
    params: InvokeChangesetOperationParams,
) -> Result<InvokeChangesetOperationResult, AhpError> {
    let uri = params.channel.clone();
    let scope = changes::parse(&uri).ok_or_else(|| AhpError::not_found(format!("There is no changeset {uri}")))?;
    let (session, folders, offered) = match &scope {
        Scope::Branch { owner } => {
            let record = worktrees.record(owner).filter(|r| r.state != WorktreeState::Creating).ok_or_else(|| {
                AhpError::not_found(format!("{owner} has no worktree, so there is no changeset {uri}"))
            })?;
            let folders = vec![PathBuf::from(&record.path)];
            (record.session, folders, vec![MERGE, COMMIT, DISCARD])
        }
        Scope::Uncommitted { session } => {
            let folder = {
                let mut core = host.lock();
                host.ensure_loaded(&mut core, session);
                core.session(session).and_then(|m| m.working_directory.clone())
            };
            (session.clone(), folder.into_iter().collect(), vec![COMMIT])
        }
        Scope::Turn { .. } | Scope::Compare { .. } => {
            return Err(AhpError::invalid_params(format!(
                "{uri} offers no operations: it only shows what a turn changed"
            )))
        }
    };
    let id = params.operation_id.as_str();
    if !offered.contains(&id) {
        return Err(AhpError::invalid_params(format!("{uri} offers {}, not {id}", offered.join(", "))));
    }
    if let Some(target) = &params.target {
        check_target(id, target, &folders)?;
    }
    status(host, &uri, id, ChangesetOperationStatus::Running, None);
    let result = match (&scope, id) {
        (Scope::Branch { owner }, MERGE) => merge(worktrees, host, owner).await,
        (Scope::Branch { owner }, COMMIT) => commit_branch(worktrees, host, owner).await,
        (Scope::Branch { owner }, DISCARD) => discard(worktrees, owner).await,
        (Scope::Uncommitted { session }, COMMIT) => commit_folder(worktrees, host, session, &folders).await,
        _ => Err(AhpError::invalid_params(format!("{uri} offers no {id}"))),
    };
    match result {
        Ok(message) => {
            status(host, &uri, id, ChangesetOperationStatus::Idle, None);
            // What changed is shown at once: the watched changesets and the counts.
            changes::refresh(worktrees, host, &session, None).await;
            tracing::info!(changeset = uri, operation = id, "{message}");
            Ok(InvokeChangesetOperationResult { message: Some(StringOrMarkdown::Plain(message)), follow_up: None })
        }
        Err(e) => {
            let error = ErrorInfo {
                error_type: "operationRefused".into(),
                message: e.message.clone(),
                stack: None,
                meta: None,
            };
            status(host, &uri, id, ChangesetOperationStatus::Error, Some(error));
            Err(e)
        }
    }
}

/// Every operation here applies to the whole changeset: a target is refused, one outside the
/// session's folders in words that say so.
fn check_target(id: &str, target: &ChangesetOperationTarget, folders: &[PathBuf]) -> Result<(), AhpError> {
    let resource = match target {
        ChangesetOperationTarget::Resource { resource, .. } | ChangesetOperationTarget::Range { resource, .. } => {
            resource
        }
        ChangesetOperationTarget::Unknown(_) => {
            return Err(AhpError::invalid_params(format!("{id} applies to the whole changeset; leave target out")))
        }
    };
    let inside = path_of(resource).is_some_and(|path| {
        let normal = !path.components().any(|c| matches!(c, std::path::Component::ParentDir));
        normal && folders.iter().any(|f| path.starts_with(f))
    });
    if !inside {
        let shown: Vec<String> = folders.iter().map(|f| f.display().to_string()).collect();
        return Err(AhpError::invalid_params(format!(
            "{resource} is outside the folders this session works in ({}); an operation takes a file of its changeset, or none",
            shown.join(", ")
        )));
    }
    Err(AhpError::invalid_params(format!("{id} applies to the whole changeset; leave target out")))
}

/// Says an operation's status on its changeset, when somebody watches it.
fn status(host: &Host, uri: &str, id: &str, status: ChangesetOperationStatus, error: Option<ErrorInfo>) {
    let mut core = host.lock();
    let offered =
        core.changeset_state(uri).and_then(|s| s.operations.as_ref()).is_some_and(|ops| ops.iter().any(|o| o.id == id));
    if offered {
        let action = StateAction::ChangesetOperationStatusChanged(ChangesetOperationStatusChangedAction {
            operation_id: id.to_owned(),
            status,
            error,
        });
        core.apply(uri, action, None, None);
    }
}

fn record_of(worktrees: &Worktrees, owner: &str) -> Result<WorktreeRecord, AhpError> {
    worktrees.record(owner).ok_or_else(|| AhpError::not_found(format!("{owner} has no worktree")))
}

/// The message a commit made for a session carries.
fn message_for(host: &Host, session: &str) -> String {
    let title = host.lock().session_state(session).map(|s| s.title.clone()).unwrap_or_default();
    if title.trim().is_empty() {
        "Changes made in an ahpd session".to_owned()
    } else {
        title
    }
}

/// The tree a commit holds.
async fn tree_of(dir: &Path, commit: &str) -> Result<String, GitError> {
    git::git(dir).args(["rev-parse", &format!("{commit}^{{tree}}")]).text().await
}

/// A snapshot of `dir` as a commit on top of its `HEAD`, and whether it holds anything `HEAD`
/// does not.
async fn pending_commit(worktrees: &Worktrees, dir: &Path, message: &str) -> Result<(String, bool), GitError> {
    let snap = git::snapshot(dir, worktrees.scratch(), message).await?;
    let changed = match git::commit_of(dir, "HEAD").await? {
        Some(head) => tree_of(dir, &head).await? != snap.tree,
        None => true,
    };
    Ok((snap.commit, changed))
}

async fn merge(worktrees: &Worktrees, host: &Host, owner: &str) -> Result<String, AhpError> {
    let record = record_of(worktrees, owner)?;
    let (repo, path, branch) = (PathBuf::from(&record.repo), PathBuf::from(&record.path), record.branch.clone());
    let lock = worktrees.repo_lock(&repo);
    let _held = lock.lock().await;
    let Some(base) = record.base_branch.clone() else {
        return Err(conflict(format!(
            "{branch} was cut from a detached HEAD ({}), so there is no branch to merge it into; merge it by hand. Nothing was changed.",
            record.base_commit
        )));
    };
    let on = git::current_branch(&repo).await.map_err(failed)?;
    if on.as_deref() != Some(base.as_str()) {
        return Err(conflict(format!(
            "{} has {} checked out, not {base}, which {branch} was cut from: check {base} out there, then merge again. Nothing was changed.",
            repo.display(),
            on.as_deref().unwrap_or("a detached HEAD")
        )));
    }
    let dirty = git::dirty(&repo, false).await.map_err(failed)?;
    if !dirty.is_empty() {
        return Err(conflict(format!(
            "{} has uncommitted changes ({}): commit or stash them, then merge again. Nothing was changed.",
            repo.display(),
            shown(&dirty)
        )));
    }
    let message = message_for(host, &record.session);
    let (tip, uncommitted) = if path.exists() {
        pending_commit(worktrees, &path, &message).await.map_err(failed)?
    } else {
        let tip = git::commit_of(&repo, &format!("refs/heads/{branch}")).await.map_err(failed)?;
        (tip.unwrap_or_else(|| record.base_commit.clone()), false)
    };
    let head = git::commit_of(&repo, "HEAD").await.map_err(failed)?.unwrap_or_default();
    let tip = if uncommitted { tip } else { git::commit_of(&path, "HEAD").await.ok().flatten().unwrap_or(tip) };
    if git::is_ancestor(&repo, &tip, &head).await.map_err(failed)? {
        return Ok(format!("Nothing to merge: {base} holds everything on {branch} already."));
    }
    if let Trial::Conflicts(files) = git::try_merge(&repo, &head, &tip).await.map_err(failed)? {
        return Err(conflict(format!(
            "Merging {branch} into {base} would conflict in {}; nothing was changed. Bring {base}'s changes into the worktree (or resolve them by hand) first, then merge again.",
            shown(&files)
        )));
    }
    let incoming: Vec<String> =
        git::diff(&repo, &head, &tip).await.map_err(failed)?.into_iter().map(|f| f.path).collect();
    let untracked: Vec<String> =
        git::dirty(&repo, true).await.map_err(failed)?.into_iter().filter(|p| incoming.contains(p)).collect();
    if !untracked.is_empty() {
        return Err(conflict(format!(
            "{} has untracked files the merge would overwrite ({}): move them away, then merge again. Nothing was changed.",
            repo.display(),
            shown(&untracked)
        )));
    }
    if uncommitted {
        git::adopt(&path, &tip).await.map_err(failed)?;
    }
    git::merge(&repo, &branch, &format!("Merge {branch}: {message}")).await.map_err(failed)?;
    let files = if incoming.len() == 1 { "1 file".to_owned() } else { format!("{} files", incoming.len()) };
    Ok(format!("Merged {branch} into {base} in {} ({files}).", repo.display()))
}

async fn commit_branch(worktrees: &Worktrees, host: &Host, owner: &str) -> Result<String, AhpError> {
    let record = record_of(worktrees, owner)?;
    let path = PathBuf::from(&record.path);
    if !path.exists() {
        return Err(conflict(format!("The worktree's folder {} is gone; there is nothing to commit.", record.path)));
    }
    let lock = worktrees.repo_lock(Path::new(&record.repo));
    let _held = lock.lock().await;
    let message = message_for(host, &record.session);
    let (commit, changed) = pending_commit(worktrees, &path, &message).await.map_err(failed)?;
    if !changed {
        return Ok(format!("Nothing to commit: {} has no uncommitted changes.", record.path));
    }
    git::adopt(&path, &commit).await.map_err(failed)?;
    Ok(format!("Committed the worktree's changes on {}.", record.branch))
}

async fn commit_folder(
    worktrees: &Worktrees,
    host: &Host,
    session: &str,
    folders: &[PathBuf],
) -> Result<String, AhpError> {
    let folder = folders.first().ok_or_else(|| AhpError::not_found(format!("{session} has no folder")))?;
    let top = git::toplevel(folder)
        .await
        .map_err(failed)?
        .ok_or_else(|| AhpError::not_found(format!("{} is not in a Git repository", folder.display())))?;
    let lock = worktrees.repo_lock(&top);
    let _held = lock.lock().await;
    let message = message_for(host, session);
    let (commit, changed) = pending_commit(worktrees, &top, &message).await.map_err(failed)?;
    if !changed {
        return Ok(format!("Nothing to commit: {} has no uncommitted changes.", top.display()));
    }
    git::adopt(&top, &commit).await.map_err(failed)?;
    let on = git::current_branch(&top).await.map_err(failed)?;
    Ok(format!("Committed the changes on {} in {}.", on.as_deref().unwrap_or("a detached HEAD"), top.display()))
}

async fn discard(worktrees: &Worktrees, owner: &str) -> Result<String, AhpError> {
    let record = record_of(worktrees, owner)?;
    let path = PathBuf::from(&record.path);
    if !path.exists() {
        return Err(conflict(format!("The worktree's folder {} is gone; bring its session back first.", record.path)));
    }
    let repo = PathBuf::from(&record.repo);
    let lock = worktrees.repo_lock(&repo);
    let _held = lock.lock().await;
    let head = git::commit_of(&path, "HEAD").await.map_err(failed)?.unwrap_or_else(|| record.base_commit.clone());
    let base = match &record.base_branch {
        Some(b) => git::merge_base(&repo, &format!("refs/heads/{b}"), &head).await.map_err(failed)?,
        None => None,
    }
    .unwrap_or_else(|| record.base_commit.clone());
    git::reset_hard(&path, &base).await.map_err(failed)?;
    Ok(format!("Discarded the changes on {}; the worktree is back where it parted from its base.", record.branch))
}
