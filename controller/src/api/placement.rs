//! Placement and PlacementDecision (`cluster.open-cluster-management.io/v1beta1`):
//! which managed clusters a ManifestWorkReplicaSet rolls out to, in which
//! decision groups.
//!
//! The placement controller owns both; this controller only reads them. The
//! fields it reads are typed, the rest kept in `extra`. [`decision_groups`]
//! turns a placement's decisions into the engine's [`ClusterGroup`]s.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use super::labels::{DECISION_GROUP_INDEX_LABEL, DECISION_GROUP_NAME_LABEL};
use super::schema;
use crate::rollout::ClusterGroup;

/// The desired selection of a Placement. (This definition declares
/// `decisionStrategy`; it keeps every other field as written.)
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.open-cluster-management.io",
    version = "v1beta1",
    kind = "Placement",
    namespaced,
    status = "PlacementStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "Placement selects managed clusters from the cluster sets bound to its namespace, and divides them into decision groups."
)]
#[serde(rename_all = "camelCase")]
pub struct PlacementSpec {
    /// How the selected clusters are divided into decision groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) decision_strategy: Option<DecisionStrategy>,
    /// Upstream fields this crate does not model (clusterSets,
    /// numberOfClusters, predicates, prioritizerPolicy, spreadPolicy,
    /// tolerations), kept as read.
    #[serde(flatten)]
    pub(crate) extra: BTreeMap<String, Value>,
}

/// `decisionStrategy`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DecisionStrategy {
    /// How clusters are grouped.
    #[serde(default)]
    pub(crate) group_strategy: GroupStrategy,
    /// Upstream fields this crate does not model, kept as read.
    #[serde(flatten)]
    pub(crate) extra: BTreeMap<String, Value>,
}

/// `groupStrategy`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GroupStrategy {
    /// Named groups, each selecting its clusters among the placement's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) decision_groups: Vec<DecisionGroup>,
    /// The largest number (or percentage) of clusters in one group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) clusters_per_decision_group: Option<IntOrString>,
    /// Upstream fields this crate does not model, kept as read.
    #[serde(flatten)]
    pub(crate) extra: BTreeMap<String, Value>,
}

/// One entry of `decisionGroups`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DecisionGroup {
    /// The group's name, the `decision-group-name` label of its decisions.
    #[serde(default)]
    pub(crate) group_name: String,
    /// Which of the placement's clusters belong to the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::any_object")]
    pub(crate) group_cluster_selector: Option<Value>,
    /// Upstream fields this crate does not model, kept as read.
    #[serde(flatten)]
    pub(crate) extra: BTreeMap<String, Value>,
}

/// What the placement controller reports about a Placement.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementStatus {
    /// How many clusters the placement selected.
    #[serde(default)]
    pub(crate) number_of_selected_clusters: i32,
    /// The decision groups and the PlacementDecisions of each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) decision_groups: Vec<DecisionGroupStatus>,
    /// PlacementSatisfied, PlacementMisconfigured.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) conditions: Vec<Condition>,
    /// Upstream fields this crate does not model, kept as read.
    #[serde(flatten)]
    pub(crate) extra: BTreeMap<String, Value>,
}

/// One entry of `status.decisionGroups`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DecisionGroupStatus {
    /// The group's index; 0 when the placement defines no groups.
    #[serde(default)]
    pub(crate) decision_group_index: i32,
    /// The group's name; may be empty.
    #[serde(default)]
    pub(crate) decision_group_name: String,
    /// Names of the group's PlacementDecisions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) decisions: Vec<String>,
    /// How many clusters the group holds.
    #[serde(default)]
    pub(crate) cluster_count: i32,
}

/// A PlacementDecision has no spec: its decisions are in its status.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "cluster.open-cluster-management.io",
    version = "v1beta1",
    kind = "PlacementDecision",
    namespaced,
    no_spec,
    status = "PlacementDecisionStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "PlacementDecision holds a slice of a Placement's selected clusters. It is labelled with its placement and decision group."
)]
pub struct PlacementDecisionFields {}

/// The clusters of one PlacementDecision.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementDecisionStatus {
    /// The selected clusters.
    #[serde(default)]
    pub(crate) decisions: Vec<ClusterDecision>,
}

/// One selected cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterDecision {
    /// The managed cluster's name (and its namespace on the hub).
    pub(crate) cluster_name: String,
    /// Why it was selected.
    #[serde(default)]
    pub(crate) reason: String,
}

/// A PlacementDecision whose group labels cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecisionGroupError {
    /// The `decision-group-index` label is absent.
    #[error("PlacementDecision {decision}: label {DECISION_GROUP_INDEX_LABEL} is missing")]
    MissingIndex {
        /// The PlacementDecision's name.
        decision: String,
    },
    /// The `decision-group-index` label is not an int32.
    #[error(
        "PlacementDecision {decision}: label {DECISION_GROUP_INDEX_LABEL}={value:?} is not a number"
    )]
    BadIndex {
        /// The PlacementDecision's name.
        decision: String,
        /// The label's value.
        value: String,
    },
}

/// The decision groups of one placement, from its PlacementDecisions (those
/// labelled with the placement's name; the caller selects them).
///
/// A group is keyed by its index and name labels; its clusters are the union
/// of its decisions' clusters, sorted, without empty names. Groups come out
/// ordered by index, then name. Fails on the first decision whose
/// `decision-group-index` label is missing or not a number, as OCM does.
pub fn decision_groups(
    decisions: &[PlacementDecision],
) -> Result<Vec<ClusterGroup>, DecisionGroupError> {
    let mut groups: BTreeMap<(i32, String), BTreeSet<String>> = BTreeMap::new();
    for decision in decisions {
        let labels = decision.labels();
        let value = labels.get(DECISION_GROUP_INDEX_LABEL).ok_or_else(|| {
            DecisionGroupError::MissingIndex {
                decision: decision.name_any(),
            }
        })?;
        let index = value
            .parse::<i32>()
            .map_err(|_| DecisionGroupError::BadIndex {
                decision: decision.name_any(),
                value: value.clone(),
            })?;
        let name = labels
            .get(DECISION_GROUP_NAME_LABEL)
            .cloned()
            .unwrap_or_default();
        let clusters = groups.entry((index, name)).or_default();
        let decided = decision.status.iter().flat_map(|s| &s.decisions);
        clusters.extend(
            decided
                .filter(|d| !d.cluster_name.is_empty())
                .map(|d| d.cluster_name.clone()),
        );
    }
    Ok(groups
        .into_iter()
        .map(|((index, name), clusters)| ClusterGroup {
            index,
            name,
            clusters: clusters.into_iter().collect(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use kube::api::ObjectMeta;
    use serde_json::json;

    use super::*;
    use crate::api::labels::PLACEMENT_LABEL;

    fn decision(name: &str, labels: &[(&str, &str)], clusters: &[&str]) -> PlacementDecision {
        PlacementDecision {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            spec: PlacementDecisionFields {},
            status: Some(PlacementDecisionStatus {
                decisions: clusters
                    .iter()
                    .map(|c| ClusterDecision {
                        cluster_name: c.to_string(),
                        reason: String::new(),
                    })
                    .collect(),
            }),
        }
    }

    #[test]
    fn groups_are_the_union_of_their_decisions() {
        let p = (PLACEMENT_LABEL, "p");
        let decisions = [
            decision(
                "p-decision-3",
                &[
                    p,
                    (DECISION_GROUP_INDEX_LABEL, "1"),
                    (DECISION_GROUP_NAME_LABEL, "rest"),
                ],
                &["c5", "c3"],
            ),
            decision(
                "p-decision-1",
                &[
                    p,
                    (DECISION_GROUP_INDEX_LABEL, "0"),
                    (DECISION_GROUP_NAME_LABEL, "canary"),
                ],
                &["c2", "c1"],
            ),
            decision(
                "p-decision-2",
                &[
                    p,
                    (DECISION_GROUP_INDEX_LABEL, "0"),
                    (DECISION_GROUP_NAME_LABEL, "canary"),
                ],
                &["c1", "c4", ""],
            ),
            decision("p-decision-4", &[p, (DECISION_GROUP_INDEX_LABEL, "2")], &[]),
        ];
        let groups = decision_groups(&decisions).expect("valid labels");
        let want = vec![
            ClusterGroup {
                index: 0,
                name: "canary".into(),
                clusters: vec!["c1".into(), "c2".into(), "c4".into()],
            },
            ClusterGroup {
                index: 1,
                name: "rest".into(),
                clusters: vec!["c3".into(), "c5".into()],
            },
            ClusterGroup {
                index: 2,
                name: String::new(),
                clusters: vec![],
            },
        ];
        assert_eq!(groups, want);
        assert_eq!(decision_groups(&[]), Ok(vec![]));
    }

    #[test]
    fn group_index_must_be_present_and_numeric() {
        let cases: &[(&[(&str, &str)], DecisionGroupError)] = &[
            (
                &[],
                DecisionGroupError::MissingIndex {
                    decision: "d".into(),
                },
            ),
            (
                &[(DECISION_GROUP_INDEX_LABEL, "one")],
                DecisionGroupError::BadIndex {
                    decision: "d".into(),
                    value: "one".into(),
                },
            ),
            (
                &[(DECISION_GROUP_INDEX_LABEL, "")],
                DecisionGroupError::BadIndex {
                    decision: "d".into(),
                    value: String::new(),
                },
            ),
        ];
        for (labels, want) in cases {
            assert_eq!(
                decision_groups(&[decision("d", labels, &["c1"])]),
                Err(want.clone())
            );
        }
        assert_eq!(
            DecisionGroupError::BadIndex {
                decision: "d".into(),
                value: "one".into()
            }
            .to_string(),
            r#"PlacementDecision d: label cluster.open-cluster-management.io/decision-group-index="one" is not a number"#
        );
    }

    #[test]
    fn upstream_objects_parse_and_round_trip() {
        let placement = json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1",
            "kind": "Placement",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {
                "clusterSets": ["global"],
                "numberOfClusters": 3,
                "decisionStrategy": {"groupStrategy": {
                    "clustersPerDecisionGroup": "25%",
                    "decisionGroups": [{"groupName": "canary",
                        "groupClusterSelector": {"labelSelector": {"matchLabels": {"canary": "true"}}}}]
                }}
            },
            "status": {
                "numberOfSelectedClusters": 3,
                "decisionGroups": [{"decisionGroupIndex": 0, "decisionGroupName": "canary",
                                    "decisions": ["p-decision-1"], "clusterCount": 1}],
                "conditions": []
            }
        });
        let parsed: Placement = serde_json::from_value(placement.clone()).expect("parses");
        let strategy = parsed.spec.decision_strategy.as_ref().expect("strategy");
        assert_eq!(
            strategy.group_strategy.clusters_per_decision_group,
            Some(IntOrString::String("25%".into()))
        );
        assert_eq!(
            strategy.group_strategy.decision_groups[0].group_name,
            "canary"
        );
        assert_eq!(
            parsed
                .status
                .as_ref()
                .map(|s| s.number_of_selected_clusters),
            Some(3)
        );
        let mut want = placement;
        // An empty list is omitted on the way out.
        if let Some(status) = want["status"].as_object_mut() {
            status.remove("conditions");
        }
        assert_eq!(serde_json::to_value(&parsed).expect("serializes"), want);

        let decision = json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1",
            "kind": "PlacementDecision",
            "metadata": {"name": "p-decision-1", "namespace": "default",
                         "labels": {PLACEMENT_LABEL: "p", DECISION_GROUP_INDEX_LABEL: "0"}},
            "status": {"decisions": [{"clusterName": "c1", "reason": ""}]}
        });
        let parsed: PlacementDecision = serde_json::from_value(decision.clone()).expect("parses");
        assert_eq!(serde_json::to_value(&parsed).expect("serializes"), decision);
    }
}
