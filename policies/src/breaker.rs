//! The circuit breaker of one plugin, in the manner of Linkerd's failure
//! accrual: `consecutive_failures` failures in a row open the circuit; while it
//! is open, calls are refused at once; after `open_for` one probe call is let
//! through; a failed probe doubles the wait (with jitter, up to `max_open_for`),
//! a good probe closes the circuit. A pure state machine: time and randomness
//! are arguments.
//!
//! ```text
//!            failures reach the threshold
//!   Closed ───────────────────────────────▶ Open { until }
//!     ▲                                       │  wait over: one acquire gets a Probe
//!     │ probe Success                         ▼
//!     └──────────────────────────────── Probing ──▶ Open { until: now + next wait }
//!                                          │    probe Failure
//!                                          └──▶ Open { until: now }  (probe Neutral: probe again)
//! ```

use std::time::{Duration, Instant};

use tonic::Code;

use crate::policy::BreakerPolicy;

/// Leave to make one call, from [`Breaker::acquire`]. Every permit must be given
/// back to [`Breaker::record`] with the call's outcome (a cancelled call is
/// [`CallOutcome::Neutral`]); a probe that is never recorded keeps the circuit
/// from ever closing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a permit must be recorded with the call's outcome"]
pub enum Permit {
    /// The circuit is closed: an ordinary call.
    Normal,
    /// The circuit was open and its wait is over: this call decides whether it
    /// closes again.
    Probe,
}

/// The circuit is open: the call must not be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("circuit open; next probe in {retry_in:?}")]
pub struct Rejected {
    /// Time until a call may probe again. Zero while a probe is in flight: its
    /// outcome decides.
    pub retry_in: Duration,
    /// A probe call is in flight.
    pub probing: bool,
}

/// How a call ended, as far as the breaker is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// The plugin answered.
    Success,
    /// The plugin failed (see [`is_failure`]).
    Failure,
    /// Says nothing about the plugin's health: the call was cancelled or
    /// dropped, or answered with an error that is the plugin's answer.
    Neutral,
}

impl CallOutcome {
    /// The outcome of a call that ended with `result`: `Ok` is a success, an
    /// error a failure when [`is_failure`] says so and neutral otherwise.
    #[cfg(test)]
    pub(crate) fn of<T>(result: &Result<T, tonic::Status>) -> Self {
        match result {
            Ok(_) => CallOutcome::Success,
            Err(status) if is_failure(status.code()) => CallOutcome::Failure,
            Err(_) => CallOutcome::Neutral,
        }
    }
}

/// The state of a circuit, for display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through.
    Closed,
    /// Calls are refused until the wait is over.
    Open,
    /// The wait is over: one probe call may go, or is in flight.
    HalfOpen,
}

impl BreakerState {
    /// Lower-case name, as shown in `/debug/plugins`.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half-open",
        }
    }
}

/// Whether a call that ended with `code` counts as a failure of the plugin:
/// UNAVAILABLE (connection errors included), DEADLINE_EXCEEDED, INTERNAL and
/// UNKNOWN. Every other code (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION,
/// CANCELLED, …) is the plugin's answer, not its failure; RESOURCE_EXHAUSTED in
/// particular is what the gateway's own concurrency bound answers.
pub fn is_failure(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable | Code::DeadlineExceeded | Code::Internal | Code::Unknown
    )
}

/// The circuit breaker of one plugin. See the module documentation.
#[derive(Debug, Clone)]
pub struct Breaker {
    policy: BreakerPolicy,
    state: State,
    /// Failures in a row while closed.
    failures: u32,
    /// While open, the wait before the next probe, before jitter: `open_for`
    /// when the circuit opens, doubled on each failed probe, at most
    /// `max_open_for`.
    wait: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed,
    Open { until: Instant },
    Probing,
}

impl Breaker {
    /// The policy in force.
    pub fn policy(&self) -> &BreakerPolicy {
        &self.policy
    }

    /// A closed circuit. A `consecutive_failures` of 0 counts as 1.
    pub fn new(policy: &BreakerPolicy) -> Self {
        Breaker {
            policy: policy.clone(),
            state: State::Closed,
            failures: 0,
            wait: policy.open_for,
        }
    }

    /// Replaces the policy (on a configuration reload) and keeps the state: the
    /// new values apply from the next transition.
    pub fn set_policy(&mut self, policy: &BreakerPolicy) {
        self.policy = policy.clone();
        self.wait = self
            .wait
            .clamp(policy.open_for, policy.max_open_for.max(policy.open_for));
    }

    /// Asks to make one call at `now`.
    ///
    /// Closed: always [`Permit::Normal`]. Open: [`Rejected`] until the wait is
    /// over, then [`Permit::Probe`] to exactly one caller; everyone else is
    /// rejected while that probe is in flight.
    pub fn acquire(&mut self, now: Instant) -> Result<Permit, Rejected> {
        match self.state {
            State::Closed => Ok(Permit::Normal),
            State::Open { until } if now < until => Err(Rejected {
                retry_in: until - now,
                probing: false,
            }),
            State::Open { .. } => {
                self.state = State::Probing;
                Ok(Permit::Probe)
            }
            State::Probing => Err(Rejected {
                retry_in: Duration::ZERO,
                probing: true,
            }),
        }
    }

    /// Records how the call made with `permit` ended at `now`. `random`, in
    /// `[0, 1)`, jitters the wait after a failed probe.
    ///
    /// - A normal call while closed: a failure counts towards the threshold and
    ///   opens the circuit for `open_for` when it is reached; a success resets
    ///   the count; a neutral outcome changes nothing. Normal calls that end
    ///   while the circuit is not closed (they started before it opened) are
    ///   ignored.
    /// - The probe: a success closes the circuit (count reset, wait back to
    ///   `open_for`); a failure doubles the wait, multiplies it by a jitter
    ///   factor in `[0.8, 1.2)`, caps it at `max_open_for` and opens the circuit
    ///   for it; a neutral outcome lets the next acquire probe again.
    pub fn record(&mut self, permit: Permit, outcome: CallOutcome, now: Instant, random: f64) {
        match (permit, self.state) {
            (Permit::Normal, State::Closed) => match outcome {
                CallOutcome::Success => self.failures = 0,
                CallOutcome::Neutral => {}
                CallOutcome::Failure => {
                    self.failures = self.failures.saturating_add(1);
                    if self.failures >= self.policy.consecutive_failures.max(1) {
                        self.wait = self.policy.open_for;
                        self.state = State::Open {
                            until: after(now, self.policy.open_for),
                        };
                    }
                }
            },
            (Permit::Probe, State::Probing) => match outcome {
                CallOutcome::Success => {
                    // The wait goes back to open_for when the circuit next opens.
                    self.failures = 0;
                    self.state = State::Closed;
                }
                CallOutcome::Neutral => self.state = State::Open { until: now },
                CallOutcome::Failure => {
                    self.wait = self.wait.saturating_mul(2).min(self.policy.max_open_for);
                    let wait = jittered(self.wait, random).min(self.policy.max_open_for);
                    self.state = State::Open {
                        until: after(now, wait),
                    };
                }
            },
            // A normal call that outlived the closed state, or a permit that is
            // not the probe in flight: says nothing about the present.
            _ => {}
        }
    }

    /// The state at `now`, for display: open while the wait lasts, half-open
    /// once a probe may go or is in flight.
    pub fn state(&self, now: Instant) -> BreakerState {
        match self.state {
            State::Closed => BreakerState::Closed,
            State::Open { until } if now < until => BreakerState::Open,
            State::Open { .. } | State::Probing => BreakerState::HalfOpen,
        }
    }

    /// Failures in a row counted while closed.
    pub fn consecutive_failures(&self) -> u32 {
        self.failures
    }
}

/// `now + wait`; absurd waits (a century or more) count as a century rather
/// than overflowing the clock.
fn after(now: Instant, wait: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3_600);
    now.checked_add(wait.min(CENTURY)).unwrap_or(now)
}

/// `wait × (0.8 + 0.4 × random)`, `random` clamped into `[0, 1)`.
fn jittered(wait: Duration, random: f64) -> Duration {
    let random = if random.is_nan() {
        0.0
    } else {
        random.clamp(0.0, 1.0)
    };
    let factor = 0.8 + 0.4 * random;
    Duration::try_from_secs_f64(wait.as_secs_f64() * factor).unwrap_or(Duration::MAX)
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "an arbitrary origin for a state machine handed its `now`; nothing waits on the clock"
)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    fn policy() -> BreakerPolicy {
        BreakerPolicy {
            consecutive_failures: 3,
            open_for: Duration::from_secs(10),
            max_open_for: Duration::from_secs(60),
        }
    }

    /// Records `outcome` for one normal call at `now`.
    fn call(b: &mut Breaker, outcome: CallOutcome, now: Instant) {
        let permit = b.acquire(now);
        assert_eq!(permit, Ok(Permit::Normal), "circuit should be closed");
        if let Ok(permit) = permit {
            b.record(permit, outcome, now, 0.5);
        }
    }

    /// A breaker opened at `t0` by three failures.
    fn opened(t0: Instant) -> Breaker {
        let mut b = Breaker::new(&policy());
        for _ in 0..3 {
            call(&mut b, CallOutcome::Failure, t0);
        }
        b
    }

    #[test]
    fn is_failure_table() {
        let table = [
            (Code::Unavailable, true),
            (Code::DeadlineExceeded, true),
            (Code::Internal, true),
            (Code::Unknown, true),
            (Code::Ok, false),
            (Code::InvalidArgument, false),
            (Code::NotFound, false),
            (Code::FailedPrecondition, false),
            (Code::ResourceExhausted, false),
            (Code::Cancelled, false),
            (Code::AlreadyExists, false),
            (Code::PermissionDenied, false),
            (Code::Unauthenticated, false),
            (Code::Aborted, false),
            (Code::OutOfRange, false),
            (Code::Unimplemented, false),
            (Code::DataLoss, false),
        ];
        for (code, expected) in table {
            assert_eq!(is_failure(code), expected, "{code:?}");
        }
        assert_eq!(CallOutcome::of(&Ok::<(), _>(())), CallOutcome::Success);
        let err = |code| Err::<(), _>(tonic::Status::new(code, "x"));
        assert_eq!(CallOutcome::of(&err(Code::Unknown)), CallOutcome::Failure);
        assert_eq!(CallOutcome::of(&err(Code::NotFound)), CallOutcome::Neutral);
    }

    #[test]
    fn closed_counts_failures_in_a_row() {
        use CallOutcome::*;
        // (outcomes of normal calls, state after them)
        let table: [(&[CallOutcome], BreakerState); 8] = [
            (&[], BreakerState::Closed),
            (&[Failure, Failure], BreakerState::Closed),
            (&[Failure, Failure, Failure], BreakerState::Open),
            (
                &[Failure, Failure, Success, Failure, Failure],
                BreakerState::Closed,
            ),
            (
                &[Failure, Failure, Success, Failure, Failure, Failure],
                BreakerState::Open,
            ),
            // Neutral outcomes neither count nor reset.
            (&[Failure, Neutral, Failure, Neutral], BreakerState::Closed),
            (
                &[Failure, Neutral, Failure, Neutral, Failure],
                BreakerState::Open,
            ),
            (&[Neutral, Neutral, Neutral, Neutral], BreakerState::Closed),
        ];
        let t0 = Instant::now();
        for (outcomes, expected) in table {
            let mut b = Breaker::new(&policy());
            for outcome in outcomes {
                call(&mut b, *outcome, t0);
            }
            assert_eq!(b.state(t0), expected, "{outcomes:?}");
        }
    }

    #[test]
    fn a_threshold_of_zero_counts_as_one() {
        let t0 = Instant::now();
        let mut b = Breaker::new(&BreakerPolicy {
            consecutive_failures: 0,
            ..policy()
        });
        call(&mut b, CallOutcome::Failure, t0);
        assert_eq!(b.state(t0), BreakerState::Open);
    }

    #[test]
    fn absurd_waits_do_not_overflow_the_clock() {
        let t0 = Instant::now();
        let mut b = Breaker::new(&BreakerPolicy {
            consecutive_failures: 1,
            open_for: Duration::MAX,
            max_open_for: Duration::MAX,
        });
        call(&mut b, CallOutcome::Failure, t0);
        assert_eq!(b.state(t0 + 1_000_000 * SEC), BreakerState::Open);
    }

    #[test]
    fn open_rejects_until_the_wait_is_over_then_lets_one_probe() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        // (time after opening, expected acquire)
        let table = [
            (
                Duration::ZERO,
                Err(Rejected {
                    retry_in: 10 * SEC,
                    probing: false,
                }),
            ),
            (
                4 * SEC,
                Err(Rejected {
                    retry_in: 6 * SEC,
                    probing: false,
                }),
            ),
            (
                10 * SEC - Duration::from_nanos(1),
                Err(Rejected {
                    retry_in: Duration::from_nanos(1),
                    probing: false,
                }),
            ),
            (10 * SEC, Ok(Permit::Probe)),
            (
                10 * SEC,
                Err(Rejected {
                    retry_in: Duration::ZERO,
                    probing: true,
                }),
            ),
            (
                50 * SEC,
                Err(Rejected {
                    retry_in: Duration::ZERO,
                    probing: true,
                }),
            ),
        ];
        for (after, expected) in table {
            let state = b.state(t0 + after);
            assert_eq!(b.acquire(t0 + after), expected, "after {after:?}");
            let expected_state = if after < 10 * SEC {
                BreakerState::Open
            } else {
                BreakerState::HalfOpen
            };
            assert_eq!(state, expected_state, "after {after:?}");
        }
    }

    #[test]
    fn probe_outcomes() {
        use CallOutcome::*;
        let t0 = Instant::now();
        let probe_at = t0 + 10 * SEC;
        // (probe outcome, random, state just after, time until the next probe may go)
        let table = [
            (Success, 0.5, BreakerState::Closed, None),
            (Neutral, 0.5, BreakerState::HalfOpen, Some(Duration::ZERO)),
            // Doubled to 20 s, times 0.8 + 0.4 × random.
            (Failure, 0.0, BreakerState::Open, Some(16 * SEC)),
            (Failure, 0.5, BreakerState::Open, Some(20 * SEC)),
            (Failure, 0.75, BreakerState::Open, Some(22 * SEC)),
        ];
        for (outcome, random, state, next) in table {
            let mut b = opened(t0);
            assert_eq!(b.acquire(probe_at), Ok(Permit::Probe));
            b.record(Permit::Probe, outcome, probe_at, random);
            assert_eq!(b.state(probe_at), state, "{outcome:?}");
            match next {
                None => {
                    assert_eq!(b.acquire(probe_at), Ok(Permit::Normal));
                    assert_eq!(b.consecutive_failures(), 0);
                }
                Some(wait) => {
                    if !wait.is_zero() {
                        let before = probe_at + wait - Duration::from_nanos(1);
                        assert!(b.acquire(before).is_err(), "{outcome:?} {random}");
                        assert_eq!(b.state(before), BreakerState::Open);
                    }
                    assert_eq!(
                        b.acquire(probe_at + wait),
                        Ok(Permit::Probe),
                        "{outcome:?} {random}"
                    );
                }
            }
        }
    }

    #[test]
    fn failed_probes_double_the_wait_up_to_the_cap_after_jitter() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        let mut now = t0 + 10 * SEC;
        // (random of the failed probe, wait after it): 10 s doubles to 20, 40,
        // then 80 capped at 60; the jitter applies before the cap.
        let table = [
            (0.5, 20 * SEC),
            (0.5, 40 * SEC),
            (0.5, 60 * SEC),
            (0.0, 48 * SEC),  // 60 × 0.8: below the cap
            (0.99, 60 * SEC), // 60 × 1.196: capped
            (0.5, 60 * SEC),
        ];
        for (random, wait) in table {
            assert_eq!(b.acquire(now), Ok(Permit::Probe));
            b.record(Permit::Probe, CallOutcome::Failure, now, random);
            assert_eq!(
                b.acquire(now),
                Err(Rejected {
                    retry_in: wait,
                    probing: false
                }),
                "random {random}"
            );
            now += wait;
        }
        // A good probe closes, and the next opening waits open_for again.
        assert_eq!(b.acquire(now), Ok(Permit::Probe));
        b.record(Permit::Probe, CallOutcome::Success, now, 0.5);
        for _ in 0..3 {
            call(&mut b, CallOutcome::Failure, now);
        }
        assert_eq!(
            b.acquire(now),
            Err(Rejected {
                retry_in: 10 * SEC,
                probing: false
            })
        );
    }

    #[test]
    fn normal_outcomes_are_ignored_while_not_closed() {
        use CallOutcome::*;
        let t0 = Instant::now();
        let probe_at = t0 + 10 * SEC;
        for outcome in [Success, Failure, Neutral] {
            // While open: a late success does not close it.
            let mut b = opened(t0);
            b.record(Permit::Normal, outcome, t0, 0.5);
            assert_eq!(b.state(t0), BreakerState::Open, "{outcome:?}");
            assert_eq!(b.acquire(probe_at), Ok(Permit::Probe));
            // While probing: a late outcome neither closes, reopens nor frees the probe.
            b.record(Permit::Normal, outcome, probe_at, 0.5);
            assert_eq!(
                b.acquire(probe_at),
                Err(Rejected {
                    retry_in: Duration::ZERO,
                    probing: true
                }),
                "{outcome:?}"
            );
        }
        // A probe outcome recorded while closed changes nothing either.
        let mut b = Breaker::new(&policy());
        call(&mut b, CallOutcome::Failure, t0);
        call(&mut b, CallOutcome::Failure, t0);
        b.record(Permit::Probe, Success, t0, 0.5);
        call(&mut b, CallOutcome::Failure, t0);
        assert_eq!(b.state(t0), BreakerState::Open);
    }

    #[test]
    fn set_policy_keeps_the_state() {
        let t0 = Instant::now();
        let mut b = opened(t0);
        b.set_policy(&BreakerPolicy {
            consecutive_failures: 1,
            open_for: Duration::from_secs(1),
            max_open_for: Duration::from_secs(2),
        });
        assert_eq!(
            b.state(t0 + 5 * SEC),
            BreakerState::Open,
            "current wait kept"
        );
        let now = t0 + 10 * SEC;
        assert_eq!(b.acquire(now), Ok(Permit::Probe));
        b.record(Permit::Probe, CallOutcome::Failure, now, 0.5);
        assert_eq!(
            b.acquire(now),
            Err(Rejected {
                retry_in: 2 * SEC,
                probing: false
            }),
            "new cap applies"
        );
    }
}
