//! The `git` program, run as a child and read as data: every question and every change the
//! worktrees feature asks of a repository goes through here. Nothing is diffed or merged by hand:
//! `git diff-tree` diffs, `git merge-tree` says whether a merge applies, `git merge` merges.
//!
//! Each run is started with the one child guard (`agent_runner::child`: its own process group,
//! killed when it is given up on, never outliving the daemon — a git ended that way removes its
//! lock files), with a deadline and a cap on what it may print; the environment a daemon might
//! have inherited from a Git hook (`GIT_DIR`, `GIT_INDEX_FILE`, …) is taken out, prompts are off,
//! and messages are in the C locale so they read the same everywhere.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_runner::child::{ChildCommand, SpawnError};
use tokio::io::AsyncReadExt;

/// How long one git command may run.
const DEADLINE: Duration = Duration::from_secs(120);
/// The most a git command may print before it is stopped (a diff of a huge tree).
pub const OUTPUT_CAP: usize = 32 * 1024 * 1024;
/// Variables that point git somewhere else than the folder it is run in.
const INHERITED: [&str; 9] = [
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_CEILING_DIRECTORIES",
];

/// What went wrong running git.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The program could not be started.
    #[error("could not run git: {0}")]
    Spawn(#[source] SpawnError),
    /// Reading what it printed, or a file of ahpd's own beside it, failed.
    #[error("{0}")]
    Io(#[source] std::io::Error),
    /// It ran and failed.
    #[error("git {args} failed: {stderr}")]
    Failed {
        /// The arguments, for the log.
        args: String,
        /// Its exit code.
        code: Option<i32>,
        /// What it said.
        stderr: String,
    },
    /// It ran past its deadline or printed more than its cap, and was stopped.
    #[error("git {0} was stopped: it took too long or printed too much")]
    Stopped(String),
}

/// What a git run printed.
#[derive(Debug)]
pub struct Output {
    /// Its exit code.
    pub code: Option<i32>,
    /// Its standard output.
    pub stdout: Vec<u8>,
    /// Its standard error, as text.
    pub stderr: String,
}

impl Output {
    /// Standard output as text, trimmed.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim().to_owned()
    }
}

/// One git command in a folder.
pub struct Git<'a> {
    dir: &'a Path,
    args: Vec<OsString>,
    env: Vec<(&'static str, OsString)>,
    private: bool,
}

/// A git command run in `dir`.
pub fn git(dir: &Path) -> Git<'_> {
    Git { dir, args: Vec::new(), env: Vec::new(), private: false }
}

impl<'a> Git<'a> {
    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets a variable for this run.
    pub fn env(mut self, key: &'static str, value: impl Into<OsString>) -> Self {
        self.env.push((key, value.into()));
        self
    }

    /// What it writes is its owner's alone (a worktree checked out in the private data folder).
    pub fn private(mut self) -> Self {
        self.private = true;
        self
    }

    fn shown(&self) -> String {
        self.args.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
    }

    /// Runs it; answers what it printed whatever its exit code.
    pub async fn output(self) -> Result<Output, GitError> {
        let shown = self.shown();
        let mut command = ChildCommand::new("git")
            .args([std::ffi::OsStr::new("-C"), self.dir.as_os_str()])
            .args(["-c", "core.quotepath=off", "-c", "color.ui=false"])
            .args(&self.args)
            .env_remove(INHERITED)
            .envs([("GIT_TERMINAL_PROMPT", "0"), ("GIT_PAGER", "cat"), ("LC_ALL", "C")])
            .envs(self.env.iter().map(|(k, v)| (*k, v)))
            .stdin_null()
            .stderr_to_caller();
        if self.private {
            command = command.private_files();
        }
        let (child, pipes) = command.spawn().map_err(GitError::Spawn)?;
        let Some(mut stderr) = pipes.stderr else {
            return Err(GitError::Io(std::io::Error::other("git has no stderr pipe")));
        };
        let run = async {
            let mut out = Vec::new();
            let mut err = Vec::new();
            let mut capped = pipes.stdout.take(OUTPUT_CAP as u64 + 1);
            let (read_out, read_err) = tokio::join!(capped.read_to_end(&mut out), stderr.read_to_end(&mut err));
            read_out.map_err(GitError::Io)?;
            read_err.map_err(GitError::Io)?;
            if out.len() > OUTPUT_CAP {
                return Err(GitError::Stopped(shown.clone()));
            }
            let status = child.wait().await;
            Ok(Output {
                code: status.and_then(|s| s.code()),
                stdout: out,
                stderr: String::from_utf8_lossy(&err).trim().to_owned(),
            })
        };
        // Given up on (too slow, or printing too much), its group is killed with its guard.
        match tokio::time::timeout(DEADLINE, run).await {
            Ok(result) => result,
            Err(_) => Err(GitError::Stopped(shown)),
        }
    }

    /// Runs it; a non-zero exit is an error.
    pub async fn run(self) -> Result<Output, GitError> {
        let shown = self.shown();
        let output = self.output().await?;
        if output.code == Some(0) {
            Ok(output)
        } else {
            Err(GitError::Failed { args: shown, code: output.code, stderr: output.stderr })
        }
    }

    /// Runs it; answers its output as trimmed text.
    pub async fn text(self) -> Result<String, GitError> {
        Ok(self.run().await?.text())
    }
}

/// The top of the work tree `folder` is in, or `None` when it is in none.
pub async fn toplevel(folder: &Path) -> Result<Option<PathBuf>, GitError> {
    let output = git(folder).args(["rev-parse", "--show-toplevel"]).output().await?;
    Ok((output.code == Some(0)).then(|| PathBuf::from(output.text())))
}

/// The branch checked out in `dir` (`None`: a detached HEAD, or no commit yet).
pub async fn current_branch(dir: &Path) -> Result<Option<String>, GitError> {
    let output = git(dir).args(["symbolic-ref", "-q", "--short", "HEAD"]).output().await?;
    Ok((output.code == Some(0)).then(|| output.text()).filter(|b| !b.is_empty()))
}

/// The commit `rev` names in `dir`, if it names one.
pub async fn commit_of(dir: &Path, rev: &str) -> Result<Option<String>, GitError> {
    let output = git(dir).args(["rev-parse", "-q", "--verify", &format!("{rev}^{{commit}}")]).output().await?;
    Ok((output.code == Some(0)).then(|| output.text()))
}

/// The paths whose tracked content differs from `HEAD` (staged or not), and, with `untracked`,
/// the untracked files too (ignored files never).
pub async fn dirty(dir: &Path, untracked: bool) -> Result<Vec<String>, GitError> {
    let mode = if untracked { "--untracked-files=all" } else { "--untracked-files=no" };
    let output = git(dir)
        .args(["status", "--porcelain=v1", "-z", "--no-renames", mode])
        .env("GIT_OPTIONAL_LOCKS", "0")
        .run()
        .await?;
    Ok(output
        .stdout
        .split(|b| *b == 0)
        .filter(|entry| entry.len() > 3)
        .map(|entry| String::from_utf8_lossy(&entry[3..]).into_owned())
        .collect())
}

/// True when a local branch called `name` exists.
pub async fn branch_exists(dir: &Path, name: &str) -> Result<bool, GitError> {
    let output = git(dir).args(["show-ref", "--verify", "-q", &format!("refs/heads/{name}")]).output().await?;
    Ok(output.code == Some(0))
}

/// True when `name` is a valid branch name.
pub async fn valid_branch_name(dir: &Path, name: &str) -> Result<bool, GitError> {
    let output = git(dir).args(["check-ref-format", "--branch", name]).output().await?;
    Ok(output.code == Some(0) && !name.starts_with('-'))
}

/// Cuts a worktree at `path` on a new branch `branch` from `commit`.
pub async fn worktree_add(repo: &Path, path: &Path, branch: &str, commit: &str) -> Result<(), GitError> {
    git(repo)
        .args(["worktree", "add", "--quiet", "-b", branch])
        .args([path.as_os_str()])
        .args([commit])
        .private()
        .run()
        .await?;
    Ok(())
}

/// Checks an existing branch out again at `path` (a worktree removed while its branch stayed).
pub async fn worktree_restore(repo: &Path, path: &Path, branch: &str) -> Result<(), GitError> {
    git(repo).args(["worktree", "add", "--quiet"]).args([path.as_os_str()]).args([branch]).private().run().await?;
    Ok(())
}

/// Removes the worktree at `path` (`force`: even with changes in it).
pub async fn worktree_remove(repo: &Path, path: &Path, force: bool) -> Result<(), GitError> {
    let mut command = git(repo).args(["worktree", "remove"]);
    if force {
        command = command.args(["--force", "--force"]);
    }
    command.args([path.as_os_str()]).run().await?;
    Ok(())
}

/// Forgets worktrees whose folders are gone.
pub async fn worktree_prune(repo: &Path) -> Result<(), GitError> {
    git(repo).args(["worktree", "prune"]).run().await?;
    Ok(())
}

/// The folders of a repository's worktrees, its main one first.
pub async fn worktree_list(repo: &Path) -> Result<Vec<PathBuf>, GitError> {
    let output = git(repo).args(["worktree", "list", "--porcelain", "-z"]).run().await?;
    Ok(output
        .stdout
        .split(|b| *b == 0)
        .filter_map(|field| field.strip_prefix(b"worktree "))
        .map(|path| PathBuf::from(String::from_utf8_lossy(path).into_owned()))
        .collect())
}

/// Deletes a local branch (`force`: even when it is not merged).
pub async fn branch_delete(repo: &Path, branch: &str, force: bool) -> Result<(), GitError> {
    git(repo).args(["branch", "--quiet", if force { "-D" } else { "-d" }, branch]).run().await?;
    Ok(())
}

/// True when `ancestor` is an ancestor of (or equal to) `of`.
pub async fn is_ancestor(dir: &Path, ancestor: &str, of: &str) -> Result<bool, GitError> {
    let output = git(dir).args(["merge-base", "--is-ancestor", ancestor, of]).output().await?;
    match output.code {
        Some(0) => Ok(true),
        Some(1) => Ok(false),
        code => Err(GitError::Failed { args: "merge-base --is-ancestor".into(), code, stderr: output.stderr }),
    }
}

/// The best common ancestor of two commits.
pub async fn merge_base(dir: &Path, a: &str, b: &str) -> Result<Option<String>, GitError> {
    let output = git(dir).args(["merge-base", a, b]).output().await?;
    Ok((output.code == Some(0)).then(|| output.text()))
}

/// The name and address commits are made under: the repository's own when it has one, else
/// ahpd's (a daemon's home often has no git identity).
async fn identity(dir: &Path) -> Result<Vec<(&'static str, String)>, GitError> {
    let email = git(dir).args(["config", "--get", "user.email"]).output().await?;
    let name = git(dir).args(["config", "--get", "user.name"]).output().await?;
    let mut env = Vec::new();
    if email.code != Some(0) || email.text().is_empty() {
        env.push(("GIT_AUTHOR_EMAIL", "ahpd@localhost".to_owned()));
        env.push(("GIT_COMMITTER_EMAIL", "ahpd@localhost".to_owned()));
    }
    if name.code != Some(0) || name.text().is_empty() {
        env.push(("GIT_AUTHOR_NAME", "ahpd".to_owned()));
        env.push(("GIT_COMMITTER_NAME", "ahpd".to_owned()));
    }
    Ok(env)
}

/// A folder's content as a commit: every file git would take with `add -A` (ignored files left
/// out), written through a private index so the folder's own index and files are untouched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The commit (its parent is `HEAD`, when there is one).
    pub commit: String,
    /// Its tree.
    pub tree: String,
}

/// A private index file, removed when dropped (git's own `.lock` beside it is git's to remove).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Takes a [`Snapshot`] of `dir`. `scratch` is a folder of ahpd's own for the private index.
pub async fn snapshot(dir: &Path, scratch: &Path, message: &str) -> Result<Snapshot, GitError> {
    crate::fsutil::create_private_dir(scratch).map_err(GitError::Io)?;
    let index = Scratch(scratch.join(format!("index-{}", uuid::Uuid::new_v4().simple())));
    let index_path = index.0.clone();
    // Start from the folder's own index, so unchanged files are not read again.
    let own = git(dir).args(["rev-parse", "--path-format=absolute", "--git-path", "index"]).text().await?;
    if std::fs::copy(&own, &index_path).is_err() {
        // No index yet (nothing ever staged): begin from HEAD's tree, or from nothing.
        let _ = std::fs::remove_file(&index_path);
    }
    git(dir).args(["add", "-A", "--", "."]).env("GIT_INDEX_FILE", &index_path).run().await?;
    let tree = git(dir).args(["write-tree"]).env("GIT_INDEX_FILE", &index_path).text().await?;
    drop(index);
    let head = commit_of(dir, "HEAD").await?;
    let mut command = git(dir).args(["commit-tree", &tree, "-m", message]);
    if let Some(head) = &head {
        command = command.args(["-p", head]);
    }
    for (key, value) in identity(dir).await? {
        command = command.env(key, value);
    }
    let commit = command.text().await?;
    Ok(Snapshot { commit, tree })
}

/// Points `name` at `commit`.
pub async fn update_ref(dir: &Path, name: &str, commit: &str) -> Result<(), GitError> {
    git(dir).args(["update-ref", name, commit]).run().await?;
    Ok(())
}

/// Deletes every ref under `prefix` (`refs/ahpd/<session>/`).
pub async fn delete_refs(dir: &Path, prefix: &str) -> Result<(), GitError> {
    let listed = git(dir).args(["for-each-ref", "--format=%(refname)", prefix]).text().await?;
    for name in listed.lines().filter(|l| !l.is_empty()) {
        git(dir).args(["update-ref", "-d", name]).run().await?;
    }
    Ok(())
}

/// How one file differs between two trees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDiff {
    /// Its path, relative to the top of the repository.
    pub path: String,
    /// Its blob before (`None`: it was added).
    pub before: Option<String>,
    /// Its blob after (`None`: it was deleted).
    pub after: Option<String>,
    /// Lines added and removed; `None` for a binary file.
    pub lines: Option<(i64, i64)>,
    /// Its patch text (absent for a binary file, or past the output cap).
    pub patch: Option<String>,
}

/// What differs between two trees (commits), file by file, with each file's patch. Renames are
/// shown as a deletion and an addition.
pub async fn diff(dir: &Path, from: &str, to: &str) -> Result<Vec<FileDiff>, GitError> {
    const ZERO: &str = "0000000000000000000000000000000000000000";
    let raw = git(dir).args(["diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", from, to]).run().await?;
    let mut files = Vec::new();
    let mut fields = raw.stdout.split(|b| *b == 0).filter(|f| !f.is_empty());
    while let (Some(meta), Some(path)) = (fields.next(), fields.next()) {
        let meta = String::from_utf8_lossy(meta);
        let parts: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
        let (Some(before), Some(after)) = (parts.get(2), parts.get(3)) else { continue };
        let side = |sha: &str| (!sha.starts_with(ZERO)).then(|| sha.to_owned());
        files.push(FileDiff {
            path: String::from_utf8_lossy(path).into_owned(),
            before: side(before),
            after: side(after),
            lines: None,
            patch: None,
        });
    }
    if files.is_empty() {
        return Ok(files);
    }
    let numstat = git(dir).args(["diff-tree", "-r", "-z", "--no-renames", "--numstat", from, to]).run().await?;
    for entry in numstat.stdout.split(|b| *b == 0).filter(|f| !f.is_empty()) {
        let entry = String::from_utf8_lossy(entry);
        let mut parts = entry.splitn(3, '\t');
        let (Some(added), Some(removed), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        if let Some(file) = files.iter_mut().find(|f| f.path == path) {
            file.lines = added.parse().ok().zip(removed.parse().ok());
        }
    }
    let patch = git(dir).args(["diff-tree", "-r", "-p", "--no-renames", "--no-commit-id", from, to]).run().await;
    // Past the output cap the files keep their counts and go without their text.
    if let Ok(patch) = patch {
        for (path, text) in split_patch(&String::from_utf8_lossy(&patch.stdout)) {
            if let Some(file) = files.iter_mut().find(|f| f.path == path && f.lines.is_some()) {
                file.patch = Some(text);
            }
        }
    }
    Ok(files)
}

/// A whole patch cut into each file's part, keyed by the file's path.
fn split_patch(patch: &str) -> Vec<(String, String)> {
    let mut parts = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in patch.split_inclusive('\n') {
        if let Some(header) = line.strip_prefix("diff --git ") {
            if let Some(done) = current.take() {
                parts.push(done);
            }
            // `a/<path> b/<path>`: the path is the second half, after `b/`.
            let path = header.trim_end().rsplit_once(" b/").map(|(_, p)| p.to_owned()).unwrap_or_default();
            current = Some((path, String::new()));
        }
        if let Some((_, text)) = current.as_mut() {
            text.push_str(line);
        }
    }
    parts.extend(current);
    parts
}

/// A blob's bytes, at most `cap` of them (and whether there were more).
pub async fn blob(dir: &Path, sha: &str, cap: usize) -> Result<(Vec<u8>, bool), GitError> {
    let kind = git(dir).args(["cat-file", "-t", sha]).text().await?;
    if kind != "blob" {
        return Err(GitError::Failed {
            args: format!("cat-file {sha}"),
            code: None,
            stderr: format!("{sha} is a {kind}"),
        });
    }
    let mut bytes = git(dir).args(["cat-file", "blob", sha]).run().await?.stdout;
    let more = bytes.len() > cap;
    bytes.truncate(cap);
    Ok((bytes, more))
}

/// What a merge of `theirs` into `ours` would do, worked out without touching any folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trial {
    /// It applies cleanly.
    Clean,
    /// It conflicts in these files.
    Conflicts(Vec<String>),
}

/// Tries a merge in memory (`git merge-tree --write-tree`).
pub async fn try_merge(dir: &Path, ours: &str, theirs: &str) -> Result<Trial, GitError> {
    let output = git(dir)
        .args(["merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", ours, theirs])
        .output()
        .await?;
    match output.code {
        Some(0) => Ok(Trial::Clean),
        Some(1) => {
            let mut names: Vec<String> = output
                .stdout
                .split(|b| *b == 0)
                .skip(1)
                .filter(|f| !f.is_empty())
                .map(|f| String::from_utf8_lossy(f).into_owned())
                .collect();
            names.dedup();
            Ok(Trial::Conflicts(names))
        }
        code => Err(GitError::Failed { args: "merge-tree".into(), code, stderr: output.stderr }),
    }
}

/// Merges `branch` into what `dir` has checked out.
pub async fn merge(dir: &Path, branch: &str, message: &str) -> Result<(), GitError> {
    let mut command = git(dir).args(["merge", "--no-edit", "--no-verify", "-m", message, branch]);
    for (key, value) in identity(dir).await? {
        command = command.env(key, value);
    }
    if let Err(e) = command.run().await {
        // Leave nothing half-merged behind.
        let _ = git(dir).args(["merge", "--abort"]).output().await;
        return Err(e);
    }
    Ok(())
}

/// Makes `commit` (a snapshot of the folder) the branch's new tip, with the index following.
pub async fn adopt(dir: &Path, commit: &str) -> Result<(), GitError> {
    let head = commit_of(dir, "HEAD").await?;
    let mut command = git(dir).args(["update-ref", "-m", "ahpd: commit", "HEAD", commit]);
    if let Some(head) = &head {
        command = command.args([head.as_str()]);
    }
    command.run().await?;
    git(dir).args(["reset", "--quiet"]).run().await?;
    Ok(())
}

/// Puts the folder back to `commit`: its tracked files and its untracked ones (ignored files
/// stay).
pub async fn reset_hard(dir: &Path, commit: &str) -> Result<(), GitError> {
    git(dir).args(["reset", "--quiet", "--hard", commit]).run().await?;
    git(dir).args(["clean", "--quiet", "-f", "-d"]).run().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository with one commit of `a.txt`, and ahpd's scratch folder beside it.
    pub(crate) async fn repo() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(&repo).expect("mkdir");
        git(&repo).args(["init", "-q", "-b", "main"]).run().await.expect("init");
        std::fs::write(repo.join("a.txt"), "one\n").expect("write");
        git(&repo).args(["add", "a.txt"]).run().await.expect("add");
        let mut commit = git(&repo).args(["commit", "-q", "-m", "first"]);
        for (k, v) in identity(&repo).await.expect("identity") {
            commit = commit.env(k, v);
        }
        commit.run().await.expect("commit");
        (dir, repo)
    }

    #[tokio::test]
    async fn a_folder_outside_git_has_no_toplevel() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert_eq!(toplevel(dir.path()).await.expect("git runs"), None);
        let (_keep, repo) = repo().await;
        let top = toplevel(&repo.join(".")).await.expect("git runs").expect("a repo");
        assert_eq!(top.canonicalize().ok(), repo.canonicalize().ok());
        assert_eq!(current_branch(&repo).await.expect("branch"), Some("main".into()));
    }

    #[tokio::test]
    async fn a_snapshot_leaves_the_index_alone_and_diffs_against_head() {
        let (keep, repo) = repo().await;
        std::fs::write(repo.join("a.txt"), "one\ntwo\n").expect("write");
        std::fs::write(repo.join("new.txt"), "fresh\n").expect("write");
        std::fs::write(repo.join("bin.dat"), [0u8, 159, 146, 150]).expect("write");
        let snap = snapshot(&repo, &keep.path().join("scratch"), "test").await.expect("snapshot");
        // The folder's own index still has nothing staged.
        let staged = git(&repo).args(["diff", "--cached", "--name-only"]).text().await.expect("diff");
        assert_eq!(staged, "");
        let files = diff(&repo, "HEAD", &snap.commit).await.expect("diff");
        let names: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(names, vec!["a.txt", "bin.dat", "new.txt"]);
        assert_eq!(files[0].lines, Some((1, 0)));
        assert!(files[0].patch.as_deref().is_some_and(|p| p.contains("+two")), "{:?}", files[0].patch);
        assert_eq!(files[1].lines, None, "binary");
        assert_eq!(files[1].patch, None);
        assert!(files[2].before.is_none() && files[2].after.is_some());
        let (bytes, more) = blob(&repo, files[2].after.as_deref().expect("after"), 3).await.expect("blob");
        assert_eq!((bytes.as_slice(), more), (&b"fre"[..], true));
    }

    #[tokio::test]
    async fn a_merge_that_conflicts_is_named_before_anything_changes() {
        let (keep, repo) = repo().await;
        let scratch = keep.path().join("scratch");
        let wt = keep.path().join("wt");
        let base = commit_of(&repo, "HEAD").await.expect("head").expect("a commit");
        worktree_add(&repo, &wt, "ahpd/one", &base).await.expect("worktree");
        assert!(branch_exists(&repo, "ahpd/one").await.expect("show-ref"));
        std::fs::write(wt.join("a.txt"), "theirs\n").expect("write");
        let theirs = snapshot(&wt, &scratch, "theirs").await.expect("snapshot");
        std::fs::write(repo.join("a.txt"), "ours\n").expect("write");
        let ours = snapshot(&repo, &scratch, "ours").await.expect("snapshot");
        let trial = try_merge(&repo, &ours.commit, &theirs.commit).await.expect("merge-tree");
        assert_eq!(trial, Trial::Conflicts(vec!["a.txt".into()]));
        assert_eq!(try_merge(&repo, &base, &theirs.commit).await.expect("merge-tree"), Trial::Clean);
        assert_eq!(worktree_list(&repo).await.expect("list").len(), 2);
        worktree_remove(&repo, &wt, true).await.expect("remove");
        assert_eq!(worktree_list(&repo).await.expect("list").len(), 1);
    }

    #[test]
    fn a_patch_is_cut_per_file() {
        let patch = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\ndiff --git a/d/y z b/d/y z\nnew\n";
        let parts = split_patch(patch);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].0, "x");
        assert!(parts[0].1.ends_with("+b\n"));
        assert_eq!(parts[1].0, "d/y z");
    }
}
