//! The mark `ahpd restart` leaves in the data folder while it replaces the daemon: between the old
//! daemon's exit and its successor's start no daemon answers, and an `ahpd --stdio` that came then
//! (a remote host's link reconnecting) must wait for the successor rather than serve the same
//! store in process beside it.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::paths::Paths;

/// A mark older than this is one a restart that died left behind: nothing waits for it.
const FRESH_FOR: Duration = Duration::from_secs(120);

/// The mark's file.
fn mark_file(paths: &Paths) -> PathBuf {
    paths.data_dir.join("restarting")
}

/// Removes the mark when dropped (the restart ended, however it ended).
pub struct Restarting(PathBuf);

impl Drop for Restarting {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Marks a restart under way until the answer is dropped. A mark that cannot be written is logged
/// and the restart goes on (only a `--stdio` arriving in the gap would miss it).
pub fn mark(paths: &Paths) -> Restarting {
    let file = mark_file(paths);
    let said = format!("{}\n", std::process::id());
    if let Err(e) = crate::fsutil::write_private(&file, said.as_bytes()) {
        tracing::warn!("could not mark the restart in {}: {e}", file.display());
    }
    Restarting(file)
}

/// True while a restart marked itself in this data folder, lately.
pub fn under_way(paths: &Paths) -> bool {
    let modified = std::fs::metadata(mark_file(paths)).and_then(|m| m.modified());
    modified.is_ok_and(|at| SystemTime::now().duration_since(at).is_ok_and(|age| age < FRESH_FOR))
}
