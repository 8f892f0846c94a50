//! What each turn changed: a snapshot of the folder's files just before the turn is handed to its
//! backend, and one once it ended, each kept as a commit under a ref of ahpd's own
//! (`refs/ahpd/<session>/<chat>/<turn>/before|after`), so a turn's changeset is the diff between
//! the two (or, while it runs, between its `before` and the folder now). The refs go when the
//! session is deleted.
//!
//! A chat's snapshots come in order: the one after a turn is taken before the next turn's one
//! before, whoever gets to it first (the event task or the next turn's start).

use std::path::{Path, PathBuf};

use super::{git, TurnPlace, Worktrees};
use crate::host::facade::uri_id;
use crate::host::Host;

/// A ref name's part from an id: kept when it is plain, else spelled in hex.
fn component(id: &str) -> String {
    let plain = !id.is_empty()
        && !id.starts_with(['-', '.'])
        && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if plain {
        id.to_owned()
    } else {
        format!("x{}", id.bytes().map(|b| format!("{b:02x}")).collect::<String>())
    }
}

/// Where a session's turn refs live.
pub fn session_refs(session: &str) -> String {
    format!("refs/ahpd/{}", component(uri_id(session)))
}

/// The ref of one side (`before` or `after`) of a turn.
pub fn turn_ref(session: &str, chat: &str, turn_id: &str, side: &str) -> String {
    format!("{}/{}/{}/{side}", session_refs(session), component(uri_id(chat)), component(turn_id))
}

/// True when `folder` is inside a Git work tree (looked up on disk, without running git).
pub fn in_git(folder: &Path) -> bool {
    folder.ancestors().any(|dir| dir.join(".git").exists())
}

/// Before a turn is handed to its backend: the folder it works in is brought back if it was let
/// go, the last turn's snapshot after is taken if it is still owed, then this turn's before.
pub async fn starting(worktrees: &Worktrees, host: &Host, chat: &str, turn_id: &str) {
    let (session, folder) = {
        let core = host.lock();
        let Some(session) = core.chat(chat).map(|m| m.session.clone()) else { return };
        (session, core.chat_folder(chat))
    };
    let Some(folder) = folder else { return };
    for record in worktrees.records_of(&session) {
        if !folder.exists() && folder.starts_with(&record.path) {
            super::cut::restore(worktrees, host, &record.owner).await;
        }
    }
    settle_after(worktrees, chat).await;
    if !in_git(&folder) {
        return;
    }
    let Ok(Some(top)) = git::toplevel(&folder).await else { return };
    let lock = worktrees.chat_lock(chat);
    let _held = lock.lock().await;
    let name = turn_ref(&session, chat, turn_id, "before");
    match snapshot_into(worktrees, &top, &name).await {
        Ok(()) => {
            let place = TurnPlace { turn_id: turn_id.to_owned(), session, top };
            worktrees.state().running.insert(chat.to_owned(), place);
        }
        Err(e) => tracing::warn!(chat, turn = turn_id, "could not take the snapshot before the turn: {e}"),
    }
}

/// The turn that ended in `chat` owes its snapshot after (taken by the event task, or by the
/// chat's next turn, whichever comes first).
pub fn ended(worktrees: &Worktrees, chat: &str, turn_id: &str) {
    let mut state = worktrees.state();
    if let Some(place) = state.running.remove(chat) {
        if place.turn_id == turn_id {
            state.pending_after.insert(chat.to_owned(), place);
        } else {
            state.running.insert(chat.to_owned(), place);
        }
    }
}

/// Takes the snapshot after the chat's last turn, when it is still owed.
pub async fn settle_after(worktrees: &Worktrees, chat: &str) {
    let lock = worktrees.chat_lock(chat);
    let _held = lock.lock().await;
    let Some(place) = worktrees.state().pending_after.remove(chat) else { return };
    let name = turn_ref(&place.session, chat, &place.turn_id, "after");
    if let Err(e) = snapshot_into(worktrees, &place.top, &name).await {
        tracing::warn!(chat, turn = place.turn_id, "could not take the snapshot after the turn: {e}");
    }
}

/// Takes a snapshot of `top` and points `name` at it.
async fn snapshot_into(worktrees: &Worktrees, top: &Path, name: &str) -> Result<(), git::GitError> {
    let snap = git::snapshot(top, worktrees.scratch(), "ahpd: a turn's files").await?;
    git::update_ref(top, name, &snap.commit).await
}

/// The commit a turn's side points at, in the folder `dir` is in.
pub async fn side(dir: &Path, session: &str, chat: &str, turn_id: &str, which: &str) -> Option<String> {
    git::commit_of(dir, &turn_ref(session, chat, turn_id, which)).await.ok().flatten()
}

/// The top of the work tree a chat works in, if it is in one.
pub async fn top_of(folder: Option<PathBuf>) -> Option<PathBuf> {
    let folder = folder?;
    if !in_git(&folder) {
        return None;
    }
    git::toplevel(&folder).await.ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_spell_odd_ids_in_hex() {
        assert_eq!(turn_ref("ahp-session:/s1", "ahp-chat:/c1", "t-1", "before"), "refs/ahpd/s1/c1/t-1/before");
        assert_eq!(component("a/b"), "x612f62");
        assert_eq!(component(".x"), "x2e78");
    }
}
