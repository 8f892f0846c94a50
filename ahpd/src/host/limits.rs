//! Limits against abuse, per connection: how large and how deeply nested a message may be, how many
//! channels one connection may watch, how many of its requests may wait for an answer at once, and
//! how many sessions it may create in a minute. Each refusal is an error the client can read; the
//! connection lives on.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::Value;

use super::errors::AhpError;
use crate::clock::Millis;

/// The limits one connection is held to (config keys in brackets).
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// The largest message, in bytes (`maxFrameBytes`).
    pub max_frame_bytes: usize,
    /// The deepest nesting of objects and arrays a message may have (`maxJsonDepth`).
    pub max_json_depth: usize,
    /// Channels one connection may be subscribed to at once (`maxSubscriptionsPerConnection`).
    pub max_subscriptions: usize,
    /// Requests of one connection that may wait for their answer at once
    /// (`maxPendingRequestsPerConnection`).
    pub max_pending_requests: usize,
    /// Sessions one connection may create in any minute (`maxSessionsPerMinute`).
    pub max_sessions_per_minute: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_frame_bytes: 4 * 1024 * 1024,
            max_json_depth: 64,
            max_subscriptions: 1024,
            max_pending_requests: 64,
            max_sessions_per_minute: 60,
        }
    }
}

/// The window `maxSessionsPerMinute` counts over.
const MINUTE_MS: Millis = 60_000;

/// A refusal for going over a limit: -32600 with `data: {limit, value}` naming the config key and
/// its value, so a client can tell a limit from a malformed request.
pub fn over_limit(key: &str, value: usize, message: String) -> AhpError {
    let mut error = AhpError::invalid_request(message);
    error.data = Some(serde_json::json!({ "limit": key, "value": value }));
    error
}

/// True when `text`, read as JSON, nests objects and arrays more than `max` deep. Scans bytes
/// without building anything, so a hostile message costs one pass, not a parse.
pub fn nested_deeper_than(text: &str, max: usize) -> bool {
    if text.len() <= max {
        // Each level needs at least one byte: nothing this short can be too deep.
        return false;
    }
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for byte in text.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Counts one connection's requests that wait for an answer; shared with the tasks that answer.
#[derive(Debug, Clone, Default)]
pub struct InFlight {
    count: Arc<AtomicUsize>,
}

/// One request waiting for its answer; dropping it (once the answer is sent) counts it off.
#[derive(Debug)]
pub struct InFlightGuard {
    count: Arc<AtomicUsize>,
}

impl InFlight {
    /// How many wait now.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Counts one more request until the guard is dropped.
    pub fn begin(&self) -> InFlightGuard {
        self.count.fetch_add(1, Ordering::AcqRel);
        InFlightGuard { count: self.count.clone() }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// When one connection created its recent sessions, to hold it to `maxSessionsPerMinute`.
#[derive(Debug, Default)]
pub struct CreationWindow {
    times: VecDeque<Millis>,
}

impl CreationWindow {
    /// Refuses a creation at `now` when `max` happened in the minute before; the sentence says the
    /// limit and when the oldest of them leaves the window.
    pub fn check(&mut self, now: Millis, max: usize) -> Result<(), AhpError> {
        while self.times.front().is_some_and(|t| now.saturating_sub(*t) >= MINUTE_MS) {
            self.times.pop_front();
        }
        if self.times.len() < max {
            return Ok(());
        }
        let oldest = self.times.front().copied().unwrap_or(now);
        let frees_in_ms = (oldest + MINUTE_MS).saturating_sub(now);
        let seconds = frees_in_ms.div_ceil(1000).max(1);
        let mut error = over_limit(
            "maxSessionsPerMinute",
            max,
            format!(
                "This connection created {max} sessions in the last minute, this host's limit \
                 (maxSessionsPerMinute); the next one may be created in {seconds} s"
            ),
        );
        if let Some(Value::Object(data)) = error.data.as_mut() {
            data.insert("retryAfterMs".into(), Value::from(frees_in_ms));
        }
        Err(error)
    }

    /// Records a creation at `now`.
    pub fn record(&mut self, now: Millis) {
        self.times.push_back(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_brackets_outside_strings() {
        assert!(!nested_deeper_than(r#"{"a":[1,{"b":2}]}"#, 3));
        assert!(nested_deeper_than(r#"{"a":[1,{"b":[2]}]}"#, 3));
        assert!(!nested_deeper_than(r#"{"a":"[[[[[[[[[[[[[[[[[[[["}"#, 2));
        assert!(!nested_deeper_than(r#"{"a":"\"[[[[[[[[[[[[[[[[[[[[\\"}"#, 2));
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(nested_deeper_than(&deep, 64));
        assert!(!nested_deeper_than(&deep, 100));
    }

    #[test]
    fn in_flight_counts_until_the_guard_goes() {
        let in_flight = InFlight::default();
        let a = in_flight.begin();
        let b = in_flight.clone().begin();
        assert_eq!(in_flight.count(), 2);
        drop(a);
        drop(b);
        assert_eq!(in_flight.count(), 0);
    }

    #[test]
    fn the_window_frees_a_minute_after_the_oldest() {
        let mut window = CreationWindow::default();
        for t in [0, 10_000, 20_000] {
            window.check(t, 3).expect("under the limit");
            window.record(t);
        }
        let refused = window.check(30_000, 3).expect_err("over");
        assert!(refused.message.contains("the next one may be created in 30 s"), "{}", refused.message);
        assert_eq!(refused.data.as_ref().map(|d| d["retryAfterMs"].clone()), Some(Value::from(30_000)));
        window.check(60_000, 3).expect("the first left the window");
    }
}
