//! The retry policy for a ManifestWorkReplicaSet whose plugin refuses it
//! permanently (a [`Persistence::Permanent`] hook error, such as
//! `INVALID_ARGUMENT` to a bad `pluginConfig`): calling again with the same
//! input gives the same answer, so the reconcile backs off exponentially
//! (the error requeue doubled per failure, capped at [`BACKOFF_CAP`])
//! instead of calling the plugin every few seconds, and every reconcile
//! while the backoff lasts (its own status write, a ManifestWork's status)
//! is skipped. A new generation of the ManifestWorkReplicaSet or of its
//! ManifestWorkReplicaSetRollout ends the backoff at once. Transient
//! errors keep the short error requeue.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::hooks::{HookError, Persistence};

/// The longest wait between two tries of a permanently failing set.
pub(crate) const BACKOFF_CAP: Duration = Duration::from_secs(5 * 60);

/// The generations a backoff is tied to: a change of either retries at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Generations {
    /// The ManifestWorkReplicaSet's `metadata.generation`.
    pub(crate) mwrs: Option<i64>,
    /// Its carrier's `metadata.generation`.
    pub(crate) carrier: Option<i64>,
}

#[derive(Debug, Clone, Copy)]
struct Failing {
    generations: Generations,
    failures: u32,
    until: Instant,
}

/// The sets in backoff, by `namespace/name`.
#[derive(Debug, Default)]
pub(crate) struct Backoffs {
    failing: Mutex<HashMap<String, Failing>>,
}

/// The wait after the `failures`-th permanent failure in a row: `base`,
/// doubled per failure, at most [`BACKOFF_CAP`].
pub(crate) fn delay(base: Duration, failures: u32) -> Duration {
    let doubled = base.saturating_mul(1u32 << failures.saturating_sub(1).min(20));
    doubled.min(BACKOFF_CAP)
}

/// Whether a reconcile's hook errors call for the backoff: there are some
/// and every one is permanent.
pub(crate) fn all_permanent<'a>(errors: impl IntoIterator<Item = &'a HookError>) -> bool {
    let mut any = false;
    for error in errors {
        if error.persistence() != Persistence::Transient {
            any = true;
        } else {
            return false;
        }
    }
    any
}

impl Backoffs {
    /// How long `key` still waits at `generations`; `None` when it may
    /// reconcile now (no backoff, it expired, or a generation changed).
    pub(crate) fn waiting(
        &self,
        key: &str,
        generations: Generations,
        now: Instant,
    ) -> Option<Duration> {
        let failing = self.lock();
        let entry = failing.get(key)?;
        (entry.generations == generations && entry.until > now).then(|| entry.until - now)
    }

    /// Records a reconcile's result at `generations`: on a permanent
    /// failure, the wait before the next try; otherwise forgets `key`.
    pub(crate) fn record(
        &self,
        key: &str,
        generations: Generations,
        permanent: bool,
        base: Duration,
        now: Instant,
    ) -> Option<Duration> {
        let mut failing = self.lock();
        if !permanent {
            failing.remove(key);
            return None;
        }
        let failures = match failing.get(key) {
            Some(entry) if entry.generations == generations => entry.failures.saturating_add(1),
            _ => 1,
        };
        let wait = delay(base, failures);
        failing.insert(
            key.to_owned(),
            Failing {
                generations,
                failures,
                until: now + wait,
            },
        );
        Some(wait)
    }

    /// Forgets `key` (the set is gone).
    pub(crate) fn forget(&self, key: &str) {
        self.lock().remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Failing>> {
        // A panic while holding the map leaves it usable: the worst is one
        // backoff too many or too few.
        self.failing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "an arbitrary origin for a state machine handed its `now`; nothing waits on the clock"
)]
mod tests {
    use super::*;
    use crate::hooks::HookKind;

    const BASE: Duration = Duration::from_secs(5);

    fn gens(mwrs: i64, carrier: i64) -> Generations {
        Generations {
            mwrs: Some(mwrs),
            carrier: Some(carrier),
        }
    }

    fn error(code: tonic::Code) -> HookError {
        HookError {
            hook: HookKind::ValidateRolloutCompletion,
            code,
            message: "pluginConfig.threshold: not a number".into(),
            origin: crate::hooks::Origin::Answer,
        }
    }

    #[test]
    fn the_delay_doubles_up_to_the_cap() {
        let got: Vec<u64> = (1..=9).map(|n| delay(BASE, n).as_secs()).collect();
        assert_eq!(got, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(delay(BASE, u32::MAX), BACKOFF_CAP);
    }

    #[test]
    fn codes_are_classified_once() {
        use tonic::Code::*;
        for code in [
            InvalidArgument,
            FailedPrecondition,
            PermissionDenied,
            NotFound,
            Unimplemented,
        ] {
            assert!(all_permanent([&error(code)]), "{code:?}");
        }
        for code in [
            Unavailable,
            DeadlineExceeded,
            ResourceExhausted,
            Internal,
            Unknown,
        ] {
            assert!(!all_permanent([&error(code)]), "{code:?}");
        }
        // A transient error among permanent ones keeps the short retry.
        assert!(!all_permanent([
            &error(InvalidArgument),
            &error(Unavailable)
        ]));
        assert!(!all_permanent([]));
    }

    /// A set whose plugin always refuses it, reconciled whenever anything
    /// triggers it (every second here, as its own status writes and its
    /// works' updates would), calls the plugin a logarithmic number of
    /// times over ten minutes, not once per trigger.
    #[test]
    fn calls_over_ten_minutes_are_bounded() {
        let backoffs = Backoffs::default();
        let start = Instant::now();
        let mut calls = 0;
        for second in 0..600 {
            let now = start + Duration::from_secs(second);
            if backoffs.waiting("ns/a", gens(1, 1), now).is_some() {
                continue;
            }
            calls += 1;
            backoffs.record("ns/a", gens(1, 1), true, BASE, now);
        }
        // 0, 5, 15, 35, 75, 155, 315 and 615 > 600: seven calls.
        assert_eq!(calls, 7);
    }

    #[test]
    fn a_new_generation_retries_at_once_and_restarts_the_backoff() {
        let backoffs = Backoffs::default();
        let now = Instant::now();
        for _ in 0..4 {
            backoffs.record("ns/a", gens(1, 1), true, BASE, now);
        }
        assert!(backoffs.waiting("ns/a", gens(1, 1), now).is_some());
        // The set's spec changed, or its carrier's.
        assert_eq!(backoffs.waiting("ns/a", gens(2, 1), now), None);
        assert_eq!(backoffs.waiting("ns/a", gens(1, 2), now), None);
        assert_eq!(
            backoffs.record("ns/a", gens(2, 1), true, BASE, now),
            Some(BASE)
        );
        // Success, or a transient error, forgets it.
        backoffs.record("ns/a", gens(2, 1), false, BASE, now);
        assert_eq!(backoffs.waiting("ns/a", gens(2, 1), now), None);
        // Other sets are not held.
        backoffs.record("ns/a", gens(2, 1), true, BASE, now);
        assert_eq!(backoffs.waiting("ns/b", gens(2, 1), now), None);
    }
}
