//! Go's duration syntax (`time.ParseDuration`: `300ms`, `1h30m`, `-1.5s`),
//! the one parser of the workspace: Kubernetes objects spell durations this
//! way (a `rolloutStrategy`'s `minSuccessTime`), and so do the gateway's
//! registry and the command-line flags. It lives here because every crate
//! that reads one already depends on this one, and it needs nothing else.
//! Each user adds its own rules on top (the gateway takes no sign and at
//! most 10^9 s; the controller reads `progressDeadline`'s pattern first).

/// Why a string is not a Go duration. The messages follow Go's wording.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not of the form `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+`.
    #[error("invalid duration {0:?}")]
    Invalid(String),
    /// Well-formed, but not within an `i64` of nanoseconds (about 292 years).
    #[error("invalid duration {0:?}: out of range")]
    OutOfRange(String),
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

/// Parses a Go duration (`time.ParseDuration`).
///
/// Accepts an optional sign and a sequence of decimal numbers, each with an
/// optional fraction and a unit among `ns`, `us` (`µs`, `μs`), `ms`, `s`, `m`,
/// `h`; the bare string `0` is zero. Fractions are truncated to the
/// nanosecond as Go does. Returns signed nanoseconds; fails on anything else,
/// or when the total does not fit in an `i64` of nanoseconds.
pub fn parse_go_duration(input: &str) -> Result<i64, DurationError> {
    let invalid = || DurationError::Invalid(input.to_owned());
    let out_of_range = || DurationError::OutOfRange(input.to_owned());
    let mut rest = input;
    let mut negative = false;
    if let Some(first) = rest.bytes().next()
        && (first == b'-' || first == b'+')
    {
        negative = first == b'-';
        rest = &rest[1..];
    }
    if rest == "0" {
        return Ok(0);
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
        let (whole, after_int, had_int) = leading_int(rest).ok_or_else(out_of_range)?;
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
            return Err(out_of_range());
        }
        let mut value = whole * unit_nanos;
        if fraction > 0 {
            // Same float arithmetic as Go, so fractions round the same way.
            value += (fraction as f64 * (unit_nanos as f64 / scale)) as u64;
            if value > LIMIT {
                return Err(out_of_range());
            }
        }
        total = total.checked_add(value).ok_or_else(out_of_range)?;
        if total > LIMIT {
            return Err(out_of_range());
        }
    }
    if negative {
        // total <= 1 << 63, so the negation fits.
        let nanos = if total == LIMIT {
            i64::MIN
        } else {
            -(total as i64)
        };
        return Ok(nanos);
    }
    if total > i64::MAX as u64 {
        return Err(out_of_range());
    }
    Ok(total as i64)
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

    #[test]
    fn go_durations() {
        const S: i64 = 1_000_000_000;
        let cases: &[(&str, Result<i64, DurationError>)] = &[
            ("0", Ok(0)),
            ("-0", Ok(0)),
            ("90s", Ok(90 * S)),
            ("1h30m", Ok(5_400 * S)),
            ("1.5h", Ok(5_400 * S)),
            ("-1.5s", Ok(-1_500_000_000)),
            ("+5m", Ok(300 * S)),
            ("1\u{00b5}s", Ok(1_000)),
            (".5s", Ok(S / 2)),
            ("5.s", Ok(5 * S)),
            ("9223372036854775807ns", Ok(i64::MAX)),
            ("-9223372036854775808ns", Ok(i64::MIN)),
            ("", Err(DurationError::Invalid("".into()))),
            (".s", Err(DurationError::Invalid(".s".into()))),
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
        ];
        for (input, want) in cases {
            assert_eq!(&parse_go_duration(input), want, "input {input:?}");
        }
    }
}
