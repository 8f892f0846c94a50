//! One folder's Agent Merge settings: the options its calls named over VS Code's defaults, the
//! configuration it answers with, and the branch it captures when first turned on.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::trust::Authors;
use super::Settings;
use crate::store::{AgentMergeOptions, AgentMergeRecord};

/// `asked` over `current`: what a call names changes, what it omits stays.
pub fn merged(current: &AgentMergeOptions, asked: &AgentMergeOptions) -> AgentMergeOptions {
    AgentMergeOptions {
        address_reviews: asked.address_reviews.or(current.address_reviews),
        fix_ci: asked.fix_ci.or(current.fix_ci),
        resolve_conflicts: asked.resolve_conflicts.or(current.resolve_conflicts),
        merge_pull_request: asked.merge_pull_request.clone().or_else(|| current.merge_pull_request.clone()),
    }
}

/// The options in force: VS Code's defaults under the folder's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InForce {
    pub address_reviews: bool,
    pub fix_ci: bool,
    pub resolve_conflicts: bool,
    pub merge_pull_request: String,
}

impl InForce {
    pub fn of(options: &AgentMergeOptions) -> Self {
        Self {
            address_reviews: options.address_reviews.unwrap_or(true),
            fix_ci: options.fix_ci.unwrap_or(true),
            resolve_conflicts: options.resolve_conflicts.unwrap_or(true),
            merge_pull_request: options.merge_pull_request.clone().unwrap_or_else(|| "never".to_owned()),
        }
    }

    /// What it follows on the pull request, in words.
    pub fn watches(&self) -> Vec<&'static str> {
        let mut what = Vec::new();
        if self.fix_ci {
            what.push("checks");
        }
        if self.address_reviews {
            what.push("reviews");
        }
        if self.resolve_conflicts {
            what.push("conflicts");
        }
        what
    }
}

/// The configuration in force for a folder, as VS Code answers it: whether (and on what branch)
/// it is watching, and when it merges.
pub fn configuration_of(record: &AgentMergeRecord, monitoring: &str, settings: &Settings) -> Value {
    let o = InForce::of(&record.options);
    let authors = Authors::describe(&settings.allowed_authors);
    let configuration = json!({
        "addressReviews": o.address_reviews,
        "fixCI": o.fix_ci,
        "resolveConflicts": o.resolve_conflicts,
        "mergePullRequest": o.merge_pull_request,
        "mergeMethod": settings.merge_method,
        "replyAttribution": true,
        "reviewAuthors": authors,
    });
    if !record.enabled {
        return json!({ "enabled": false, "configuration": configuration, "monitoring": "disabled" });
    }
    json!({
        "enabled": true,
        "configuration": configuration,
        "monitoring": monitoring,
        "target": { "branchName": record.target },
    })
}

/// The Git folder of `folder` (or of the repository above it): `.git`, or the folder a
/// worktree's `.git` file names.
pub fn git_dir(folder: &Path) -> Option<PathBuf> {
    let mut dir = Some(folder);
    while let Some(here) = dir {
        let dot_git = here.join(".git");
        if dot_git.is_dir() {
            return Some(dot_git);
        }
        if dot_git.is_file() {
            let text = std::fs::read_to_string(&dot_git).ok()?;
            let path = PathBuf::from(text.strip_prefix("gitdir:")?.trim());
            return Some(if path.is_absolute() { path } else { here.join(path) });
        }
        dir = here.parent();
    }
    None
}

/// The branch checked out in `folder`, read from Git's own files.
pub fn current_branch(folder: &Path) -> Option<String> {
    let head = std::fs::read_to_string(git_dir(folder)?.join("HEAD")).ok()?;
    let branch = head.trim().strip_prefix("ref: refs/heads/")?;
    (!branch.is_empty()).then(|| branch.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(options: AgentMergeOptions) -> AgentMergeRecord {
        AgentMergeRecord {
            session: "s".into(),
            folder: "/f".into(),
            chat: None,
            enabled: true,
            options,
            target: Some("feature".into()),
            enabled_by: None,
            changed_at: String::new(),
            asked: Vec::new(),
        }
    }

    #[test]
    fn options_persist_and_merging_is_off_until_asked() {
        let settings = Settings {
            github: crate::github::Access::default(),
            poll: std::time::Duration::from_secs(60),
            merge_method: "squash".into(),
            allowed_authors: vec!["Copilot".into()],
        };
        let answer = configuration_of(&record(AgentMergeOptions::default()), "waitingForPullRequest", &settings);
        assert_eq!(answer["configuration"]["mergePullRequest"], "never");
        assert_eq!(answer["configuration"]["reviewAuthors"]["allowed"], json!(["Copilot"]));
        let asked = AgentMergeOptions { merge_pull_request: Some("always".into()), ..Default::default() };
        let later = merged(
            &merged(&AgentMergeOptions::default(), &asked),
            &AgentMergeOptions { fix_ci: Some(false), ..Default::default() },
        );
        assert_eq!(later.merge_pull_request.as_deref(), Some("always"), "omitted options stay unchanged");
        assert_eq!(later.fix_ci, Some(false));
        assert_eq!(InForce::of(&later).watches(), vec!["reviews", "conflicts"]);
    }

    #[test]
    fn the_branch_is_read_from_git_head_and_a_worktree_file() {
        let dir = tempfile::tempdir().expect("dir");
        assert_eq!(current_branch(&dir.path().join("nowhere")), None);
        std::fs::create_dir_all(dir.path().join("repo/.git")).expect("git dir");
        std::fs::write(dir.path().join("repo/.git/HEAD"), "ref: refs/heads/feature\n").expect("head");
        std::fs::create_dir_all(dir.path().join("repo/src")).expect("src");
        assert_eq!(current_branch(&dir.path().join("repo/src")).as_deref(), Some("feature"));
        std::fs::create_dir_all(dir.path().join("wt-git")).expect("wt git dir");
        std::fs::write(dir.path().join("wt-git/HEAD"), "ref: refs/heads/tools\n").expect("head");
        std::fs::create_dir_all(dir.path().join("wt")).expect("wt");
        std::fs::write(dir.path().join("wt/.git"), format!("gitdir: {}\n", dir.path().join("wt-git").display()))
            .expect("file");
        assert_eq!(current_branch(&dir.path().join("wt")).as_deref(), Some("tools"));
    }
}
