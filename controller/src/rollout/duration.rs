//! Durations the way Kubernetes spells them in a `rolloutStrategy`.
//!
//! OCM stores `minSuccessTime` as a `metav1.Duration` (Go's
//! `time.ParseDuration` syntax: `300ms`, `1h30m`, `-1.5s`) and
//! `progressDeadline` as a string that must first match the CRD pattern
//! `^(([0-9])+[h|m|s])|None$` and is then read as a Go duration. This module
//! reproduces both, including their odd corners, because a strategy that a
//! real hub accepts must mean the same thing here:
//!
//! - the pattern is an alternation, so only its first branch is anchored on
//!   the left and only its second on the right: `1h30m` and `10ms` pass the
//!   pattern (they start with digits and a unit letter), `2d`, `0` and `1.5h`
//!   do not;
//! - `""` and `None` mean "no deadline"; `0s` is a deadline that has already
//!   passed.
//!
//! [`format_go_duration`] writes a duration back for a person, the way Go
//! prints one, shortened.

use jiff::SignedDuration;
use thiserror::Error;

pub(crate) use rollout_proto::duration::DurationError;

/// Why a string is not a valid `progressDeadline`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum DeadlineError {
    /// The string does not match `^(([0-9])+[h|m|s])|None$`.
    #[error("does not match the pattern ^(([0-9])+[h|m|s])|None$")]
    Pattern,
    /// The string matches the pattern but is not a Go duration (`5|`, `1s2d`).
    #[error(transparent)]
    Duration(#[from] DurationError),
}

/// Parses a Go duration (`time.ParseDuration`), with the workspace's one
/// parser ([`rollout_proto::duration`]).
pub(crate) fn parse_go_duration(input: &str) -> Result<SignedDuration, DurationError> {
    rollout_proto::duration::parse_go_duration(input).map(SignedDuration::from_nanos)
}

/// Parses a `progressDeadline` the way OCM's `parseTimeout` does.
///
/// Returns `Ok(None)` for `""` and `None` (wait for ever), otherwise the
/// deadline, which is never negative. Fails when the pattern does not match
/// or the string is not a Go duration.
pub(crate) fn parse_progress_deadline(
    input: &str,
) -> Result<Option<SignedDuration>, DeadlineError> {
    if input.is_empty() || input == "None" {
        return Ok(None);
    }
    if !matches_deadline_pattern(input) {
        return Err(DeadlineError::Pattern);
    }
    Ok(Some(parse_go_duration(input)?))
}

/// Whether `input` matches `^(([0-9])+[h|m|s])|None$` with Go regexp
/// semantics: digits then one of `h`, `|`, `m`, `s` at the start, or `None`
/// at the end.
fn matches_deadline_pattern(input: &str) -> bool {
    let bytes = input.as_bytes();
    let digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    let first_branch = digits > 0 && matches!(bytes.get(digits), Some(b'h' | b'|' | b'm' | b's'));
    first_branch || input.ends_with("None")
}

/// A duration as Go writes it, shortened: `300ms`, `30s`, `30.3s`,
/// `1m30s`, `2h5m0s`. For a person: the errors of the control verbs, the
/// strategy's phrase and the command line's views.
pub fn format_go_duration(d: std::time::Duration) -> String {
    let millis = d.as_millis();
    if millis == 0 {
        return "0s".to_owned();
    }
    if millis < 1000 {
        return format!("{millis}ms");
    }
    let tenths = (millis + 50) / 100;
    let (hours, rest) = (tenths / 36_000, tenths % 36_000);
    let (minutes, tenths) = (rest / 600, rest % 600);
    let seconds = if tenths % 10 == 0 {
        format!("{}s", tenths / 10)
    } else {
        format!("{}.{}s", tenths / 10, tenths % 10)
    };
    match (hours, minutes) {
        (0, 0) => seconds,
        (0, m) => format!("{m}m{seconds}"),
        (h, m) => format!("{h}h{m}m{seconds}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: i64) -> SignedDuration {
        SignedDuration::from_secs(s)
    }

    #[test]
    fn go_durations() {
        let cases: &[(&str, Result<SignedDuration, DurationError>)] = &[
            ("0", Ok(SignedDuration::ZERO)),
            ("-0", Ok(SignedDuration::ZERO)),
            ("0s", Ok(SignedDuration::ZERO)),
            ("90s", Ok(secs(90))),
            ("2h", Ok(secs(7200))),
            ("1h30m", Ok(secs(5400))),
            ("1.5h", Ok(secs(5400))),
            ("-1.5s", Ok(SignedDuration::from_millis(-1500))),
            ("+5m", Ok(secs(300))),
            ("300ms", Ok(SignedDuration::from_millis(300))),
            ("1us", Ok(SignedDuration::from_micros(1))),
            ("1\u{00b5}s", Ok(SignedDuration::from_micros(1))),
            ("1\u{03bc}s", Ok(SignedDuration::from_micros(1))),
            ("7ns", Ok(SignedDuration::from_nanos(7))),
            (".5s", Ok(SignedDuration::from_millis(500))),
            ("5.s", Ok(secs(5))),
            ("1h0.5m", Ok(secs(3630))),
            ("2562047h", Ok(secs(2_562_047 * 3600))),
            (
                "9223372036854775807ns",
                Ok(SignedDuration::from_nanos(i64::MAX)),
            ),
            (
                "-9223372036854775808ns",
                Ok(SignedDuration::from_nanos(i64::MIN)),
            ),
            ("", Err(DurationError::Invalid("".into()))),
            ("-", Err(DurationError::Invalid("-".into()))),
            (".s", Err(DurationError::Invalid(".s".into()))),
            ("s", Err(DurationError::Invalid("s".into()))),
            (
                "1h-5m",
                Err(DurationError::UnknownUnit {
                    unit: "h-".into(),
                    input: "1h-5m".into(),
                }),
            ),
            (
                "9223372036854775808ns",
                Err(DurationError::OutOfRange("9223372036854775808ns".into())),
            ),
            (
                "3000000h",
                Err(DurationError::OutOfRange("3000000h".into())),
            ),
            ("10", Err(DurationError::MissingUnit("10".into()))),
            (
                "2d",
                Err(DurationError::UnknownUnit {
                    unit: "d".into(),
                    input: "2d".into(),
                }),
            ),
            (
                "1s ",
                Err(DurationError::UnknownUnit {
                    unit: "s ".into(),
                    input: "1s ".into(),
                }),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(&parse_go_duration(input), want, "input {input:?}");
        }
    }

    #[test]
    fn progress_deadlines() {
        let cases: &[(&str, Result<Option<SignedDuration>, DeadlineError>)] = &[
            ("", Ok(None)),
            ("None", Ok(None)),
            ("0s", Ok(Some(SignedDuration::ZERO))),
            ("90s", Ok(Some(secs(90)))),
            ("10m", Ok(Some(secs(600)))),
            ("2h", Ok(Some(secs(7200)))),
            // Unanchored on the right: only the leading `1h` has to match.
            ("1h30m", Ok(Some(secs(5400)))),
            ("10ms", Ok(Some(SignedDuration::from_millis(10)))),
            ("0", Err(DeadlineError::Pattern)),
            ("2d", Err(DeadlineError::Pattern)),
            ("1.5h", Err(DeadlineError::Pattern)),
            ("-1s", Err(DeadlineError::Pattern)),
            ("none", Err(DeadlineError::Pattern)),
            ("s", Err(DeadlineError::Pattern)),
            ("1ns", Err(DeadlineError::Pattern)),
            // Pass the pattern, fail as Go durations.
            (
                "5|",
                Err(DeadlineError::Duration(DurationError::UnknownUnit {
                    unit: "|".into(),
                    input: "5|".into(),
                })),
            ),
            (
                "1s2d",
                Err(DeadlineError::Duration(DurationError::UnknownUnit {
                    unit: "d".into(),
                    input: "1s2d".into(),
                })),
            ),
            (
                "xNone",
                Err(DeadlineError::Duration(DurationError::Invalid(
                    "xNone".into(),
                ))),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(&parse_progress_deadline(input), want, "input {input:?}");
        }
    }

    #[test]
    fn durations_are_written_like_go() {
        use std::time::Duration;
        let table = [
            (Duration::from_millis(300), "300ms"),
            (Duration::from_secs(30), "30s"),
            (Duration::from_millis(30_320), "30.3s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_millis(90_300), "1m30.3s"),
            (Duration::from_secs(7500), "2h5m0s"),
            (Duration::ZERO, "0s"),
        ];
        for (d, want) in table {
            assert_eq!(format_go_duration(d), want, "{d:?}");
        }
    }
}
