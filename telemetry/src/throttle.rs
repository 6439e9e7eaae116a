//! [`Throttle`]: at most one log line per key and interval, for warnings
//! that repeat with every call (a plugin failing open under
//! `failurePolicy: Ignore` fails open on each of thousands of calls). The
//! first line of a key is logged at once; the repeats within the interval
//! are counted, and the next line logged says how many were left out.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The interval of the throttles the binaries use.
pub const LOG_INTERVAL: Duration = Duration::from_secs(60);

/// At most this many keys are tracked apart; further keys share one.
const MAX_KEYS: usize = 1024;

/// The key of lines whose own key did not fit in [`MAX_KEYS`].
const OVERFLOW: &str = "";

/// Decides which repeats of a log line are written.
#[derive(Debug)]
pub struct Throttle {
    interval: Duration,
    /// Per key: when a line was last written, and the lines left out since.
    keys: Mutex<HashMap<String, (Instant, u64)>>,
}

impl Throttle {
    /// A throttle letting one line per key through every `interval`.
    pub fn new(interval: Duration) -> Throttle {
        Throttle {
            interval,
            keys: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the line of `key` at `now` is written: `Some(n)` with the
    /// `n` lines of that key left out since the last one written, else
    /// `None` (this one is left out, and counted).
    pub fn admit(&self, key: &str, now: Instant) -> Option<u64> {
        let mut keys = self
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = if keys.contains_key(key) || keys.len() < MAX_KEYS {
            key
        } else {
            OVERFLOW
        };
        match keys.get_mut(key) {
            Some((last, left_out)) if now.saturating_duration_since(*last) < self.interval => {
                *left_out += 1;
                None
            }
            Some((last, left_out)) => {
                *last = now;
                Some(std::mem::take(left_out))
            }
            None => {
                keys.insert(key.to_owned(), (now, 0));
                Some(0)
            }
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "an arbitrary origin for a state machine handed its `now`; nothing waits on the clock"
)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_key_and_interval_then_the_count_left_out() {
        let throttle = Throttle::new(Duration::from_secs(60));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        for (key, second, want) in [
            ("a", 0, Some(0)),
            ("a", 1, None),
            ("b", 1, Some(0)),
            ("a", 30, None),
            ("a", 59, None),
            ("a", 60, Some(3)),
            ("a", 61, None),
            ("a", 200, Some(1)),
            ("b", 200, Some(0)),
        ] {
            assert_eq!(throttle.admit(key, at(second)), want, "{key} at {second}s");
        }
    }

    #[test]
    fn keys_beyond_the_bound_share_one() {
        let throttle = Throttle::new(Duration::from_secs(60));
        let now = Instant::now();
        for i in 0..MAX_KEYS {
            assert_eq!(throttle.admit(&format!("k{i}"), now), Some(0));
        }
        assert_eq!(throttle.admit("new-1", now), Some(0));
        assert_eq!(throttle.admit("new-2", now), None);
        assert_eq!(throttle.keys.lock().expect("lock").len(), MAX_KEYS + 1);
    }
}
