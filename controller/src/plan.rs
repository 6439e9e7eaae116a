//! One decision of the rollout engine as JSON in and out: the `plan` command
//! (docs/plugin-api.md §5).
//!
//! The input names a strategy exactly as the Kubernetes `rolloutStrategy`
//! field, the placement's decision groups, the existing cluster statuses and
//! the time; the output is the [`RolloutResult`] in camelCase, with statuses
//! spelled `ToApply`, `Progressing`, …, times in RFC 3339 or `null`, and
//! `recheckAfterSeconds` a number or `null`. Unknown fields are ignored.

use std::io::Read;
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize, Serializer};
use thiserror::Error;

use crate::rollout::{
    self, ClusterGroup, ClusterRolloutStatus, InvalidStrategy, RawStrategy, RolloutResult,
    RolloutStatus, Strategy,
};

/// The `plan` input document.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PlanInput {
    /// The `rolloutStrategy`; absent means OCM's default (All, no deadline).
    #[serde(default)]
    pub(crate) strategy: RawStrategy,
    /// The placement's decision groups.
    #[serde(default)]
    pub(crate) groups: Vec<GroupEntry>,
    /// Statuses of clusters that already have the ManifestWork.
    #[serde(default)]
    pub(crate) existing: Vec<ExistingEntry>,
    /// The time of the decision; absent means the caller's clock.
    #[serde(default)]
    pub(crate) now: Option<Timestamp>,
}

/// A decision group in the input.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GroupEntry {
    /// Group index.
    #[serde(default)]
    pub(crate) index: i32,
    /// Group name (may be empty).
    #[serde(default)]
    pub(crate) name: String,
    /// Cluster names.
    #[serde(default)]
    pub(crate) clusters: Vec<String>,
}

/// An existing cluster status in the input.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ExistingEntry {
    /// The cluster.
    pub(crate) cluster_name: String,
    /// Its status.
    pub(crate) status: RolloutStatus,
    /// When the status began; absent or `null` means unknown.
    #[serde(default)]
    pub(crate) last_transition_time: Option<Timestamp>,
    /// Group index it was recorded with; default 0.
    #[serde(default)]
    pub(crate) group_index: Option<i32>,
    /// Group name it was recorded with; default empty.
    #[serde(default)]
    pub(crate) group_name: Option<String>,
}

/// A cluster in the output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterEntry {
    /// The cluster.
    pub(crate) cluster_name: String,
    /// Its status after the decision.
    pub(crate) status: RolloutStatus,
    /// Group index.
    pub(crate) group_index: i32,
    /// Group name.
    pub(crate) group_name: String,
    /// When the status began, or `null`.
    pub(crate) last_transition_time: Option<Timestamp>,
    /// When to look at the cluster again, or `null`.
    pub(crate) recheck_time: Option<Timestamp>,
}

/// The `plan` output document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanOutput {
    /// Clusters to roll out or keep watching.
    #[serde(rename = "clustersToRollout")]
    pub(crate) clusters_to_rollout: Vec<ClusterEntry>,
    /// Clusters that timed out.
    #[serde(rename = "clustersTimeOut")]
    pub(crate) clusters_time_out: Vec<ClusterEntry>,
    /// Clusters no longer in the placement.
    #[serde(rename = "clustersRemoved")]
    pub(crate) clusters_removed: Vec<ClusterEntry>,
    /// Whether `maxFailures` was breached.
    #[serde(rename = "maxFailureBreach")]
    pub(crate) max_failure_breach: bool,
    /// Seconds until the next recheck, or `null`.
    #[serde(rename = "recheckAfterSeconds")]
    pub(crate) recheck_after_seconds: Option<Seconds>,
}

/// A duration written as a JSON number of seconds: an integer when whole
/// (`30`), else a fraction (`0.25`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seconds(pub(crate) Duration);

impl Serialize for Seconds {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0.subsec_nanos() == 0 {
            serializer.serialize_u64(self.0.as_secs())
        } else {
            serializer.serialize_f64(self.0.as_secs_f64())
        }
    }
}

/// Why `plan` could not answer. Every variant is a problem with the input.
#[derive(Debug, Error)]
pub enum PlanError {
    /// The input file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file, or `<stdin>`.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The input is not a valid plan document.
    #[error("{path}:{line}:{column}: invalid plan input: {message}")]
    Json {
        /// The file, or `<stdin>`.
        path: String,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// What serde_json found wrong.
        message: String,
    },
    /// The strategy does not validate.
    #[error(transparent)]
    Strategy(#[from] InvalidStrategy),
}

/// Runs one decision on a parsed input. `default_now` is used when the input
/// has no `now`. Fails only when the strategy is invalid.
pub(crate) fn plan(
    input: &PlanInput,
    default_now: Timestamp,
) -> Result<PlanOutput, InvalidStrategy> {
    let strategy = Strategy::from_raw(&input.strategy)?;
    let groups: Vec<ClusterGroup> = input
        .groups
        .iter()
        .map(|g| ClusterGroup {
            index: g.index,
            name: g.name.clone(),
            clusters: g.clusters.clone(),
        })
        .collect();
    let existing: Vec<ClusterRolloutStatus> = input
        .existing
        .iter()
        .map(|e| ClusterRolloutStatus {
            cluster_name: e.cluster_name.clone(),
            status: e.status,
            last_transition_time: e.last_transition_time,
            group_index: e.group_index.unwrap_or(0),
            group_name: e.group_name.clone().unwrap_or_default(),
            recheck_time: None,
        })
        .collect();
    let now = input.now.unwrap_or(default_now);
    Ok(PlanOutput::from(rollout::decide(
        &strategy, &groups, &existing, now,
    )))
}

impl From<RolloutResult> for PlanOutput {
    fn from(result: RolloutResult) -> Self {
        let entries = |list: Vec<ClusterRolloutStatus>| -> Vec<ClusterEntry> {
            list.into_iter().map(ClusterEntry::from).collect()
        };
        PlanOutput {
            clusters_to_rollout: entries(result.clusters_to_rollout),
            clusters_time_out: entries(result.clusters_timeout),
            clusters_removed: entries(result.clusters_removed),
            max_failure_breach: result.max_failure_breach,
            recheck_after_seconds: result.recheck_after.map(Seconds),
        }
    }
}

impl From<ClusterRolloutStatus> for ClusterEntry {
    fn from(s: ClusterRolloutStatus) -> Self {
        ClusterEntry {
            cluster_name: s.cluster_name,
            status: s.status,
            group_index: s.group_index,
            group_name: s.group_name,
            last_transition_time: s.last_transition_time,
            recheck_time: s.recheck_time,
        }
    }
}

/// Parses a plan document; `source` names it in errors.
pub(crate) fn parse_input(text: &str, source: &str) -> Result<PlanInput, PlanError> {
    serde_json::from_str(text).map_err(|err| {
        let (line, column) = (err.line(), err.column());
        let full = err.to_string();
        // serde_json appends the location; it is already in the prefix.
        let suffix = format!(" at line {line} column {column}");
        let message = full.strip_suffix(&suffix).unwrap_or(&full).to_owned();
        PlanError::Json {
            path: source.to_owned(),
            line,
            column,
            message,
        }
    })
}

/// Reads the input from `path`, or from standard input when it is `-`.
pub(crate) fn read_input(path: &str) -> Result<String, PlanError> {
    let result = if path == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map(|_| text)
    } else {
        std::fs::read_to_string(path)
    };
    result.map_err(|source| PlanError::Read {
        path: display_name(path).to_owned(),
        source,
    })
}

/// The whole command: read `path` (`-` is stdin), parse, decide.
pub fn run(path: &str, default_now: Timestamp) -> Result<PlanOutput, PlanError> {
    let text = read_input(path)?;
    let input = parse_input(&text, display_name(path))?;
    Ok(plan(&input, default_now)?)
}

fn display_name(path: &str) -> &str {
    if path == "-" { "<stdin>" } else { path }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_example() {
        let input = parse_input(
            r#"{"strategy": {"type": "Progressive", "progressive": {"maxConcurrency": 2, "maxFailures": 1, "progressDeadline": "90s"}},
                "groups": [{"index": 0, "name": "canary", "clusters": ["c1", "c2"]}, {"index": 1, "name": "", "clusters": ["c3"]}],
                "existing": [{"clusterName": "c1", "status": "Succeeded", "lastTransitionTime": "2022-01-01T00:00:00Z", "groupIndex": 0, "groupName": "canary"}],
                "now": "2022-01-01T00:02:00Z"}"#,
            "example.json",
        )
        .expect("parses");
        let output = plan(&input, Timestamp::UNIX_EPOCH).expect("valid strategy");
        let json = serde_json::to_value(&output).expect("encodes");
        assert_eq!(
            json,
            serde_json::json!({
                "clustersToRollout": [
                    {"clusterName": "c2", "status": "ToApply", "groupIndex": 0, "groupName": "canary",
                     "lastTransitionTime": null, "recheckTime": null},
                    {"clusterName": "c3", "status": "ToApply", "groupIndex": 1, "groupName": "",
                     "lastTransitionTime": null, "recheckTime": null}
                ],
                "clustersTimeOut": [], "clustersRemoved": [], "maxFailureBreach": false,
                "recheckAfterSeconds": null
            })
        );
    }

    #[test]
    fn optional_group_of_existing_and_removed_keep_it() {
        let input = parse_input(
            r#"{"groups": [{"index": 0, "clusters": ["a"]}],
                "existing": [{"clusterName": "gone", "status": "Progressing", "groupIndex": 3, "groupName": "old"},
                             {"clusterName": "a", "status": "Progressing", "lastTransitionTime": null}],
                "now": "2022-01-01T00:00:00Z"}"#,
            "x",
        )
        .expect("parses");
        let output = plan(&input, Timestamp::UNIX_EPOCH).expect("valid");
        assert_eq!(output.clusters_removed.len(), 1);
        assert_eq!(output.clusters_removed[0].group_index, 3);
        assert_eq!(output.clusters_removed[0].group_name, "old");
        assert_eq!(output.clusters_to_rollout[0].cluster_name, "a");
        assert_eq!(output.clusters_to_rollout[0].group_index, 0);
        assert_eq!(output.clusters_to_rollout[0].group_name, "");
    }

    #[test]
    fn recheck_after_is_a_number() {
        let json = |d: Duration| serde_json::to_string(&Seconds(d)).expect("encodes");
        assert_eq!(json(Duration::from_secs(30)), "30");
        assert_eq!(json(Duration::from_millis(250)), "0.25");
    }

    #[test]
    fn now_defaults_to_the_callers_clock() {
        let input = parse_input(
            r#"{"strategy": {"type": "All", "all": {"progressDeadline": "60s"}},
                "groups": [{"clusters": ["a"]}],
                "existing": [{"clusterName": "a", "status": "Progressing", "lastTransitionTime": "2022-01-01T00:00:00Z"}]}"#,
            "x",
        )
        .expect("parses");
        let early: Timestamp = "2022-01-01T00:00:10Z".parse().expect("time");
        let output = plan(&input, early).expect("valid");
        assert_eq!(
            output.recheck_after_seconds,
            Some(Seconds(Duration::from_secs(50)))
        );
    }

    #[test]
    fn errors_name_the_source_and_location() {
        let err = parse_input("{\n  \"groups\": [1]\n}", "in.json").expect_err("bad");
        match &err {
            PlanError::Json { path, line, .. } => {
                assert_eq!(path, "in.json");
                assert_eq!(*line, 2);
            }
            other => panic!("unexpected {other:?}"),
        }
        let text = err.to_string();
        assert!(text.starts_with("in.json:2:"), "{text}");
        assert!(!text.contains(" at line "), "{text}");

        let err = parse_input(
            r#"{"existing": [{"clusterName": "a", "status": "Done"}]}"#,
            "s",
        )
        .expect_err("bad status");
        assert!(err.to_string().contains("unknown variant `Done`"), "{err}");

        let err = run("/nonexistent/plan.json", Timestamp::UNIX_EPOCH).expect_err("missing");
        assert!(
            err.to_string()
                .starts_with("cannot read /nonexistent/plan.json: "),
            "{err}"
        );
    }

    #[test]
    fn invalid_strategy_is_reported() {
        let input = parse_input(
            r#"{"strategy": {"type": "Progressive", "progressive": {"progressDeadline": "2d"}}}"#,
            "x",
        )
        .expect("parses");
        let err = plan(&input, Timestamp::UNIX_EPOCH).expect_err("invalid");
        assert!(
            err.to_string()
                .contains(r#"progressive.progressDeadline: invalid progressDeadline "2d""#),
            "{err}"
        );
    }
}
