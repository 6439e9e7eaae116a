//! Latency statistics: nearest-rank percentiles over all samples, and the
//! median used to summarize benchmark rounds.

use serde::{Deserialize, Serialize};

/// Latency figures of one run, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Slowest request.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
}

impl LatencySummary {
    /// Summarizes latency samples given in nanoseconds (in any order); all
    /// zero when there are none.
    pub fn from_nanos(mut samples: Vec<u64>) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        samples.sort_unstable();
        let micros = |nanos: u64| round_to_tenth(nanos as f64 / 1_000.0);
        let total: u128 = samples.iter().map(|&s| u128::from(s)).sum();
        Self {
            p50: micros(percentile(&samples, 50.0)),
            p90: micros(percentile(&samples, 90.0)),
            p99: micros(percentile(&samples, 99.0)),
            max: micros(samples[samples.len() - 1]),
            mean: round_to_tenth(total as f64 / samples.len() as f64 / 1_000.0),
        }
    }
}

/// The nearest-rank `p`-th percentile (0 < p ≤ 100) of `sorted`, which must
/// be sorted ascending: the smallest sample such that at least `p` percent of
/// the samples are less than or equal to it. Zero for no samples.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The median of `values` (the mean of the middle two for an even count);
/// `None` when empty. NaNs sort last.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    })
}

/// Rounds to one decimal, enough for microsecond figures.
pub fn round_to_tenth(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&samples, 50.0), 50);
        assert_eq!(percentile(&samples, 90.0), 90);
        assert_eq!(percentile(&samples, 99.0), 99);
        assert_eq!(percentile(&samples, 100.0), 100);
        assert_eq!(percentile(&samples, 0.1), 1);

        let small = [10, 20, 30];
        assert_eq!(percentile(&small, 50.0), 20);
        assert_eq!(percentile(&small, 99.0), 30);
        assert_eq!(percentile(&[7], 50.0), 7);
        assert_eq!(percentile(&[], 50.0), 0);
    }

    #[test]
    fn summary_in_micros() {
        // 1..=1000 µs, shuffled.
        let mut nanos: Vec<u64> = (1..=1000).map(|us| us * 1_000).collect();
        nanos.reverse();
        let summary = LatencySummary::from_nanos(nanos);
        assert_eq!(summary.p50, 500.0);
        assert_eq!(summary.p90, 900.0);
        assert_eq!(summary.p99, 990.0);
        assert_eq!(summary.max, 1000.0);
        assert_eq!(summary.mean, 500.5);
        assert_eq!(
            LatencySummary::from_nanos(Vec::new()),
            LatencySummary::default()
        );
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }
}
