//! Another writer of a ManifestWork the controller owns, read from the
//! work's `metadata.managedFields`. Pure.
//!
//! OCM's own ManifestWorkReplicaSet controller (when its feature gate is
//! on), a person with `kubectl edit`, or a GitOps tool may write a work this
//! controller applied: OCM's controller puts the plain template back over a
//! plugin's mutation and strips this controller's labels and annotations.
//! Applying again at once would start a loop that never ends. So a work that
//! another field manager wrote since the controller's last apply, in fields
//! the controller sets (`spec`, its labels, its annotations), is a
//! [`WorkConflict`]: reported, and left alone ([`decide`]) until
//!
//! - the template moves on: the work carries the controller's revision
//!   label of another revision than the one rolled out, so applying is a
//!   new rollout, not a fight; or
//! - the other writer has been quiet for
//!   [`Settings::conflict_backoff`](super::Settings::conflict_backoff):
//!   then the controller takes the work over once,
//!   and a writer that is still there writes again and starts another
//!   quiet period. At most one apply per back-off, never a loop.
//!
//! A work the controller never applied (no `Apply` entry of its own, such
//! as one OCM's controller wrote before this controller took over) is no
//! conflict: adopting or updating it is the controller's job.

use std::fmt;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::ResourceExt;
use serde_json::Value;

use crate::api::ManifestWork;
use crate::api::annotations::{OWNER_ANNOTATION, SPEC_HASH_ANNOTATION};
use crate::api::labels::{CONTROLLER_HASH_LABEL, MWRS_OWNER_LABEL, PLACEMENT_NAME_LABEL};

/// The server-side apply field manager of every write of the controller.
pub(crate) const FIELD_MANAGER: &str = "rollout-controller";

/// The labels the controller sets on every work it applies.
const OWN_LABELS: [&str; 3] = [
    MWRS_OWNER_LABEL,
    PLACEMENT_NAME_LABEL,
    CONTROLLER_HASH_LABEL,
];

/// The annotations the controller sets on every work it applies.
const OWN_ANNOTATIONS: [&str; 2] = [OWNER_ANNOTATION, SPEC_HASH_ANNOTATION];

/// A work another field manager wrote since the controller last applied it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkConflict {
    /// The cluster (the work's namespace).
    pub(crate) cluster: String,
    /// The work's name.
    pub(crate) work: String,
    /// The other field managers, by name; empty when the API server refused
    /// an apply (then [`WorkConflict::refused`] has its answer).
    pub(crate) managers: Vec<String>,
    /// When the last of them wrote.
    pub(crate) at: Option<Timestamp>,
    /// The API server's answer to an apply it refused with 409 Conflict.
    pub(crate) refused: Option<String>,
    /// Whether the controller left the work alone in this step (false when
    /// it took the work over: a new revision, or the back-off passed).
    pub(crate) left_alone: bool,
}

impl fmt::Display for WorkConflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (cluster, work) = (&self.cluster, &self.work);
        match &self.refused {
            Some(answer) => write!(
                f,
                "ManifestWork {cluster}/{work}: the API server refused the apply: {answer}"
            )?,
            None => {
                let managers: Vec<String> =
                    self.managers.iter().map(|m| format!("{m:?}")).collect();
                write!(
                    f,
                    "ManifestWork {cluster}/{work} was changed by field manager {}",
                    managers.join(", ")
                )?;
                if let Some(at) = self.at {
                    write!(f, " at {at}")?;
                }
            }
        }
        if self.left_alone {
            write!(f, "; left alone, not applied again")
        } else {
            write!(f, "; applied again")
        }
    }
}

/// What to do with a work to roll out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Apply it; `force` when another manager owns fields the controller
    /// sets (a take-over), else without force so that a writer racing the
    /// controller gets a 409 rather than being overwritten.
    Apply {
        /// Whether the apply forces ownership.
        force: bool,
    },
    /// Leave it alone; look again after `retry_after`.
    LeaveAlone {
        /// The conflict.
        conflict: WorkConflict,
        /// When the back-off ends.
        retry_after: Duration,
    },
}

/// When the controller last applied `work` (its `Apply` entry in
/// `managedFields`), if it ever did.
pub(crate) fn own_apply_time(work: &ManifestWork) -> Option<Timestamp> {
    work.metadata
        .managed_fields
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter(|e| e.manager.as_deref() == Some(FIELD_MANAGER))
        .filter(|e| e.operation.as_deref() == Some("Apply"))
        .filter_map(time_of)
        .max()
}

/// Another manager's write of `work` since the controller's last apply, in
/// fields the controller sets: the managers and when the last of them
/// wrote. `None` when there is none, or the controller never applied the
/// work.
pub(crate) fn foreign_write(work: &ManifestWork) -> Option<(Vec<String>, Timestamp)> {
    let entries = work.metadata.managed_fields.as_deref().unwrap_or_default();
    let ours = own_apply_time(work)?;
    let mut managers: Vec<String> = Vec::new();
    let mut last: Option<Timestamp> = None;
    for entry in entries {
        let manager = entry.manager.as_deref().unwrap_or_default();
        let status = entry.subresource.as_deref().is_some_and(|s| !s.is_empty());
        let Some(at) = time_of(entry) else { continue };
        if manager == FIELD_MANAGER || status || at < ours || !owns_our_fields(entry) {
            continue;
        }
        if !managers.iter().any(|m| m == manager) {
            managers.push(manager.to_owned());
        }
        last = last.max(Some(at));
    }
    last.map(|at| (managers, at))
}

/// Whether another manager (not the status subresource) owns any field the
/// controller sets on `work`, however long ago: an apply must then force
/// to take the work over.
pub(crate) fn foreign_owned(work: &ManifestWork) -> bool {
    work.metadata
        .managed_fields
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter(|e| e.manager.as_deref() != Some(FIELD_MANAGER))
        .filter(|e| e.subresource.as_deref().is_none_or(str::is_empty))
        .any(owns_our_fields)
}

/// Whether to apply `work` (in `cluster`) for `desired_revision` at `now`,
/// given the back-off after another writer (see the module documentation).
pub(crate) fn decide(
    cluster: &str,
    work: &ManifestWork,
    desired_revision: &str,
    now: Timestamp,
    backoff: Duration,
) -> Decision {
    let force = foreign_owned(work);
    let Some((managers, at)) = foreign_write(work) else {
        return Decision::Apply { force };
    };
    let revision = work.labels().get(CONTROLLER_HASH_LABEL);
    let quiet_until = at.checked_add(backoff).unwrap_or(Timestamp::MAX);
    let new_revision = revision.is_some_and(|r| r != desired_revision);
    if new_revision || now >= quiet_until {
        return Decision::Apply { force: true };
    }
    Decision::LeaveAlone {
        conflict: WorkConflict {
            cluster: cluster.to_owned(),
            work: work.name_any(),
            managers,
            at: Some(at),
            refused: None,
            left_alone: true,
        },
        retry_after: Duration::try_from(quiet_until.duration_since(now)).unwrap_or(backoff),
    }
}

/// The conflicts among `works` (cluster, work) as reported: each work
/// another manager wrote since the controller's last apply, whether or not
/// the step rolls it out.
pub(crate) fn conflicts_of<'w>(
    works: impl IntoIterator<Item = (&'w String, &'w ManifestWork)>,
) -> Vec<WorkConflict> {
    works
        .into_iter()
        .filter_map(|(cluster, work)| {
            foreign_write(work).map(|(managers, at)| WorkConflict {
                cluster: cluster.clone(),
                work: work.name_any(),
                managers,
                at: Some(at),
                refused: None,
                left_alone: true,
            })
        })
        .collect()
}

fn time_of(entry: &ManagedFieldsEntry) -> Option<Timestamp> {
    entry.time.as_ref().map(|t| t.0)
}

/// Whether the entry's field set holds any of `spec`, the controller's
/// labels or its annotations.
fn owns_our_fields(entry: &ManagedFieldsEntry) -> bool {
    let Some(fields) = entry.fields_v1.as_ref().map(|f| &f.0) else {
        return false;
    };
    let has = |object: &Value, key: &str| object.get(format!("f:{key}")).is_some();
    let metadata = fields.get("f:metadata");
    let owns_any = |map: &str, keys: &[&str]| {
        metadata
            .and_then(|m| m.get(format!("f:{map}")))
            .is_some_and(|m| keys.iter().any(|k| has(m, k)))
    };
    has(fields, "spec")
        || owns_any("labels", &OWN_LABELS)
        || owns_any("annotations", &OWN_ANNOTATIONS)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, Time};
    use serde_json::json;

    use super::*;
    use crate::api::ManifestWorkSpec;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).expect("time")
    }

    fn entry(manager: &str, operation: &str, secs: i64, fields: Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            time: Some(Time(at(secs))),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            ..ManagedFieldsEntry::default()
        }
    }

    fn work(revision: Option<&str>, entries: Vec<ManagedFieldsEntry>) -> ManifestWork {
        let mut work = ManifestWork::new("web-0123abcd", ManifestWorkSpec::default());
        work.metadata.namespace = Some("c1".into());
        if let Some(r) = revision {
            work.metadata.labels = Some([(CONTROLLER_HASH_LABEL.to_owned(), r.to_owned())].into());
        }
        work.metadata.managed_fields = Some(entries);
        work
    }

    fn spec_fields() -> Value {
        json!({"f:spec": {"f:workload": {"f:manifests": {}}}})
    }

    const BACKOFF: Duration = Duration::from_secs(600);

    #[test]
    fn writers_after_our_apply_in_our_fields_conflict() {
        let status = ManagedFieldsEntry {
            subresource: Some("status".into()),
            ..entry("work-agent", "Update", 20, json!({"f:status": {}}))
        };
        let label = json!({"f:metadata": {"f:labels": {format!("f:{CONTROLLER_HASH_LABEL}"): {}}}});
        let other_label = json!({"f:metadata": {"f:labels": {"f:team": {}}}});
        type Case = (
            &'static str,
            Vec<ManagedFieldsEntry>,
            Option<Vec<&'static str>>,
        );
        let cases: Vec<Case> = vec![
            (
                "only ours",
                vec![entry(FIELD_MANAGER, "Apply", 10, spec_fields())],
                None,
            ),
            (
                "never applied by us",
                vec![entry("work-controller", "Update", 20, spec_fields())],
                None,
            ),
            (
                "the agent's status",
                vec![entry(FIELD_MANAGER, "Apply", 10, spec_fields()), status],
                None,
            ),
            (
                "a spec edit after our apply",
                vec![
                    entry(FIELD_MANAGER, "Apply", 10, spec_fields()),
                    entry("kubectl-edit", "Update", 20, spec_fields()),
                ],
                Some(vec!["kubectl-edit"]),
            ),
            (
                "in the same second",
                vec![
                    entry(FIELD_MANAGER, "Apply", 10, spec_fields()),
                    entry("work-controller", "Update", 10, spec_fields()),
                ],
                Some(vec!["work-controller"]),
            ),
            (
                "before our apply",
                vec![
                    entry("work-controller", "Update", 5, label.clone()),
                    entry(FIELD_MANAGER, "Apply", 10, spec_fields()),
                ],
                None,
            ),
            (
                "our label",
                vec![
                    entry(FIELD_MANAGER, "Apply", 10, spec_fields()),
                    entry("argocd-controller", "Apply", 30, label),
                ],
                Some(vec!["argocd-controller"]),
            ),
            (
                "a label of someone else's",
                vec![
                    entry(FIELD_MANAGER, "Apply", 10, spec_fields()),
                    entry("team-bot", "Update", 30, other_label),
                ],
                None,
            ),
        ];
        for (name, entries, want) in cases {
            let got = foreign_write(&work(Some("r1"), entries)).map(|(m, _)| m);
            let want = want.map(|w| w.into_iter().map(str::to_owned).collect::<Vec<_>>());
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn a_conflict_is_left_alone_until_the_revision_moves_or_the_backoff_ends() {
        let edited = |revision| {
            work(
                revision,
                vec![
                    entry(FIELD_MANAGER, "Apply", 10, spec_fields()),
                    entry("work-controller", "Update", 20, spec_fields()),
                ],
            )
        };
        match decide("c1", &edited(Some("r1")), "r1", at(30), BACKOFF) {
            Decision::LeaveAlone {
                conflict,
                retry_after,
            } => {
                assert_eq!(conflict.managers, ["work-controller"]);
                assert_eq!(conflict.at, Some(at(20)));
                assert_eq!(retry_after, Duration::from_secs(590));
                assert_eq!(
                    conflict.to_string(),
                    format!(
                        "ManifestWork c1/web-0123abcd was changed by field manager \"work-controller\" at {}; left alone, not applied again",
                        at(20)
                    )
                );
            }
            other => panic!("{other:?}"),
        }
        // Stripped of its labels (as OCM's controller does): still left alone.
        assert!(matches!(
            decide("c1", &edited(None), "r1", at(30), BACKOFF),
            Decision::LeaveAlone { .. }
        ));
        // The template moved on: a new rollout takes the work over.
        assert_eq!(
            decide("c1", &edited(Some("r1")), "r2", at(30), BACKOFF),
            Decision::Apply { force: true }
        );
        // The other writer was quiet for the back-off.
        assert_eq!(
            decide("c1", &edited(Some("r1")), "r1", at(620), BACKOFF),
            Decision::Apply { force: true }
        );
        // No other writer: no force, so a racing one gets a 409.
        let ours = work(
            Some("r1"),
            vec![entry(FIELD_MANAGER, "Apply", 10, spec_fields())],
        );
        assert_eq!(
            decide("c1", &ours, "r2", at(30), BACKOFF),
            Decision::Apply { force: false }
        );
        // Written by another controller before this one ever applied it:
        // taken over with force.
        let foreign = work(
            None,
            vec![entry("work-controller", "Update", 5, spec_fields())],
        );
        assert_eq!(
            decide("c1", &foreign, "r2", at(30), BACKOFF),
            Decision::Apply { force: true }
        );
    }
}
