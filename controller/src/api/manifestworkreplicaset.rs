//! ManifestWorkReplicaSet (`work.open-cluster-management.io/v1alpha1`): one
//! ManifestWork template rolled out to the clusters of one or more
//! placements, with upstream's fields and the additions of the rollout
//! plugin design and the rollback design.
//!
//! Additions over upstream:
//!
//! - `rolloutStrategy.plugin`, `rolloutStrategy.pluginConfig` (free-form
//!   settings sent to the plugin with every hook call of the rollout),
//!   `rolloutStrategy.abortOnFailure` and its other spelling
//!   `rolloutStrategy.failureStrategy: AbortAll`. The field is the
//!   engine's [`RawStrategy`], so [`LocalPlacementReference::strategy`]
//!   validates it with the same code the `plan` command runs.
//! - `spec.revisionHistoryLimit`; `status.currentRevision`,
//!   `status.updateRevision`, `status.abortedTime`, `status.collisionCount`.
//! - per placement: `maxFailureBreach`, the count of clusters in each rollout
//!   status, and the clusters that need attention (timed out, failed, ...),
//!   which upstream never reports (ocm #1237).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, ResourceExt};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::labels::{HashedLabelValue, owner_label_value};
use super::manifestwork::ManifestWorkSpec;
use super::schema;
use crate::rollout::{ClusterRolloutStatus, InvalidStrategy, RawStrategy, RolloutStatus, Strategy};

/// `spec.revisionHistoryLimit` when not set.
pub(crate) const DEFAULT_REVISION_HISTORY_LIMIT: i32 = 10;

/// The most clusters the controller lists in one
/// [`PlacementSummary::clusters`]; the others are only counted in
/// [`PlacementSummary::omitted_clusters`], so the status of a large fleet
/// stays far below the API server's object size limit.
pub(crate) const MAX_CLUSTER_SUMMARIES: usize = 100;

/// The desired state of a ManifestWorkReplicaSet.
// Clippy reads the repeated keys of the `printcolumn(...)` lists as
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "work.open-cluster-management.io",
    version = "v1alpha1",
    kind = "ManifestWorkReplicaSet",
    namespaced,
    status = "ManifestWorkReplicaSetStatus",
    shortname = "mwrs",
    derive = "PartialEq",
    derive = "Default",
    doc = "ManifestWorkReplicaSet applies a ManifestWork template to the clusters its placements select, following each placement's rollout strategy, and removes the ManifestWorks when deleted.",
    printcolumn(
        name = "Placement",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"PlacementVerified\")].reason",
        description = "Reason"
    ),
    printcolumn(
        name = "Found",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"PlacementVerified\")].status",
        description = "Configured"
    ),
    printcolumn(
        name = "ManifestWorks",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"ManifestworkApplied\")].reason",
        description = "Reason"
    ),
    printcolumn(
        name = "Applied",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"ManifestworkApplied\")].status",
        description = "Applied"
    ),
    printcolumn(
        name = "RolledOut",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"PlacementRolledOut\")].reason",
        description = "Rollout progress"
    ),
    printcolumn(
        name = "Plugin",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"PluginLoaded\")].status",
        description = "Whether the rollout plugin is available",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkReplicaSetSpec {
    /// The ManifestWork spec applied, per cluster, to each cluster the
    /// placements select.
    #[serde(default, skip_serializing_if = "schema::is_default")]
    pub(crate) manifest_work_template: ManifestWorkSpec,
    /// The placements (in this namespace) whose decisions receive the
    /// ManifestWork, each with its rollout strategy.
    #[schemars(length(min = 1))]
    pub placement_refs: Vec<LocalPlacementReference>,
    /// Background: the ManifestWorkReplicaSet is deleted without waiting for
    /// its ManifestWorks to be gone. Foreground: it is deleted only after
    /// they are gone. Default Background.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Background"))]
    pub(crate) cascade_deletion_policy: Option<CascadeDeletionPolicy>,
    /// How many past template revisions to keep as ControllerRevisions for
    /// rollback. Default 10.
    // No schema default: a value the API server fills in would hide the
    // one of a ManifestWorkReplicaSetRollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub(crate) revision_history_limit: Option<i32>,
}

impl ManifestWorkReplicaSetSpec {
    /// `cascadeDeletionPolicy`, Background when not set.
    pub(crate) fn cascade_deletion_policy(&self) -> CascadeDeletionPolicy {
        self.cascade_deletion_policy.unwrap_or_default()
    }

    /// `revisionHistoryLimit`, [`DEFAULT_REVISION_HISTORY_LIMIT`] when not
    /// set, 0 when negative.
    pub(crate) fn revision_history_limit(&self) -> usize {
        let limit = self
            .revision_history_limit
            .unwrap_or(DEFAULT_REVISION_HISTORY_LIMIT);
        usize::try_from(limit).unwrap_or(0)
    }
}

impl ManifestWorkReplicaSet {
    /// The value of the owner label on this ManifestWorkReplicaSet's works:
    /// `<namespace>.<name>`, or its hash when that does not fit a label value
    /// (with the reason, to show in the status).
    pub fn owner_label_value(&self) -> (String, Option<HashedLabelValue>) {
        owner_label_value(&self.namespace().unwrap_or_default(), &self.name_any())
    }
}

/// When the ManifestWorkReplicaSet is deleted relative to its ManifestWorks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub(crate) enum CascadeDeletionPolicy {
    /// Delete without waiting for the ManifestWorks to be gone.
    #[default]
    Background,
    /// Keep the finalizer until the ManifestWorks are gone.
    Foreground,
}

/// A placement in the ManifestWorkReplicaSet's namespace and how to roll out
/// to its clusters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalPlacementReference {
    /// The Placement's name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// How to roll out to the placement's clusters. Absent means type All.
    #[serde(default, skip_serializing_if = "schema::is_default")]
    #[schemars(schema_with = "rollout_strategy_schema")]
    pub(crate) rollout_strategy: RawStrategy,
}

impl LocalPlacementReference {
    /// The validated rollout strategy, or every problem with it.
    pub fn strategy(&self) -> Result<Strategy, InvalidStrategy> {
        Strategy::from_raw(&self.rollout_strategy)
    }
}

/// What the controller reports about a ManifestWorkReplicaSet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkReplicaSetStatus {
    /// PlacementVerified, PlacementRolledOut and ManifestworkApplied as
    /// upstream; PluginLoaded (the rollout plugin answered Initialize) and
    /// Progressing (the rollout of the current revision, with the errors of
    /// plugin calls).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Totals over all placements.
    #[serde(default)]
    pub summary: ManifestWorkReplicaSetSummary,
    /// One entry per placement reference.
    #[serde(default, rename = "placementSummary")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub placements_summary: Vec<PlacementSummary>,
    /// The revision (template hash) known good: rolled out everywhere, and
    /// the one an abort restores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<String>,
    /// The revision of the current template, being rolled out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_revision: Option<String>,
    /// When the current rollout was aborted; set while the current revision
    /// is being restored, cleared when a new revision starts rolling out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted_time: Option<Time>,
    /// Bumped when two templates hash to the same revision name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
}

impl ManifestWorkReplicaSetStatus {
    /// Whether an abort is under way (`abortedTime` is set).
    #[cfg(test)]
    pub(crate) fn is_aborting(&self) -> bool {
        self.aborted_time.is_some()
    }
}

/// Counts of the ManifestWorks of a ManifestWorkReplicaSet (or of one
/// placement) by state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkReplicaSetSummary {
    /// ManifestWorks owned.
    #[serde(default)]
    pub(crate) total: i32,
    /// ManifestWorks with condition Progressing True.
    #[serde(default)]
    pub(crate) progressing: i32,
    /// ManifestWorks with condition Available True.
    #[serde(default)]
    pub(crate) available: i32,
    /// ManifestWorks with condition Degraded True.
    #[serde(default)]
    pub(crate) degraded: i32,
    /// ManifestWorks with condition Applied True.
    #[serde(default)]
    pub(crate) applied: i32,
    /// ManifestWorks there will be once the rollout is done: the clusters
    /// selected.
    #[serde(default)]
    pub(crate) desired_total: i32,
    /// Clusters where the update revision has succeeded.
    #[serde(default)]
    pub(crate) updated: i32,
}

/// The rollout on one placement.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementSummary {
    /// The placement's name.
    pub name: String,
    /// Decision groups whose clusters all have available ManifestWorks, of
    /// all groups, such as `2/4`.
    #[serde(default)]
    pub(crate) available_decision_groups: String,
    /// Counts of this placement's ManifestWorks.
    #[serde(default)]
    pub(crate) summary: ManifestWorkReplicaSetSummary,
    /// Whether more clusters failed or timed out than `maxFailures` allows,
    /// which stops new clusters from being rolled out.
    #[serde(default)]
    pub max_failure_breach: bool,
    /// How many of the placement's clusters are in each rollout status.
    #[serde(default)]
    pub cluster_counts: ClusterCounts,
    /// Clusters that need attention, the most urgent first (timed out and
    /// failed before validating, progressing and to apply); at most 100.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterRolloutSummary>,
    /// Clusters left out of `clusters` to keep the status small.
    #[serde(default, skip_serializing_if = "schema::is_default")]
    pub omitted_clusters: i32,
    /// The failed and timed-out clusters that aborted the rollout, with
    /// why; kept while the abort lasts (`abortedTime` set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) abort_failures: Vec<ClusterRolloutSummary>,
}

/// The number of clusters in each rollout status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCounts {
    /// Clusters whose ManifestWork is still to apply or not yet observed.
    #[serde(default)]
    pub to_apply: i32,
    /// Clusters whose ManifestWork is progressing.
    #[serde(default)]
    pub progressing: i32,
    /// Clusters the rollout plugin is validating.
    #[serde(default)]
    pub validating: i32,
    /// Clusters where the rollout succeeded.
    #[serde(default)]
    pub succeeded: i32,
    /// Clusters where the rollout failed.
    #[serde(default)]
    pub failed: i32,
    /// Clusters that did not finish within progressDeadline.
    #[serde(default)]
    pub time_out: i32,
    /// Clusters skipped.
    #[serde(default)]
    pub skip: i32,
}

impl ClusterCounts {
    /// Counts one more cluster in `status`, saturating.
    pub fn add(&mut self, status: RolloutStatus) {
        let slot = match status {
            RolloutStatus::ToApply => &mut self.to_apply,
            RolloutStatus::Progressing => &mut self.progressing,
            RolloutStatus::Validating => &mut self.validating,
            RolloutStatus::Succeeded => &mut self.succeeded,
            RolloutStatus::Failed => &mut self.failed,
            RolloutStatus::TimeOut => &mut self.time_out,
            RolloutStatus::Skip => &mut self.skip,
        };
        *slot = slot.saturating_add(1);
    }
}

/// One cluster's rollout, as reported in the status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRolloutSummary {
    /// The managed cluster.
    pub cluster_name: String,
    /// ToApply, Progressing, Validating, Succeeded, Failed, TimeOut or Skip.
    #[schemars(schema_with = "schema::rollout_status")]
    pub rollout_status: RolloutStatus,
    /// The decision group's index.
    #[serde(default)]
    pub(crate) group_index: i32,
    /// The decision group's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) group_name: String,
    /// When the status began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// The revision (template hash) of the cluster's ManifestWork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Why: the validation plugin's message, or the error of a hook call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl From<&ClusterRolloutStatus> for ClusterRolloutSummary {
    fn from(status: &ClusterRolloutStatus) -> Self {
        ClusterRolloutSummary {
            cluster_name: status.cluster_name.clone(),
            rollout_status: status.status,
            group_index: status.group_index,
            group_name: status.group_name.clone(),
            last_transition_time: status.last_transition_time.map(Time),
            revision: None,
            message: None,
        }
    }
}

/// The schema of `rolloutStrategy`, with upstream's default.
fn rollout_strategy_schema(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = generator.subschema_for::<RolloutStrategySchema>();
    schema.insert(
        "default".into(),
        json!({"type": "All", "all": {"progressDeadline": "None"}}),
    );
    schema
}

// The types below only describe the schema of `rolloutStrategy`, whose Rust
// type is the engine's `RawStrategy`; a test checks that every field
// `RawStrategy` writes is in it. They are never built.

/// The rollout strategy of a placement: how fast the ManifestWork reaches
/// its clusters, the rollout plugin to call, and whether to abort on failure.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct RolloutStrategySchema {
    /// All: every cluster at once. Progressive: cluster by cluster, at most
    /// maxConcurrency at a time. ProgressivePerGroup: decision group by
    /// decision group. A cluster counts as done when its ManifestWork
    /// succeeded (and, with a plugin, passed validation).
    #[serde(rename = "type")]
    #[schemars(extend("default" = "All"))]
    kind: Option<StrategyType>,
    /// Settings of type All.
    all: Option<RolloutConfigSchema>,
    /// Settings of type Progressive.
    progressive: Option<RolloutProgressiveSchema>,
    /// Settings of type ProgressivePerGroup.
    progressive_per_group: Option<RolloutProgressivePerGroupSchema>,
    /// The design's additions.
    #[serde(flatten)]
    additions: AdditionsSchema,
}

// The schema of the design's additions to a placement's rollout strategy
// (`crate::rollout::RawAdditions`): in `rolloutStrategy` here, and in each
// placement of a ManifestWorkReplicaSetRollout.
/// The rollout plugin, its settings and the abort of a placement's rollout.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub(crate) struct AdditionsSchema {
    /// The rollout plugin, or pipeline of plugins, registered with the
    /// rollout gateway to call at each phase of the rollout.
    plugin: Option<String>,
    /// Settings for the plugin, free-form (each plugin defines its own
    /// keys), sent with every hook call of this placement's rollout; the
    /// same object for every member of a pipeline. At most 64 KiB as JSON.
    #[serde(default)]
    #[schemars(schema_with = "schema::any_object")]
    plugin_config: Option<Value>,
    /// Abort the rollout when a cluster fails or times out: the clusters
    /// already updated go back to the current revision.
    abort_on_failure: Option<bool>,
    /// AbortAll: the same as abortOnFailure true.
    failure_strategy: Option<FailureStrategy>,
    /// How an abort restores the clusters already updated: AtOnce (the
    /// default) applies the current revision to all of them in one step,
    /// the failing one included; Strategy follows the rollout strategy's
    /// pace.
    // No schema default: a value the API server fills in would hide the
    // one of a ManifestWorkReplicaSetRollout.
    rollback_pace: Option<RollbackPaceSchema>,
}

#[derive(JsonSchema)]
#[allow(dead_code)]
enum RollbackPaceSchema {
    /// Every updated cluster in one step.
    AtOnce,
    /// At the rollout strategy's pace.
    Strategy,
}

// The variants carry doc comments so that schemars writes a `oneOf` that
// kube's rewriter turns into a plain `enum` (without a `null` value).
#[derive(JsonSchema)]
#[allow(dead_code)]
enum StrategyType {
    /// Every cluster at once.
    All,
    /// Cluster by cluster.
    Progressive,
    /// Decision group by decision group.
    ProgressivePerGroup,
}

#[derive(JsonSchema)]
#[allow(dead_code)]
enum FailureStrategy {
    /// Abort the rollout when a cluster fails or times out.
    AbortAll,
}

#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct RolloutConfigSchema {
    /// Soak time: how long a succeeded cluster is still watched before the
    /// rollout moves on, a Go duration such as 2h, 90m or 360s. Default 0.
    /// Not used by type All.
    min_success_time: Option<String>,
    /// How long a cluster may take to succeed before it times out: a
    /// duration such as 2h, 90m or 360s, or None (the default) to wait for
    /// ever.
    #[schemars(extend("pattern" = schema::PROGRESS_DEADLINE_PATTERN))]
    progress_deadline: Option<String>,
    /// How many clusters (or what percentage) may fail before the rollout
    /// stops. Counted over all clusters for Progressive, over the current
    /// group for ProgressivePerGroup. Default 0.
    #[serde(default)]
    #[schemars(schema_with = "schema::count_or_percent")]
    max_failures: Option<Value>,
}

#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct RolloutProgressiveSchema {
    #[serde(flatten)]
    config: RolloutConfigSchema,
    /// Decision groups rolled out first, by name or index, tolerating no
    /// failure.
    mandatory_decision_groups: Option<Vec<MandatoryDecisionGroupSchema>>,
    /// How many clusters (or what percentage) roll out at once. Default:
    /// all of them.
    #[serde(default)]
    #[schemars(schema_with = "schema::count_or_percent")]
    max_concurrency: Option<Value>,
}

#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct RolloutProgressivePerGroupSchema {
    #[serde(flatten)]
    config: RolloutConfigSchema,
    /// Decision groups rolled out first, by name or index, tolerating no
    /// failure.
    mandatory_decision_groups: Option<Vec<MandatoryDecisionGroupSchema>>,
}

/// A decision group, by name (preferred) or index.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct MandatoryDecisionGroupSchema {
    /// The decision-group-name label of the group's PlacementDecisions.
    group_name: Option<String>,
    /// The decision-group-index label of the group's PlacementDecisions.
    group_index: Option<i32>,
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use kube::CustomResourceExt;

    use super::*;
    use crate::rollout::RolloutKind;

    fn mwrs_schema() -> Value {
        let crd = ManifestWorkReplicaSet::crd();
        let version = crd.spec.versions.first().expect("one version");
        let schema = version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("schema");
        serde_json::to_value(schema).expect("schema serializes")
    }

    fn strategy_schema() -> Value {
        mwrs_schema()["properties"]["spec"]["properties"]["placementRefs"]["items"]["properties"]
            ["rolloutStrategy"]
            .clone()
    }

    /// Asserts that every object key of `value` is a property of `schema`
    /// (recursively, through arrays).
    fn assert_schema_covers(schema: &Value, value: &Value, path: &str) {
        match value {
            // A free-form object: the API server keeps whatever it holds.
            Value::Object(_) if schema["x-kubernetes-preserve-unknown-fields"] == json!(true) => {}
            Value::Object(map) => {
                for (key, v) in map {
                    let property = &schema["properties"][key];
                    assert!(property.is_object(), "{path}.{key} is not in the schema");
                    assert_schema_covers(property, v, &format!("{path}.{key}"));
                }
            }
            Value::Array(items) => {
                for item in items {
                    assert_schema_covers(&schema["items"], item, &format!("{path}[]"));
                }
            }
            _ => {}
        }
    }

    #[test]
    fn every_raw_strategy_field_is_in_the_schema() {
        let full = json!({
            "type": "Progressive", "plugin": "p", "abortOnFailure": true, "failureStrategy": "AbortAll",
            "rollbackPace": "Strategy",
            "pluginConfig": {"soakTime": "5m", "nested": {"any": [1, "two"]}},
            "all": {"minSuccessTime": "1m", "progressDeadline": "90s", "maxFailures": 1},
            "progressive": {"minSuccessTime": "1m", "progressDeadline": "90s", "maxFailures": "10%",
                            "maxConcurrency": 2,
                            "mandatoryDecisionGroups": [{"groupName": "a", "groupIndex": 1}]},
            "progressivePerGroup": {"minSuccessTime": "1m", "progressDeadline": "None", "maxFailures": 0,
                                    "mandatoryDecisionGroups": [{"groupName": "a", "groupIndex": 1}]}
        });
        let raw: RawStrategy = serde_json::from_value(full.clone()).expect("parses");
        let written = serde_json::to_value(&raw).expect("serializes");
        // Nothing is lost between the schema's shape and the engine's type.
        assert_eq!(written, full);
        assert_schema_covers(&strategy_schema(), &written, "rolloutStrategy");
    }

    #[test]
    fn strategy_schema_has_upstream_validation_and_default() {
        let s = strategy_schema();
        assert_eq!(
            s["default"],
            json!({"type": "All", "all": {"progressDeadline": "None"}})
        );
        assert_eq!(
            s["properties"]["type"]["enum"],
            json!(["All", "Progressive", "ProgressivePerGroup"])
        );
        assert_eq!(s["properties"]["type"]["default"], json!("All"));
        assert_eq!(
            s["properties"]["failureStrategy"]["enum"],
            json!(["AbortAll"])
        );
        let progressive = &s["properties"]["progressive"]["properties"];
        assert_eq!(
            progressive["progressDeadline"]["pattern"],
            json!(schema::PROGRESS_DEADLINE_PATTERN)
        );
        for field in ["maxFailures", "maxConcurrency"] {
            assert_eq!(
                progressive[field]["x-kubernetes-int-or-string"],
                json!(true)
            );
            assert_eq!(
                progressive[field]["pattern"],
                json!(schema::COUNT_OR_PERCENT_PATTERN)
            );
        }
        assert_eq!(
            progressive["mandatoryDecisionGroups"]["items"]["properties"]["groupIndex"]["format"],
            json!("int32")
        );
        assert_eq!(
            s["properties"]["pluginConfig"],
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                   "description": s["properties"]["pluginConfig"]["description"]})
        );
        // Nothing in a strategy is required.
        assert!(s.get("required").is_none(), "{s}");
    }

    #[test]
    fn the_schema_default_is_a_valid_all_strategy() {
        let default: RawStrategy =
            serde_json::from_value(strategy_schema()["default"].clone()).expect("default parses");
        let strategy = Strategy::from_raw(&default).expect("default is valid");
        assert!(matches!(strategy.kind, RolloutKind::All(_)));
        assert_eq!(strategy.config().progress_deadline, None);
    }

    #[test]
    fn design_example_parses() {
        let mwrs: ManifestWorkReplicaSet = serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1alpha1",
            "kind": "ManifestWorkReplicaSet",
            "metadata": {"name": "hello", "namespace": "default"},
            "spec": {
                "revisionHistoryLimit": 3,
                "cascadeDeletionPolicy": "Foreground",
                "placementRefs": [
                    {"name": "placement-rollout-progressive",
                     "rolloutStrategy": {"type": "Progressive", "plugin": "my-rollout",
                                         "failureStrategy": "AbortAll",
                                         "progressive": {"maxConcurrency": 1, "progressDeadline": "10m"}}},
                    {"name": "defaults"}
                ],
                "manifestWorkTemplate": {"workload": {"manifests": [
                    {"kind": "Rollout", "apiVersion": "argoproj.io/v1alpha1",
                     "metadata": {"name": "hello-rollout", "namespace": "default"}}
                ]}}
            },
            "status": {
                "collisionCount": 0, "currentRevision": "6b6dcbd695", "updateRevision": "8a6dcbd695",
                "abortedTime": "2025-11-04T15:41:05Z",
                "conditions": [{"lastTransitionTime": "2025-10-09T04:40:41Z",
                                "message": "my-rollout plugin is available.", "observedGeneration": 1,
                                "reason": "Available", "status": "True", "type": "PluginLoaded"}],
                "placementSummary": [{"name": "placement-rollout-progressive",
                                      "availableDecisionGroups": "1 (2 / 2 clusters applied)",
                                      "summary": {"updated": 2, "applied": 2, "available": 2, "degraded": 0,
                                                  "progressing": 0, "total": 2, "desiredTotal": 2}}],
                "summary": {"updated": 2, "applied": 2, "available": 2, "total": 2, "desiredTotal": 2}
            }
        }))
        .expect("parses");
        assert_eq!(
            mwrs.spec.cascade_deletion_policy(),
            CascadeDeletionPolicy::Foreground
        );
        assert_eq!(mwrs.spec.revision_history_limit(), 3);
        let strategy = mwrs.spec.placement_refs[0].strategy().expect("valid");
        assert_eq!(strategy.plugin.as_deref(), Some("my-rollout"));
        assert!(strategy.abort_on_failure);
        let defaults = mwrs.spec.placement_refs[1].strategy().expect("valid");
        assert_eq!(defaults, Strategy::default());
        let status = mwrs.status.as_ref().expect("status");
        assert!(status.is_aborting());
        assert_eq!(status.summary.desired_total, 2);
        assert_eq!(status.placements_summary[0].summary.updated, 2);
        assert_eq!(
            mwrs.owner_label_value(),
            ("default.hello".to_string(), None)
        );
    }

    #[test]
    fn spec_defaults() {
        let spec = ManifestWorkReplicaSetSpec::default();
        assert_eq!(
            spec.cascade_deletion_policy(),
            CascadeDeletionPolicy::Background
        );
        assert_eq!(spec.revision_history_limit(), 10);
        let negative = ManifestWorkReplicaSetSpec {
            revision_history_limit: Some(-1),
            ..spec
        };
        assert_eq!(negative.revision_history_limit(), 0);
    }

    #[test]
    fn long_owner_label_is_hashed() {
        let name = "x".repeat(60);
        let mut mwrs = ManifestWorkReplicaSet::new(&name, ManifestWorkReplicaSetSpec::default());
        mwrs.metadata.namespace = Some("default".into());
        let (value, hashed) = mwrs.owner_label_value();
        assert!(value.len() <= 63);
        assert_eq!(hashed.map(|h| h.original), Some(format!("default.{name}")));
    }

    #[test]
    fn cluster_summaries_and_counts() {
        let at: Timestamp = "2025-01-01T00:00:00Z".parse().expect("timestamp");
        let status = ClusterRolloutStatus::new("c1", RolloutStatus::TimeOut)
            .since(at)
            .in_group(1, "canary");
        let summary = ClusterRolloutSummary::from(&status);
        assert_eq!(
            serde_json::to_value(&summary).expect("serializes"),
            json!({"clusterName": "c1", "rolloutStatus": "TimeOut", "groupIndex": 1,
                   "groupName": "canary", "lastTransitionTime": "2025-01-01T00:00:00Z"})
        );

        let mut counts = ClusterCounts::default();
        for status in [
            RolloutStatus::ToApply,
            RolloutStatus::Progressing,
            RolloutStatus::Validating,
            RolloutStatus::Validating,
            RolloutStatus::Succeeded,
            RolloutStatus::Failed,
            RolloutStatus::TimeOut,
            RolloutStatus::Skip,
        ] {
            counts.add(status);
        }
        assert_eq!(
            serde_json::to_value(counts).expect("serializes"),
            json!({"toApply": 1, "progressing": 1, "validating": 2, "succeeded": 1,
                   "failed": 1, "timeOut": 1, "skip": 1})
        );
        let mut full = ClusterCounts {
            failed: i32::MAX,
            ..ClusterCounts::default()
        };
        full.add(RolloutStatus::Failed);
        assert_eq!(full.failed, i32::MAX);
    }

    #[test]
    fn status_lists_merge_by_key() {
        let status = &mwrs_schema()["properties"]["status"]["properties"];
        assert_eq!(status["conditions"]["x-kubernetes-list-type"], json!("map"));
        assert_eq!(
            status["conditions"]["x-kubernetes-list-map-keys"],
            json!(["type"])
        );
        assert_eq!(
            status["placementSummary"]["x-kubernetes-list-map-keys"],
            json!(["name"])
        );
        assert_eq!(
            status["placementSummary"]["items"]["required"],
            json!(["name"])
        );
        assert_eq!(
            status["placementSummary"]["items"]["properties"]["clusters"]["items"]["properties"]["rolloutStatus"]
                ["enum"][6],
            json!("Validating")
        );
    }
}
