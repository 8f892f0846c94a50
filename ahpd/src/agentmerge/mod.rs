//! Agent Merge (seed 000, issue 30): per session folder, keep the pull request of its branch
//! green and merge it when it is ready. This room owns what the four tools do (their definitions
//! stay in `tools/agentmerge.rs`, which reaches this room through `host::facade::AgentMerge`) and
//! what is kept for each folder (the store's `agent_merge` table, so a folder it was turned on for
//! stays on across restarts), and the watch of each folder that is on (`watch.rs`, saying what it
//! does in `monitoring.rs`), which follows its pull request on GitHub (`github.rs`, through the
//! one client ahpd has, `crate::github`), begins repair turns for what fails (`repair.rs`), acting only on the words of
//! people it trusts and handing the model what GitHub says as quoted data (`trust.rs`), and
//! merges it when it is ready. `docs/agent-merge.md` says what it does.
//!
//! It reaches the host through `host::facade` alone, as the other features do; the host knows it
//! only as the `facade::AgentMerge` registered with `Host::serve_agent_merge`.

pub mod github;
pub mod input;
mod monitoring;
pub mod repair;
pub mod settings;
mod status;
pub mod trust;
mod watch;

pub use self::status::{status, FolderStatus};

use std::sync::Arc;

use agent_runner::sync::lock;

use crate::host::facade::{self, now_iso, Caller, Pending, ToolCall};
use crate::host::Host;
use crate::store::AgentMergeRecord;

use self::input::SET;
use self::settings::{configuration_of, current_branch, merged};
use crate::github::remote::NoRemote;
use crate::github::{Access, Remote};

/// What the daemon's config says of Agent Merge (the `agentMerge*` keys).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where the GitHub token is read and which API is asked (`agentMergeToken`,
    /// `agentMergeApiUrl`), as every feature reads them.
    pub github: Access,
    /// How long a watch waits between looks at its pull request (`agentMergePollMs`).
    pub poll: std::time::Duration,
    /// How it merges: `merge`, `squash` or `rebase` (`agentMergeMethod`).
    pub merge_method: String,
    /// Whose review comments it acts on besides the repository's owners, members and
    /// collaborators (`agentMergeAllowedAuthors`), as configured.
    pub allowed_authors: Vec<String>,
}

impl Settings {
    /// The settings the config names.
    pub fn of(config: &crate::config::Config) -> Self {
        Self {
            github: Access::of(config),
            poll: std::time::Duration::from_millis(config.u64("agentMergePollMs")),
            merge_method: config.string("agentMergeMethod").unwrap_or_else(|| "squash".to_owned()),
            allowed_authors: config.strings("agentMergeAllowedAuthors"),
        }
    }
}

/// The Agent Merge feature, registered with the host.
pub struct AgentMerge {
    settings: Settings,
    watches: watch::Watches,
}

impl AgentMerge {
    /// The feature, ready to register with a host.
    pub fn new(settings: Settings) -> Arc<Self> {
        Arc::new(Self { settings, watches: watch::Watches::default() })
    }

    /// Starts the watch of every folder Agent Merge is on for, as the daemon starts.
    pub fn resume(&self, host: &Host) {
        let records = host.lock().store().agent_merges().unwrap_or_else(|e| {
            tracing::error!("could not read Agent Merge's settings: {e}");
            Vec::new()
        });
        for record in records.iter().filter(|r| r.enabled) {
            self.watches.start(host, &self.settings, record);
        }
    }
}

impl facade::AgentMerge for AgentMerge {
    fn configure<'a>(&'a self, host: &'a Host, call: &'a ToolCall) -> Pending<'a, Result<String, String>> {
        Box::pin(self.configure(host, call))
    }

    fn read_ci<'a>(&'a self, host: &'a Host, call: &'a ToolCall) -> Pending<'a, Result<String, String>> {
        Box::pin(async move {
            input::read_ci(&call.input)?;
            match self.repair_for(host, call, |r| !r.jobs.is_empty()) {
                Some(repair) => repair.read_ci(&call.input).await,
                None => unauthorized("fixCI"),
            }
        })
    }

    fn reply<'a>(&'a self, host: &'a Host, call: &'a ToolCall) -> Pending<'a, Result<String, String>> {
        Box::pin(async move {
            let asked = input::reply(&call.input)?;
            let Some(repair) = self.repair_for(host, call, |r| !r.threads.is_empty()) else {
                return unauthorized("addressReviews");
            };
            let shared = &self.watches.shared;
            // While the reply is on its way (and until its comment id is known) the watch leaves
            // the thread be: its own reply is no new comment to address.
            let replying = (repair.session.clone(), asked.thread_id.clone());
            lock(&shared.replying).insert(replying.clone());
            let replied = repair.reply(&asked).await;
            if let Ok(replied) = &replied {
                lock(&shared.replied).insert(replied.comment.clone());
            }
            lock(&shared.replying).remove(&replying);
            let replied = replied?;
            if let (true, Some(chat), Some(turn)) = (replied.pending, call.chat.clone(), call.turn_id.clone()) {
                // Seed 000: "the folder's watch stops when the turn ends" - the person is in the
                // middle of a review of their own.
                let key = (repair.session.clone(), repair.folder.clone());
                lock(&shared.stop_after).insert(key, (chat, turn));
            }
            Ok(replied.said)
        })
    }

    fn rerun<'a>(&'a self, host: &'a Host, call: &'a ToolCall) -> Pending<'a, Result<String, String>> {
        Box::pin(async move {
            let asked = input::rerun(&call.input)?;
            let Some(repair) = self.repair_for(host, call, |r| !r.jobs.is_empty()) else {
                return unauthorized("fixCI");
            };
            let (deferred, said) = repair.rerun(&asked).await?;
            if let Some(deferred) = deferred {
                let key = (repair.session.clone(), repair.folder.clone());
                let shared = &self.watches.shared;
                lock(&shared.deferred).entry(key).or_default().push(deferred);
            }
            Ok(said)
        })
    }

    fn session_removed(&self, session: &str) {
        self.watches.stop_session(session);
    }

    fn watching(&self, session: &str, folder: &str) -> Option<facade::Watching> {
        self.watches.monitoring(&(session.to_owned(), folder.to_owned())).map(|m| facade::Watching {
            monitoring: m.word().to_owned(),
            reason: m.reason().map(str::to_owned),
            retry_at: m.retry_at(),
        })
    }
}

impl AgentMerge {
    /// The repair the call's turn was begun for, when it was asked to fix what `fits`.
    fn repair_for(
        &self,
        host: &Host,
        call: &ToolCall,
        fits: impl Fn(&repair::Repair) -> bool,
    ) -> Option<Arc<repair::Repair>> {
        repair::of_call(host, &self.watches.shared.repairs, call).filter(|r| fits(r))
    }
}

/// VS Code's refusal for a repair tool outside a repair turn, and its repair prompt's rule: stop
/// rather than try another way.
fn unauthorized(action: &str) -> Result<String, String> {
    Err(format!(
        "Agent Merge action '{action}' is not authorized for the active turn. Stop the turn without trying another method: do not use the GitHub CLI, GitHub MCP tools, or any other method for this action."
    ))
}

impl AgentMerge {
    /// `setAgentMergeEnabled`: turns Agent Merge on, off or different for the calling chat's
    /// folder, keeps it, and answers the configuration in force. Turning it on needs what the
    /// watch needs: the branch, a GitHub `origin` and a token; nothing is kept when one is missing.
    async fn configure(&self, host: &Host, call: &ToolCall) -> Result<String, String> {
        let (enabled, asked) = input::set(&call.input)?;
        let session = call.session.clone().ok_or_else(|| {
            format!("{SET} configures the folder of the chat it is called from, and this call has none.")
        })?;
        let folder = {
            let mut core = host.lock();
            if !host.ensure_loaded(&mut core, &session) {
                return Err(format!("Agent Merge cannot be configured for unknown session {session}."));
            }
            call.chat
                .as_deref()
                .and_then(|chat| core.chat_folder(chat))
                .or_else(|| core.session(&session).and_then(|m| m.working_directory.clone()))
                .ok_or("Agent Merge cannot be enabled for a session without a working directory.")?
        };
        let key = folder.display().to_string();
        let branch = current_branch(&folder);
        if enabled {
            let kept = host.lock().store().agent_merge(&session, &key).map_err(|e| kept_not(&e))?;
            if kept.and_then(|k| k.target).or_else(|| branch.clone()).is_none() {
                return Err(
                    "Agent Merge cannot be enabled because the current Git branch could not be determined.".into()
                );
            }
            let remote = origin(&folder).await?;
            self.settings.github.token(WHO, &remote.host, &folder).await?;
        }
        let next = {
            let core = host.lock();
            let current = core.store().agent_merge(&session, &key).map_err(|e| kept_not(&e))?;
            let was_on = current.as_ref().is_some_and(|c| c.enabled);
            let target = current.as_ref().and_then(|c| c.target.clone()).or(if enabled { branch } else { None });
            // Turned on now: its repair turns act for the person whose turn did it.
            let turned_on_in_a_turn = enabled && !was_on && matches!(call.caller, Caller::Turn(_));
            let enabled_by = if turned_on_in_a_turn {
                call.caller.turn_sender()
            } else {
                current.as_ref().and_then(|c| c.enabled_by.clone())
            };
            let next = AgentMergeRecord {
                session,
                folder: key,
                chat: call.chat.clone().or_else(|| current.as_ref().and_then(|c| c.chat.clone())),
                enabled,
                options: merged(&current.as_ref().map(|c| c.options.clone()).unwrap_or_default(), &asked),
                target,
                enabled_by,
                changed_at: now_iso(),
                asked: current.as_ref().map(|c| c.asked.clone()).unwrap_or_default(),
            };
            core.store().save_agent_merge(&next).map_err(|e| kept_not(&e))?;
            next
        };
        let key = (next.session.clone(), next.folder.clone());
        if enabled {
            self.watches.start(host, &self.settings, &next);
        } else {
            self.watches.stop(&key).await;
        }
        let monitoring = self.watches.monitoring(&key).unwrap_or(watch::Monitoring::WaitingForPullRequest);
        status::publish(&mut host.lock(), &next, &monitoring);
        Ok(configuration_of(&next, monitoring.word(), &self.settings).to_string())
    }
}

/// Who needs GitHub's token, as the sentence saying what to set begins.
const WHO: &str = "Agent Merge";

/// The GitHub repository the folder's `origin` names, or the sentence saying why it cannot be
/// followed.
async fn origin(folder: &std::path::Path) -> Result<Remote, String> {
    Remote::of(folder).await.map_err(|e| match e {
        NoRemote::NoOrigin => {
            "Agent Merge cannot be enabled because the folder's repository has no origin remote.".into()
        }
        NoRemote::NotGitHub(url) => format!(
            "Agent Merge cannot be enabled because the origin remote ({url}) does not name a GitHub repository."
        ),
    })
}

fn kept_not(e: &dyn std::fmt::Display) -> String {
    format!("Agent Merge's settings could not be kept: {e}")
}
