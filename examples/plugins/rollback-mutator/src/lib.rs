//! `rollback-mutator`, the rollout plugin of story 3 (automated rollback):
//! while a rollout aborts (`aborting` is true, the controller re-applying the
//! last good revision to the clusters already rolled out), its
//! `MutateManifestWork` changes the work so that the rollback goes through at
//! once instead of replaying a canary:
//!
//! - every manifest of `spec.workload.manifests` gets the annotations
//!   [`ROLLBACK_ANNOTATION`] `rollout-hooks.io/rollback: "true"` and, when the
//!   request names it, [`ROLLBACK_REVISION_ANNOTATION`]
//!   `rollout-hooks.io/rollback-revision: <desired_revision>`;
//! - an Argo Rollout (`kind: Rollout`, group `argoproj.io`) with a canary
//!   strategy loses its steps (`spec.strategy.canary.steps: []`): Argo
//!   Rollouts then promotes the restored pod template fully, without pauses
//!   or analysis steps. The number of steps dropped is recorded in
//!   [`SKIPPED_STEPS_ANNOTATION`] `rollout-hooks.io/skipped-canary-steps`;
//! - an Argo Rollout with a blue-green strategy gets
//!   `spec.strategy.blueGreen.autoPromotionEnabled: true`, so the restored
//!   revision is promoted as soon as it is ready.
//!
//! Outside an abort the work is left unchanged. Applying the plugin twice
//! gives the same work. It declares only the `MutateManifestWork` hook, and
//! only the rollout counts: it reads `aborting` and `desired_revision`, never
//! the list of every cluster's status.
#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
    )
)]

use rollout_plugin_sdk::prelude::*;
use serde_json::{Value, json};

/// Marks every manifest of a rollback: `"true"`.
pub const ROLLBACK_ANNOTATION: &str = "rollout-hooks.io/rollback";
/// The revision a rollback restores (the request's `desired_revision`).
pub const ROLLBACK_REVISION_ANNOTATION: &str = "rollout-hooks.io/rollback-revision";
/// On an Argo Rollout: how many canary steps the rollback skipped.
pub const SKIPPED_STEPS_ANNOTATION: &str = "rollout-hooks.io/skipped-canary-steps";
/// The plugin's name, as it answers `Initialize` and prints when listening.
pub const NAME: &str = "rollback-mutator";

/// The plugin.
#[derive(Debug, Default)]
pub struct RollbackMutator;

impl RollbackMutator {
    /// Prepares `work` for a rollback to `revision` (empty: not recorded).
    /// See the crate docs for what changes.
    pub fn prepare_rollback(work: &mut ManifestWork, revision: &str) -> Result<(), PluginError> {
        for mut manifest in work.manifests_mut() {
            manifest.set_annotation(ROLLBACK_ANNOTATION, "true")?;
            if !revision.is_empty() {
                manifest.set_annotation(ROLLBACK_REVISION_ANNOTATION, revision)?;
            }
            if manifest.kind() == Some("Rollout") && manifest.group() == Some("argoproj.io") {
                skip_argo_steps(&mut manifest)?;
            }
        }
        Ok(())
    }
}

/// Makes an Argo Rollout promote at once (canary: no steps; blue-green:
/// auto-promotion).
fn skip_argo_steps(rollout: &mut rollout_plugin_sdk::ManifestMut<'_>) -> Result<(), PluginError> {
    let strategy = rollout.view().get(&["spec", "strategy"]).cloned();
    let Some(strategy) = strategy else {
        return Ok(());
    };
    if let Some(canary) = strategy.get("canary") {
        let steps = canary
            .get("steps")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        if steps > 0 {
            rollout.set(&["spec", "strategy", "canary", "steps"], json!([]))?;
            rollout.set_annotation(SKIPPED_STEPS_ANNOTATION, steps.to_string())?;
        }
    }
    if strategy.get("blueGreen").is_some() {
        rollout.set(
            &["spec", "strategy", "blueGreen", "autoPromotionEnabled"],
            json!(true),
        )?;
    }
    Ok(())
}

impl RolloutPlugin for RollbackMutator {
    fn info(&self) -> PluginInfo {
        // It reads `aborting` and the revision, not the per-cluster list.
        PluginInfo::new(NAME, env!("CARGO_PKG_VERSION"))
            .hooks([Hook::MutateManifestWork])
            .state_detail(RolloutStateDetail::Counts)
    }

    async fn mutate_manifest_work(
        &self,
        request: RolloutPluginRequest,
        mut work: ManifestWork,
    ) -> Result<Mutation, PluginError> {
        if !request.aborting {
            return Ok(Mutation::Unchanged);
        }
        Self::prepare_rollback(&mut work, &request.desired_revision)?;
        tracing::info!(cluster = %request.cluster_name, revision = %request.desired_revision, "prepared rollback");
        Ok(Mutation::Changed(work))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rollout_plugin_sdk::testing;

    fn prepared(value: Value) -> ManifestWork {
        let mut work = ManifestWork::from_value(value).unwrap();
        RollbackMutator::prepare_rollback(&mut work, "rev-0").unwrap();
        work
    }

    #[test]
    fn marks_every_manifest_and_empties_canary_steps() {
        let work = prepared(testing::sample_work("c"));
        for m in work.manifests() {
            assert_eq!(
                m.annotation(ROLLBACK_ANNOTATION),
                Some("true"),
                "{:?}",
                m.kind()
            );
            assert_eq!(m.annotation(ROLLBACK_REVISION_ANNOTATION), Some("rev-0"));
        }
        let rollout = work.find("Rollout", "web").unwrap();
        assert_eq!(
            rollout.get(&["spec", "strategy", "canary", "steps"]),
            Some(&json!([]))
        );
        assert_eq!(rollout.annotation(SKIPPED_STEPS_ANNOTATION), Some("2"));
        let deployment = work.find("Deployment", "web").unwrap();
        assert_eq!(deployment.annotation(SKIPPED_STEPS_ANNOTATION), None);
        assert_eq!(deployment.get(&["spec"]), Some(&json!({"replicas": 2})));
    }

    #[test]
    fn is_idempotent() {
        let once = prepared(testing::sample_work("c"));
        let mut twice = once.clone();
        RollbackMutator::prepare_rollback(&mut twice, "rev-0").unwrap();
        assert_eq!(twice, once);
    }

    #[test]
    fn blue_green_is_promoted_automatically() {
        let mut value = testing::sample_work("c");
        value["spec"]["workload"]["manifests"][1]["spec"]["strategy"] =
            json!({"blueGreen": {"activeService": "web", "autoPromotionEnabled": false}});
        let work = prepared(value);
        let rollout = work.find("Rollout", "web").unwrap();
        assert_eq!(
            rollout.get(&["spec", "strategy", "blueGreen"]),
            Some(&json!({"activeService": "web", "autoPromotionEnabled": true}))
        );
        assert_eq!(rollout.annotation(SKIPPED_STEPS_ANNOTATION), None);
    }

    #[test]
    fn only_argo_rollouts_are_touched() {
        let mut value = testing::sample_work("c");
        // Same kind, other group: not an Argo Rollout.
        value["spec"]["workload"]["manifests"][1]["apiVersion"] = json!("example.com/v1");
        let work = prepared(value.clone());
        let rollout = work.find("Rollout", "web").unwrap();
        assert_eq!(
            rollout.get(&["spec"]),
            Some(&value["spec"]["workload"]["manifests"][1]["spec"])
        );
        assert_eq!(rollout.annotation(ROLLBACK_ANNOTATION), Some("true"));
    }

    #[test]
    fn no_revision_no_revision_annotation() {
        let mut work = ManifestWork::from_value(testing::sample_work("c")).unwrap();
        RollbackMutator::prepare_rollback(&mut work, "").unwrap();
        assert!(
            work.manifests()
                .all(|m| m.annotation(ROLLBACK_REVISION_ANNOTATION).is_none())
        );
    }

    #[test]
    fn a_strategy_that_is_not_an_object_is_named() {
        let mut value = testing::sample_work("c");
        value["spec"]["workload"]["manifests"][1]["spec"]["strategy"] = json!({"canary": 3});
        let mut work = ManifestWork::from_value(value).unwrap();
        // canary is not an object: no steps to skip, nothing to fail on
        RollbackMutator::prepare_rollback(&mut work, "rev-0").unwrap();
        let mut value = testing::sample_work("c");
        value["spec"]["workload"]["manifests"][1]["spec"]["strategy"] =
            json!({"blueGreen": "fast"});
        let mut work = ManifestWork::from_value(value).unwrap();
        let err = RollbackMutator::prepare_rollback(&mut work, "rev-0").unwrap_err();
        assert_eq!(
            err.to_string(),
            "`spec.workload.manifests[1].spec.strategy.blueGreen` must be an object, found a string"
        );
    }
}
