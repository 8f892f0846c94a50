//! One watch per folder Agent Merge is on for: a tracked task that finds the pull request of the
//! folder's branch on its GitHub `origin` and follows it, polling with conditional requests every
//! `agentMergePollMs`, backing off on errors (doubling, up to fifteen minutes; as long as GitHub
//! says when its rate limit is spent), and stopping the moment the folder is turned off or its
//! session deleted (every wait and every request selects on its cancellation).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::github::{ApiError, GitHub, PullRequest};
use super::remote::Remote;
use super::settings::InForce;
use super::{token, Settings};
use crate::host::facade::WeakHost;
use crate::host::Host;
use crate::store::AgentMergeRecord;

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
}

impl Monitoring {
    /// The word for it.
    pub fn word(&self) -> &'static str {
        match self {
            Self::WaitingForPullRequest => "waitingForPullRequest",
            Self::PullRequest(_) => "monitoringPullRequest",
            Self::BackingOff(_) => "backingOff",
        }
    }
}

struct Running {
    cancel: CancellationToken,
    stopped: watch::Receiver<bool>,
    monitoring: Arc<Mutex<Monitoring>>,
}

/// The running watches.
#[derive(Default)]
pub struct Watches {
    running: Mutex<HashMap<Key, Running>>,
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
}

impl Watch {
    async fn run(self) {
        let mut github: Option<GitHub> = None;
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

    /// One look at the pull request. `Ok(None)`: nothing left to watch.
    async fn round(&self, github: &mut Option<GitHub>) -> Result<Option<()>, ApiError> {
        let Some(host) = self.host.upgrade() else { return Ok(None) };
        let Some(record) = self.record(&host) else { return Ok(None) };
        let Some(branch) = record.target.clone() else { return Ok(None) };
        if github.is_none() {
            *github = Some(self.client().await?);
        }
        let Some(github) = github.as_ref() else { return Ok(None) };
        let Some(pull) = github.pull_request_of(&branch).await? else {
            *lock(&self.monitoring) = super::watch::Monitoring::WaitingForPullRequest;
            return Ok(Some(()));
        };
        *lock(&self.monitoring) = Monitoring::PullRequest(pull.number);
        self.follow(&host, github, &record, &pull).await?;
        Ok(Some(()))
    }

    /// The client for the folder's remote, with the token read now.
    async fn client(&self) -> Result<GitHub, ApiError> {
        let refused = |message: String| ApiError::Refused { status: 0, message };
        let remote = Remote::of(&self.folder).await.map_err(refused)?;
        let token = token::token(self.settings.token.as_ref(), &remote.host, &self.folder).await.map_err(refused)?;
        GitHub::new(&remote, &remote.api_base(self.settings.api_url.as_deref()), token)
    }

    /// Follows what the folder's options ask: the head's checks, the review threads.
    async fn follow(
        &self,
        _host: &Host,
        github: &GitHub,
        record: &AgentMergeRecord,
        pull: &PullRequest,
    ) -> Result<(), ApiError> {
        let in_force = InForce::of(&record.options);
        if in_force.fix_ci || in_force.merge_pull_request != "never" {
            github.check_runs(&pull.head.sha).await?;
        }
        if in_force.address_reviews {
            github.review_threads(pull.number).await?;
        }
        Ok(())
    }
}
