//! ManifestWorkReplicaSetRollout (`rollout-hooks.io/v1alpha1`): the carrier
//! of the design's additions to a ManifestWorkReplicaSet on a hub whose
//! ManifestWorkReplicaSet CRD is OCM's own.
//!
//! OCM's cluster-manager operator re-applies its own ManifestWorkReplicaSet
//! CRD on every sync, and the API server prunes every field that CRD does
//! not declare: `rolloutStrategy.plugin`, `pluginConfig`, `abortOnFailure`,
//! `failureStrategy`, `rollbackPace`, `revisionHistoryLimit` and the
//! controller's status additions. This kind, of the project's own group and
//! CRD, carries them instead.
//!
//! **Binding** ([`choose`]): a ManifestWorkReplicaSetRollout belongs to
//! the ManifestWorkReplicaSet its `spec.targetRef` names, or, without one,
//! to the set of the same namespace and name. An explicit reference wins:
//! a same-name carrier of a set that another carrier targets binds to
//! nothing. Two carriers targeting one set bind neither (the set is held
//! until one is changed). Its spec gives,
//! per placement (by the placement reference's name), the design's
//! additions; a field set on the ManifestWorkReplicaSet itself (a hub whose
//! CRD carries the design's fields) wins over the same field here. Its
//! status holds what the controller reports beyond OCM's status
//! (revisions, abort time, per-cluster details); `spec.control` and
//! `status.control` are an operator's manual control of the rollout and
//! what the controller made of it ([`super::control`]); OCM's own status fields
//! (conditions, summary, placementSummary) stay on the
//! ManifestWorkReplicaSet.
//!
//! - A ManifestWorkReplicaSet without one: the controller creates an empty
//!   one (owned by the ManifestWorkReplicaSet, so it is deleted with it) to
//!   keep its status in; the rollout has no plugin and no abort unless the
//!   ManifestWorkReplicaSet carries them.
//! - One without its ManifestWorkReplicaSet: nothing reads it; it is kept
//!   as written (a ManifestWorkReplicaSet created later binds to it).
//!
//! [`bind`] gives the ManifestWorkReplicaSet as the controller reads it
//! (its own fields, completed from the carrier); [`carrier_status`] is the
//! part of a status written here.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, ResourceExt};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

use super::control::{Control, ControlStatus};
use super::manifestworkreplicaset::{
    AdditionsSchema, ClusterCounts, ClusterRolloutSummary, ManifestWorkReplicaSet,
    ManifestWorkReplicaSetStatus, PlacementSummary,
};
use super::schema;
use crate::rollout::RawAdditions;

/// What a ManifestWorkReplicaSet of the same namespace and name leaves out
/// when its CRD is OCM's: the design's additions.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "rollout-hooks.io",
    version = "v1alpha1",
    kind = "ManifestWorkReplicaSetRollout",
    namespaced,
    status = "ManifestWorkReplicaSetRolloutStatus",
    shortname = "mwrsrollout",
    derive = "PartialEq",
    derive = "Default",
    doc = "ManifestWorkReplicaSetRollout carries the rollout plugin settings, the abort and the revision history of the ManifestWorkReplicaSet of the same namespace and name, an operator's manual control of its rollout (spec.control), and the controller's rollout status beyond OCM's.",
    printcolumn(
        name = "Current",
        type_ = "string",
        json_path = ".status.currentRevision",
        description = "The revision an abort restores"
    ),
    printcolumn(
        name = "Update",
        type_ = "string",
        json_path = ".status.updateRevision",
        description = "The revision being rolled out"
    ),
    printcolumn(
        name = "Aborted",
        type_ = "date",
        json_path = ".status.abortedTime",
        description = "When the rollout was aborted"
    ),
    printcolumn(
        name = "Paused",
        type_ = "date",
        json_path = ".status.control.paused.time",
        description = "When an operator paused the rollout (spec.control.paused), as the controller read it"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkReplicaSetRolloutSpec {
    /// The ManifestWorkReplicaSet of this namespace this object belongs
    /// to. Without it, the one of the same name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) target_ref: Option<TargetRef>,
    /// How many past template revisions to keep as ControllerRevisions for
    /// rollback. Default 10. The ManifestWorkReplicaSet's own
    /// spec.revisionHistoryLimit wins when its CRD has the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub(crate) revision_history_limit: Option<i32>,
    /// The design's additions to each placement's rollout strategy, by the
    /// name of the ManifestWorkReplicaSet's placement reference.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "placements_schema")]
    pub placements: Vec<PlacementRollout>,
    /// Manual control of the rollout: pause, abort, retry, promote
    /// (`rollout-controller abort|retry|pause|resume|promote` writes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<Control>,
}

/// The ManifestWorkReplicaSet a ManifestWorkReplicaSetRollout belongs to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TargetRef {
    /// `work.open-cluster-management.io/v1alpha1`, the only one taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["work.open-cluster-management.io/v1alpha1"]))]
    pub(crate) api_version: Option<String>,
    /// `ManifestWorkReplicaSet`, the only kind taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["ManifestWorkReplicaSet"]))]
    pub(crate) kind: Option<String>,
    /// The ManifestWorkReplicaSet's name, in this object's namespace.
    #[schemars(length(min = 1))]
    pub(crate) name: String,
}

/// The design's additions to one placement's rollout strategy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementRollout {
    /// The ManifestWorkReplicaSet's placement reference.
    pub(crate) name: String,
    /// plugin, pluginConfig, abortOnFailure, failureStrategy, rollbackPace.
    #[serde(flatten)]
    pub(crate) additions: RawAdditions,
}

/// What the controller reports beyond OCM's ManifestWorkReplicaSet status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkReplicaSetRolloutStatus {
    /// The UID of the ManifestWorkReplicaSet this status belongs to. A
    /// status written for another one (an earlier set of the same name) is
    /// not read: the rollout starts over.
    #[serde(default, rename = "setUID", skip_serializing_if = "Option::is_none")]
    pub(crate) set_uid: Option<String>,
    /// The generation of this object the controller last read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) observed_generation: Option<i64>,
    /// The revision (template hash) known good: rolled out everywhere, and
    /// the one an abort restores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) current_revision: Option<String>,
    /// The revision of the current template, being rolled out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) update_revision: Option<String>,
    /// When the current rollout was aborted; set while the current revision
    /// is being restored, cleared when a new revision starts rolling out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) aborted_time: Option<Time>,
    /// Bumped when two templates hash to the same revision name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) collision_count: Option<i32>,
    /// Per placement: the clusters' rollout statuses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub placements: Vec<PlacementRolloutStatus>,
    /// What the controller says about this object itself: `OtherController`
    /// while another ManifestWorkReplicaSet controller (OCM's own) is found
    /// at work and this one reconciles nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub(crate) conditions: Vec<Condition>,
    /// What the controller made of `spec.control`: the pause it holds the
    /// rollout for, and the latest request of each kind it read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<ControlStatus>,
}

/// The rollout on one placement, beyond OCM's placementSummary.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementRolloutStatus {
    /// The placement's name.
    pub name: String,
    /// Whether more clusters failed or timed out than `maxFailures` allows,
    /// which stops new clusters from being rolled out.
    #[serde(default)]
    pub max_failure_breach: bool,
    /// How many of the placement's clusters are in each rollout status.
    #[serde(default)]
    pub cluster_counts: ClusterCounts,
    /// Clusters that need attention, the most urgent first; at most 100.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterRolloutSummary>,
    /// Clusters left out of `clusters` to keep the status small.
    #[serde(default, skip_serializing_if = "schema::is_default")]
    pub omitted_clusters: i32,
    /// The failed and timed-out clusters that aborted the rollout, with
    /// why; kept while the abort lasts (`abortedTime` set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub abort_failures: Vec<ClusterRolloutSummary>,
}

/// The schema of `spec.placements`: a list keyed by name, each entry the
/// name and the same fields as the additions in `rolloutStrategy`.
fn placements_schema(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = generator.subschema_for::<Vec<PlacementRolloutSchema>>();
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["name"]),
    );
    schema
}

// Only describes the schema of `PlacementRollout`, whose additions are the
// engine's `RawAdditions`; never built.
/// The rollout plugin, its settings and the abort of one placement of the
/// ManifestWorkReplicaSet.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct PlacementRolloutSchema {
    /// The name of the ManifestWorkReplicaSet's placement reference.
    #[schemars(length(min = 1))]
    name: String,
    #[serde(flatten)]
    additions: AdditionsSchema,
}

/// The ManifestWorkReplicaSet as the controller reads it: `mwrs` with each
/// design field it does not set taken from `carrier` (per placement, by
/// name), and the status additions from the carrier's status when it has
/// one.
pub fn bind(
    mwrs: &ManifestWorkReplicaSet,
    carrier: Option<&ManifestWorkReplicaSetRollout>,
) -> ManifestWorkReplicaSet {
    let mut bound = mwrs.clone();
    let Some(carrier) = carrier else {
        return bound;
    };
    let spec = &carrier.spec;
    if bound.spec.revision_history_limit.is_none() {
        bound.spec.revision_history_limit = spec.revision_history_limit;
    }
    for reference in &mut bound.spec.placement_refs {
        if let Some(entry) = spec.placements.iter().find(|p| p.name == reference.name) {
            let own = &reference.rollout_strategy.additions;
            reference.rollout_strategy.additions = own.or(&entry.additions);
        }
    }
    if let Some(status) = carrier.status.as_ref().filter(|s| status_belongs(s, mwrs)) {
        let mut merged = bound.status.take().unwrap_or_default();
        merge_status(&mut merged, status);
        bound.status = Some(merged);
    }
    bound
}

/// Whether `status` was written for `mwrs`: it names `mwrs`'s UID, or no
/// UID at all (written before the controller recorded one).
pub(crate) fn status_belongs(
    status: &ManifestWorkReplicaSetRolloutStatus,
    mwrs: &ManifestWorkReplicaSet,
) -> bool {
    match (&status.set_uid, &mwrs.metadata.uid) {
        (Some(recorded), Some(uid)) => recorded == uid,
        _ => true,
    }
}

/// The set `carrier` belongs to, by name: its `targetRef`'s, else its own.
pub(crate) fn target_of(carrier: &ManifestWorkReplicaSetRollout) -> &str {
    match &carrier.spec.target_ref {
        Some(target) => &target.name,
        None => carrier.metadata.name.as_deref().unwrap_or_default(),
    }
}

/// How a set found its carrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// Its `spec.targetRef` names the set.
    TargetRef,
    /// It has the set's name and no `targetRef`.
    SameName,
}

/// The carrier of the set named `set`, among the carriers of its
/// namespace (see the module documentation).
#[derive(Debug, Clone, PartialEq)]
pub enum Choice<'a> {
    Bound(&'a ManifestWorkReplicaSetRollout, Found),
    /// None binds to the set.
    None,
    /// Several target it: their names, sorted.
    Ambiguous(Vec<String>),
}

/// Which of `carriers` (one namespace's) binds to the set named `set`.
pub fn choose<'a>(
    set: &str,
    carriers: impl IntoIterator<Item = &'a ManifestWorkReplicaSetRollout>,
) -> Choice<'a> {
    let mut explicit = Vec::new();
    let mut same = None;
    for carrier in carriers {
        match &carrier.spec.target_ref {
            Some(target) if target.name == set => explicit.push(carrier),
            None if carrier.metadata.name.as_deref() == Some(set) => same = Some(carrier),
            _ => {}
        }
    }
    match explicit.as_slice() {
        [] => same.map_or(Choice::None, |c| Choice::Bound(c, Found::SameName)),
        [one] => Choice::Bound(one, Found::TargetRef),
        many => {
            let mut names: Vec<String> = many.iter().map(|c| c.name_any()).collect();
            names.sort();
            Choice::Ambiguous(names)
        }
    }
}

/// Puts the carrier's status additions into a ManifestWorkReplicaSet status.
fn merge_status(
    into: &mut ManifestWorkReplicaSetStatus,
    from: &ManifestWorkReplicaSetRolloutStatus,
) {
    into.current_revision.clone_from(&from.current_revision);
    into.update_revision.clone_from(&from.update_revision);
    into.aborted_time.clone_from(&from.aborted_time);
    into.collision_count = from.collision_count;
    for summary in &mut into.placements_summary {
        if let Some(placement) = from.placements.iter().find(|p| p.name == summary.name) {
            summary.max_failure_breach = placement.max_failure_breach;
            summary.cluster_counts = placement.cluster_counts;
            summary.clusters.clone_from(&placement.clusters);
            summary.omitted_clusters = placement.omitted_clusters;
            summary.abort_failures.clone_from(&placement.abort_failures);
        }
    }
}

/// The part of `status` written to the carrier: the revisions, the abort
/// and the per-placement details, with the UID of the set it belongs to
/// and the carrier's `generation`.
pub fn carrier_status(
    status: &ManifestWorkReplicaSetStatus,
    set_uid: Option<String>,
    generation: Option<i64>,
) -> ManifestWorkReplicaSetRolloutStatus {
    ManifestWorkReplicaSetRolloutStatus {
        set_uid,
        observed_generation: generation,
        current_revision: status.current_revision.clone(),
        update_revision: status.update_revision.clone(),
        aborted_time: status.aborted_time.clone(),
        collision_count: status.collision_count,
        placements: status
            .placements_summary
            .iter()
            .map(placement_status)
            .collect(),
        conditions: Vec::new(),
        control: None,
    }
}

fn placement_status(summary: &PlacementSummary) -> PlacementRolloutStatus {
    PlacementRolloutStatus {
        name: summary.name.clone(),
        max_failure_breach: summary.max_failure_breach,
        cluster_counts: summary.cluster_counts,
        clusters: summary.clusters.clone(),
        omitted_clusters: summary.omitted_clusters,
        abort_failures: summary.abort_failures.clone(),
    }
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;
    use serde_json::{Value, json};

    use super::*;
    use crate::rollout::RolloutStatus;

    fn mwrs(strategy: Value, status: Value) -> ManifestWorkReplicaSet {
        serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1alpha1",
            "kind": "ManifestWorkReplicaSet",
            "metadata": {"name": "hello", "namespace": "default", "generation": 4},
            "spec": {"placementRefs": [{"name": "a", "rolloutStrategy": strategy}, {"name": "b"}]},
            "status": status
        }))
        .expect("a ManifestWorkReplicaSet")
    }

    fn carrier(spec: Value, status: Value) -> ManifestWorkReplicaSetRollout {
        serde_json::from_value(json!({
            "apiVersion": "rollout-hooks.io/v1alpha1",
            "kind": "ManifestWorkReplicaSetRollout",
            "metadata": {"name": "hello", "namespace": "default", "generation": 2},
            "spec": spec,
            "status": status
        }))
        .expect("a ManifestWorkReplicaSetRollout")
    }

    #[test]
    fn the_carrier_completes_what_the_mwrs_does_not_set() {
        let carrier = carrier(
            json!({"revisionHistoryLimit": 3, "placements": [
                {"name": "a", "plugin": "from-carrier", "abortOnFailure": true,
                 "pluginConfig": {"k": "v"}, "rollbackPace": "Strategy"},
                {"name": "b", "failureStrategy": "AbortAll"},
                {"name": "not-in-the-mwrs", "plugin": "ignored"}]}),
            Value::Null,
        );
        let bound = bind(
            &mwrs(json!({"type": "All", "plugin": "from-mwrs"}), Value::Null),
            Some(&carrier),
        );
        assert_eq!(bound.spec.revision_history_limit(), 3);
        let a = bound.spec.placement_refs[0].strategy().expect("valid");
        // The ManifestWorkReplicaSet's own field wins; the rest comes from the carrier.
        assert_eq!(a.plugin.as_deref(), Some("from-mwrs"));
        assert!(a.abort_on_failure);
        assert_eq!(a.rollback_pace, crate::rollout::RollbackPace::Strategy);
        assert_eq!(a.plugin_config.as_deref(), Some(&b"{\"k\":\"v\"}"[..]));
        let b = bound.spec.placement_refs[1].strategy().expect("valid");
        assert!(b.abort_on_failure && b.plugin.is_none());
        assert_eq!(bound.spec.placement_refs.len(), 2);
    }

    #[test]
    fn without_a_carrier_the_mwrs_is_read_as_it_is() {
        let m = mwrs(
            json!({"plugin": "p"}),
            json!({"currentRevision": "c", "summary": {"total": 1}}),
        );
        assert_eq!(bind(&m, None), m);
    }

    #[test]
    fn status_additions_come_from_the_carrier_and_go_back_to_it() {
        let m = mwrs(
            json!({}),
            json!({"summary": {"total": 2},
                   "placementSummary": [{"name": "a", "availableDecisionGroups": "1 (2 / 2 clusters applied)",
                                         "summary": {"total": 2}}]}),
        );
        let details = json!({"observedGeneration": 2, "currentRevision": "c1", "updateRevision": "u2",
            "abortedTime": "2025-01-01T00:00:00Z", "collisionCount": 1,
            "placements": [{"name": "a", "maxFailureBreach": true,
                            "clusterCounts": {"toApply": 0, "progressing": 0, "validating": 0, "succeeded": 1,
                                              "failed": 1, "timeOut": 0, "skip": 0},
                            "clusters": [{"clusterName": "c2", "rolloutStatus": "Failed", "groupIndex": 0,
                                          "message": "5xx above 1%"}]}]});
        let c = carrier(json!({}), details.clone());
        let bound = bind(&m, Some(&c));
        let status = bound.status.as_ref().expect("status");
        assert_eq!(status.current_revision.as_deref(), Some("c1"));
        assert!(status.is_aborting());
        assert_eq!(status.summary.total, 2);
        let placement = &status.placements_summary[0];
        assert!(placement.max_failure_breach);
        assert_eq!(placement.clusters[0].rollout_status, RolloutStatus::Failed);
        // Split again, the carrier's part is what was read.
        let split = carrier_status(status, None, Some(2));
        assert_eq!(serde_json::to_value(&split).expect("serializes"), details);
    }

    #[test]
    fn a_carrier_without_a_status_yet_keeps_the_mwrs_own_revisions() {
        // A hub whose CRD kept them, before its first reconcile with a carrier.
        let m = mwrs(
            json!({}),
            json!({"currentRevision": "c1", "updateRevision": "u1"}),
        );
        let bound = bind(&m, Some(&carrier(json!({}), Value::Null)));
        let status = bound.status.expect("status");
        assert_eq!(status.current_revision.as_deref(), Some("c1"));
        assert_eq!(status.update_revision.as_deref(), Some("u1"));
    }

    fn named(name: &str, spec: Value) -> ManifestWorkReplicaSetRollout {
        let mut c = carrier(spec, Value::Null);
        c.metadata.name = Some(name.into());
        c
    }

    #[test]
    fn an_explicit_target_ref_wins_over_the_same_name() {
        let same = named("hello", json!({}));
        let elsewhere = named("hello", json!({"targetRef": {"name": "other"}}));
        let explicit = named("hello-rollout", json!({"targetRef": {"name": "hello"}}));
        let again = named("hello-2", json!({"targetRef": {"name": "hello"}}));
        assert_eq!(
            choose("hello", [&same]),
            Choice::Bound(&same, Found::SameName)
        );
        assert_eq!(
            choose("hello", [&same, &explicit]),
            Choice::Bound(&explicit, Found::TargetRef)
        );
        // A carrier of the set's name that targets another set is not its.
        assert_eq!(choose("hello", [&elsewhere]), Choice::None);
        assert_eq!(
            choose("other", [&elsewhere]),
            Choice::Bound(&elsewhere, Found::TargetRef)
        );
        assert_eq!(
            choose("hello", [&again, &same, &explicit]),
            Choice::Ambiguous(vec!["hello-2".into(), "hello-rollout".into()])
        );
        assert_eq!(target_of(&explicit), "hello");
        assert_eq!(target_of(&same), "hello");
    }

    #[test]
    fn a_status_written_for_another_set_of_the_name_is_not_read() {
        let mut m = mwrs(json!({}), Value::Null);
        m.metadata.uid = Some("uid-2".into());
        let of = |uid: Value| {
            carrier(
                json!({}),
                json!({"setUID": uid, "currentRevision": "c1", "abortedTime": "2025-01-01T00:00:00Z"}),
            )
        };
        let bound = bind(&m, Some(&of(json!("uid-1"))));
        assert_eq!(bound.status.unwrap_or_default().current_revision, None);
        for uid in [json!("uid-2"), Value::Null] {
            let bound = bind(&m, Some(&of(uid)));
            assert!(bound.status.expect("status").is_aborting());
        }
        let written = carrier_status(&ManifestWorkReplicaSetStatus::default(), m.uid(), None);
        assert_eq!(written.set_uid.as_deref(), Some("uid-2"));
    }

    #[test]
    fn the_crd_is_namespaced_with_a_status_and_a_short_name() {
        let crd = ManifestWorkReplicaSetRollout::crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("manifestworkreplicasetrollouts.rollout-hooks.io")
        );
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.short_names, Some(vec!["mwrsrollout".into()]));
        let schema = serde_json::to_value(
            crd.spec.versions[0]
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .expect("schema"),
        )
        .expect("serializes");
        let placement = &schema["properties"]["spec"]["properties"]["placements"];
        assert_eq!(placement["x-kubernetes-list-map-keys"], json!(["name"]));
        let properties = &placement["items"]["properties"];
        for field in [
            "name",
            "plugin",
            "pluginConfig",
            "abortOnFailure",
            "failureStrategy",
            "rollbackPace",
        ] {
            assert!(
                properties[field].is_object(),
                "{field} missing from {placement:#}"
            );
        }
        assert_eq!(placement["items"]["required"], json!(["name"]));
        assert_eq!(
            properties["rollbackPace"]["enum"],
            json!(["AtOnce", "Strategy"])
        );
        // No default the API server would fill in over the ManifestWorkReplicaSet's value.
        assert_eq!(properties["rollbackPace"].get("default"), None);
    }
}
