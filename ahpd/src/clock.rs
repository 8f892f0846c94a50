//! The host's clock: wall time for what it keeps (wakeups, the limits' sliding hour, client tool
//! timeouts), and a manual clock tests can move forward instead of waiting.
//!
//! The manual clock is on only when the daemon starts with `AHPD_TEST_CLOCK=manual`; then the AHP
//! request `ahpd/test/advanceClock {ms}` moves it. A production daemon has no such request.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

/// Milliseconds since the Unix epoch.
pub type Millis = u64;

/// The clock; cheap to clone.
#[derive(Clone, Debug)]
pub struct Clock {
    manual: Option<Arc<watch::Sender<Millis>>>,
}

fn wall() -> Millis {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)).unwrap_or(0)
}

impl Clock {
    /// Wall time.
    pub fn system() -> Self {
        Self { manual: None }
    }

    /// A clock that starts at wall time and moves only when told.
    pub fn manual() -> Self {
        let (tx, _) = watch::channel(wall());
        Self { manual: Some(Arc::new(tx)) }
    }

    /// The clock the environment asks for (`AHPD_TEST_CLOCK=manual`), else wall time. A manual
    /// clock starts `AHPD_TEST_CLOCK_OFFSET_MS` ahead of wall time when that is set, so a test can
    /// start a daemon after something it stored fell due, without waiting for it.
    pub fn from_env() -> Self {
        match std::env::var("AHPD_TEST_CLOCK").as_deref() {
            Ok("manual") => {
                tracing::warn!("AHPD_TEST_CLOCK=manual: this daemon's clock moves only when a test moves it");
                let clock = Self::manual();
                let offset = std::env::var("AHPD_TEST_CLOCK_OFFSET_MS").ok().and_then(|v| v.parse::<u64>().ok());
                if let Some(offset) = offset {
                    clock.advance(Duration::from_millis(offset));
                }
                clock
            }
            _ => Self::system(),
        }
    }

    /// True for the manual clock.
    pub fn is_manual(&self) -> bool {
        self.manual.is_some()
    }

    /// Now.
    pub fn now(&self) -> Millis {
        match &self.manual {
            Some(tx) => *tx.borrow(),
            None => wall(),
        }
    }

    /// Now, as RFC 3339 with milliseconds.
    pub fn now_iso(&self) -> String {
        iso(self.now())
    }

    /// Moves a manual clock forward; does nothing to wall time.
    pub fn advance(&self, by: Duration) {
        if let Some(tx) = &self.manual {
            let step = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
            tx.send_modify(|now| *now = now.saturating_add(step));
        }
    }

    /// Waits until the clock reads `deadline` or later.
    pub async fn sleep_until(&self, deadline: Millis) {
        match &self.manual {
            Some(tx) => {
                let mut rx = tx.subscribe();
                let _ = rx.wait_for(|now| *now >= deadline).await;
            }
            None => {
                let left = deadline.saturating_sub(wall());
                tokio::time::sleep(Duration::from_millis(left)).await;
            }
        }
    }

    /// Waits for `duration` on this clock.
    pub async fn sleep(&self, duration: Duration) {
        self.sleep_until(self.after(duration)).await;
    }

    /// The time `duration` from now.
    pub fn after(&self, duration: Duration) -> Millis {
        self.now().saturating_add(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
    }
}

/// Milliseconds since the epoch as RFC 3339 with milliseconds.
pub fn iso(ms: Millis) -> String {
    let ts =
        jiff::Timestamp::from_millisecond(i64::try_from(ms).unwrap_or(i64::MAX)).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    format!("{ts:.3}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_manual_clock_moves_only_when_told_and_wakes_sleepers() {
        let clock = Clock::manual();
        let start = clock.now();
        let sleeper = {
            let clock = clock.clone();
            tokio::spawn(async move { clock.sleep(Duration::from_secs(3600)).await })
        };
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished());
        clock.advance(Duration::from_secs(3600));
        sleeper.await.expect("woke");
        assert_eq!(clock.now(), start + 3_600_000);
    }

    #[test]
    fn iso_has_milliseconds() {
        assert_eq!(iso(1_500), "1970-01-01T00:00:01.500Z");
    }
}
