//! When to start a worker again after it died: capped exponential backoff, reset after a stable run.

use std::time::Duration;

/// The first delay after a crash.
pub const BASE: Duration = Duration::from_millis(500);
/// The longest delay between attempts.
pub const CAP: Duration = Duration::from_secs(30);
/// A worker that ran this long before dying starts the count again.
pub const STABLE: Duration = Duration::from_secs(60);

/// The delay before attempt `failures + 1`, where `failures` counts deaths since the last stable
/// run: 0.5 s, 1 s, 2 s, … up to 30 s.
pub fn delay(failures: u32) -> Duration {
    let factor = 1u32.checked_shl(failures.min(16)).unwrap_or(u32::MAX);
    BASE.checked_mul(factor).map_or(CAP, |d| d.min(CAP))
}

/// The failure count to use after a worker that ran for `ran` died, given the count before.
pub fn next_failures(before: u32, ran: Duration) -> u32 {
    if ran >= STABLE {
        1
    } else {
        before.saturating_add(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_then_caps() {
        assert_eq!(delay(0), Duration::from_millis(500));
        assert_eq!(delay(1), Duration::from_secs(1));
        assert_eq!(delay(2), Duration::from_secs(2));
        assert_eq!(delay(5), Duration::from_secs(16));
        assert_eq!(delay(6), CAP);
        assert_eq!(delay(40), CAP);
        assert_eq!(delay(u32::MAX), CAP);
    }

    #[test]
    fn a_stable_run_resets_the_count() {
        assert_eq!(next_failures(0, Duration::from_secs(1)), 1);
        assert_eq!(next_failures(5, Duration::from_secs(1)), 6);
        assert_eq!(next_failures(5, STABLE), 1);
        assert_eq!(delay(next_failures(9, Duration::from_secs(3600)) - 1), BASE);
    }
}
