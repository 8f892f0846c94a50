//! The streams a scripted model API holds open (`[[hold]]`) until a test lets them go: one count
//! of them, one release, one wait, shared by every mock that holds.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use agent_runner::lock;
use tokio::sync::{Notify, Semaphore};

/// A stream holds no longer than this, whoever forgot to release it.
pub const HOLD_LIMIT: Duration = Duration::from_secs(120);

/// The streams holding right now and the releases given for them.
pub struct Holds {
    releases: Semaphore,
    holding: Mutex<usize>,
    changed: Notify,
}

impl Default for Holds {
    fn default() -> Self {
        Self { releases: Semaphore::new(0), holding: Mutex::new(0), changed: Notify::new() }
    }
}

impl Holds {
    /// Lets one held stream finish; a release given before the stream holds waits for it.
    pub fn release(&self) {
        self.releases.add_permits(1);
    }

    /// How many streams are holding right now.
    pub fn holding(&self) -> usize {
        *lock(&self.holding)
    }

    /// Waits until exactly `count` streams hold, at most `within`: a test that releases a stream
    /// after the agent that held one died waits until that one ended, or the release goes to it.
    pub async fn until_holding(&self, count: usize, within: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let changed = self.changed.notified();
            let now = self.holding();
            if now == count {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(format!("{now} streams hold, not {count}, after {within:?}"));
            }
        }
    }

    /// Holds one stream until a release, `closed` (the client hung up), or [`HOLD_LIMIT`].
    pub async fn hold(&self, closed: impl Future<Output = ()>) {
        self.counted(1);
        tokio::select! {
            permit = self.releases.acquire() => {
                if let Ok(permit) = permit {
                    permit.forget();
                }
            }
            _ = closed => {}
            _ = tokio::time::sleep(HOLD_LIMIT) => {}
        }
        self.counted(-1);
    }

    fn counted(&self, change: isize) {
        let mut holding = lock(&self.holding);
        *holding = holding.saturating_add_signed(change);
        drop(holding);
        self.changed.notify_waiters();
    }
}
