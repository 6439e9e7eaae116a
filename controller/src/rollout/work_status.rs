//! A cluster's rollout status, derived from its ManifestWork's conditions.
//!
//! This follows OCM's `clusterRolloutStatusFunc` and the design's status
//! table: a work is `ToApply` until the agent has applied and observed its
//! current generation; then `Progressing` and `Degraded` decide, and a work
//! whose agent reports no `Progressing` at all counts as still progressing
//! (the design's conservative fallback, which times out). With a rollout
//! plugin (the design), a work that finished progressing is `Validating`
//! until the plugin's `ValidateRolloutCompletion` says SUCCEEDED or FAILED,
//! which [`apply_validation`] folds in.
//!
//! Whether the work's spec is the revision being rolled out is for the caller
//! to check first: a work of another revision counts as not there at all.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::RolloutStatus;

/// ManifestWork condition type `Applied`.
pub const APPLIED: &str = "Applied";
/// ManifestWork condition type `Progressing`.
pub const PROGRESSING: &str = "Progressing";
/// ManifestWork condition type `Degraded`.
pub const DEGRADED: &str = "Degraded";

/// A condition's status. Anything other than `True` or `False` reads as
/// `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) enum ConditionStatus {
    /// `"True"`.
    True,
    /// `"False"`.
    False,
    /// `"Unknown"`, or any other value.
    #[default]
    #[serde(other)]
    Unknown,
}

/// The part of a Kubernetes `metav1.Condition` the status depends on; it
/// deserializes from a full condition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type, such as `Progressing`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    #[serde(default)]
    pub(crate) status: ConditionStatus,
    /// The work generation the agent had seen when it set the condition.
    #[serde(default)]
    pub(crate) observed_generation: i64,
    /// When the status last changed.
    #[serde(default)]
    pub last_transition_time: Option<Timestamp>,
}

impl Condition {
    /// A condition observed at `observed_generation`, changed at `at`.
    #[cfg(test)]
    pub(crate) fn new(
        kind: impl Into<String>,
        status: ConditionStatus,
        observed_generation: i64,
        at: Timestamp,
    ) -> Self {
        Condition {
            kind: kind.into(),
            status,
            observed_generation,
            last_transition_time: Some(at),
        }
    }
}

/// Whether the MWRS's placement uses a rollout plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validation {
    /// No plugin: upstream OCM behaviour.
    None,
    /// A plugin validates each cluster after it stops progressing.
    Plugin,
}

/// A status derived from a ManifestWork, with the time it began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkStatus {
    /// The rollout status.
    pub status: RolloutStatus,
    /// From the condition that decided it (`Degraded` for `Failed`,
    /// `Progressing` otherwise); `None` for `ToApply`.
    pub last_transition_time: Option<Timestamp>,
}

/// A decided answer of `ValidateRolloutCompletion` (an `INPROGRESS`
/// answer decides nothing and changes no status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValidationResult {
    /// Validation passed.
    Succeeded,
    /// Validation failed.
    Failed,
}

fn find<'c>(conditions: &'c [Condition], kind: &str) -> Option<&'c Condition> {
    conditions.iter().find(|c| c.kind == kind)
}

/// Derives a cluster's status from its ManifestWork's `generation` and
/// status `conditions`: the design's status table.
///
/// `ToApply` when `Applied` is missing, not True or stale (its
/// `observedGeneration` differs from `generation`), when `Progressing` is
/// stale, or when `Degraded` exists and is stale. Otherwise:
///
/// | Progressing | Degraded | status | with a plugin | time from |
/// |---|---|---|---|---|
/// | True | True | Failed | Failed | Degraded |
/// | True | not True | Progressing | Progressing | Progressing |
/// | False | not True | Succeeded | Validating | Progressing |
/// | False | True | Succeeded | Failed | Progressing / Degraded |
/// | Unknown | any | Progressing | Progressing | Progressing |
/// | missing | any | Progressing | Progressing | Applied |
///
/// The last row is the design's conservative fallback: OCM's work agent
/// sets a work-level `Progressing` only from the template's condition
/// rules, so a work without them would otherwise be `ToApply` for ever,
/// which never times out. As `Progressing` it times out under the
/// strategy's `progressDeadline` (counted from `Applied`'s last transition;
/// the orchestration takes the later of that and its own last apply) and
/// so can abort; it never succeeds, since only `Progressing` False says the
/// work is done.
///
/// The row before it is not in the design: OCM ignores `Degraded` once
/// progress stops, but with a plugin a degraded work must not reach
/// validation as if healthy, so it fails.
pub fn derive(generation: i64, conditions: &[Condition], validation: Validation) -> WorkStatus {
    let applied = find(conditions, APPLIED);
    let progressing = find(conditions, PROGRESSING);
    let degraded = find(conditions, DEGRADED);

    let current = |c: &Condition| c.observed_generation == generation;
    let applied = match applied {
        Some(a) if current(a) && a.status == ConditionStatus::True => a,
        _ => return to_apply(),
    };
    if progressing.is_some_and(|p| !current(p)) || degraded.is_some_and(|d| !current(d)) {
        return to_apply();
    }
    let Some(progressing) = progressing else {
        // The fallback: no Progressing reported at all.
        return WorkStatus {
            status: RolloutStatus::Progressing,
            last_transition_time: applied.last_transition_time,
        };
    };
    let degraded = degraded.filter(|d| d.status == ConditionStatus::True);

    let (status, at) = match (progressing.status, degraded, validation) {
        (ConditionStatus::True, Some(d), _) => (RolloutStatus::Failed, d.last_transition_time),
        (ConditionStatus::False, Some(d), Validation::Plugin) => {
            (RolloutStatus::Failed, d.last_transition_time)
        }
        (ConditionStatus::False, None, Validation::Plugin) => {
            (RolloutStatus::Validating, progressing.last_transition_time)
        }
        (ConditionStatus::False, _, Validation::None) => {
            (RolloutStatus::Succeeded, progressing.last_transition_time)
        }
        // True and not degraded, or Unknown: still progressing.
        _ => (RolloutStatus::Progressing, progressing.last_transition_time),
    };
    WorkStatus {
        status,
        last_transition_time: at,
    }
}

fn to_apply() -> WorkStatus {
    WorkStatus {
        status: RolloutStatus::ToApply,
        last_transition_time: None,
    }
}

/// Folds a `ValidateRolloutCompletion` answer into a `Validating` status:
/// SUCCEEDED makes it `Succeeded`, FAILED `Failed`.
/// The time is kept, so the soak and the deadline both run from the end of
/// progress. Any other status is returned unchanged.
pub(crate) fn apply_validation(status: WorkStatus, result: ValidationResult) -> WorkStatus {
    if status.status != RolloutStatus::Validating {
        return status;
    }
    let status_after = match result {
        ValidationResult::Succeeded => RolloutStatus::Succeeded,
        ValidationResult::Failed => RolloutStatus::Failed,
    };
    WorkStatus {
        status: status_after,
        ..status
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConditionStatus::{False, True, Unknown};

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_640_995_200 + secs).expect("valid time")
    }

    /// `(type, status, observedGeneration, lastTransitionTime seconds)`.
    fn conditions(spec: &[(&str, ConditionStatus, i64, i64)]) -> Vec<Condition> {
        spec.iter()
            .map(|&(kind, status, generation, secs)| {
                Condition::new(kind, status, generation, at(secs))
            })
            .collect()
    }

    #[test]
    fn derived_statuses() {
        use RolloutStatus::*;
        type Case<'a> = (
            &'a str,
            &'a [(&'a str, ConditionStatus, i64, i64)],
            Validation,
            RolloutStatus,
            Option<i64>,
        );
        let none = Validation::None;
        let plugin = Validation::Plugin;
        let cases: &[Case] = &[
            ("no conditions", &[], none, ToApply, None),
            (
                "applied only: the fallback",
                &[("Applied", True, 2, 1)],
                none,
                Progressing,
                Some(1),
            ),
            (
                "applied only, plugin: the fallback",
                &[("Applied", True, 2, 1)],
                plugin,
                Progressing,
                Some(1),
            ),
            (
                "applied and degraded, no progressing: the fallback",
                &[("Applied", True, 2, 1), ("Degraded", True, 2, 3)],
                plugin,
                Progressing,
                Some(1),
            ),
            (
                "applied, degraded stale, no progressing",
                &[("Applied", True, 2, 1), ("Degraded", True, 1, 3)],
                none,
                ToApply,
                None,
            ),
            (
                "applied stale, no progressing",
                &[("Applied", True, 1, 1)],
                none,
                ToApply,
                None,
            ),
            (
                "progressing without applied",
                &[("Progressing", True, 2, 2)],
                none,
                ToApply,
                None,
            ),
            (
                "applied false",
                &[("Applied", False, 2, 1), ("Progressing", True, 2, 2)],
                none,
                ToApply,
                None,
            ),
            (
                "applied unknown",
                &[("Applied", Unknown, 2, 1), ("Progressing", True, 2, 2)],
                none,
                ToApply,
                None,
            ),
            (
                "applied stale",
                &[("Applied", True, 1, 1), ("Progressing", False, 2, 2)],
                none,
                ToApply,
                None,
            ),
            (
                "progressing stale",
                &[("Applied", True, 2, 1), ("Progressing", False, 1, 2)],
                none,
                ToApply,
                None,
            ),
            (
                "degraded stale",
                &[
                    ("Applied", True, 2, 1),
                    ("Progressing", False, 2, 2),
                    ("Degraded", False, 1, 3),
                ],
                none,
                ToApply,
                None,
            ),
            (
                "progressing true",
                &[("Applied", True, 2, 1), ("Progressing", True, 2, 2)],
                none,
                Progressing,
                Some(2),
            ),
            (
                "progressing true, degraded false",
                &[
                    ("Applied", True, 2, 1),
                    ("Progressing", True, 2, 2),
                    ("Degraded", False, 2, 3),
                ],
                none,
                Progressing,
                Some(2),
            ),
            (
                "progressing and degraded",
                &[
                    ("Applied", True, 2, 1),
                    ("Progressing", True, 2, 2),
                    ("Degraded", True, 2, 3),
                ],
                none,
                Failed,
                Some(3),
            ),
            (
                "progressing and degraded, plugin",
                &[
                    ("Applied", True, 2, 1),
                    ("Progressing", True, 2, 2),
                    ("Degraded", True, 2, 3),
                ],
                plugin,
                Failed,
                Some(3),
            ),
            (
                "done",
                &[("Applied", True, 2, 1), ("Progressing", False, 2, 2)],
                none,
                Succeeded,
                Some(2),
            ),
            (
                "done, degraded false",
                &[
                    ("Applied", True, 2, 1),
                    ("Progressing", False, 2, 2),
                    ("Degraded", False, 2, 3),
                ],
                none,
                Succeeded,
                Some(2),
            ),
            (
                "done but degraded: upstream ignores Degraded",
                &[
                    ("Applied", True, 2, 1),
                    ("Progressing", False, 2, 2),
                    ("Degraded", True, 2, 3),
                ],
                none,
                Succeeded,
                Some(2),
            ),
            (
                "done, plugin: validating",
                &[("Applied", True, 2, 1), ("Progressing", False, 2, 2)],
                plugin,
                Validating,
                Some(2),
            ),
            (
                "done, degraded unknown, plugin: validating",
                &[
                    ("Applied", True, 2, 1),
                    ("Progressing", False, 2, 2),
                    ("Degraded", Unknown, 2, 3),
                ],
                plugin,
                Validating,
                Some(2),
            ),
            (
                "done but degraded, plugin: failed",
                &[
                    ("Applied", True, 2, 1),
                    ("Progressing", False, 2, 2),
                    ("Degraded", True, 2, 3),
                ],
                plugin,
                Failed,
                Some(3),
            ),
            (
                "progressing unknown",
                &[
                    ("Applied", True, 2, 1),
                    ("Progressing", Unknown, 2, 2),
                    ("Degraded", True, 2, 3),
                ],
                none,
                Progressing,
                Some(2),
            ),
            (
                "progressing unknown, plugin",
                &[("Applied", True, 2, 1), ("Progressing", Unknown, 2, 2)],
                plugin,
                Progressing,
                Some(2),
            ),
        ];
        for (name, spec, validation, status, secs) in cases {
            let got = derive(2, &conditions(spec), *validation);
            assert_eq!(
                got,
                WorkStatus {
                    status: *status,
                    last_transition_time: secs.map(at)
                },
                "{name}"
            );
        }
    }

    #[test]
    fn first_condition_of_a_type_counts() {
        let mut conds = conditions(&[("Applied", True, 1, 1), ("Progressing", False, 1, 2)]);
        conds.push(Condition::new("Progressing", True, 1, at(9)));
        assert_eq!(
            derive(1, &conds, Validation::None).status,
            RolloutStatus::Succeeded
        );
    }

    #[test]
    fn validation_results() {
        let validating = WorkStatus {
            status: RolloutStatus::Validating,
            last_transition_time: Some(at(5)),
        };
        let cases = [
            (ValidationResult::Succeeded, RolloutStatus::Succeeded),
            (ValidationResult::Failed, RolloutStatus::Failed),
        ];
        for (result, want) in cases {
            let got = apply_validation(validating, result);
            assert_eq!(got.status, want, "{result:?}");
            assert_eq!(got.last_transition_time, Some(at(5)));
        }
        let progressing = WorkStatus {
            status: RolloutStatus::Progressing,
            last_transition_time: Some(at(5)),
        };
        assert_eq!(
            apply_validation(progressing, ValidationResult::Failed),
            progressing
        );
    }

    #[test]
    fn conditions_deserialize_from_kubernetes_json() {
        let json = r#"[{"type": "Progressing", "status": "False", "observedGeneration": 3,
                        "lastTransitionTime": "2022-01-01T00:00:00Z", "reason": "Done", "message": ""},
                       {"type": "Degraded", "status": "Weird", "lastTransitionTime": "2022-01-01T00:00:01Z"}]"#;
        let conds: Vec<Condition> = serde_json::from_str(json).expect("parses");
        assert_eq!(conds[0].status, ConditionStatus::False);
        assert_eq!(conds[0].observed_generation, 3);
        assert_eq!(conds[0].last_transition_time, Some(at(0)));
        assert_eq!(conds[1].status, ConditionStatus::Unknown);
        assert_eq!(conds[1].observed_generation, 0);
    }
}
