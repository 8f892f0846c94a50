//! The `sandbox` level on Linux: bubblewrap (`bwrap`), as Anthropic's sandbox-runtime uses it.
//!
//! What a sandboxed session's processes see ([`bwrap_args`], in mount order, later over earlier):
//! the machine's files read-only; `/tmp`, the ahpd data folder and the secrets of the home folder
//! (`~/.ssh`, `~/.gnupg`, `~/.aws`, …) hidden behind empty folders; the home folder read-only; the
//! session's worktree and its git metadata writable, but the repository's hooks and config
//! read-only (a hook written there would run as the person at their next commit); the agent's
//! own state folders writable (`sandboxWritable`, Claude Code's `~/.claude` by default); no
//! network but the box's own loopback, on which `ahpd box-run` relays what the daemon allows
//! (`net.rs`, `relay.rs`).

use std::path::{Path, PathBuf};

/// Folders of the home folder that hold secrets: hidden, whatever else is allowed.
pub const SECRETS: [&str; 8] = [".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".netrc", ".config/gh"];

/// Everything a sandbox is made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The session's worktree: writable, and where it starts.
    pub worktree: PathBuf,
    /// The git folders the worktree writes (its own `.git/worktrees/<name>`, the repository's
    /// common `.git`).
    pub git_dirs: Vec<PathBuf>,
    /// What in them stays read-only (the common folder's `hooks` and `config`).
    pub git_read_only: Vec<PathBuf>,
    /// The person's home folder: read-only, its secrets hidden.
    pub home: Option<PathBuf>,
    /// Hidden: the ahpd data folder, and what else the daemon keeps private.
    pub hidden: Vec<PathBuf>,
    /// The agent's own state, writable (created when missing).
    pub writable: Vec<PathBuf>,
    /// The folder of the box's network sockets.
    pub sockets: PathBuf,
    /// The `ahpd` binary that runs first inside (`ahpd box-run`).
    pub ahpd: PathBuf,
    /// The loopback ports relayed, each with its socket.
    pub ports: Vec<(u16, PathBuf)>,
    /// The proxy's port inside and its socket.
    pub proxy: (u16, PathBuf),
}

fn push(args: &mut Vec<String>, words: &[&str]) {
    args.extend(words.iter().map(|w| (*w).to_owned()));
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// The launcher's argv: `bwrap` with the layout's mounts, then `ahpd box-run` with its relays,
/// ending with `--` (the program follows).
pub fn bwrap_args(bwrap: &Path, layout: &Layout) -> Vec<String> {
    let mut args = vec![path(bwrap)];
    push(&mut args, &["--die-with-parent", "--unshare-net", "--unshare-ipc", "--unshare-uts"]);
    push(&mut args, &["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]);
    // The launcher runs first inside: where it sits under /tmp (a checkout built there), it comes
    // back, read-only, over the empty /tmp.
    args.extend(["--ro-bind".into(), path(&layout.ahpd), path(&layout.ahpd)]);
    if let Some(home) = &layout.home {
        // Home may sit under /tmp (a test's): it comes back, read-only.
        args.extend(["--ro-bind-try".into(), path(home), path(home)]);
        for secret in SECRETS {
            let hidden = home.join(secret);
            if hidden.is_dir() {
                args.extend(["--tmpfs".into(), path(&hidden)]);
            } else if hidden.exists() {
                args.extend(["--ro-bind".into(), "/dev/null".into(), path(&hidden)]);
            }
        }
    }
    for hidden in &layout.hidden {
        if hidden.is_dir() {
            args.extend(["--tmpfs".into(), path(hidden)]);
        }
    }
    for dir in &layout.writable {
        args.extend(["--bind-try".into(), path(dir), path(dir)]);
    }
    for dir in &layout.git_dirs {
        args.extend(["--bind".into(), path(dir), path(dir)]);
    }
    for kept in &layout.git_read_only {
        args.extend(["--ro-bind-try".into(), path(kept), path(kept)]);
    }
    args.extend(["--bind".into(), path(&layout.worktree), path(&layout.worktree)]);
    args.extend(["--bind".into(), path(&layout.sockets), path(&layout.sockets)]);
    args.extend(["--chdir".into(), path(&layout.worktree)]);
    args.extend(["--".into(), path(&layout.ahpd), "box-run".into()]);
    for (port, socket) in &layout.ports {
        args.extend(["--port".into(), format!("{port}={}", socket.display())]);
    }
    let (port, socket) = &layout.proxy;
    args.extend(["--proxy".into(), format!("{port}={}", socket.display())]);
    args.push("--".into());
    args
}

/// The git folders a worktree writes, and what in them stays read-only: for a worktree (`.git`
/// a file naming its folder) its own folder and the repository's common one; for a repository's
/// own checkout, its `.git`.
pub fn git_dirs(worktree: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let dot_git = worktree.join(".git");
    let (own, common) = if dot_git.is_dir() {
        (None, dot_git)
    } else {
        let Ok(text) = std::fs::read_to_string(&dot_git) else { return (Vec::new(), Vec::new()) };
        let Some(own) = text.trim().strip_prefix("gitdir:").map(|d| worktree.join(d.trim())) else {
            return (Vec::new(), Vec::new());
        };
        let common = std::fs::read_to_string(own.join("commondir"))
            .map(|c| own.join(c.trim()))
            .unwrap_or_else(|_| own.join("..").join(".."));
        let common = common.canonicalize().unwrap_or(common);
        (Some(own), common)
    };
    let read_only = vec![common.join("hooks"), common.join("config")];
    (own.into_iter().chain([common]).collect(), read_only)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worktree_is_mounted_after_what_hides_it_and_the_program_follows_the_relays() {
        let layout = Layout {
            worktree: "/data/worktrees/r/b".into(),
            git_dirs: vec!["/repo/.git".into()],
            git_read_only: vec!["/repo/.git/hooks".into()],
            home: None,
            hidden: Vec::new(),
            writable: Vec::new(),
            sockets: "/tmp/ahpd-box-1".into(),
            ahpd: "/tmp/build/ahpd".into(),
            ports: vec![(4000, "/tmp/ahpd-box-1/port-4000.sock".into())],
            proxy: (3128, "/tmp/ahpd-box-1/proxy.sock".into()),
        };
        let args = bwrap_args(Path::new("bwrap"), &layout);
        let at = |word: &str| args.iter().position(|a| a == word).unwrap_or_else(|| panic!("{word} in {args:?}"));
        assert!(at("/repo/.git/hooks") > at("/repo/.git"), "hooks read-only over the writable .git");
        assert!(at("--unshare-net") < at("--ro-bind"));
        assert!(at("/tmp/build/ahpd") > at("/tmp"), "the launcher is there over the empty /tmp");
        let tail: Vec<&str> = args[args.len() - 5..].iter().map(String::as_str).collect();
        assert_eq!(
            tail,
            ["--port", "4000=/tmp/ahpd-box-1/port-4000.sock", "--proxy", "3128=/tmp/ahpd-box-1/proxy.sock", "--"]
        );
    }
}
