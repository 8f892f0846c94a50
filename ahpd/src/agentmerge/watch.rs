//! One watch per folder Agent Merge is on for: a tracked task that finds the pull request of the
//! folder's branch on its GitHub `origin` and follows it, polling with conditional requests every
//! `agentMergePollMs`, backing off on errors (doubling, up to fifteen minutes; as long as GitHub
//! says when its rate limit is spent), and stopping the moment the folder is turned off or its
//! session deleted (every wait and every request selects on its cancellation).
//!
//! What it finds, it acts on: a failed check or an unresolved review thread it has not asked
//! about begins a repair turn in the folder's chat (`repair.rs`), acting for the person who turned
//! Agent Merge on; a deferred rerun is made once its run's attempt ends; a pull request whose
//! checks passed and that GitHub says may merge is merged (when the folder says so), and a
//! refusal is told to the chat in GitHub's words.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use std::collections::HashSet;

use ahp_types::state::{Message, MessageKind, MessageOrigin};

use super::github::{ApiError, GitHub, PullRequest, ReviewThread};
use super::remote::Remote;
use super::repair::{Deferred, FailedJob, Repair};
use super::settings::InForce;
use super::{token, Settings};
use crate::host::facade::WeakHost;
use crate::host::Host;
use crate::store::AgentMergeRecord;

/// How many of the things it acted on a folder's record keeps.
const KEPT_ASKED: usize = 200;

/// The repairs kept per folder for their tools.
const KEPT_REPAIRS: usize = 8;

/// The longest wait between tries after errors.
const MOST_BACKOFF: Duration = Duration::from_secs(15 * 60);

/// A folder's watch, by (session, folder).
pub type Key = (String, String);

/// What a watch is doing, as the tool and `ahpd status` say it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Monitoring {
    /// No open pull request for the branch yet.
    WaitingForPullRequest,
    /// Following this pull request.
    PullRequest(u64),
    /// The last try failed; trying again later.
    BackingOff(String),
    /// Stopped after a repair turn whose reply landed in the person's pending review; turning
    /// Agent Merge on again (or a restart) watches again.
    StoppedForPendingReview,
}

impl Monitoring {
    /// The pull request it follows.
    pub fn pull(&self) -> Option<u64> {
        match self {
            Self::PullRequest(number) => Some(*number),
            _ => None,
        }
    }

    /// The word for it.
    pub fn word(&self) -> &'static str {
        match self {
            Self::WaitingForPullRequest => "waitingForPullRequest",
            Self::PullRequest(_) => "monitoringPullRequest",
            Self::BackingOff(_) => "backingOff",
            Self::StoppedForPendingReview => "stoppedForPendingReview",
        }
    }
}

struct Running {
    cancel: CancellationToken,
    stopped: watch::Receiver<bool>,
    monitoring: Arc<Mutex<Monitoring>>,
}

/// What the watches and the repair tools share.
#[derive(Default)]
pub struct Shared {
    /// The repairs begun, by id.
    pub repairs: Mutex<HashMap<String, Arc<Repair>>>,
    /// Reruns waiting for their run's attempt to end, by folder.
    pub deferred: Mutex<HashMap<Key, Vec<Deferred>>>,
    /// The review comments its repair turns posted: a thread whose newest comment is one of
    /// them waits for somebody else.
    pub replied: Mutex<HashSet<String>>,
    /// Folders whose watch stops once this (chat, turn) ends: a reply of that repair turn landed
    /// in the person's pending review.
    pub stop_after: Mutex<HashMap<Key, (String, String)>>,
}

/// The running watches.
#[derive(Default)]
pub struct Watches {
    running: Mutex<HashMap<Key, Running>>,
    /// What they share with the repair tools.
    pub shared: Arc<Shared>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Watches {
    /// Starts the watch of a folder that is on, unless one runs.
    pub fn start(&self, host: &Host, settings: &Settings, record: &AgentMergeRecord) {
        let key = (record.session.clone(), record.folder.clone());
        let mut running = lock(&self.running);
        if running.get(&key).is_some_and(|r| !*r.stopped.borrow()) {
            return;
        }
        // Turned on again after a pending review stopped it: it watches on.
        lock(&self.shared.stop_after).remove(&key);
        let cancel = host.cancel_token().child_token();
        let (done, stopped) = watch::channel(false);
        let monitoring = Arc::new(Mutex::new(Monitoring::WaitingForPullRequest));
        let watch = Watch {
            key: key.clone(),
            folder: PathBuf::from(&record.folder),
            settings: settings.clone(),
            host: host.downgrade(),
            cancel: cancel.clone(),
            monitoring: monitoring.clone(),
            shared: self.shared.clone(),
            asked: Mutex::new(record.asked.iter().cloned().collect()),
        };
        tracing::info!(folder = %record.folder, session = %record.session, "agent merge: watching");
        host.spawn("agent merge watch", async move {
            watch.run().await;
            let _ = done.send(true);
        });
        running.insert(key, Running { cancel, stopped, monitoring });
    }

    /// Stops a folder's watch and waits until it has stopped: no request of it is on its way.
    pub async fn stop(&self, key: &Key) {
        let Some(running) = lock(&self.running).remove(key) else { return };
        running.cancel.cancel();
        let mut stopped = running.stopped;
        let _ = stopped.wait_for(|s| *s).await;
    }

    /// Stops every watch of a session (it is being deleted); they end at their next step.
    pub fn stop_session(&self, session: &str) {
        lock(&self.running).retain(|(s, _), running| {
            if s == session {
                running.cancel.cancel();
            }
            s != session
        });
    }

    /// What a folder's watch is doing, if it runs.
    pub fn monitoring(&self, key: &Key) -> Option<Monitoring> {
        lock(&self.running).get(key).map(|r| lock(&r.monitoring).clone())
    }
}

/// One folder's watch, as its task holds it.
struct Watch {
    key: Key,
    folder: PathBuf,
    settings: Settings,
    host: WeakHost,
    cancel: CancellationToken,
    monitoring: Arc<Mutex<Monitoring>>,
    shared: Arc<Shared>,
    /// What it has acted on already: `check:<sha>:<id>`, `thread:<id>:<last comment>`,
    /// `merge:<sha>`, `repaired:<pull>`.
    asked: Mutex<HashSet<String>>,
}

impl Watch {
    async fn run(self) {
        let mut github: Option<Arc<GitHub>> = None;
        let mut failures: u32 = 0;
        let mut wait = Duration::ZERO;
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => break,
                _ = tokio::time::sleep(wait) => {}
            }
            let outcome = tokio::select! {
                _ = self.cancel.cancelled() => break,
                outcome = self.round(&mut github) => outcome,
            };
            wait = match outcome {
                Ok(Some(())) => {
                    failures = 0;
                    self.settings.poll
                }
                Ok(None) => break,
                Err(e) => {
                    failures = failures.saturating_add(1);
                    if matches!(e, ApiError::Refused { status: 401, .. }) {
                        // The token may have changed: it is read again.
                        github = None;
                    }
                    let doubled = self.settings.poll.saturating_mul(2u32.saturating_pow(failures.min(16)));
                    let wait = match &e {
                        ApiError::RateLimited(until) => doubled.max(*until),
                        _ => doubled,
                    }
                    .min(MOST_BACKOFF);
                    tracing::warn!(folder = %self.key.1, "agent merge: {e}; trying again in {} ms", wait.as_millis());
                    *lock(&self.monitoring) = Monitoring::BackingOff(e.to_string());
                    wait
                }
            };
        }
        tracing::info!(folder = %self.key.1, session = %self.key.0, "agent merge: stopped watching");
    }

    /// The folder's record as kept now; `None` once it is off or gone.
    fn record(&self, host: &Host) -> Option<AgentMergeRecord> {
        let core = host.lock();
        core.store().agent_merge(&self.key.0, &self.key.1).ok().flatten().filter(|r| r.enabled)
    }

    /// Whether the repair turn this watch stops after has ended.
    fn stops_now(&self, host: &Host) -> bool {
        let mut stop_after = lock(&self.shared.stop_after);
        let Some((chat, turn)) = stop_after.get(&self.key) else { return false };
        let running = host.lock().chat_state(chat).and_then(|c| c.active_turn.as_ref()).is_some_and(|t| t.id == *turn);
        if running {
            return false;
        }
        stop_after.remove(&self.key);
        true
    }

    /// One look at the pull request. `Ok(None)`: nothing left to watch.
    async fn round(&self, github: &mut Option<Arc<GitHub>>) -> Result<Option<()>, ApiError> {
        let Some(host) = self.host.upgrade() else { return Ok(None) };
        let Some(record) = self.record(&host) else { return Ok(None) };
        if self.stops_now(&host) {
            tracing::info!(folder = %self.key.1, "agent merge: a reply waits in the person's pending review; the watch stops");
            self.now(&host, &record, Monitoring::StoppedForPendingReview);
            return Ok(None);
        }
        let Some(branch) = record.target.clone() else { return Ok(None) };
        if github.is_none() {
            *github = Some(Arc::new(self.client().await?));
        }
        let Some(github) = github.clone() else { return Ok(None) };
        let Some(pull) = github.pull_request_of(&branch).await? else {
            self.now(&host, &record, Monitoring::WaitingForPullRequest);
            return Ok(Some(()));
        };
        self.now(&host, &record, Monitoring::PullRequest(pull.number));
        self.follow(&host, &github, &record, &pull).await?;
        Ok(Some(()))
    }

    /// The client for the folder's remote, with the token read now.
    async fn client(&self) -> Result<GitHub, ApiError> {
        let refused = |message: String| ApiError::Refused { status: 0, message };
        let remote = Remote::of(&self.folder).await.map_err(refused)?;
        let token = token::token(self.settings.token.as_ref(), &remote.host, &self.folder).await.map_err(refused)?;
        GitHub::new(&remote, &remote.api_base(self.settings.api_url.as_deref()), token)
    }

    /// Follows what the folder's options ask: the head's checks, the review threads; begins a
    /// repair for what is new, makes the reruns that were waiting, merges when it is ready.
    async fn follow(
        &self,
        host: &Host,
        github: &Arc<GitHub>,
        record: &AgentMergeRecord,
        pull: &PullRequest,
    ) -> Result<(), ApiError> {
        let in_force = InForce::of(&record.options);
        let sha = pull.head.sha.as_str();
        let merges = in_force.merge_pull_request != "never";
        let checks = if in_force.fix_ci || merges { github.check_runs(sha).await? } else { Vec::new() };
        let threads: Vec<ReviewThread> = if in_force.address_reviews || merges {
            github.review_threads(pull.number).await?.into_iter().filter(|t| !t.is_resolved).collect()
        } else {
            Vec::new()
        };
        self.deferred_reruns(github, sha, in_force.fix_ci).await?;
        let mut failed: Vec<_> = checks
            .iter()
            .filter(|c| c.failed())
            .filter(|c| in_force.fix_ci && self.first_time(format!("check:{sha}:{}", c.id)))
            .collect();
        if !failed.is_empty() {
            // Only the checks branch protection requires are Agent Merge's to fix; when GitHub
            // cannot say which those are, every failed one is.
            match github.required_checks(pull.number).await {
                Ok(required) => failed.retain(|c| required.contains(&c.id)),
                Err(e) => {
                    tracing::warn!(folder = %self.key.1, "agent merge: which checks are required is unknown ({e}); every failed check counts")
                }
            }
        }
        let new_threads: Vec<ReviewThread> = threads
            .iter()
            .filter(|_| in_force.address_reviews)
            .filter(|t| {
                let last = t.comments.nodes.last().map(|c| c.id.as_str()).unwrap_or("");
                !lock(&self.shared.replied).contains(last) && self.first_time(format!("thread:{}:{last}", t.id))
            })
            .cloned()
            .collect();
        // A conflict with the base (or a branch behind it) is asked about once per head.
        let conflict = pull
            .mergeable_state
            .clone()
            .filter(|state| in_force.resolve_conflicts && matches!(state.as_str(), "dirty" | "behind"))
            .filter(|state| self.first_time(format!("conflict:{sha}:{state}")));
        if !failed.is_empty() || !new_threads.is_empty() || conflict.is_some() {
            let names: Vec<String> = failed.iter().map(|c| c.name.clone()).collect();
            let excerpts: Vec<String> =
                failed.iter().filter_map(|c| c.output.as_ref().and_then(|o| o.summary.clone())).collect();
            let jobs = if failed.is_empty() { Vec::new() } else { failed_jobs(github, sha, &names).await? };
            let mut repair =
                Repair::new(&self.key.0, &self.key.1, github.clone(), pull.number, sha, names, jobs, new_threads);
            repair.conflict = conflict;
            self.begin_repair(host, record, repair, &excerpts);
            return Ok(());
        }
        let green = !checks.is_empty() && checks.iter().all(|c| c.passed());
        let unchanged = !lock(&self.asked).contains(&format!("repaired:{}", pull.number));
        let wanted =
            in_force.merge_pull_request == "always" || (in_force.merge_pull_request == "ifUnchanged" && unchanged);
        if wanted
            && green
            && threads.is_empty()
            && pull.mergeable_state.as_deref() == Some("clean")
            && self.first_time(format!("merge:{sha}"))
        {
            self.merge(host, github, record, pull).await;
        }
        Ok(())
    }

    /// What the watch does now, told to the session's clients when it changed.
    fn now(&self, host: &Host, record: &AgentMergeRecord, monitoring: Monitoring) {
        let changed = {
            let mut now = lock(&self.monitoring);
            let changed = *now != monitoring;
            *now = monitoring;
            changed
        };
        if changed {
            let (word, pull) = {
                let now = lock(&self.monitoring);
                (now.word(), now.pull())
            };
            super::status::publish(&mut host.lock(), record, word, pull);
        }
    }

    /// True the first time `what` is seen; kept with the folder's record, so a restart does not
    /// ask again.
    fn first_time(&self, what: String) -> bool {
        if !lock(&self.asked).insert(what.clone()) {
            return false;
        }
        if let Some(host) = self.host.upgrade() {
            let core = host.lock();
            if let Ok(Some(mut record)) = core.store().agent_merge(&self.key.0, &self.key.1) {
                record.asked.push(what);
                let excess = record.asked.len().saturating_sub(KEPT_ASKED);
                record.asked.drain(..excess);
                if let Err(e) = core.store().save_agent_merge(&record) {
                    tracing::warn!(folder = %self.key.1, "agent merge: what was asked could not be kept: {e}");
                }
            }
        }
        true
    }

    /// Begins (or queues) the repair turn in the folder's chat, as the person who turned Agent
    /// Merge on.
    fn begin_repair(&self, host: &Host, record: &AgentMergeRecord, repair: Repair, excerpts: &[String]) {
        let Some(chat) = record.chat.clone() else {
            tracing::warn!(folder = %self.key.1, "agent merge: no chat to begin a repair turn in");
            return;
        };
        self.first_time(format!("repaired:{}", repair.pull));
        let message = repair.message(excerpts);
        let repair = Arc::new(repair);
        {
            let mut repairs = lock(&self.shared.repairs);
            // A folder's older repairs are let go past a few: their turns ended long ago, and a
            // tool called in one is refused as outside a repair turn.
            let mut mine: Vec<(u64, String)> =
                repairs.values().filter(|r| r.folder == self.key.1).map(|r| (r.seq, r.id.clone())).collect();
            mine.sort();
            for (_, id) in mine.iter().rev().skip(KEPT_REPAIRS - 1) {
                repairs.remove(id);
            }
            repairs.insert(repair.id.clone(), repair.clone());
        }
        let mut core = host.lock();
        match host.begin_host_turn(&mut core, &chat, message, record.enabled_by.clone()) {
            Ok(how) => tracing::info!(chat = %chat, pull = repair.pull, "agent merge: a repair turn: {how:?}"),
            Err(why) => {
                tracing::warn!(chat = %chat, "agent merge: the repair turn could not begin: {why}");
                lock(&self.shared.repairs).remove(&repair.id);
            }
        }
    }

    /// Makes the reruns that waited for their run's attempt to end, while the head is the same
    /// and CI repair is on; forgets the others.
    async fn deferred_reruns(&self, github: &GitHub, sha: &str, fix_ci: bool) -> Result<(), ApiError> {
        let waiting = lock(&self.shared.deferred).remove(&self.key).unwrap_or_default();
        let mut still = Vec::new();
        for deferred in waiting.into_iter().filter(|d| fix_ci && d.head_sha == sha) {
            let run = github.workflow_run(deferred.run).await?;
            if run.status == "completed" {
                github.rerun(deferred.run, deferred.failed_jobs_only).await?;
                tracing::info!(run = deferred.run, "agent merge: a deferred rerun was made");
            } else {
                still.push(deferred);
            }
        }
        if !still.is_empty() {
            lock(&self.shared.deferred).entry(self.key.clone()).or_default().extend(still);
        }
        Ok(())
    }

    /// Merges with the configured method; a refusal is told to the chat in GitHub's words.
    async fn merge(&self, host: &Host, github: &GitHub, record: &AgentMergeRecord, pull: &PullRequest) {
        let method = self.settings.merge_method.as_str();
        let said = match github.merge(pull.number, &pull.head.sha, method).await {
            Ok(merged) if merged.merged => {
                tracing::info!(pull = pull.number, "agent merge: merged ({method})");
                format!("Agent Merge merged pull request #{} ({method}): {}", pull.number, merged.message)
            }
            Ok(merged) => {
                format!("Agent Merge could not merge pull request #{}. GitHub said: {}", pull.number, merged.message)
            }
            Err(e) => format!("Agent Merge could not merge pull request #{}. GitHub said: {e}", pull.number),
        };
        let Some(chat) = record.chat.clone() else { return };
        let message = Message {
            text: said,
            origin: MessageOrigin { kind: MessageKind::Agent },
            attachments: None,
            model: None,
            agent: None,
            meta: None,
        };
        let mut core = host.lock();
        if let Err(why) = host.begin_host_turn(&mut core, &chat, message, record.enabled_by.clone()) {
            tracing::warn!(chat = %chat, "agent merge: the chat could not be told of the merge: {why}");
        }
    }
}

/// The failed jobs of the head's workflow runs behind the failed checks (a check run of GitHub
/// Actions is named after its job); every failed job when none is named so.
async fn failed_jobs(github: &GitHub, sha: &str, checks: &[String]) -> Result<Vec<FailedJob>, ApiError> {
    let mut failed = Vec::new();
    for run in github.workflow_runs(sha).await? {
        for job in github.jobs(run.id).await? {
            if job.status == "completed" && job.conclusion.as_deref() == Some("failure") {
                let workflow = run.name.clone().unwrap_or_default();
                failed.push(FailedJob { job, attempt: run.run_attempt, workflow });
            }
        }
    }
    if failed.iter().any(|f| checks.contains(&f.job.name)) {
        failed.retain(|f| checks.contains(&f.job.name));
    }
    Ok(failed)
}
