//! The retry budget of one plugin, in the manner of tower's `TpsBudget` and
//! Linkerd's retry budgets: retries may add at most `ratio` to the calls, plus
//! `min_per_second` retries a second whatever the traffic, so that retries cannot
//! multiply the load on a plugin in an outage. Pure accounting: every method
//! takes `now`.
//!
//! Two bounds are kept, both exactly (integer accounting in millionths of a
//! retry, every rounding against the retry):
//!
//! - **Since creation.** At any time `T`, the retries allowed so far are at most
//!   `ratio × calls deposited + min_per_second × (seconds elapsed + 1)`
//!   (fractional seconds, from the budget's creation). A new budget therefore
//!   starts with one second's `min_per_second` in reserve, as gRFC A6's retry
//!   throttle and tower's `TpsBudget` start able to retry: the first failures
//!   of a plugin that is warming up right after the gateway (re)starts are
//!   retried, as `min_per_second` promises whatever the traffic.
//! - **Over the last 10 s.** When a retry is allowed at time `t`, the retries
//!   allowed in `[t − 10 s, t]` (that one included) are at most
//!   `ratio × calls deposited in [t − 10 s, t] + min_per_second × 10`. Credit
//!   older than the window is forgotten, so a long quiet spell cannot fund a
//!   burst. The window is kept in eleven one-second buckets: retries are counted
//!   over all eleven (a superset of the window), calls only over the ten whole
//!   seconds inside it (a subset), which errs against the retry by less than a
//!   second's traffic.
//!
//! The window bound is checked at each retry, for the window that retry can see.
//! It cannot be promised for a window that reaches into a later lull: retries
//! funded by calls just before such a window started still count inside it.

// Why our own budget and not tower's `TpsBudget`: docs/decisions/0003-retry-and-budget.md.

use std::time::{Duration, Instant};

use crate::policy::BudgetPolicy;

/// Accounting unit: a millionth of a retry.
const UNIT: i128 = 1_000_000;
/// Length of the sliding window, in whole seconds.
const WINDOW_SECS: u64 = 10;
/// The sliding window over which retries are bounded by recent calls.
pub const WINDOW: Duration = Duration::from_secs(WINDOW_SECS);
/// Buckets kept: the window's ten seconds plus the one it starts in.
const BUCKETS: usize = WINDOW_SECS as usize + 1;

/// The retry budget of one plugin. See the module documentation for the bounds
/// it keeps.
///
/// Instants earlier than one the budget has already seen count as that one (the
/// budget's clock never runs backwards).
#[derive(Debug, Clone)]
pub struct RetryBudget {
    created: Instant,
    latest: Instant,
    /// Credit of one call, in units (`ratio` rounded down).
    credit_per_call: i128,
    min_per_second: i128,
    deposited: u64,
    withdrawn: u64,
    buckets: [Bucket; BUCKETS],
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    /// Whole seconds since creation that this bucket counts.
    second: u64,
    deposited: u64,
    withdrawn: u64,
}

impl RetryBudget {
    /// A budget created at `now`, holding one second's `min_per_second` of
    /// retries and nothing else: more are allowed as calls are deposited and
    /// time passes.
    ///
    /// A `ratio` that is negative or not a number counts as zero.
    pub fn new(policy: &BudgetPolicy, now: Instant) -> Self {
        let ratio = if policy.ratio.is_nan() {
            0.0
        } else {
            policy.ratio.max(0.0)
        };
        // Rounded down, so the accounting never grants more than the ratio;
        // `as` saturates for absurd ratios.
        let credit_per_call = (ratio * UNIT as f64).floor() as i64;
        RetryBudget {
            created: now,
            latest: now,
            credit_per_call: i128::from(credit_per_call),
            min_per_second: i128::from(policy.min_per_second),
            deposited: 0,
            withdrawn: 0,
            buckets: [Bucket::default(); BUCKETS],
        }
    }

    /// Counts one original call (not a retry) made at `now`.
    pub fn deposit(&mut self, now: Instant) {
        let second = self.advance(now);
        self.deposited += 1;
        self.bucket(second).deposited += 1;
    }

    /// A retry wants to start at `now`: returns true, and counts it, if both
    /// bounds still hold with it; false (and counts nothing) otherwise.
    pub fn try_withdraw(&mut self, now: Instant) -> bool {
        let second = self.advance(now);

        let elapsed_nanos = i128::try_from(self.latest.duration_since(self.created).as_nanos())
            .unwrap_or(i128::MAX);
        // min_per_second × (elapsed + the one-second reserve), in units:
        // retries/s × ns × UNIT / 1e9.
        let since_creation = self.credit_per_call * i128::from(self.deposited)
            + self
                .min_per_second
                .saturating_mul(elapsed_nanos.saturating_add(1_000_000_000))
                / 1_000;
        if i128::from(self.withdrawn + 1) * UNIT > since_creation {
            return false;
        }

        let (deposited, withdrawn) = self.window(second);
        let in_window = self.credit_per_call * i128::from(deposited)
            + self.min_per_second * i128::from(WINDOW_SECS) * UNIT;
        if i128::from(withdrawn + 1) * UNIT > in_window {
            return false;
        }

        self.withdrawn += 1;
        self.bucket(second).withdrawn += 1;
        true
    }

    /// Calls deposited since creation.
    pub fn deposited(&self) -> u64 {
        self.deposited
    }

    /// Retries allowed since creation.
    pub fn withdrawn(&self) -> u64 {
        self.withdrawn
    }

    /// Moves the clock to `now` (never backwards) and returns the whole seconds
    /// since creation.
    fn advance(&mut self, now: Instant) -> u64 {
        self.latest = self.latest.max(now);
        self.latest.duration_since(self.created).as_secs()
    }

    /// The bucket of `second`, emptied first if it last counted an older second.
    fn bucket(&mut self, second: u64) -> &mut Bucket {
        let bucket = &mut self.buckets[slot(second)];
        if bucket.second != second {
            *bucket = Bucket {
                second,
                ..Bucket::default()
            };
        }
        bucket
    }

    /// Calls deposited in the ten whole seconds ending with `second`, and
    /// retries allowed in the eleven.
    fn window(&self, second: u64) -> (u64, u64) {
        let oldest = second.saturating_sub(WINDOW_SECS);
        let (mut deposited, mut withdrawn) = (0, 0);
        for s in oldest..=second {
            let bucket = &self.buckets[slot(s)];
            if bucket.second != s {
                continue;
            }
            withdrawn += bucket.withdrawn;
            if second - s < WINDOW_SECS {
                deposited += bucket.deposited;
            }
        }
        (deposited, withdrawn)
    }
}

fn slot(second: u64) -> usize {
    // The remainder is below BUCKETS.
    (second % BUCKETS as u64) as usize
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "an arbitrary origin for a state machine handed its `now`; nothing waits on the clock"
)]
mod tests {
    use super::*;

    fn policy(ratio: f64, min_per_second: u32) -> BudgetPolicy {
        BudgetPolicy {
            ratio,
            min_per_second,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Withdraws until refused (at most `limit` times) and returns how many
    /// were allowed.
    fn drain(budget: &mut RetryBudget, now: Instant, limit: u32) -> u32 {
        let mut n = 0;
        while n < limit && budget.try_withdraw(now) {
            n += 1;
        }
        n
    }

    #[test]
    fn since_creation_table() {
        // (ratio, min_per_second, calls deposited at start, time waited, retries allowed)
        let table = [
            // A fresh budget holds one second's min_per_second.
            (0.2, 10, 0, ms(0), 10),
            (0.2, 10, 4, ms(0), 10),
            (0.2, 10, 5, ms(0), 11),
            (0.2, 10, 9, ms(0), 11),
            (0.2, 10, 10, ms(0), 12),
            (0.2, 10, 0, ms(99), 10),
            (0.2, 10, 0, ms(100), 11),
            (0.2, 10, 0, ms(1_000), 20),
            (0.2, 10, 0, ms(2_550), 35),
            (0.2, 10, 5, ms(100), 12),
            (0.2, 10, 4, ms(100), 11), // 0.8 + 11.0: fractions of each do not add up to a retry
            (0.5, 0, 7, ms(5_000), 3),
            (1.0, 0, 3, ms(0), 3),
            (3.0, 0, 2, ms(0), 6),
            (0.0, 0, 1_000, ms(9_000), 0),
            (0.0, 1, 0, ms(0), 1),
            (0.0, 1, 0, ms(1_500), 2),
            (-1.0, 0, 100, ms(0), 0),
            (f64::NAN, 0, 100, ms(0), 0),
        ];
        for (ratio, mps, calls, wait, expected) in table {
            let t0 = Instant::now();
            let mut b = RetryBudget::new(&policy(ratio, mps), t0);
            for _ in 0..calls {
                b.deposit(t0);
            }
            let allowed = drain(&mut b, t0 + wait, 1_000);
            assert_eq!(
                allowed, expected,
                "ratio {ratio}, {mps}/s, {calls} calls, after {wait:?}"
            );
            assert_eq!(b.withdrawn(), u64::from(allowed));
            assert_eq!(b.deposited(), calls);
        }
    }

    #[test]
    fn a_refused_retry_is_not_counted() {
        let t0 = Instant::now();
        let mut b = RetryBudget::new(&policy(0.5, 0), t0);
        b.deposit(t0);
        assert!(!b.try_withdraw(t0));
        assert!(!b.try_withdraw(t0));
        b.deposit(t0);
        assert!(b.try_withdraw(t0), "two calls fund one retry");
        assert!(!b.try_withdraw(t0));
        assert_eq!(b.withdrawn(), 1);
    }

    #[test]
    fn the_window_forgets_old_credit() {
        let t0 = Instant::now();
        // Plenty of credit since creation, but only 10 retries a window.
        let mut b = RetryBudget::new(&policy(0.0, 1), t0);
        let t = t0 + Duration::from_secs(100);
        assert_eq!(
            drain(&mut b, t, 1_000),
            10,
            "min_per_second × 10 per window"
        );
        // The ten retries stay in the window for ten to eleven seconds.
        assert_eq!(drain(&mut b, t + ms(9_999), 1_000), 0);
        assert_eq!(drain(&mut b, t + ms(10_999), 1_000), 0);
        assert_eq!(drain(&mut b, t + ms(11_000), 1_000), 10);

        // Calls deposited more than ten seconds ago fund nothing.
        let mut b = RetryBudget::new(&policy(1.0, 0), t0);
        for _ in 0..50 {
            b.deposit(t0);
        }
        assert_eq!(drain(&mut b, t0 + ms(9_999), 1), 1, "still inside");
        assert_eq!(drain(&mut b, t0 + ms(10_000), 1_000), 0, "gone");
    }

    #[test]
    fn calls_in_the_window_fund_retries_up_to_the_ratio() {
        let t0 = Instant::now();
        let mut b = RetryBudget::new(&policy(0.25, 0), t0);
        // 4 calls a second for a minute, each failing once.
        let mut allowed = 0;
        for tick in 0..240u64 {
            let now = t0 + ms(tick * 250);
            b.deposit(now);
            allowed += u32::from(b.try_withdraw(now));
        }
        // A quarter of 240 calls is 60. In steady state, the retries of eleven
        // buckets are bounded by the calls of ten, so about 10/11 of that.
        assert!((54..=56).contains(&allowed), "{allowed}");
    }

    #[test]
    fn clock_never_runs_backwards() {
        let t0 = Instant::now();
        let mut b = RetryBudget::new(&policy(0.0, 10), t0);
        let later = t0 + Duration::from_secs(1);
        assert_eq!(
            drain(&mut b, later, 1_000),
            20,
            "the reserve and one second"
        );
        // An earlier instant counts as the latest one: no extra credit, no
        // forgotten retries.
        assert_eq!(drain(&mut b, t0, 1_000), 0);
        assert_eq!(drain(&mut b, t0 + ms(1_100), 1_000), 1);
    }

    /// A simulated outage: every call fails and wants two retries; traffic comes
    /// in waves, with lulls and bursts. Asserts, at every step, the bound since
    /// creation and, at every allowed retry, the bound over the last 10 s,
    /// against an exact log of events.
    #[test]
    fn long_outage_keeps_both_bounds_at_every_step() {
        let (ratio, mps) = (0.2, 10u32);
        let t0 = Instant::now();
        let mut b = RetryBudget::new(&policy(ratio, mps), t0);
        let mut calls: Vec<Duration> = Vec::new();
        let mut retries: Vec<Duration> = Vec::new();
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut random = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };

        let mut at = Duration::ZERO;
        // The budget's clock: an instant earlier than one it saw counts as that one.
        let mut clock = Duration::ZERO;
        let end = Duration::from_secs(600);
        while at < end {
            // Waves: 200 calls/s, 20 calls/s, silence, and bursts of 500 at once.
            let phase = at.as_secs() % 60;
            let (step, burst) = match phase {
                0..=19 => (ms(5), 1),
                20..=34 => (ms(50), 1),
                35..=44 => (ms(1_000), 0),
                _ => (ms(2_000), 500),
            };
            let now = t0 + at;
            for _ in 0..burst {
                b.deposit(now);
                clock = clock.max(at);
                calls.push(clock);
                for _ in 0..2 {
                    // A retry wants to start a little after its call failed.
                    let when = clock.max(at + Duration::from_secs_f64(random() * 0.004));
                    clock = when;
                    if b.try_withdraw(t0 + when) {
                        retries.push(when);
                        // Both logs are in time order and end at or before `when`.
                        let in_window = |log: &[Duration]| {
                            let from = when.saturating_sub(WINDOW);
                            (log.len() - log.partition_point(|t| *t < from)) as f64
                        };
                        let bound = ratio * in_window(&calls) + f64::from(mps) * 10.0;
                        assert!(
                            in_window(&retries) <= bound + 1e-9,
                            "at {when:?}: {} retries in the last 10 s, bound {bound}",
                            in_window(&retries)
                        );
                    }
                    let since =
                        ratio * calls.len() as f64 + f64::from(mps) * (when.as_secs_f64() + 1.0);
                    assert!(
                        retries.len() as f64 <= since + 1e-9,
                        "at {when:?}: {} retries since creation, bound {since}",
                        retries.len()
                    );
                }
            }
            at += step;
        }
        // The budget is not merely shut: it hands out most of what the bound
        // since creation allows (short of it by the quiet spells' unused
        // min_per_second and the window's whole-second rounding).
        let since = ratio * calls.len() as f64 + f64::from(mps) * (end.as_secs_f64() + 1.0);
        assert!(
            retries.len() as f64 >= 0.8 * since,
            "{} retries of {since} allowed",
            retries.len()
        );
    }
}
