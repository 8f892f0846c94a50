//! `gitBranch` triggers: one task looks, every few seconds of the host's clock, at the commit each
//! watched branch points at (`git rev-parse`, through the one short-command runner). The first
//! look only notes it; a later look that finds another commit starts one run for that commit. What
//! was seen is kept in the automation's record (and shown in its entry's `_meta`), so a commit that
//! landed while the daemon was down starts its run at the first look after it starts.

use std::collections::BTreeMap;
use std::path::PathBuf;

use ahp_types::state::AutomationTrigger;
use serde_json::{json, Value};

use super::catalogue::{record, save};
use super::runs::{admit, Why};
use super::triggers::{config_str, GIT_BRANCH};
use crate::host::facade::path_of;
use crate::host::{Core, Host};

/// How often the branches are looked at, on the host's clock.
pub const LOOK_EVERY_MS: u64 = 5_000;

/// One watched branch.
struct Watched {
    automation: String,
    trigger: String,
    folder: PathBuf,
    branch: String,
}

/// Starts the task.
pub fn run(host: &Host) {
    let looking = host.clone();
    host.spawn("automation branch watches", async move {
        loop {
            let (watched, clock) = {
                let core = looking.lock();
                (watched(&core), core.clock().clone())
            };
            let mut seen = Vec::with_capacity(watched.len());
            for w in watched {
                let refname = format!("refs/heads/{}^{{commit}}", w.branch);
                match crate::shortcommand::output("git", &["rev-parse", "--verify", "--quiet", &refname], &w.folder)
                    .await
                {
                    Ok(commit) if !commit.is_empty() => seen.push((w, commit)),
                    Ok(_) | Err(_) => {
                        tracing::debug!(folder = %w.folder.display(), branch = w.branch, "no such branch")
                    }
                }
            }
            if !seen.is_empty() {
                let mut core = looking.lock();
                moved(&looking, &mut core, seen);
            }
            clock.sleep(std::time::Duration::from_millis(LOOK_EVERY_MS)).await;
        }
    });
}

/// Every enabled automation's `gitBranch` triggers.
fn watched(core: &Core) -> Vec<Watched> {
    let records = core.store().automations().unwrap_or_default();
    let mut found = Vec::new();
    for record in records.iter().filter(|r| r.definition.enabled) {
        for trigger in &record.definition.triggers {
            let AutomationTrigger::Event(t) = trigger else { continue };
            if t.r#type != GIT_BRANCH || !t.events.iter().any(|e| e.id == "moved") {
                continue;
            }
            let (Some(folder), Some(branch)) = (config_str(t, "folder").and_then(path_of), config_str(t, "branch"))
            else {
                continue;
            };
            found.push(Watched {
                automation: record.resource.clone(),
                trigger: t.id.clone(),
                folder,
                branch: branch.into(),
            });
        }
    }
    found
}

/// What the look found: each branch's commit noted, and a run started for each that moved.
fn moved(host: &Host, core: &mut Core, seen: Vec<(Watched, String)>) {
    let mut by_automation: BTreeMap<String, Vec<(Watched, String)>> = BTreeMap::new();
    for (w, commit) in seen {
        by_automation.entry(w.automation.clone()).or_default().push((w, commit));
    }
    for (automation, found) in by_automation {
        let Some(mut record) = record(core, &automation) else { continue };
        let mut changed = false;
        for (w, commit) in found {
            let before = record.branches.insert(w.trigger.clone(), commit.clone());
            if before.as_deref() == Some(commit.as_str()) {
                continue;
            }
            changed = true;
            let Some(from) = before else { continue };
            let event =
                json!({ "folder": w.folder.display().to_string(), "branch": w.branch, "from": from, "to": commit });
            let Value::Object(event) = event else { continue };
            let why = Why::Event { trigger: w.trigger.clone(), key: commit, event };
            if let Err(e) = admit(host, core, &automation, why) {
                tracing::error!(automation, "a branch's run could not be made: {e}");
            }
        }
        if changed {
            save(core, &record);
        }
    }
}
