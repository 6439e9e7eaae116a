//! ManifestWork (`work.open-cluster-management.io/v1`): the per-cluster unit
//! of work on the hub, in the managed cluster's namespace.
//!
//! The controller writes its spec (a copy of the ManifestWorkReplicaSet's
//! template, possibly mutated by a plugin) and reads the conditions the work
//! agent reports. Only the fields the controller reads are typed; every
//! other field of upstream's spec and status is kept in `extra` and written
//! back as read, so a template using fields this crate does not model still
//! reaches the cluster intact.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::schema;
use crate::rollout::work_status;

/// ManifestWork condition type `Available`: every resource exists on the
/// managed cluster. (The types the rollout reads, `Applied`, `Progressing`
/// and `Degraded`, are in [`work_status`].)
pub const CONDITION_AVAILABLE: &str = "Available";

/// The desired state of a ManifestWork, also the template of a
/// ManifestWorkReplicaSet.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "work.open-cluster-management.io",
    version = "v1",
    kind = "ManifestWork",
    namespaced,
    status = "ManifestWorkStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "ManifestWork is a list of Kubernetes resources to deploy on the managed cluster whose namespace on the hub holds it."
)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkSpec {
    /// The resources to deploy on the managed cluster.
    #[serde(default, skip_serializing_if = "schema::is_default")]
    pub workload: ManifestsTemplate,
    /// How the work agent deletes the resources when the work is deleted
    /// (Foreground when not set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) delete_option: Option<DeleteOption>,
    /// Per-resource settings: resourceIdentifier, feedbackRules,
    /// conditionRules, updateStrategy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::any_objects")]
    pub manifest_configs: Vec<Value>,
    /// The identity the work agent applies the resources as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::any_object")]
    pub(crate) executor: Option<Value>,
    /// Upstream fields this crate does not model, kept as read.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// `workload`: the manifests of a ManifestWork.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestsTemplate {
    /// Complete Kubernetes objects (apiVersion, kind, metadata, ...), as
    /// raw JSON.
    #[serde(default, skip_serializing_if = "Manifests::is_empty")]
    #[schemars(schema_with = "schema::embedded_resources")]
    pub manifests: Manifests,
    /// Upstream fields this crate does not model, kept as read.
    #[serde(flatten)]
    pub(crate) extra: BTreeMap<String, Value>,
}

/// The manifests of a work, shared: every work of a revision holds the same
/// list (a clone is a reference count), so a fleet keeps one copy of a
/// revision's manifests rather than one per cluster. Reads go through
/// `Deref`; a change (`DerefMut`) copies the list first if it is shared.
/// Serialized as the plain list.
#[derive(Clone, Debug, Default)]
pub struct Manifests(Arc<Vec<Map<String, Value>>>);

impl Manifests {
    /// Whether `self` and `other` are the same shared list (not merely
    /// equal).
    pub(crate) fn ptr_eq(&self, other: &Manifests) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Whether there are no manifests.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<Vec<Map<String, Value>>> for Manifests {
    fn from(list: Vec<Map<String, Value>>) -> Manifests {
        Manifests(Arc::new(list))
    }
}

impl Deref for Manifests {
    type Target = Vec<Map<String, Value>>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for Manifests {
    fn deref_mut(&mut self) -> &mut Self::Target {
        Arc::make_mut(&mut self.0)
    }
}

impl PartialEq for Manifests {
    fn eq(&self, other: &Manifests) -> bool {
        self.ptr_eq(other) || self.0 == other.0
    }
}

impl Serialize for Manifests {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Manifests {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Manifests, D::Error> {
        Vec::deserialize(deserializer).map(Manifests::from)
    }
}

/// `deleteOption`: the deletion strategy of a ManifestWork's resources.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeleteOption {
    /// Foreground, Orphan or SelectivelyOrphan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["Foreground", "Orphan", "SelectivelyOrphan"]))]
    pub(crate) propagation_policy: Option<String>,
    /// The resources orphaned under SelectivelyOrphan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::any_object")]
    pub(crate) selectively_orphans: Option<Value>,
    /// Seconds after the work completes before it is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ttl_seconds_after_finished: Option<i64>,
    /// Upstream fields this crate does not model, kept as read.
    #[serde(flatten)]
    pub(crate) extra: BTreeMap<String, Value>,
}

/// What the work agent reports about a ManifestWork.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkStatus {
    /// Applied, Available, Progressing, Degraded and others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The status of each manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::any_object")]
    pub resource_status: Option<Value>,
    /// Upstream fields this crate does not model, kept as read.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl ManifestWork {
    /// The work's conditions in the form the rollout engine reads
    /// ([`work_status::derive`]); empty when the agent has reported none.
    pub fn rollout_conditions(&self) -> Vec<work_status::Condition> {
        self.status
            .iter()
            .flat_map(|status| &status.conditions)
            .map(|c| work_status::Condition {
                kind: c.type_.clone(),
                status: match c.status.as_str() {
                    "True" => work_status::ConditionStatus::True,
                    "False" => work_status::ConditionStatus::False,
                    _ => work_status::ConditionStatus::Unknown,
                },
                observed_generation: c.observed_generation.unwrap_or(0),
                last_transition_time: Some(c.last_transition_time.0),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use serde_json::json;

    use super::*;

    fn upstream_work() -> Value {
        json!({
            "apiVersion": "work.open-cluster-management.io/v1",
            "kind": "ManifestWork",
            "metadata": {"name": "hello", "namespace": "cluster1", "generation": 3},
            "spec": {
                "workload": {"manifests": [
                    {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "cm", "namespace": "default"}, "data": {"a": "b"}}
                ]},
                "deleteOption": {"propagationPolicy": "SelectivelyOrphan",
                                 "selectivelyOrphans": {"orphaningRules": [{"resource": "configmaps", "name": "cm"}]}},
                "manifestConfigs": [{"resourceIdentifier": {"resource": "configmaps", "name": "cm"},
                                     "conditionRules": [{"type": "CEL", "condition": "Complete"}]}],
                "executor": {"subject": {"type": "ServiceAccount",
                                         "serviceAccount": {"name": "sa", "namespace": "ns"}}},
                "someFutureField": {"x": 1}
            },
            "status": {
                "conditions": [
                    {"type": "Applied", "status": "True", "observedGeneration": 3,
                     "lastTransitionTime": "2025-01-01T00:00:00Z", "reason": "AppliedManifestComplete", "message": ""},
                    {"type": "Progressing", "status": "Unknown",
                     "lastTransitionTime": "2025-01-01T00:01:00Z", "reason": "R", "message": "m"}
                ],
                "resourceStatus": {"manifests": []},
                "otherStatus": true
            }
        })
    }

    #[test]
    fn upstream_fields_survive_a_round_trip() {
        let original = upstream_work();
        let work: ManifestWork = serde_json::from_value(original.clone()).expect("parses");
        assert_eq!(work.spec.workload.manifests.len(), 1);
        assert_eq!(
            work.spec
                .delete_option
                .as_ref()
                .and_then(|d| d.propagation_policy.as_deref()),
            Some("SelectivelyOrphan")
        );
        assert!(work.spec.extra.contains_key("someFutureField"));
        assert_eq!(serde_json::to_value(&work).expect("serializes"), original);
    }

    #[test]
    fn a_manifest_must_be_an_object() {
        let err = serde_json::from_value::<ManifestsTemplate>(json!({"manifests": ["text"]}))
            .expect_err("a string is not a manifest");
        assert!(err.to_string().contains("map"), "{err}");
    }

    #[test]
    fn rollout_conditions_read_status_generation_and_time() {
        let work: ManifestWork = serde_json::from_value(upstream_work()).expect("parses");
        let at = |s: &str| s.parse::<Timestamp>().expect("timestamp");
        assert_eq!(
            work.rollout_conditions(),
            vec![
                work_status::Condition::new(
                    work_status::APPLIED,
                    work_status::ConditionStatus::True,
                    3,
                    at("2025-01-01T00:00:00Z")
                ),
                work_status::Condition::new(
                    work_status::PROGRESSING,
                    work_status::ConditionStatus::Unknown,
                    0,
                    at("2025-01-01T00:01:00Z")
                ),
            ]
        );
        assert!(
            ManifestWork::new("w", ManifestWorkSpec::default())
                .rollout_conditions()
                .is_empty()
        );
    }
}
