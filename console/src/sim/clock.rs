//! The simulated clock.
//!
//! Everything the controller and the work agent time (apply latencies,
//! `progressDeadline`, `minSuccessTime`, the engine's recheck times, the
//! requeue after a failed hook) runs on simulated time, which jumps from
//! one step straight to the next interesting time: the soonest of the
//! step's requeue (the engine's recheck, a validation's `recheck_after`, an
//! error retry) and the agent's next work transition. So a 30-minute
//! rollout takes as long as its hook calls.
//!
//! A plugin's own waits cannot be simulated: smoke-test's soak, for one,
//! is measured by the plugin's wall clock from the first validation
//! request. So while any cluster is `Validating` (its verdict is the
//! plugin's to give), the simulated clock runs at the speed of the real
//! one: the wait until the next step is slept, plus a small margin so
//! that a plugin asked again after its `recheck_after` finds the time
//! passed. [`plan`] decides the wait; [`Clock`] keeps the time and sleeps.

use std::time::{Duration, Instant};

use jiff::Timestamp;

/// Added to every real wait, so a plugin asked again after its
/// `recheck_after` finds that much time passed on its own clock, even
/// though the requests of one step reach it one after another.
pub(crate) const REAL_MARGIN: Duration = Duration::from_millis(50);

/// The least the simulated clock moves between two steps.
pub(crate) const MIN_ADVANCE: Duration = Duration::from_millis(1);

/// How long until the next step, and whether it is waited for in real
/// time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wait {
    /// How far the simulated clock moves.
    pub(crate) duration: Duration,
    /// Whether the wait is slept (a plugin is deciding).
    pub(crate) real: bool,
}

/// The wait after a step at `now`: until the soonest of `now +
/// requeue_after` and `next_transition`, or a fixed `tick` when one is set;
/// slept (plus [`REAL_MARGIN`]) when `real_time`. `None` when nothing will
/// ever happen again: no requeue and no transition pending.
pub(crate) fn plan(
    now: Timestamp,
    requeue_after: Option<Duration>,
    next_transition: Option<Timestamp>,
    tick: Option<Duration>,
    real_time: bool,
) -> Option<Wait> {
    let until_transition = next_transition
        .map(|t| Duration::try_from(t.duration_since(now)).unwrap_or(Duration::ZERO));
    let until_next = match (requeue_after, until_transition) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b)?,
    };
    let duration = tick.unwrap_or(until_next).max(MIN_ADVANCE);
    Some(if real_time {
        Wait {
            duration: duration + REAL_MARGIN,
            real: true,
        }
    } else {
        Wait {
            duration,
            real: false,
        }
    })
}

/// The simulated time, from a start, and the real time spent.
#[derive(Debug)]
pub(crate) struct Clock {
    start: Timestamp,
    now: Timestamp,
    wall_start: Instant,
    slept: Duration,
}

#[allow(
    clippy::disallowed_methods,
    reason = "`wall` and `slept` are the real time of a run, reported beside the simulated time"
)]
impl Clock {
    /// A clock at `start`.
    pub(crate) fn new(start: Timestamp) -> Clock {
        Clock {
            start,
            now: start,
            wall_start: Instant::now(),
            slept: Duration::ZERO,
        }
    }

    /// The simulated time.
    pub(crate) fn now(&self) -> Timestamp {
        self.now
    }

    /// The simulated time since the start.
    pub(crate) fn elapsed(&self) -> Duration {
        Duration::try_from(self.now.duration_since(self.start)).unwrap_or(Duration::ZERO)
    }

    /// The real time since the start.
    pub(crate) fn wall(&self) -> Duration {
        self.wall_start.elapsed()
    }

    /// The real time spent sleeping in real waits.
    pub(crate) fn slept(&self) -> Duration {
        self.slept
    }

    /// Moves the simulated time on by `wait`, sleeping it first when it is
    /// real.
    pub(crate) async fn wait(&mut self, wait: Wait) {
        if wait.real {
            let before = Instant::now();
            tokio::time::sleep(wait.duration).await;
            self.slept += before.elapsed();
        }
        self.now = self
            .now
            .checked_add(wait.duration)
            .unwrap_or(Timestamp::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(millis: i64) -> Timestamp {
        Timestamp::from_millisecond(1_700_000_000_000 + millis).expect("time")
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_clock_jumps_to_the_soonest_event() {
        // (requeue, next transition, tick, real time) → wait
        let table = [
            (
                Some(ms(300)),
                Some(at(30_000)),
                None,
                false,
                Some((ms(300), false)),
            ),
            (
                Some(ms(60_000)),
                Some(at(30_000)),
                None,
                false,
                Some((ms(30_000), false)),
            ),
            (
                None,
                Some(at(30_000)),
                None,
                false,
                Some((ms(30_000), false)),
            ),
            (Some(ms(5_000)), None, None, false, Some((ms(5_000), false))),
            // Nothing left to happen: the rollout has ended.
            (None, None, None, false, None),
            (None, None, Some(ms(1_000)), false, None),
            // A fixed tick instead of the next event.
            (
                Some(ms(300)),
                Some(at(30_000)),
                Some(ms(1_000)),
                false,
                Some((ms(1_000), false)),
            ),
            // A plugin deciding: slept, with the margin.
            (
                Some(ms(300)),
                Some(at(30_000)),
                None,
                true,
                Some((ms(350), true)),
            ),
            // A transition already due: the least step.
            (None, Some(at(0)), None, false, Some((MIN_ADVANCE, false))),
        ];
        for (requeue, transition, tick, real, want) in table {
            let got = plan(at(0), requeue, transition, tick, real).map(|w| (w.duration, w.real));
            assert_eq!(got, want, "{requeue:?} {transition:?} {tick:?} {real}");
        }
    }

    #[tokio::test]
    async fn only_real_waits_sleep() {
        let mut clock = Clock::new(at(0));
        clock
            .wait(Wait {
                duration: Duration::from_secs(600),
                real: false,
            })
            .await;
        assert_eq!(clock.now(), at(600_000));
        assert!(clock.wall() < Duration::from_secs(1));
        assert_eq!(clock.slept(), Duration::ZERO);
        clock
            .wait(Wait {
                duration: ms(30),
                real: true,
            })
            .await;
        assert_eq!(clock.elapsed(), ms(600_030));
        assert!(clock.slept() >= ms(30));
    }
}
