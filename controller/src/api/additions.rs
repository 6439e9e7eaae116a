//! The design's additions to OCM's CRDs, in one table ([`ADDITIONS`]), and
//! what is derived from it: the CRDs without the additions
//! (`rollout-controller crd --without-additions`: this crate's CRDs minus
//! the additions, the fields a hub running OCM's cluster-manager operator
//! keeps; not OCM's own CRDs, whose schemas and defaults differ) and the
//! OCM-shaped part of
//! a ManifestWorkReplicaSet status ([`ocm_status`], what the controller
//! writes there).

use std::sync::LazyLock;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Map, Value};

use super::ManifestWorkReplicaSet;
use super::manifestworkreplicaset::ManifestWorkReplicaSetStatus;
use super::prune;

/// The fields of this crate's CRDs that OCM's own CRDs do not have, by CRD
/// name: schema paths from the root of `openAPIV3Schema`, `[]` stepping
/// into a list's items.
pub(crate) const ADDITIONS: &[(&str, &[&str])] = &[
    (
        "manifestworkreplicasets.work.open-cluster-management.io",
        &[
            "spec.revisionHistoryLimit",
            "spec.placementRefs[].rolloutStrategy.plugin",
            "spec.placementRefs[].rolloutStrategy.pluginConfig",
            "spec.placementRefs[].rolloutStrategy.abortOnFailure",
            "spec.placementRefs[].rolloutStrategy.failureStrategy",
            "spec.placementRefs[].rolloutStrategy.rollbackPace",
            "status.currentRevision",
            "status.updateRevision",
            "status.abortedTime",
            "status.collisionCount",
            "status.placementSummary[].maxFailureBreach",
            "status.placementSummary[].clusterCounts",
            "status.placementSummary[].clusters",
            "status.placementSummary[].omittedClusters",
            "status.placementSummary[].abortFailures",
        ],
    ),
    (
        "clustermanagers.operator.open-cluster-management.io",
        &[
            "spec.workConfiguration.plugins",
            "spec.workConfiguration.pipelines",
        ],
    ),
];

/// The additions of the CRD named `name`.
fn additions_of(name: &str) -> &'static [&'static str] {
    ADDITIONS
        .iter()
        .find(|(crd, _)| *crd == name)
        .map_or(&[], |(_, paths)| *paths)
}

/// Removes the property at `path` (dotted, `[]` for items) from `schema`,
/// and from its parent's `required`; whether it was there.
fn remove_path(schema: &mut Value, path: &str) -> bool {
    let steps: Vec<&str> = path
        .split('.')
        .flat_map(|step| match step.strip_suffix("[]") {
            Some(name) => vec![name, "[]"],
            None => vec![step],
        })
        .collect();
    let Some((last, parents)) = steps.split_last() else {
        return false;
    };
    let mut node = schema;
    for step in parents {
        let next = if *step == "[]" {
            node.get_mut("items")
        } else {
            node.get_mut("properties").and_then(|p| p.get_mut(*step))
        };
        let Some(next) = next else {
            return false;
        };
        node = next;
    }
    if let Some(required) = node.get_mut("required").and_then(Value::as_array_mut) {
        required.retain(|r| r != *last);
    }
    node.get_mut("properties")
        .and_then(Value::as_object_mut)
        .and_then(|p| p.remove(*last))
        .is_some()
}

/// `crd` without the design's additions.
pub(crate) fn ocm_shaped(crd: &CustomResourceDefinition) -> CustomResourceDefinition {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let paths = additions_of(&name);
    let mut crd = crd.clone();
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        // The schema types round-trip through JSON; the fallbacks are
        // never taken.
        let mut value = serde_json::to_value(&*schema).unwrap_or(Value::Null);
        for path in paths {
            remove_path(&mut value, path);
        }
        if let Ok(shaped) = serde_json::from_value(value) {
            *schema = shaped;
        }
    }
    crd
}

/// The OCM-shaped ManifestWorkReplicaSet CRD's schema, built once.
static OCM_MWRS_SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    let crd = ocm_shaped(&ManifestWorkReplicaSet::crd());
    crd.spec
        .versions
        .first()
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(Value::Null)
});

/// The fields of `status` that OCM's ManifestWorkReplicaSet CRD keeps
/// (conditions, summary, placementSummary without the additions), as JSON:
/// what the controller writes to a ManifestWorkReplicaSet's status, and
/// what it compares with the status read back.
pub fn ocm_status(status: &ManifestWorkReplicaSetStatus) -> Value {
    let mut value = serde_json::to_value(status).unwrap_or(Value::Object(Map::new()));
    prune::prune(&mut value, &OCM_MWRS_SCHEMA["properties"]["status"]);
    value
}

/// Whether the ClusterManager CRD's additions (the registration path) are
/// in `crd`; for tests of the table.
#[cfg(test)]
fn cluster_manager_has_additions(crd: &CustomResourceDefinition) -> bool {
    let schema = serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref()),
    )
    .unwrap_or(Value::Null);
    schema["properties"]["spec"]["properties"]["workConfiguration"]["properties"]["plugins"]
        .is_object()
}

#[cfg(test)]
mod tests {
    use schemars::schema_for;
    use serde_json::json;

    use super::*;
    use crate::api::ClusterManager;
    use crate::api::manifestworkreplicaset::AdditionsSchema;

    fn schema_of(crd: &CustomResourceDefinition) -> Value {
        serde_json::to_value(
            crd.spec.versions[0]
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .expect("schema"),
        )
        .expect("serializes")
    }

    #[test]
    fn every_addition_is_in_the_design_crd_and_gone_from_the_ocm_shaped_one() {
        for crd in [ManifestWorkReplicaSet::crd(), ClusterManager::crd()] {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let paths = additions_of(&name);
            assert!(!paths.is_empty(), "{name}");
            for path in paths {
                let mut design = schema_of(&crd);
                assert!(
                    remove_path(&mut design, path),
                    "{name}: {path} is not in the design CRD"
                );
                let mut shaped = schema_of(&ocm_shaped(&crd));
                assert!(
                    !remove_path(&mut shaped, path),
                    "{name}: {path} is still there"
                );
            }
        }
        assert!(cluster_manager_has_additions(&ClusterManager::crd()));
        assert!(!cluster_manager_has_additions(&ocm_shaped(
            &ClusterManager::crd()
        )));
    }

    #[test]
    fn the_rollout_strategy_additions_are_exactly_the_additions_schema() {
        let schema = serde_json::to_value(schema_for!(AdditionsSchema)).expect("serializes");
        let mut fields: Vec<String> = schema["properties"]
            .as_object()
            .expect("properties")
            .keys()
            .map(|k| format!("spec.placementRefs[].rolloutStrategy.{k}"))
            .collect();
        fields.sort();
        let mut listed: Vec<String> = additions_of(ManifestWorkReplicaSet::crd_name())
            .iter()
            .filter(|p| p.contains("rolloutStrategy"))
            .map(|p| (*p).to_owned())
            .collect();
        listed.sort();
        assert_eq!(fields, listed);
    }

    #[test]
    fn ocm_upstream_fields_stay() {
        let shaped = schema_of(&ocm_shaped(&ManifestWorkReplicaSet::crd()));
        let strategy = &shaped["properties"]["spec"]["properties"]["placementRefs"]["items"]["properties"]
            ["rolloutStrategy"]["properties"];
        let mut kept: Vec<&String> = strategy.as_object().expect("properties").keys().collect();
        kept.sort();
        assert_eq!(kept, ["all", "progressive", "progressivePerGroup", "type"]);
        let status = &shaped["properties"]["status"]["properties"];
        let mut kept: Vec<&String> = status.as_object().expect("properties").keys().collect();
        kept.sort();
        assert_eq!(kept, ["conditions", "placementSummary", "summary"]);
        let placement = &status["placementSummary"]["items"]["properties"];
        let mut kept: Vec<&String> = placement.as_object().expect("properties").keys().collect();
        kept.sort();
        assert_eq!(kept, ["availableDecisionGroups", "name", "summary"]);
    }

    #[test]
    fn the_ocm_status_leaves_the_additions_out() {
        let status: ManifestWorkReplicaSetStatus = serde_json::from_value(json!({
            "currentRevision": "c", "updateRevision": "u", "collisionCount": 1,
            "summary": {"total": 1, "updated": 1},
            "placementSummary": [{"name": "a", "maxFailureBreach": true,
                                  "clusters": [{"clusterName": "c1", "rolloutStatus": "Failed"}]}]
        }))
        .expect("a status");
        let value = ocm_status(&status);
        assert_eq!(value["currentRevision"], Value::Null);
        assert_eq!(value["summary"]["updated"], json!(1));
        assert_eq!(
            value["placementSummary"][0].as_object().map(|o| o.len()),
            Some(3),
            "{value:#}"
        );
    }
}
