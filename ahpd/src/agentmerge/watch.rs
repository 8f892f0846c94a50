//! One watch per folder Agent Merge is on for: a tracked task that finds the pull request of the
//! folder's branch on its GitHub `origin` and follows it, polling with conditional requests every
//! `agentMergePollMs` on the host's clock, backing off on errors (doubling, up to fifteen minutes),
//! waiting out a spent rate limit until GitHub says it resets, asking nothing while GitHub refuses
//! the token or shows it no repository until that changes (`monitoring.rs`), and stopping the
//! moment the folder is turned off or its session deleted (every wait and every request selects on
//! its cancellation).
//!
//! What it finds, it acts on: a failed check or an unresolved review thread by somebody it acts on
//! (`trust.rs`) that it has not asked about begins a repair turn in the folder's chat
//! (`repair.rs`), acting for the person who turned Agent Merge on; a thread by anybody else is
//! left alone and the chat told so, once; a deferred rerun is made once its run's attempt ends; a
//! pull request whose checks passed and that GitHub says may merge is merged (when the folder says
//! so), a refusal is told to the chat in GitHub's words and asked again once the pull request
//! changes.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runner::sync::lock;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use ahp_types::state::{Message, MessageKind, MessageOrigin};

pub use super::monitoring::Monitoring;

use super::github::{ApiError, CheckRun, GitHub, PullRequest, Reset, ReviewThread};
use super::monitoring::{stopped_line, stuck_line, STUCK_AFTER, TRIES_AGAIN};
use super::repair::{Deferred, FailedJob, Repair};
use super::settings::InForce;
use super::{origin, trust, Settings, WHO};
use crate::clock::{Clock, Millis};
use crate::github::Remote;
use crate::github::Token;
use crate::host::facade::{host_turn, Sender, WeakHost};
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
    /// The threads (by session) a repair turn's reply is on its way to: the watch leaves them be
    /// until the reply's comment is in `replied`.
    pub replying: Mutex<HashSet<(String, String)>>,
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

impl Watches {
    /// Starts the watch of a folder that is on, unless one runs (one that stopped asking GitHub
    /// after a refusal starts again: it was turned on again).
    pub fn start(&self, host: &Host, settings: &Settings, record: &AgentMergeRecord) {
        let key = (record.session.clone(), record.folder.clone());
        // Read before the watches' lock: the host's lock is taken before it elsewhere
        // (`stop_session` runs under the host's lock).
        let clock = host.lock().clock().clone();
        let mut running = lock(&self.running);
        if let Some(current) = running.get(&key).filter(|r| !*r.stopped.borrow()) {
            if !lock(&current.monitoring).parked() {
                return;
            }
            // Turned on again while GitHub refused it: it asks again now.
            current.cancel.cancel();
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
            authors: trust::Authors::new(&settings.allowed_authors),
            clock,
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
    /// Whose review comments it acts on.
    authors: trust::Authors,
    /// The host's clock: every wait is on it (a test moves it).
    clock: Clock,
    host: WeakHost,
    cancel: CancellationToken,
    monitoring: Arc<Mutex<Monitoring>>,
    shared: Arc<Shared>,
    /// What it has acted on already: `check:<sha>:<id>`, `thread:<id>:<last comment>`,
    /// `left:<thread>`, `merge:<sha>:<what GitHub showed>`, `repaired:<pull>`.
    asked: Mutex<HashSet<String>>,
}

/// What a watch stopped for a refusal waits to see change before it asks GitHub again.
struct Parked {
    /// The token GitHub refused (or showed no repository).
    token: Option<Token>,
    /// The folder's remote then.
    remote: Option<Remote>,
}

/// Where the watch's loop stands between looks.
#[derive(Default)]
struct Loop {
    github: Option<Arc<GitHub>>,
    /// Failed looks in a row.
    failures: u32,
    /// Stopped for a refusal, until a setting changes.
    parked: Option<Parked>,
}

impl Watch {
    async fn run(self) {
        let mut state = Loop::default();
        let mut next = self.clock.now();
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => break,
                _ = self.clock.sleep_until(next) => {}
            }
            if let Some(parked) = &state.parked {
                let changed = tokio::select! {
                    _ = self.cancel.cancelled() => break,
                    changed = self.changed_since(parked) => changed,
                };
                if !changed {
                    next = self.after(self.settings.poll);
                    continue;
                }
                tracing::info!(folder = %self.key.1, "agent merge: the token or the remote changed; asking GitHub again");
                state = Loop::default();
            }
            let outcome = tokio::select! {
                _ = self.cancel.cancelled() => break,
                outcome = self.round(&mut state.github) => outcome,
            };
            next = match outcome {
                Ok(Some(())) => {
                    state.failures = 0;
                    self.after(self.settings.poll)
                }
                Ok(None) => break,
                Err(e) => self.failed(e, &mut state).await,
            };
        }
        tracing::info!(folder = %self.key.1, session = %self.key.0, "agent merge: stopped watching");
    }

    /// The host's clock `wait` from now.
    fn after(&self, wait: Duration) -> Millis {
        self.clock.now().saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX))
    }

    /// After a failed look: stops asking for a refused token or a missing repository (said once
    /// in the chat), waits out a spent rate limit, else backs off (said in the chat once the watch
    /// has failed [`STUCK_AFTER`] looks in a row). Answers when to look next.
    async fn failed(&self, e: ApiError, state: &mut Loop) -> Millis {
        let repository = match &state.github {
            Some(github) => github.full_name(),
            None => "of the folder's origin".to_owned(),
        };
        if let Some(stop) = Monitoring::stop_for(&e, &repository) {
            tracing::warn!(folder = %self.key.1, "agent merge: {e}; asking nothing until the token or the remote changes");
            let token = state.github.take().map(|g| g.token().clone());
            state.parked = Some(Parked { token, remote: origin(&self.folder).await.ok() });
            let reason = stop.reason().unwrap_or_default().to_owned();
            self.set(stop);
            self.tell(stopped_line(&self.key.1, &reason));
            return self.after(self.settings.poll);
        }
        if let ApiError::RateLimited(reset) = &e {
            let retry_at = match reset {
                Reset::After(wait) => self.after(*wait),
                Reset::At(epoch) => epoch.saturating_mul(1000).max(self.clock.now()),
            };
            tracing::warn!(folder = %self.key.1, "agent merge: {e}; waiting until {}", crate::clock::iso(retry_at));
            self.set(Monitoring::WaitingForRateLimit { reason: e.to_string(), retry_at });
            return retry_at;
        }
        state.failures = state.failures.saturating_add(1);
        let wait = self.settings.poll.saturating_mul(2u32.saturating_pow(state.failures.min(16))).min(MOST_BACKOFF);
        tracing::warn!(folder = %self.key.1, "agent merge: {e}; trying again in {} ms", wait.as_millis());
        let retry_at = self.after(wait);
        self.set(Monitoring::BackingOff { reason: e.to_string(), retry_at });
        if state.failures == STUCK_AFTER {
            self.tell(stuck_line(&self.key.1, &e));
        }
        retry_at
    }

    /// Whether the token or the folder's remote differ from when GitHub refused them (read here,
    /// asking GitHub nothing).
    async fn changed_since(&self, parked: &Parked) -> bool {
        let remote = origin(&self.folder).await.ok();
        if remote != parked.remote {
            return true;
        }
        let Some(remote) = remote else { return false };
        match self.settings.github.token(WHO, &remote.host, &self.folder).await {
            Ok(token) => parked.token.as_ref() != Some(&token),
            Err(_) => false,
        }
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
        let remote = origin(&self.folder).await.map_err(refused)?;
        let token = self.settings.github.token(WHO, &remote.host, &self.folder).await.map_err(refused)?;
        GitHub::new(&remote, &remote.api_base(self.settings.github.api_url.as_deref()), token)
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
        let unresolved: Vec<ReviewThread> = if in_force.address_reviews || merges {
            github.review_threads(pull.number).await?.into_iter().filter(|t| !t.is_resolved).collect()
        } else {
            Vec::new()
        };
        let threads = self.acted_on(&unresolved, in_force.address_reviews);
        self.deferred_reruns(github, sha, in_force.fix_ci).await?;
        // What is new is marked asked only once everything the repair needs was read: a look cut
        // short (an outage, a spent rate limit) asks about it again at the next.
        let check_key = |c: &CheckRun| format!("check:{sha}:{}", c.id);
        let fresh: Vec<&CheckRun> =
            checks.iter().filter(|c| in_force.fix_ci && c.failed() && !self.seen(&check_key(c))).collect();
        let mut failed = fresh.clone();
        if !failed.is_empty() {
            // Only the checks branch protection requires are Agent Merge's to fix; when GitHub
            // cannot say which those are, every failed one is.
            match github.required_checks(pull.number).await {
                Ok(required) => failed.retain(|c| required.contains(&c.id)),
                Err(e @ ApiError::RateLimited(_)) => return Err(e),
                Err(e) => {
                    tracing::warn!(folder = %self.key.1, "agent merge: which checks are required is unknown ({e}); every failed check counts")
                }
            }
        }
        let thread_key = |t: &ReviewThread| {
            format!("thread:{}:{}", t.id, t.comments.nodes.last().map(|c| c.id.as_str()).unwrap_or(""))
        };
        let replied = |t: &ReviewThread| {
            lock(&self.shared.replying).contains(&(self.key.0.clone(), t.id.clone()))
                || t.comments.nodes.last().is_some_and(|c| lock(&self.shared.replied).contains(&c.id))
        };
        let new_threads: Vec<ReviewThread> = threads
            .iter()
            .filter(|t| in_force.address_reviews && !replied(t) && !self.seen(&thread_key(t)))
            .cloned()
            .collect();
        // A conflict with the base (or a branch behind it) is asked about once per head.
        let conflict = pull
            .mergeable_state
            .clone()
            .filter(|state| in_force.resolve_conflicts && matches!(state.as_str(), "dirty" | "behind"))
            .filter(|state| !self.seen(&format!("conflict:{sha}:{state}")));
        if !failed.is_empty() || !new_threads.is_empty() || conflict.is_some() {
            let names: Vec<String> = failed.iter().map(|c| c.name.clone()).collect();
            let summaries: Vec<(String, String)> = failed
                .iter()
                .filter_map(|c| c.output.as_ref().and_then(|o| o.summary.clone()).map(|s| (c.name.clone(), s)))
                .collect();
            let jobs = if failed.is_empty() { Vec::new() } else { failed_jobs(github, sha, &names).await? };
            let asked = fresh.iter().map(|c| check_key(c)).chain(new_threads.iter().map(thread_key));
            for what in asked.chain(conflict.iter().map(|state| format!("conflict:{sha}:{state}"))).collect::<Vec<_>>()
            {
                self.first_time(what);
            }
            let mut repair =
                Repair::new(&self.key.0, &self.key.1, github.clone(), pull.number, sha, names, jobs, new_threads);
            repair.conflict = conflict;
            self.begin_repair(host, record, repair, &summaries);
            return Ok(());
        }
        // Failed checks that are not required are asked about once, too.
        for check in fresh {
            self.first_time(check_key(check));
        }
        let green = !checks.is_empty() && checks.iter().all(|c| c.passed());
        let unchanged = !lock(&self.asked).contains(&format!("repaired:{}", pull.number));
        let wanted =
            in_force.merge_pull_request == "always" || (in_force.merge_pull_request == "ifUnchanged" && unchanged);
        // Asked once for what GitHub shows now: a refusal is asked again once the pull request
        // changes (a push, a review) or its checks do.
        if wanted
            && green
            && threads.is_empty()
            && pull.mergeable_state.as_deref() == Some("clean")
            && self.first_time(format!("merge:{sha}:{}", shown(pull, &checks)))
        {
            self.merge(github, pull).await;
        }
        Ok(())
    }

    /// The unresolved threads with only the comments of people it acts on (`trust.rs`); a thread
    /// with none of theirs is left alone, and the chat told so once while it addresses reviews.
    fn acted_on(&self, unresolved: &[ReviewThread], address_reviews: bool) -> Vec<ReviewThread> {
        let mut threads = Vec::new();
        for thread in unresolved {
            match self.authors.sift(thread) {
                Some(sifted) => threads.push(sifted),
                None if address_reviews && self.first_time(format!("left:{}", thread.id)) => {
                    self.tell(left_alone_line(thread));
                }
                None => {}
            }
        }
        threads
    }

    /// What the watch does now, told to the session's clients when it changed.
    fn now(&self, host: &Host, record: &AgentMergeRecord, monitoring: Monitoring) {
        {
            let mut now = lock(&self.monitoring);
            if *now == monitoring {
                return;
            }
            *now = monitoring.clone();
        }
        super::status::publish(&mut host.lock(), record, &monitoring);
    }

    /// [`Self::now`] with the folder's record as kept, while the host and the record are there.
    fn set(&self, monitoring: Monitoring) {
        let Some(host) = self.host.upgrade() else { return };
        match self.record(&host) {
            Some(record) => self.now(&host, &record, monitoring),
            None => *lock(&self.monitoring) = monitoring,
        }
    }

    /// Tells the folder's chat `text`, as a turn of its own (its agent reads it, and the person).
    fn tell(&self, text: String) {
        let Some(host) = self.host.upgrade() else { return };
        let Some(record) = self.record(&host) else { return };
        let Some(chat) = record.chat.clone() else { return };
        let message = Message {
            text,
            origin: MessageOrigin { kind: MessageKind::Agent },
            attachments: None,
            model: None,
            agent: None,
            meta: None,
        };
        let mut core = host.lock();
        let sender = Sender::Scheduled { person: record.enabled_by.clone() };
        if let Err(why) = host.deliver(&mut core, &chat, host_turn(message, None), sender) {
            tracing::warn!(chat = %chat, "agent merge: the chat could not be told: {why}");
        }
    }

    /// Whether `what` was acted on already.
    fn seen(&self, what: &str) -> bool {
        lock(&self.asked).contains(what)
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
    fn begin_repair(&self, host: &Host, record: &AgentMergeRecord, repair: Repair, summaries: &[(String, String)]) {
        let Some(chat) = record.chat.clone() else {
            tracing::warn!(folder = %self.key.1, "agent merge: no chat to begin a repair turn in");
            return;
        };
        self.first_time(format!("repaired:{}", repair.pull));
        let message = repair.message(summaries);
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
        let sender = Sender::Scheduled { person: record.enabled_by.clone() };
        match host.deliver(&mut core, &chat, host_turn(message, None), sender) {
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

    /// Merges with the configured method; what came of it is told to the chat, a refusal in
    /// GitHub's words with what makes Agent Merge try again.
    async fn merge(&self, github: &GitHub, pull: &PullRequest) {
        let method = self.settings.merge_method.as_str();
        let refused = |said: &dyn std::fmt::Display| {
            format!("Agent Merge could not merge pull request #{}. GitHub said: {said}\n{TRIES_AGAIN}", pull.number)
        };
        let said = match github.merge(pull.number, &pull.head.sha, method).await {
            Ok(merged) if merged.merged => {
                tracing::info!(pull = pull.number, "agent merge: merged ({method})");
                format!("Agent Merge merged pull request #{} ({method}): {}", pull.number, merged.message)
            }
            Ok(merged) => refused(&merged.message),
            Err(e) => refused(&e),
        };
        self.tell(said);
    }
}

/// What GitHub shows of a pull request that a merge depends on (when it last changed, whether it
/// may merge, its head's checks), as a short digest: a merge refused is asked again when it differs.
fn shown(pull: &PullRequest, checks: &[CheckRun]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(pull.updated_at.as_deref().unwrap_or_default());
    hasher.update([0]);
    hasher.update(pull.mergeable_state.as_deref().unwrap_or_default());
    let mut runs: Vec<String> =
        checks.iter().map(|c| format!("{}:{}:{}", c.id, c.status, c.conclusion.as_deref().unwrap_or(""))).collect();
    runs.sort();
    for run in runs {
        hasher.update([0]);
        hasher.update(run);
    }
    hasher.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The chat's line for a thread nobody it acts on wrote in.
fn left_alone_line(thread: &ReviewThread) -> String {
    format!(
        "Agent Merge left review thread {} (opened by {}) alone: it acts only on review comments by the repository's owners, members and collaborators, or by authors named in agentMergeAllowedAuthors. Resolve it or answer it yourself.",
        trust::one_line(&thread.id),
        trust::opened_by(thread)
    )
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
