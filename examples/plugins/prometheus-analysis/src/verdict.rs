//! The answer for one cluster, from what Prometheus said to each check:
//! pure, with `since` (the cluster's update) and `now` as arguments.
//!
//! - A check **passes** on at least `minSamples` finite samples, every one
//!   of them passing its comparison.
//! - It **fails** on one finite sample that does not pass (the message
//!   names the query, the value, when, and the threshold), or on an error
//!   asking again cannot mend ([`QueryError::transient`] is false: a query
//!   Prometheus refuses, an answer that is not Prometheus's, several
//!   series, an answer over the size limit).
//! - It is **pending** otherwise: too few finite samples (no series yet,
//!   NaN or ±Inf, which count as no sample), or Prometheus down, slow or
//!   overloaded.
//!
//! The cluster is FAILED when a check fails; INPROGRESS while a check is
//! pending and the deadline (from the cluster's update) has not passed,
//! FAILED once it has; SUCCEEDED only when every check passed.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use rollout_plugin_sdk::Validation;

use crate::config::{Check, Comparison, Plan};
use crate::prometheus::{QueryError, Series};

/// What one check's query gave, and the query as sent.
#[derive(Debug)]
pub struct Asked<'a> {
    /// The check.
    pub check: &'a Check,
    /// Its query, placeholders replaced.
    pub query: String,
    /// Prometheus's answer; `Ok(None)` for no series (or no query yet: the
    /// range was empty).
    pub answer: Result<Option<Series>, QueryError>,
}

/// One check's state.
#[derive(Debug)]
enum Outcome {
    Passed { samples: usize, worst: f64 },
    Failed { value: f64, at: f64 },
    Broken(QueryError),
    Pending { samples: usize, skipped: usize },
    Unavailable(QueryError),
}

fn judge(check: &Check, answer: Result<Option<Series>, QueryError>) -> Outcome {
    let series = match answer {
        Ok(series) => series,
        Err(e) if e.transient() => return Outcome::Unavailable(e),
        Err(e) => return Outcome::Broken(e),
    };
    let samples = series.map(|s| s.samples).unwrap_or_default();
    let finite: Vec<(f64, f64)> = samples
        .iter()
        .copied()
        .filter(|(_, v)| v.is_finite())
        .collect();
    let skipped = samples.len() - finite.len();
    if let Some(&(at, value)) = finite
        .iter()
        .find(|(_, v)| !check.comparison.passes(*v, check.threshold))
    {
        return Outcome::Failed { value, at };
    }
    let needed = usize::try_from(check.min_samples).unwrap_or(usize::MAX);
    if finite.len() < needed {
        return Outcome::Pending {
            samples: finite.len(),
            skipped,
        };
    }
    let values = finite.iter().map(|(_, v)| *v);
    let worst = match check.comparison {
        Comparison::Greater | Comparison::AtLeast => values.fold(f64::INFINITY, f64::min),
        Comparison::Less | Comparison::AtMost => values.fold(f64::NEG_INFINITY, f64::max),
    };
    Outcome::Passed {
        samples: finite.len(),
        worst,
    }
}

/// The answer for `cluster` (at `revision`), updated at `since`, at `now`,
/// from every check of `plan` asked.
pub fn decide(
    plan: &Plan,
    asked: Vec<Asked<'_>>,
    target: &str,
    since: SystemTime,
    now: SystemTime,
) -> Validation {
    let judged: Vec<(Outcome, &Check, String)> = asked
        .into_iter()
        .map(|a| (judge(a.check, a.answer), a.check, a.query))
        .collect();
    let failed: Vec<String> = judged
        .iter()
        .filter(|(o, ..)| matches!(o, Outcome::Failed { .. } | Outcome::Broken(_)))
        .map(|(o, c, q)| said(o, c, q))
        .collect();
    if !failed.is_empty() {
        return Validation::failed(format!("{target}: {}", failed.join("; ")));
    }
    let pending: Vec<_> = judged
        .iter()
        .filter(|(o, ..)| matches!(o, Outcome::Pending { .. } | Outcome::Unavailable(_)))
        .collect();
    if pending.is_empty() {
        let passed: Vec<String> = judged.iter().map(|(o, c, q)| said(o, c, q)).collect();
        return Validation::succeeded().with_message(format!(
            "{target}: all {} checks passed: {}",
            passed.len(),
            passed.join("; ")
        ));
    }
    let undecided: Vec<String> = pending.iter().map(|(o, c, q)| said(o, c, q)).collect();
    let elapsed = now.duration_since(since).unwrap_or(Duration::ZERO);
    let Some(left) = plan.deadline.checked_sub(elapsed).filter(|d| !d.is_zero()) else {
        return Validation::failed(format!(
            "{target}: still undecided {} after the cluster's update (deadline {}): {}",
            seconds_down(elapsed),
            seconds(plan.deadline),
            undecided.join("; ")
        ));
    };
    let recheck = pending
        .iter()
        .map(|(_, c, _)| c.interval)
        .min()
        .unwrap_or(left)
        .min(left);
    Validation::in_progress(format!(
        "{target}: waiting ({} left before the deadline): {}",
        seconds(left),
        undecided.join("; ")
    ))
    .recheck_after(recheck)
}

/// What `outcome` says about `check`, with the query.
fn said(outcome: &Outcome, check: &Check, query: &str) -> String {
    let name = &check.name;
    let (op, threshold) = (check.comparison, check.threshold);
    let mut out = match outcome {
        Outcome::Passed { samples, worst } => {
            format!("check {name:?} passed: {samples} samples {op} {threshold} (worst {worst})")
        }
        Outcome::Failed { value, at } => format!(
            "check {name:?} failed: value {value} at {} is not {op} {threshold}",
            timestamp(*at)
        ),
        Outcome::Broken(e) => format!("check {name:?} failed: {e}"),
        Outcome::Pending { samples, skipped } => {
            let mut s = format!(
                "check {name:?}: {samples} of {} samples {op} {threshold}",
                check.min_samples
            );
            if *skipped > 0 {
                let _ = write!(s, " ({skipped} NaN or infinite, not counted)");
            }
            s
        }
        Outcome::Unavailable(e) => format!("check {name:?}: {e}"),
    };
    let _ = write!(out, " (query: {query})");
    out
}

/// Unix seconds as RFC 3339, to the millisecond.
fn timestamp(at: f64) -> String {
    // Whole milliseconds: the cast saturates out of range, which jiff
    // then refuses, and the number is shown as it is.
    let millis = (at * 1000.0).round() as i64;
    jiff::Timestamp::from_millisecond(millis)
        .map_or_else(|_| format!("unix {at}"), |t| t.to_string())
}

/// A duration as whole seconds, rounded down (`90s`).
fn seconds_down(d: Duration) -> String {
    format!("{:?}", Duration::from_secs(d.as_secs()))
}

/// A duration as whole seconds, rounded up (`90s`).
fn seconds(d: Duration) -> String {
    format!(
        "{:?}",
        Duration::from_secs(d.as_secs() + u64::from(d.subsec_nanos() > 0))
    )
}

#[cfg(test)]
mod tests;
