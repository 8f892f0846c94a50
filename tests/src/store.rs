//! The session store under faults, as a client sees it: the root notice (`storeCannotWrite`) and
//! the sentences it says, a turn the store could not keep (failed, never told complete), the
//! store's room filled and given back through the daemon (`ahpd/test/fillStore`), and a data folder
//! made immutable for a while (`chattr -R +i`, as root).

use std::path::{Path, PathBuf};

use ahp_types::actions::StateAction;
use ahp_types::state::{ResponsePart, Turn, TurnState};
use serde_json::json;

use crate::TestClient;

/// The store's file in a daemon's home.
pub fn store_of(home: &Path) -> PathBuf {
    home.join("data").join("ahpd").join("sessions.db")
}

/// The data folder in a daemon's home.
pub fn data_of(home: &Path) -> PathBuf {
    home.join("data").join("ahpd")
}

/// The sentence of a store out of room.
pub fn full_sentence(store: &Path) -> String {
    format!(
        "ahpd cannot write its session store: the disk is full ({}). Free some space; nothing after this point was kept.",
        store.display()
    )
}

/// The sentence of a store whose disk fails its writes.
pub fn io_sentence(store: &Path) -> String {
    format!(
        "ahpd cannot write its session store: the disk reports an I/O error ({}). Check the disk; nothing after this point was kept.",
        store.display()
    )
}

/// What a client watching the chat folded: the turn ended as failed, its last part the sentence,
/// and no `chat/turnComplete` for it ever reached the client.
pub fn assert_failed_not_completed(client: &TestClient, turn: &Turn, sentence: &str) {
    assert_eq!(turn.state, TurnState::Error, "{}: the turn the store could not keep failed", client.client_id);
    let Some(ResponsePart::Error(e)) = turn.response_parts.last() else { panic!("no error part: {turn:?}") };
    assert_eq!(e.error.message, sentence);
    assert_eq!(e.error.error_type, "storeCannotWrite");
    let told_complete = client
        .envelopes
        .iter()
        .any(|env| matches!(&env.action, StateAction::ChatTurnComplete(c) if c.turn_id == turn.id));
    assert!(!told_complete, "{} was told turn {} completed", client.client_id, turn.id);
}

/// Waits until the root state's `storeCannotWrite` says `want` ("" once the store writes).
pub async fn until_notice(client: &mut TestClient, want: &str) -> anyhow::Result<()> {
    let w = want.to_owned();
    client
        .until(&format!("the root notice to say {want:?}"), move |m| {
            m.root().and_then(|r| r.config.as_ref()).and_then(|c| c.values.get("storeCannotWrite")) == Some(&json!(w))
        })
        .await
}

/// Waits until the client was told the root notice `want` (it may have been said and cleared
/// since).
pub async fn told_notice(client: &mut TestClient, want: &str) -> anyhow::Result<()> {
    let told = |c: &TestClient| {
        c.envelopes.iter().any(|env| {
            matches!(&env.action, StateAction::RootConfigChanged(a) if a.config.get("storeCannotWrite") == Some(&json!(want)))
        })
    };
    while !told(client) {
        client.next_event(crate::PATIENCE).await?;
    }
    Ok(())
}

/// Fills the room a daemon started with `AHPD_TEST_STORE_MAX_PAGES` leaves in its store (`full`),
/// or gives it back, as another program's files fill a disk and are removed. The daemon writes
/// the filler itself: no other process may open its store while it runs.
pub async fn fill_store(client: &TestClient, full: bool) -> anyhow::Result<()> {
    client
        .request("ahpd/test/fillStore", json!({ "channel": "ahp-root://", "full": full }))
        .await
        .map_err(|e| anyhow::anyhow!("fillStore {full}: {e}"))?;
    Ok(())
}

/// The completed turns of a chat as a client holds them: (id, text).
pub fn completed_turns(client: &TestClient, chat: &str) -> Vec<(String, String)> {
    client
        .mirror
        .chat(chat)
        .map(|state| {
            state
                .turns
                .iter()
                .filter(|t| t.state == TurnState::Complete)
                .map(|t| (t.id.clone(), crate::turn_text(t)))
                .collect()
        })
        .unwrap_or_default()
}

/// A folder made immutable (`chattr +i` on it and every file and folder in it) until dropped, as
/// a person locks a data folder (`chattr -R +i`, which stops at the daemon's socket: the flag is
/// not for sockets).
pub struct Immutable(Vec<PathBuf>);

impl Immutable {
    /// Makes `dir` and all in it immutable, or says why it cannot be here (not root, or a file
    /// system without the flag).
    pub fn make(dir: &Path) -> Result<Self, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("the test does not run as root, so it cannot make a folder immutable (chattr +i)".into());
        }
        let mut paths = Vec::new();
        files_and_folders(dir, &mut paths).map_err(|e| format!("could not list {}: {e}", dir.display()))?;
        let immutable = Self(paths);
        let made = chattr("+i", &immutable.0)?;
        if !made.status.success() {
            return Err(format!(
                "chattr +i failed in {} (the file system may not have the flag): {}",
                dir.display(),
                String::from_utf8_lossy(&made.stderr).trim()
            ));
        }
        // As the kernel does within half a minute: dirty pages written back, so the next write to
        // a mapped page of a file here faults (and the file system answers the fault).
        let synced = std::process::Command::new("sync").arg("-f").arg(dir).status();
        if !synced.is_ok_and(|s| s.success()) {
            return Err(format!("sync -f {} failed", dir.display()));
        }
        Ok(immutable)
    }

    /// Makes it writable again.
    pub fn undo(self) {}
}

impl Drop for Immutable {
    fn drop(&mut self) {
        if !chattr("-i", &self.0).is_ok_and(|o| o.status.success()) {
            eprintln!("could not make {:?} writable again (chattr -i)", self.0.first());
        }
    }
}

fn chattr(flag: &str, paths: &[PathBuf]) -> Result<std::process::Output, String> {
    std::process::Command::new("chattr")
        .arg(flag)
        .args(paths)
        .output()
        .map_err(|e| format!("chattr could not run: {e}"))
}

/// `dir`, and every regular file and folder under it.
fn files_and_folders(dir: &Path, into: &mut Vec<PathBuf>) -> std::io::Result<()> {
    into.push(dir.to_owned());
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            files_and_folders(&entry.path(), into)?;
        } else if kind.is_file() {
            into.push(entry.path());
        }
    }
    Ok(())
}
