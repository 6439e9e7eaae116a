//! Sizes and durations as written on the command line: `4KiB`, `64k`,
//! `4MiB`, `4096`; `500ms`, `3s`, `2m`, `1.5s`.
//!
//! Sizes are binary for the short and `iB` spellings (`4k` = `4K` = `4KiB` =
//! 4096 bytes, which is what the scenario names `c1-4k` mean) and decimal for
//! the `B` spellings (`4KB` = 4000 bytes), like Kubernetes quantities.

use std::time::Duration;

use rollout_proto::duration::{self, DurationError, Rules};

/// A size or duration that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    /// The input was empty.
    #[error("empty value")]
    Empty,
    /// The numeric part is missing, negative or not a number.
    #[error("invalid number in {0:?}")]
    InvalidNumber(String),
    /// The suffix is not a known unit.
    #[error("unknown unit {unit:?} in {input:?} (expected one of {expected})")]
    UnknownUnit {
        /// The whole input.
        input: String,
        /// The suffix that was not understood.
        unit: String,
        /// The accepted suffixes, for the message.
        expected: &'static str,
    },
    /// The value does not fit in 64 bits.
    #[error("{0:?} is too large")]
    Overflow(String),
    /// Not a duration.
    #[error(transparent)]
    Duration(#[from] DurationError),
}

const SIZE_UNITS: &str = "B, k/K/KiB, KB, m/M/MiB, MB, g/G/GiB, GB";

/// Splits `"64KiB"` into `(64.0, "KiB")`; the number may have a fraction.
fn split_number(input: &str) -> Result<(f64, &str), UnitError> {
    let input = input.trim();
    if input.is_empty() {
        return Err(UnitError::Empty);
    }
    let split = input
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(input.len());
    let (number, unit) = input.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| UnitError::InvalidNumber(input.to_owned()))?;
    if !value.is_finite() {
        return Err(UnitError::InvalidNumber(input.to_owned()));
    }
    Ok((value, unit.trim()))
}

/// Parses a byte size: a plain number of bytes, or a number with a unit.
///
/// Fails on an empty string, a malformed number or an unknown unit.
pub fn parse_size(input: &str) -> Result<u64, UnitError> {
    let (value, unit) = split_number(input)?;
    let multiplier: u64 = match unit {
        "" | "b" | "B" => 1,
        "k" | "K" | "Ki" | "KiB" | "kiB" | "kib" => 1 << 10,
        "KB" | "kB" | "kb" => 1_000,
        "m" | "M" | "Mi" | "MiB" | "mib" => 1 << 20,
        "MB" | "mb" => 1_000_000,
        "g" | "G" | "Gi" | "GiB" | "gib" => 1 << 30,
        "GB" | "gb" => 1_000_000_000,
        _ => {
            return Err(UnitError::UnknownUnit {
                input: input.to_owned(),
                unit: unit.to_owned(),
                expected: SIZE_UNITS,
            });
        }
    };
    let bytes = (value * multiplier as f64).round();
    if bytes >= u64::MAX as f64 {
        return Err(UnitError::Overflow(input.to_owned()));
    }
    Ok(bytes as u64)
}

/// [`parse_size`] for a size held in memory: fails as well when the size
/// does not fit in a `usize`.
pub fn parse_size_usize(input: &str) -> Result<usize, UnitError> {
    usize::try_from(parse_size(input)?).map_err(|_| UnitError::Overflow(input.to_owned()))
}

/// Formats a byte size the short way used in scenario names: `4k`, `64k`,
/// `4m`, else the plain number of bytes.
pub fn format_size(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    const KIB: u64 = 1 << 10;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{}m", bytes / MIB)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{}k", bytes / KIB)
    } else {
        bytes.to_string()
    }
}

/// Parses a duration: a bare number of seconds (`10`, `1.5`) or Go's
/// syntax (`500ms`, `3s`, `2m`, `1h30m`), by the workspace's one parser
/// ([`Rules::BareSeconds`]).
pub fn parse_duration(input: &str) -> Result<Duration, UnitError> {
    Ok(duration::parse_duration(input, Rules::BareSeconds)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        let cases = [
            ("4096", 4096),
            ("4KiB", 4096),
            ("4k", 4096),
            ("4K", 4096),
            ("64KiB", 65536),
            ("4MiB", 4 << 20),
            ("4m", 4 << 20),
            ("4KB", 4000),
            ("1.5KiB", 1536),
            ("  16 MiB ", 16 << 20),
            ("1GiB", 1 << 30),
            ("0", 0),
        ];
        for (input, want) in cases {
            assert_eq!(parse_size(input), Ok(want), "{input}");
        }
    }

    #[test]
    fn sizes_in_memory() {
        assert_eq!(parse_size_usize("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size_usize(""), Err(UnitError::Empty));
    }

    #[test]
    fn bad_sizes() {
        assert_eq!(parse_size(""), Err(UnitError::Empty));
        assert!(matches!(
            parse_size("KiB"),
            Err(UnitError::InvalidNumber(_))
        ));
        assert!(matches!(
            parse_size("-4k"),
            Err(UnitError::InvalidNumber(_))
        ));
        assert!(matches!(
            parse_size("4 parsecs"),
            Err(UnitError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_size("1.2.3k"),
            Err(UnitError::InvalidNumber(_))
        ));
    }

    #[test]
    fn size_names_round_trip() {
        for name in ["4k", "64k", "4m", "1000"] {
            let bytes = parse_size(name).expect("valid size");
            assert_eq!(format_size(bytes), name);
        }
    }

    #[test]
    fn durations() {
        let cases = [
            ("3s", Duration::from_secs(3)),
            ("500ms", Duration::from_millis(500)),
            ("0.5s", Duration::from_millis(500)),
            ("2m", Duration::from_secs(120)),
            ("10", Duration::from_secs(10)),
            ("250us", Duration::from_micros(250)),
            ("0s", Duration::ZERO),
        ];
        for (input, want) in cases {
            assert_eq!(parse_duration(input), Ok(want), "{input}");
        }
        assert!(parse_duration("3 fortnights").is_err());
        assert!(parse_duration("").is_err());
    }
}
