//! The event triggers this host defines (`listAutomationTriggerDefinitions`) and how a saved one
//! is checked and normalized: its type one of these, its events among the type's, its config as
//! the type's schema says, its title and description the host's words.
//!
//! - `session`: a session ended its work (`finished`) or failed (`failed`); chains automations.
//! - `webhook`: `POST /hooks/<automation id>` with the automation's own secret in
//!   `Authorization: Bearer <secret>` (`received`); anything else can start a run this way.
//! - `gitBranch`: a branch of a repository on this machine moved (`moved`): a commit or a push
//!   landed on it.
//! - `githubPullRequest`: a pull request of a GitHub repository was opened (`opened`), or a check
//!   its head must pass failed (`checkFailed`); `githubIssue`: an issue was opened (`opened`) or
//!   given a label (`labeled`); `githubBranchCheck`: a check on a branch's head failed (`failed`).
//!   Watched by `github_watch.rs` through the one GitHub client ahpd has.

use ahp_types::state::{AutomationEventTrigger, AutomationTriggerDefinition};
use serde_json::{json, Value};

/// A session's turn ended and nothing waits behind it.
pub const SESSION: &str = "session";
/// An authenticated `POST /hooks/<id>`.
pub const WEBHOOK: &str = "webhook";
/// A branch of a Git repository moved (a commit or a push landed on it).
pub const GIT_BRANCH: &str = "gitBranch";

/// A GitHub repository's pull requests.
pub const GITHUB_PULL_REQUEST: &str = "githubPullRequest";
/// A GitHub repository's issues.
pub const GITHUB_ISSUE: &str = "githubIssue";
/// The checks on a GitHub repository's branch.
pub const GITHUB_BRANCH_CHECK: &str = "githubBranchCheck";
/// Every GitHub trigger type.
pub const GITHUB: [&str; 3] = [GITHUB_PULL_REQUEST, GITHUB_ISSUE, GITHUB_BRANCH_CHECK];

/// Every event trigger this host defines.
pub fn definitions() -> Vec<AutomationTriggerDefinition> {
    let string =
        |title: &str, description: &str| json!({ "type": "string", "title": title, "description": description });
    let listed = json!([
        {
            "type": SESSION,
            "title": "A session ends",
            "description": "Starts a run when a session on this host ends its work, to chain automations.",
            "events": [
                { "id": "finished", "title": "Finished", "description": "Its turn completed and nothing waits behind it." },
                { "id": "failed", "title": "Failed", "description": "Its turn failed." }
            ],
            "configSchema": { "type": "object", "properties": {
                "automation": string("After automation", "Only sessions of this automation's runs (its ahp-automation:/ URI); absent: any session.")
            } }
        },
        {
            "type": GIT_BRANCH,
            "title": "A branch moved",
            "description": "Starts a run when a branch of a Git repository on this machine moves: a commit or a push landed on it.",
            "events": [ { "id": "moved", "title": "Moved", "description": "The branch points at another commit than when last looked at." } ],
            "configSchema": { "type": "object", "required": ["folder", "branch"], "properties": {
                "folder": string("Folder", "The repository's folder (an absolute path or a file:// URI)."),
                "branch": string("Branch", "The branch to watch, for example main.")
            } }
        },
        {
            "type": GITHUB_PULL_REQUEST,
            "title": "A GitHub pull request",
            "description": "Starts a run when a pull request of a GitHub repository opens, or a check it must pass fails. By default only for pull requests by the repository's owners, members and collaborators; its title and body reach the agent as quoted data.",
            "events": [
                { "id": "opened", "title": "Opened", "description": "A pull request was opened." },
                { "id": "checkFailed", "title": "Check failed", "description": "A check its head must pass (required by branch protection, or any with checks: all) failed." }
            ],
            "configSchema": { "type": "object", "required": ["repository"], "properties": {
                "repository": string("Repository", "The GitHub repository, as owner/name."),
                "base": string("Base branch", "Only pull requests into this branch; absent: any."),
                "checks": string("Checks", "required (the default): a check branch protection requires; all: any check."),
                "authors": string("Authors", "trusted (the default): pull requests by the repository's owners, members and collaborators; anyone: every pull request.")
            } }
        },
        {
            "type": GITHUB_ISSUE,
            "title": "A GitHub issue",
            "description": "Starts a run when an issue of a GitHub repository opens, or is given a label. An opened issue counts by default only when the repository's owners, members or collaborators wrote it; a label is a triager's act and counts whoever wrote the issue. Its title and body reach the agent as quoted data.",
            "events": [
                { "id": "opened", "title": "Opened", "description": "An issue was opened." },
                { "id": "labeled", "title": "Labeled", "description": "An open issue was given the trigger's label." }
            ],
            "configSchema": { "type": "object", "required": ["repository"], "properties": {
                "repository": string("Repository", "The GitHub repository, as owner/name."),
                "label": string("Label", "The label that starts a run when an issue is given it (labeled needs it)."),
                "authors": string("Authors", "trusted (the default): issues by the repository's owners, members and collaborators; anyone: every issue.")
            } }
        },
        {
            "type": GITHUB_BRANCH_CHECK,
            "title": "A GitHub branch's check failed",
            "description": "Starts a run when a check on the head of a branch of a GitHub repository fails (CI broke on main).",
            "events": [ { "id": "failed", "title": "Failed", "description": "A check on the branch's head failed." } ],
            "configSchema": { "type": "object", "required": ["repository", "branch"], "properties": {
                "repository": string("Repository", "The GitHub repository, as owner/name."),
                "branch": string("Branch", "The branch whose head's checks are watched, for example main.")
            } }
        },
        {
            "type": WEBHOOK,
            "title": "Webhook",
            "description": "Starts a run on POST /hooks/<automation id> carrying the trigger's secret as a Bearer token.",
            "events": [ { "id": "received", "title": "Received", "description": "An authenticated POST arrived." } ],
            "configSchema": { "type": "object", "required": ["secret"], "properties": {
                "secret": string("Secret", "The Bearer token a POST must carry; at least 16 characters.")
            } }
        }
    ]);
    serde_json::from_value(listed).unwrap_or_else(|e| {
        tracing::error!("the trigger definitions this host spells out did not read: {e}");
        Vec::new()
    })
}

/// Checks a saved event trigger and puts the host's words on it; `Err` names the field (under the
/// trigger) and why.
pub fn normalize(trigger: &mut AutomationEventTrigger) -> Result<(), String> {
    let definitions = definitions();
    let Some(definition) = definitions.iter().find(|d| d.r#type == trigger.r#type) else {
        let known: Vec<&str> = definitions.iter().map(|d| d.r#type.as_str()).collect();
        return Err(format!("type: {:?} is not an event this host defines ({})", trigger.r#type, known.join(", ")));
    };
    if trigger.events.is_empty() {
        return Err("events: choose at least one event".into());
    }
    for (n, chosen) in trigger.events.iter_mut().enumerate() {
        let Some(known) = definition.events.iter().find(|e| e.id == chosen.id) else {
            return Err(format!("events[{n}].id: {:?} is not an event of {}", chosen.id, definition.r#type));
        };
        *chosen = known.clone();
    }
    trigger.title = definition.title.clone();
    trigger.description = definition.description.clone();
    let config = trigger.config.clone().unwrap_or_default();
    if let Some(schema) = &definition.config_schema {
        for key in schema.required.iter().flatten() {
            if !config.contains_key(key) {
                return Err(format!("config.{key}: {} needs it", definition.title));
            }
        }
        for (key, value) in &config {
            if !schema.properties.contains_key(key) {
                return Err(format!("config.{key}: not a setting of {}", definition.title));
            }
            if !value.is_string() {
                return Err(format!("config.{key}: must be a string"));
            }
        }
    }
    let text = |key: &str| config.get(key).and_then(Value::as_str);
    if trigger.r#type == GIT_BRANCH {
        let folder = text("folder").unwrap_or_default();
        if !crate::host::facade::path_of(folder).is_some_and(|p| p.is_dir()) {
            return Err(format!("config.folder: {folder:?} is not a folder this host can reach"));
        }
        branch_name("branch", text("branch"))?;
    }
    if GITHUB.contains(&trigger.r#type.as_str()) {
        check_github(trigger)?;
    }
    if trigger.r#type == WEBHOOK && config.get("secret").and_then(Value::as_str).is_none_or(|s| s.len() < 16) {
        return Err("config.secret: a webhook's secret must be at least 16 characters".into());
    }
    Ok(())
}

/// `config.<key>` is a branch name, when given.
fn branch_name(key: &str, branch: Option<&str>) -> Result<(), String> {
    let Some(branch) = branch else { return Ok(()) };
    if branch.is_empty() || branch.starts_with('-') || branch.contains("..") || branch.contains(char::is_whitespace) {
        return Err(format!("config.{key}: {branch:?} is not a branch name"));
    }
    Ok(())
}

/// A GitHub trigger's config: a repository as `owner/name`, branch names, a label where
/// `labeled` is chosen, and the words `checks` and `authors` take.
fn check_github(trigger: &AutomationEventTrigger) -> Result<(), String> {
    let text = |key: &str| config_str(trigger, key);
    let repository = text("repository").unwrap_or_default();
    if crate::github::Remote::named(repository, "https://api.github.com").is_none() {
        return Err(format!("config.repository: {repository:?} is not a GitHub repository as owner/name"));
    }
    branch_name("base", text("base"))?;
    branch_name("branch", text("branch"))?;
    if trigger.events.iter().any(|e| e.id == "labeled") && text("label").is_none_or(|l| l.trim().is_empty()) {
        return Err("config.label: labeled needs the label that starts a run".into());
    }
    if let Some(authors) = text("authors").filter(|a| !matches!(*a, "trusted" | "anyone")) {
        return Err(format!("config.authors: {authors:?} is neither trusted nor anyone"));
    }
    if let Some(checks) = text("checks").filter(|c| !matches!(*c, "required" | "all")) {
        return Err(format!("config.checks: {checks:?} is neither required nor all"));
    }
    Ok(())
}

/// The string a trigger's config holds under `key`.
pub fn config_str<'a>(trigger: &'a AutomationEventTrigger, key: &str) -> Option<&'a str> {
    trigger.config.as_ref()?.get(key)?.as_str()
}
