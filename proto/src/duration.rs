//! Durations as the workspace reads them: Go's syntax (`time.ParseDuration`:
//! `300ms`, `1h30m`, `-1.5s`), the one parser of the workspace, and
//! [`parse_duration`] with the named [`Rules`] each reader keeps on top of it.
//! Kubernetes objects spell durations the Go way (a `rolloutStrategy`'s
//! `minSuccessTime`), and so do the gateway's registry and the command-line
//! flags. It lives here because every crate that reads one (the gateway, the
//! controller, the sample plugins, the benchmarks) already depends on this
//! one, and it needs nothing else.

use std::time::Duration;

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
    /// Below zero, where [`Rules`] want none.
    #[error("{0:?} is negative")]
    Negative(String),
    /// A sign, where [`Rules::Registry`] takes none.
    #[error("a duration takes no sign")]
    Signed,
    /// Over [`Rules::Registry`]'s maximum.
    #[error("too large")]
    TooLarge,
    /// Nothing but blanks.
    #[error("empty")]
    Empty,
}

/// The rules a duration is read by, on top of Go's syntax; each reader
/// names the one it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rules {
    /// Go's syntax, not negative (`-0s` is zero): the controller's flags,
    /// the smoke-test plugin's `--soak` and `soakTime`.
    NotNegative,
    /// The gateway's registry and flags: Go's syntax without a sign, blanks
    /// around it ignored, at most 10^9 s.
    Registry,
    /// The benchmarks' flags: a bare number is seconds (`10`, `1.5`), else
    /// Go's syntax, with blanks around it and before the first unit ignored
    /// (`3 s`); not negative.
    BareSeconds,
}

/// The longest duration [`Rules::Registry`] takes, in nanoseconds (10^9 s).
const REGISTRY_MAX_NANOS: i64 = 1_000_000_000 * 1_000_000_000;

/// Parses a duration by `rules` (see [`Rules`]).
pub fn parse_duration(text: &str, rules: Rules) -> Result<Duration, DurationError> {
    let nanos = match rules {
        Rules::NotNegative => parse_go_duration(text)?,
        Rules::Registry => registry_nanos(text.trim())?,
        Rules::BareSeconds => bare_seconds_nanos(text.trim())?,
    };
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| DurationError::Negative(text.to_owned()))
}

fn registry_nanos(text: &str) -> Result<i64, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    if text.starts_with(['-', '+']) {
        return Err(DurationError::Signed);
    }
    match parse_go_duration(text) {
        Ok(nanos) if nanos > REGISTRY_MAX_NANOS => Err(DurationError::TooLarge),
        Err(DurationError::OutOfRange(_)) => Err(DurationError::TooLarge),
        other => other,
    }
}

fn bare_seconds_nanos(text: &str) -> Result<i64, DurationError> {
    if text.is_empty() {
        return Err(DurationError::Empty);
    }
    let number_len = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(number_len);
    let unit = unit.trim_start();
    let go = if unit.is_empty() {
        format!("{number}s")
    } else {
        format!("{number}{unit}")
    };
    parse_go_duration(&go).map_err(|e| match e {
        // Named by what was written, not by the Go spelling made of it.
        DurationError::Invalid(_) => DurationError::Invalid(text.to_owned()),
        DurationError::OutOfRange(_) => DurationError::OutOfRange(text.to_owned()),
        DurationError::MissingUnit(_) => DurationError::MissingUnit(text.to_owned()),
        DurationError::UnknownUnit { unit, .. } => DurationError::UnknownUnit {
            unit,
            input: text.to_owned(),
        },
        other => other,
    })
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

    #[test]
    fn not_negative_is_go_without_a_minus() {
        let parse = |t: &str| parse_duration(t, Rules::NotNegative);
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("+5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse("-0s"), Ok(Duration::ZERO));
        assert_eq!(parse("-1s"), Err(DurationError::Negative("-1s".into())));
        assert_eq!(
            parse("-1s").map_err(|e| e.to_string()),
            Err("\"-1s\" is negative".into())
        );
        assert_eq!(parse("10"), Err(DurationError::MissingUnit("10".into())));
        assert_eq!(parse(" 1s"), Err(DurationError::Invalid(" 1s".into())));
    }

    #[test]
    fn registry_takes_no_sign_and_at_most_a_billion_seconds() {
        let parse = |t: &str| parse_duration(t, Rules::Registry);
        assert_eq!(parse(" 1.5s "), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("1000000000s"), Ok(Duration::from_secs(1_000_000_000)));
        assert_eq!(parse("1000000001s"), Err(DurationError::TooLarge));
        assert_eq!(parse("3000000h"), Err(DurationError::TooLarge));
        assert_eq!(parse("+5s"), Err(DurationError::Signed));
        assert_eq!(parse("-0s"), Err(DurationError::Signed));
        assert_eq!(parse("  "), Err(DurationError::Empty));
        assert_eq!(parse("10"), Err(DurationError::MissingUnit("10".into())));
        let messages =
            [parse("+5s"), parse("1e9h"), parse("")].map(|r| r.map_err(|e| e.to_string()));
        assert_eq!(
            messages,
            [
                Err("a duration takes no sign".into()),
                Err("unknown unit \"e\" in duration \"1e9h\"".into()),
                Err("empty".into())
            ]
        );
    }

    #[test]
    fn bare_seconds_reads_a_number_as_seconds() {
        let parse = |t: &str| parse_duration(t, Rules::BareSeconds);
        for (text, want) in [
            ("10", Duration::from_secs(10)),
            ("0.5", Duration::from_millis(500)),
            (".5", Duration::from_millis(500)),
            ("1.", Duration::from_secs(1)),
            ("3s", Duration::from_secs(3)),
            (" 3 s ", Duration::from_secs(3)),
            ("0.1s", Duration::from_millis(100)),
            ("250us", Duration::from_micros(250)),
            ("250\u{00b5}s", Duration::from_micros(250)),
            ("2m", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("1h30m", Duration::from_secs(5400)),
        ] {
            assert_eq!(parse(text), Ok(want), "{text:?}");
        }
        assert_eq!(parse(""), Err(DurationError::Empty));
        assert_eq!(
            parse("3 fortnights"),
            Err(DurationError::UnknownUnit {
                unit: "fortnights".into(),
                input: "3 fortnights".into()
            })
        );
        for bad in ["-1s", "+1", "1.2.3", ".", "s", "1e3"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
