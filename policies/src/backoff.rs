//! The retry schedule of gRPC's retry design (gRFC A6): which failed attempts
//! may be retried, and how long to wait before each retry (exponential backoff
//! with full jitter). Pure functions; the randomness is an argument.

use std::time::Duration;

use tonic::Code;

use crate::policy::RetryPolicy;

/// The wait before retry number `retry` (1 = the wait after the first attempt
/// failed; 0 is read as 1).
///
/// The wait is uniform in `[0, cap)` where
/// `cap = min(max_backoff, initial_backoff × backoff_multiplier^(retry − 1))`:
/// it is `random × cap`, rounded down to the nanosecond. `random` is taken to be
/// in `[0, 1)`; values outside are clamped into it (NaN counts as 0). The result
/// is below `cap` whenever `cap` is not zero, and zero when it is.
pub fn backoff_delay(policy: &RetryPolicy, retry: u32, random: f64) -> Duration {
    let cap = backoff_cap(policy, retry);
    let cap_nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
    if cap_nanos == 0 {
        return Duration::ZERO;
    }
    let random = if random.is_nan() {
        0.0
    } else {
        random.clamp(0.0, 1.0)
    };
    // `as` saturates; the product can round up to the cap itself, and the
    // interval is open at the cap.
    let nanos = ((random * cap_nanos as f64) as u64).min(cap_nanos - 1);
    Duration::from_nanos(nanos)
}

/// The upper bound of the wait before retry number `retry`:
/// `min(max_backoff, initial_backoff × backoff_multiplier^(retry − 1))`.
///
/// A multiplier that is not a finite number gives `max_backoff` from the second
/// retry on; a negative product counts as zero.
pub fn backoff_cap(policy: &RetryPolicy, retry: u32) -> Duration {
    let exponent = i32::try_from(retry.max(1) - 1).unwrap_or(i32::MAX);
    let secs = policy.initial_backoff.as_secs_f64() * policy.backoff_multiplier.powi(exponent);
    if secs.is_nan() {
        return policy.max_backoff;
    }
    if secs <= 0.0 {
        return Duration::ZERO;
    }
    match Duration::try_from_secs_f64(secs) {
        Ok(d) => d.min(policy.max_backoff),
        // Too large for a Duration: the cap wins.
        Err(_) => policy.max_backoff,
    }
}

/// Whether a call whose latest attempt failed with `code` may try again, after
/// `attempts_made` attempts in all (the first included): there are attempts left
/// (`attempts_made < max_attempts`) and `code` is one of `retryable_codes`.
///
/// This is the policy's answer only; the caller still asks the retry budget and
/// the deadline.
pub fn should_retry(policy: &RetryPolicy, attempts_made: u32, code: Code) -> bool {
    attempts_made < policy.max_attempts && policy.retryable_codes.contains(&code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            backoff_multiplier: 2.0,
            retryable_codes: vec![Code::Unavailable],
        }
    }

    #[test]
    fn delay_is_random_times_the_capped_exponential() {
        let ms = Duration::from_millis;
        // (retry, random, expected)
        let table = [
            (1, 0.0, ms(0)),
            (1, 0.5, ms(50)),
            (1, 0.25, ms(25)),
            (2, 0.5, ms(100)),
            (3, 0.5, ms(200)),
            (4, 0.5, ms(400)),
            (5, 0.5, ms(800)),
            (6, 0.5, ms(1000)), // 3.2 s capped at 2 s
            (7, 0.5, ms(1000)),
            (1_000, 0.5, ms(1000)), // 2^999 overflows: the cap
            (u32::MAX, 0.75, ms(1500)),
            (0, 0.5, ms(50)), // read as the first retry
            (1, -3.0, ms(0)), // clamped
            (2, f64::NAN, ms(0)),
        ];
        for (retry, random, expected) in table {
            assert_eq!(
                backoff_delay(&policy(), retry, random),
                expected,
                "retry {retry}, random {random}"
            );
        }
    }

    #[test]
    fn delay_stays_below_the_cap() {
        let p = policy();
        for retry in 1..10 {
            let cap = backoff_cap(&p, retry);
            for random in [0.999_999_999_999, 1.0 - f64::EPSILON, 1.0, 7.0] {
                let d = backoff_delay(&p, retry, random);
                assert!(d < cap, "retry {retry}: {d:?} not below {cap:?}");
                assert!(
                    d > cap.mul_f64(0.999),
                    "retry {retry}: {d:?} far below {cap:?}"
                );
            }
        }
    }

    #[test]
    fn cap_table() {
        let ms = Duration::from_millis;
        let with = |initial: u64, max: u64, multiplier: f64| RetryPolicy {
            initial_backoff: ms(initial),
            max_backoff: ms(max),
            backoff_multiplier: multiplier,
            ..policy()
        };
        // (policy, retry, expected cap)
        let table = [
            (with(100, 2_000, 2.0), 1, ms(100)),
            (with(100, 2_000, 2.0), 5, ms(1_600)),
            (with(100, 2_000, 2.0), 6, ms(2_000)),
            (with(100, 2_000, 1.0), 9, ms(100)),
            (with(100, 2_000, 1.5), 3, ms(225)),
            (with(300, 200, 2.0), 1, ms(200)), // initial above max: max wins
            (with(0, 2_000, 2.0), 4, ms(0)),
            (with(100, 2_000, 0.0), 2, ms(0)),
            (with(100, 2_000, f64::INFINITY), 2, ms(2_000)),
            (with(100, 2_000, f64::NAN), 2, ms(2_000)),
            (with(100, 2_000, -2.0), 2, ms(0)),
        ];
        for (p, retry, expected) in table {
            assert_eq!(backoff_cap(&p, retry), expected, "{p:?}, retry {retry}");
        }
        assert_eq!(backoff_delay(&with(0, 2_000, 2.0), 1, 0.5), Duration::ZERO);
    }

    #[test]
    fn should_retry_table() {
        let p = RetryPolicy {
            retryable_codes: vec![Code::Unavailable, Code::ResourceExhausted],
            ..policy()
        };
        // (max_attempts, attempts_made, code, expected)
        let table = [
            (3, 1, Code::Unavailable, true),
            (3, 2, Code::Unavailable, true),
            (3, 3, Code::Unavailable, false),
            (3, 4, Code::Unavailable, false),
            (3, 1, Code::ResourceExhausted, true),
            (3, 1, Code::InvalidArgument, false),
            (3, 1, Code::DeadlineExceeded, false),
            (3, 1, Code::Internal, false),
            (3, 1, Code::Ok, false),
            (1, 1, Code::Unavailable, false),
            (0, 1, Code::Unavailable, false),
        ];
        for (max_attempts, made, code, expected) in table {
            let p = RetryPolicy {
                max_attempts,
                ..p.clone()
            };
            assert_eq!(
                should_retry(&p, made, code),
                expected,
                "max {max_attempts}, made {made}, {code:?}"
            );
        }
    }
}
