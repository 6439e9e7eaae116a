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

use jiff::SignedDuration;
use thiserror::Error;

/// Why a string is not a Go duration. The messages follow Go's wording.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DurationError {
    /// Not of the form `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+`, or out of range.
    #[error("invalid duration {0:?}")]
    Invalid(String),
    /// A number without a unit, such as `10`.
    #[error("missing unit in duration {0:?}")]
    MissingUnit(String),
    /// A unit Go does not know, such as the `d` of `2d`.
    #[error("unknown unit {unit:?} in duration {input:?}")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The whole input.
        input: String,
    },
}

/// Why a string is not a valid `progressDeadline`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DeadlineError {
    /// The string does not match `^(([0-9])+[h|m|s])|None$`.
    #[error("does not match the pattern ^(([0-9])+[h|m|s])|None$")]
    Pattern,
    /// The string matches the pattern but is not a Go duration (`5|`, `1s2d`).
    #[error(transparent)]
    Duration(#[from] DurationError),
}

/// Parses a Go duration (`time.ParseDuration`).
///
/// Accepts an optional sign and a sequence of decimal numbers, each with an
/// optional fraction and a unit among `ns`, `us` (`µs`, `μs`), `ms`, `s`, `m`,
/// `h`; the bare string `0` is zero. Fractions are truncated to the
/// nanosecond as Go does. Fails on anything else, or when the total does not
/// fit in an `i64` of nanoseconds.
pub fn parse_go_duration(input: &str) -> Result<SignedDuration, DurationError> {
    let invalid = || DurationError::Invalid(input.to_owned());
    let mut rest = input;
    let mut negative = false;
    if let Some(first) = rest.bytes().next()
        && (first == b'-' || first == b'+')
    {
        negative = first == b'-';
        rest = &rest[1..];
    }
    if rest == "0" {
        return Ok(SignedDuration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }

    // Accumulated as unsigned nanoseconds, with 1 << 63 allowed so that the
    // most negative duration still parses, as in Go.
    const LIMIT: u64 = 1 << 63;
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let bytes = rest.as_bytes();
        if !(bytes[0] == b'.' || bytes[0].is_ascii_digit()) {
            return Err(invalid());
        }
        let (whole, after_int, had_int) = leading_int(rest).ok_or_else(invalid)?;
        rest = after_int;
        let mut fraction = 0u64;
        let mut scale = 1f64;
        let mut had_fraction = false;
        if let Some(after_dot) = rest.strip_prefix('.') {
            let (f, s, after_fraction) = leading_fraction(after_dot);
            had_fraction = after_fraction.len() != after_dot.len();
            fraction = f;
            scale = s;
            rest = after_fraction;
        }
        if !had_int && !had_fraction {
            return Err(invalid());
        }
        // The unit runs up to the next digit or dot; both are ASCII, so the
        // split falls on a character boundary even for `µs`.
        let unit_len = rest
            .bytes()
            .position(|b| b == b'.' || b.is_ascii_digit())
            .unwrap_or(rest.len());
        if unit_len == 0 {
            return Err(DurationError::MissingUnit(input.to_owned()));
        }
        let (unit, after_unit) = rest.split_at(unit_len);
        rest = after_unit;
        let unit_nanos = unit_nanos(unit).ok_or_else(|| DurationError::UnknownUnit {
            unit: unit.to_owned(),
            input: input.to_owned(),
        })?;
        if whole > LIMIT / unit_nanos {
            return Err(invalid());
        }
        let mut value = whole * unit_nanos;
        if fraction > 0 {
            // Same float arithmetic as Go, so fractions round the same way.
            value += (fraction as f64 * (unit_nanos as f64 / scale)) as u64;
            if value > LIMIT {
                return Err(invalid());
            }
        }
        total = total.checked_add(value).ok_or_else(invalid)?;
        if total > LIMIT {
            return Err(invalid());
        }
    }
    if negative {
        // total <= 1 << 63, so the negation fits.
        let nanos = if total == LIMIT {
            i64::MIN
        } else {
            -(total as i64)
        };
        return Ok(SignedDuration::from_nanos(nanos));
    }
    if total > i64::MAX as u64 {
        return Err(invalid());
    }
    Ok(SignedDuration::from_nanos(total as i64))
}

/// Parses a `progressDeadline` the way OCM's `parseTimeout` does.
///
/// Returns `Ok(None)` for `""` and `None` (wait for ever), otherwise the
/// deadline, which is never negative. Fails when the pattern does not match
/// or the string is not a Go duration.
pub fn parse_progress_deadline(input: &str) -> Result<Option<SignedDuration>, DeadlineError> {
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

fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{00b5}s" | "\u{03bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60 * 1_000_000_000,
        "h" => 3_600 * 1_000_000_000,
        _ => return None,
    })
}

/// Consumes leading ASCII digits: `(value, rest, consumed_any)`, or `None` on
/// overflow past 1 << 63.
fn leading_int(s: &str) -> Option<(u64, &str, bool)> {
    let mut value: u64 = 0;
    let mut len = 0;
    for b in s.bytes() {
        if !b.is_ascii_digit() {
            break;
        }
        if value > (1 << 63) / 10 {
            return None;
        }
        value = value * 10 + u64::from(b - b'0');
        if value > 1 << 63 {
            return None;
        }
        len += 1;
    }
    Some((value, &s[len..], len > 0))
}

/// Consumes the digits of a fraction: `(digits as integer, 10^kept, rest)`.
/// Digits beyond what fits are skipped without error, as Go does.
fn leading_fraction(s: &str) -> (u64, f64, &str) {
    let mut value: u64 = 0;
    let mut scale = 1f64;
    let mut overflow = false;
    let mut len = 0;
    for b in s.bytes() {
        if !b.is_ascii_digit() {
            break;
        }
        len += 1;
        if overflow {
            continue;
        }
        if value > (i64::MAX as u64) / 10 {
            overflow = true;
            continue;
        }
        let next = value * 10 + u64::from(b - b'0');
        if next > 1 << 63 {
            overflow = true;
            continue;
        }
        value = next;
        scale *= 10.0;
    }
    (value, scale, &s[len..])
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
                Err(DurationError::Invalid("9223372036854775808ns".into())),
            ),
            ("3000000h", Err(DurationError::Invalid("3000000h".into()))),
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
}
