//! `grpc-timeout`: a deadline as at most 8 digits and a unit.

use std::time::Duration;

use bytes::Bytes;
use http::HeaderValue;

/// The value of `grpc-timeout` for `d`: in microseconds while 8 digits hold
/// it (never 0: a call that may still run is given at least 1 µs), then in
/// milliseconds, then in seconds (capped at 8 digits). Rounded down, so a
/// peer never believes it has longer than it has.
#[inline]
pub fn encode_timeout(d: Duration) -> HeaderValue {
    let micros = d.as_micros();
    let value = if micros < 100_000_000 {
        format!("{}u", micros.max(1))
    } else if d.as_millis() < 100_000_000 {
        format!("{}m", d.as_millis())
    } else {
        format!("{}S", d.as_secs().min(99_999_999))
    };
    // The string becomes the value's bytes without a copy.
    HeaderValue::from_maybe_shared(Bytes::from(value)).unwrap_or(HeaderValue::from_static("30S"))
}

/// Parses a `grpc-timeout` value: 1 to 8 digits and a unit (`H`, `M`, `S`,
/// `m`, `u`, `n`); `None` for anything else.
#[inline]
pub fn parse_timeout(value: &str) -> Option<Duration> {
    // ASCII only: the unit is the last byte, and splitting before it must
    // not cut a multi-byte character.
    if value.len() < 2 || value.len() > 9 || !value.is_ascii() {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_round_trip() {
        for d in [
            Duration::from_micros(1),
            Duration::from_millis(300),
            Duration::from_secs(30),
            Duration::from_secs(3600 * 24),
        ] {
            let v = encode_timeout(d);
            let back = parse_timeout(v.to_str().expect("ascii")).expect("parses");
            assert!(
                back <= d && d - back < Duration::from_secs(1),
                "{d:?} -> {v:?} -> {back:?}"
            );
        }
        assert_eq!(encode_timeout(Duration::ZERO), "1u");
        assert_eq!(encode_timeout(Duration::from_millis(200)), "200000u");
    }

    #[test]
    fn only_eight_digits_and_a_unit_parse() {
        assert_eq!(parse_timeout("300m"), Some(Duration::from_millis(300)));
        assert_eq!(parse_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(
            parse_timeout("99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in ["123456789m", "10x", "m", "", "+5S", "-5S", "5 S", "5é"] {
            assert_eq!(parse_timeout(bad), None, "{bad:?}");
        }
    }
}
