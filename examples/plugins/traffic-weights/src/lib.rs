//! `traffic-weights`, the rollout plugin of story 1 (a multi-cluster aware
//! canary): on `MutateManifestWork` it tells every workload manifest where
//! its cluster stands in the rollout and how much traffic the new revision
//! should take there, in two annotations that a mesh controller, an Argo
//! Rollouts analysis or the workload itself can read:
//!
//! | annotation | value |
//! |---|---|
//! | [`POSITION_ANNOTATION`] `rollout-hooks.io/cluster-position` | `INDEX/TOTAL`, e.g. `3/10`: `cluster_index` of `total_cluster_count` |
//! | [`WEIGHT_ANNOTATION`] `rollout-hooks.io/canary-weight` | an integer percentage, `0`..=`100`, e.g. `30` |
//!
//! The weight is [`canary_weight`]: `round(100 * cluster_index /
//! total_cluster_count)`, halves rounded up, so the share of traffic on the
//! new revision grows with the share of the fleet that has it: cluster 1 of
//! 4 gets 25, cluster 3 of 10 gets 30, the last cluster gets 100.
//!
//! While the rollout aborts (`aborting`, the controller re-applying the last
//! good revision), the weight is `100`: the restored revision takes all the
//! traffic at once, with no canary ramp back (the position is still
//! written). Every manifest of `spec.workload.manifests` is annotated, and
//! applying the plugin twice gives the same work. A request without a valid
//! position (`1 <= cluster_index <= total_cluster_count`) fails with
//! `INVALID_ARGUMENT`.
//!
//! It declares only the `MutateManifestWork` hook, and only the rollout
//! counts: it reads where its own cluster stands (`cluster_index` of
//! `total_cluster_count`), never the list of every cluster's status.
#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
    )
)]

use rollout_plugin_sdk::prelude::*;

/// Annotation holding the cluster's position, `INDEX/TOTAL`.
pub const POSITION_ANNOTATION: &str = "rollout-hooks.io/cluster-position";
/// Annotation holding the canary weight, a percentage.
pub const WEIGHT_ANNOTATION: &str = "rollout-hooks.io/canary-weight";
/// The plugin's name, as it answers `Initialize` and prints when listening.
pub const NAME: &str = "traffic-weights";

/// The canary weight of a cluster: `round(100 * index / total)` with halves
/// rounded up: in `0..=100`, 0 while `index / total` is below 0.5 %, 100 for
/// the last cluster.
pub fn canary_weight(position: ClusterPosition) -> u32 {
    let (index, total) = (u64::from(position.index()), u64::from(position.total()));
    // (200 i + t) / 2t == floor(100 i / t + 1/2), in integers.
    let weight = (200 * index + total) / (2 * total);
    // index <= total, so weight <= 100.
    u32::try_from(weight).unwrap_or(100)
}

/// The weight to write for a request: [`canary_weight`], or 100 while
/// aborting.
pub fn weight_for(position: ClusterPosition, aborting: bool) -> u32 {
    if aborting {
        100
    } else {
        canary_weight(position)
    }
}

/// The plugin.
#[derive(Debug, Default)]
pub struct TrafficWeights;

impl TrafficWeights {
    /// Annotates every manifest of `work` for `request` (see the crate docs).
    pub fn annotate(
        request: &RolloutPluginRequest,
        work: &mut ManifestWork,
    ) -> Result<(), PluginError> {
        let position = request.position().ok_or_else(|| {
            PluginError::invalid_argument(format!(
                "cluster {:?}: cluster_index {} of total_cluster_count {} is not a position in the rollout",
                request.cluster_name, request.cluster_index, request.total_cluster_count
            ))
        })?;
        let weight = weight_for(position, request.aborting).to_string();
        for mut manifest in work.manifests_mut() {
            manifest.set_annotation(POSITION_ANNOTATION, position.to_string())?;
            manifest.set_annotation(WEIGHT_ANNOTATION, weight.as_str())?;
        }
        Ok(())
    }
}

impl RolloutPlugin for TrafficWeights {
    fn info(&self) -> PluginInfo {
        // How far along the rollout is comes from the request's own position:
        // the per-cluster list would only cost bytes.
        PluginInfo::new(NAME, env!("CARGO_PKG_VERSION"))
            .hooks([Hook::MutateManifestWork])
            .state_detail(RolloutStateDetail::Counts)
    }

    async fn mutate_manifest_work(
        &self,
        request: RolloutPluginRequest,
        mut work: ManifestWork,
    ) -> Result<Mutation, PluginError> {
        Self::annotate(&request, &mut work)?;
        tracing::debug!(cluster = %request.cluster_name, index = request.cluster_index, total = request.total_cluster_count, "annotated");
        Ok(Mutation::Changed(work))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rollout_plugin_sdk::testing;
    use serde_json::json;

    fn position(index: u32, total: u32) -> ClusterPosition {
        ClusterPosition::new(index, total).unwrap()
    }

    #[test]
    fn weight_follows_the_share_of_the_fleet() {
        let table = [
            (1, 1, 100),
            (1, 2, 50),
            (1, 3, 33),
            (2, 3, 67),
            (3, 10, 30),
            (10, 10, 100),
            (1, 8, 13),  // 12.5 rounds up
            (1, 200, 1), // 0.5 rounds up
            (1, 201, 0), // 0.497…
            (1, 1000, 0),
        ];
        for (index, total, want) in table {
            assert_eq!(
                canary_weight(position(index, total)),
                want,
                "{index}/{total}"
            );
        }
        // never decreasing along the rollout, and 100 at the end
        for total in 1..=50 {
            let weights: Vec<_> = (1..=total)
                .map(|i| canary_weight(position(i, total)))
                .collect();
            assert!(weights.windows(2).all(|w| w[0] <= w[1]), "{weights:?}");
            assert_eq!(weights.last(), Some(&100));
        }
        assert_eq!(canary_weight(position(u32::MAX, u32::MAX)), 100);
    }

    #[test]
    fn aborting_restores_all_traffic() {
        assert_eq!(weight_for(position(1, 10), true), 100);
        assert_eq!(weight_for(position(1, 10), false), 10);
    }

    #[test]
    fn annotates_every_manifest_idempotently() {
        let mut work = ManifestWork::from_value(testing::sample_work("cluster3")).unwrap();
        let request = testing::rollout("cluster3", 3, 10);
        TrafficWeights::annotate(&request, &mut work).unwrap();
        let once = work.clone();
        TrafficWeights::annotate(&request, &mut work).unwrap();
        assert_eq!(work, once);
        assert_eq!(work.manifest_count(), 3);
        for m in work.manifests() {
            assert_eq!(m.annotation(POSITION_ANNOTATION), Some("3/10"));
            assert_eq!(m.annotation(WEIGHT_ANNOTATION), Some("30"));
        }
        // the rest of the work is untouched
        let mut without = work.into_value();
        for m in without["spec"]["workload"]["manifests"]
            .as_array_mut()
            .unwrap()
        {
            m["metadata"].as_object_mut().unwrap().remove("annotations");
        }
        assert_eq!(without, testing::sample_work("cluster3"));
    }

    #[test]
    fn rejects_a_request_without_a_position() {
        let mut work = ManifestWork::from_value(testing::sample_work("c")).unwrap();
        let err = TrafficWeights::annotate(&testing::rollout("c", 0, 10), &mut work).unwrap_err();
        assert_eq!(err.code(), rollout_plugin_sdk::tonic::Code::InvalidArgument);
        assert!(
            err.to_string()
                .contains("cluster_index 0 of total_cluster_count 10"),
            "{err}"
        );
    }

    #[test]
    fn a_manifest_with_bad_annotations_is_named() {
        let mut value = testing::sample_work("c");
        value["spec"]["workload"]["manifests"][1]["metadata"]["annotations"] = json!([]);
        let mut work = ManifestWork::from_value(value).unwrap();
        let err = TrafficWeights::annotate(&testing::rollout("c", 1, 2), &mut work).unwrap_err();
        assert!(
            err.to_string()
                .contains("spec.workload.manifests[1].metadata.annotations"),
            "{err}"
        );
    }
}
