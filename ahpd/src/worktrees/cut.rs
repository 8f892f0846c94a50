//! A worktree's life, each step whole or not at all: cut one for a session (refused, with nothing
//! made, when the folder is not in Git, has no commit, has uncommitted changes, or the branch or
//! folder exists already), let its folder go when its session is archived and nothing is left in
//! it, bring it back, and remove it when its session is deleted — unless something in it is
//! uncommitted or unmerged, in which case it stays and the log says where.

use std::path::{Component, Path, PathBuf};

use ahp_types::common::JsonObject;
use serde_json::Value;

use super::git::{self, GitError};
use super::{Worktrees, BRANCH, INCLUDE_FILES};
use crate::host::facade::{now_iso, uri_id, FolderRequest};
use crate::host::Host;
use crate::store::records::WorktreeState;
use crate::store::WorktreeRecord;

/// A git failure as a sentence for whoever asked.
fn failed(e: GitError) -> String {
    format!("Git could not do it: {e}")
}

/// A title as a branch name's part: lower-case words joined by `-`, at most 40 characters.
pub fn slug(title: &str) -> String {
    let mut out = String::new();
    for word in title.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()) {
        if out.len() + word.len() + 1 > 40 {
            break;
        }
        if !out.is_empty() {
            out.push('-');
        }
        out.push_str(&word.to_ascii_lowercase());
    }
    if out.is_empty() {
        "session".to_owned()
    } else {
        out
    }
}

/// The branch ahpd names for `owner`: `ahpd/<title slug>-<short id>`.
pub fn branch_name(owner: &str, title: Option<&str>) -> String {
    let short: String = uri_id(owner).chars().filter(char::is_ascii_alphanumeric).take(8).collect();
    format!("ahpd/{}-{}", slug(title.unwrap_or("")), short.to_ascii_lowercase())
}

/// The files a new worktree carries over from its folder, checked to lie inside it.
fn include_files(settings: &JsonObject, from: &Path) -> Result<Vec<PathBuf>, String> {
    let Some(listed) = settings.get(INCLUDE_FILES) else { return Ok(Vec::new()) };
    let Some(listed) = listed.as_array() else {
        return Err(format!("{INCLUDE_FILES} must be a list of paths inside the folder"));
    };
    let mut files = Vec::new();
    for entry in listed {
        let Some(name) = entry.as_str().filter(|n| !n.is_empty()) else {
            return Err(format!("{INCLUDE_FILES} must be a list of paths inside the folder"));
        };
        let path = Path::new(name);
        let inside = path.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !inside {
            return Err(format!(
                "{INCLUDE_FILES} names {name}, which is outside the folder the session works in ({}); name files inside it.",
                from.display()
            ));
        }
        files.push(path.to_owned());
    }
    Ok(files)
}

/// Cuts the worktree `request` asks for and answers the folder the session works in (the
/// worktree, or the same place inside it as the folder it was cut from). Refused in a sentence
/// with nothing made.
pub async fn make(worktrees: &Worktrees, host: &Host, request: FolderRequest) -> Result<PathBuf, String> {
    let FolderRequest { owner, session, from, title, settings } = request;
    let from = from.canonicalize().map_err(|e| format!("{} cannot be read: {e}", from.display()))?;
    if let Some(record) = worktrees.record(&owner) {
        return Err(format!(
            "it works in a worktree of its own already ({}, branch {}); merge or discard the work there rather than cutting another.",
            record.path, record.branch
        ));
    }
    let includes = include_files(&settings, &from)?;
    let top = git::toplevel(&from).await.map_err(failed)?.ok_or_else(|| {
        format!(
            "{} is not in a Git repository, so no worktree can be cut from it. Work in the folder itself (isolation \"folder\"), or make it a repository first (git init, and a first commit).",
            from.display()
        )
    })?;
    let lock = worktrees.repo_lock(&top);
    let _held = lock.lock().await;
    let head = git::commit_of(&top, "HEAD").await.map_err(failed)?.ok_or_else(|| {
        format!("{} has no commit yet, and a worktree is cut from one: make a first commit there.", top.display())
    })?;
    let dirty = git::dirty(&top, false).await.map_err(failed)?;
    if !dirty.is_empty() {
        return Err(format!(
            "{} has uncommitted changes ({}); a worktree is cut from its last commit and would not carry them. Commit or stash them first, or work in the folder itself.",
            top.display(),
            shown(&dirty)
        ));
    }
    let branch = match settings.get(BRANCH) {
        Some(Value::String(name)) if !name.trim().is_empty() => name.trim().to_owned(),
        Some(Value::Null) | None => branch_name(&owner, title.as_deref()),
        Some(_) => return Err(format!("{BRANCH} must be a branch name.")),
    };
    if !git::valid_branch_name(&top, &branch).await.map_err(failed)? {
        return Err(format!("{branch} is not a name Git takes for a branch."));
    }
    if git::branch_exists(&top, &branch).await.map_err(failed)? {
        return Err(format!(
            "A branch called {branch} exists already in {}; name another ({BRANCH}), or leave it out for ahpd to name one.",
            top.display()
        ));
    }
    let repo_name = top.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "repository".into());
    let path = worktrees.settings.root.join(repo_name).join(branch.replace('/', "-"));
    if path.exists() {
        return Err(format!("{} exists already; a worktree needs a folder of its own.", path.display()));
    }
    let folder = match from.strip_prefix(&top) {
        Ok(inside) if !inside.as_os_str().is_empty() => path.join(inside),
        _ => path.clone(),
    };
    let record = WorktreeRecord {
        owner: owner.clone(),
        session,
        repo: top.display().to_string(),
        path: path.display().to_string(),
        folder: folder.display().to_string(),
        branch: branch.clone(),
        base_branch: git::current_branch(&top).await.map_err(failed)?,
        base_commit: head.clone(),
        created_at: now_iso(),
        state: WorktreeState::Creating,
    };
    // Written before git makes anything: a start after a crash finds it and cleans up.
    worktrees.keep(&host.lock(), record);
    // Its folders are the person's alone, as the data folder they sit in, and git checks the
    // worktree out private (a failure to make them is git's to report).
    let _ = crate::fsutil::create_private_dir(&worktrees.settings.root)
        .and_then(|()| path.parent().map_or(Ok(()), crate::fsutil::create_private_dir));
    if let Err(e) = git::worktree_add(&top, &path, &branch, &head).await {
        undo(worktrees, host, &owner, &top, &path, &branch).await;
        return Err(failed(e));
    }
    for file in includes {
        let (source, target) = (from.join(&file), folder.join(&file));
        if !source.is_file() {
            tracing::info!(file = %source.display(), "a file to carry over into a new worktree is not there; skipped");
            continue;
        }
        let copied =
            target.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| std::fs::copy(&source, &target));
        if let Err(e) = copied {
            undo(worktrees, host, &owner, &top, &path, &branch).await;
            return Err(format!("{} could not be copied into the worktree: {e}", source.display()));
        }
    }
    tracing::info!(owner, branch, folder = %path.display(), "cut a worktree");
    Ok(folder)
}

/// The first few of a list of paths, for a sentence.
pub fn shown(paths: &[String]) -> String {
    let mut listed: Vec<&str> = paths.iter().map(String::as_str).take(5).collect();
    if paths.len() > 5 {
        listed.push("…");
    }
    listed.join(", ")
}

/// Takes back a worktree that was being cut: its folder, its branch, its record.
async fn undo(worktrees: &Worktrees, host: &Host, owner: &str, top: &Path, path: &Path, branch: &str) {
    if path.exists() {
        if let Err(e) = git::worktree_remove(top, path, true).await {
            tracing::warn!(folder = %path.display(), "could not remove a half-made worktree: {e}");
            let _ = std::fs::remove_dir_all(path);
        }
    }
    let _ = git::worktree_prune(top).await;
    if git::branch_exists(top, branch).await.unwrap_or(false) {
        let _ = git::branch_delete(top, branch, true).await;
    }
    worktrees.forget(&host.lock(), owner);
}

/// A worktree made for `owner` that is not needed: it goes whole (nothing was done in it).
pub async fn discard(worktrees: &Worktrees, host: &Host, owner: &str) {
    let Some(record) = worktrees.record(owner) else { return };
    let top = PathBuf::from(&record.repo);
    let lock = worktrees.repo_lock(&top);
    let _held = lock.lock().await;
    undo(worktrees, host, owner, &top, Path::new(&record.path), &record.branch).await;
    tracing::info!(owner, branch = record.branch, "a worktree nobody took up was removed");
}

/// What keeps a worktree: its uncommitted files, or commits not in its base branch. `None` when
/// nothing does.
async fn what_keeps(record: &WorktreeRecord) -> Result<Option<String>, GitError> {
    let path = Path::new(&record.path);
    if path.exists() {
        let dirty = git::dirty(path, true).await?;
        if !dirty.is_empty() {
            return Ok(Some(format!("it holds uncommitted changes ({})", shown(&dirty))));
        }
    }
    let repo = Path::new(&record.repo);
    let tip = git::commit_of(repo, &format!("refs/heads/{}", record.branch)).await?;
    let Some(tip) = tip else { return Ok(None) };
    let base = record.base_branch.as_deref().map(|b| format!("refs/heads/{b}")).unwrap_or(record.base_commit.clone());
    let merged = git::is_ancestor(repo, &tip, &base).await.unwrap_or(false) || tip == record.base_commit;
    Ok((!merged).then(|| {
        format!(
            "its branch {} has commits not merged into {}",
            record.branch,
            record.base_branch.as_deref().unwrap_or("its base")
        )
    }))
}

/// A session was archived: each of its worktrees with nothing left in it loses its folder (its
/// branch stays, and the folder comes back with the session).
pub async fn release(worktrees: &Worktrees, host: &Host, session: &str) {
    for mut record in worktrees.records_of(session).into_iter().filter(|r| r.state == WorktreeState::Ready) {
        let repo = PathBuf::from(&record.repo);
        let lock = worktrees.repo_lock(&repo);
        let _held = lock.lock().await;
        match what_keeps(&record).await {
            Ok(None) => {}
            Ok(Some(why)) => {
                tracing::info!(session, folder = record.path, "an archived session's worktree stays: {why}");
                continue;
            }
            Err(e) => {
                tracing::warn!(session, "could not look into an archived session's worktree: {e}");
                continue;
            }
        }
        if let Err(e) = git::worktree_remove(&repo, Path::new(&record.path), false).await {
            tracing::warn!(session, "could not remove an archived session's worktree: {e}");
            continue;
        }
        tracing::info!(
            session,
            folder = record.path,
            branch = record.branch,
            "an archived session's worktree was removed; its branch stays"
        );
        record.state = WorktreeState::Released;
        worktrees.keep(&host.lock(), record);
    }
}

/// Brings back the folder of a worktree whose session was archived (its branch checked out
/// again where it was).
pub async fn restore(worktrees: &Worktrees, host: &Host, owner: &str) {
    let Some(mut record) = worktrees.record(owner).filter(|r| r.state == WorktreeState::Released) else { return };
    let repo = PathBuf::from(&record.repo);
    let lock = worktrees.repo_lock(&repo);
    let _held = lock.lock().await;
    let _ = git::worktree_prune(&repo).await;
    if let Err(e) = git::worktree_restore(&repo, Path::new(&record.path), &record.branch).await {
        tracing::warn!(owner, "could not bring a worktree back: {e}");
        return;
    }
    tracing::info!(owner, folder = record.path, "a worktree was brought back");
    record.state = WorktreeState::Ready;
    worktrees.keep(&host.lock(), record);
}

/// A session was deleted: each of its worktrees goes with its branch when nothing is left in it,
/// else stays where it is and the log says so; the refs of its turns' snapshots go. Answers what
/// became of them, in a sentence (empty when it had none).
pub async fn remove(worktrees: &Worktrees, host: &Host, session: &str, folders: &[PathBuf]) -> String {
    let mut said = Vec::new();
    let mut repos: Vec<PathBuf> = Vec::new();
    for record in worktrees.records_of(session) {
        let repo = PathBuf::from(&record.repo);
        if !repos.contains(&repo) {
            repos.push(repo.clone());
        }
        let lock = worktrees.repo_lock(&repo);
        let _held = lock.lock().await;
        let keeps = match what_keeps(&record).await {
            Ok(keeps) => keeps,
            Err(e) => Some(format!("Git could not say whether anything is left in it ({e})")),
        };
        worktrees.forget(&host.lock(), &record.owner);
        match keeps {
            Some(why) => {
                tracing::warn!(
                    session,
                    folder = record.path,
                    branch = record.branch,
                    "the deleted session's worktree was kept: {why}"
                );
                said.push(format!("Its worktree was kept at {} (branch {}): {why}.", record.path, record.branch));
            }
            None => {
                let path = Path::new(&record.path);
                let removed = if path.exists() { git::worktree_remove(&repo, path, false).await } else { Ok(()) };
                if let Err(e) = removed {
                    tracing::warn!(
                        session,
                        folder = record.path,
                        "could not remove the deleted session's worktree: {e}"
                    );
                    said.push(format!("Its worktree at {} could not be removed: {e}.", record.path));
                    continue;
                }
                let _ = git::worktree_prune(&repo).await;
                if let Err(e) = git::branch_delete(&repo, &record.branch, true).await {
                    tracing::warn!(session, branch = record.branch, "could not delete the branch: {e}");
                }
                tracing::info!(
                    session,
                    folder = record.path,
                    branch = record.branch,
                    "removed the deleted session's worktree and its branch"
                );
                said.push(format!("Its worktree at {} and branch {} were removed.", record.path, record.branch));
            }
        }
    }
    for folder in folders {
        if let Ok(Some(top)) = git::toplevel(folder).await {
            if !repos.contains(&top) {
                repos.push(top);
            }
        }
    }
    let prefix = format!("{}/", super::turns::session_refs(session));
    for repo in repos {
        if let Err(e) = git::delete_refs(&repo, &prefix).await {
            tracing::debug!(session, "could not delete the turns' refs: {e}");
        }
    }
    said.join(" ")
}

/// At start-up: a worktree that was being cut when the daemon stopped goes, unless its session
/// was made (then it is that session's); worktrees whose folders are gone are forgotten by git;
/// private indexes an older ahpd left behind go.
pub async fn reconcile(worktrees: &Worktrees, host: &Host) {
    let _ = std::fs::remove_dir_all(worktrees.settings.old_scratch());
    let records: Vec<WorktreeRecord> = worktrees.state().records.values().cloned().collect();
    let mut repos: Vec<PathBuf> = Vec::new();
    for mut record in records {
        let repo = PathBuf::from(&record.repo);
        if !repos.contains(&repo) {
            repos.push(repo.clone());
        }
        if record.state != WorktreeState::Creating {
            continue;
        }
        let made = {
            let mut core = host.lock();
            host.ensure_loaded(&mut core, &record.owner)
        };
        if made {
            record.state = WorktreeState::Ready;
            worktrees.keep(&host.lock(), record);
        } else {
            tracing::info!(owner = record.owner, "a worktree was being cut when ahpd stopped; it goes");
            discard(worktrees, host, &record.owner).await;
        }
    }
    for repo in repos {
        if let Err(e) = git::worktree_prune(&repo).await {
            tracing::debug!(repo = %repo.display(), "git worktree prune: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branches_are_named_after_the_title_and_the_id() {
        assert_eq!(
            branch_name("ahp-session:/1A2b3c4d-5e6f", Some("Fix the login page!")),
            "ahpd/fix-the-login-page-1a2b3c4d"
        );
        assert_eq!(branch_name("ahp-chat:/x", None), "ahpd/session-x");
        assert_eq!(
            slug("a very long title that goes on and on and on past forty characters"),
            "a-very-long-title-that-goes-on-and-on"
        );
    }

    #[test]
    fn files_to_carry_over_stay_inside_the_folder() {
        let from = Path::new("/work/repo");
        let mut settings = JsonObject::new();
        settings.insert(INCLUDE_FILES.into(), serde_json::json!([".env", "config/local.json"]));
        assert_eq!(include_files(&settings, from).expect("inside").len(), 2);
        for outside in ["../secrets", "/etc/passwd", "a/../../b"] {
            settings.insert(INCLUDE_FILES.into(), serde_json::json!([outside]));
            let refused = include_files(&settings, from).expect_err("outside");
            assert!(refused.contains("outside the folder the session works in"), "{refused}");
        }
    }
}
