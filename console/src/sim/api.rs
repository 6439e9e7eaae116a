//! The simulated API server of `rollout-controller simulate --crds DIR`:
//! it stores the simulated ManifestWorkReplicaSet and its
//! ManifestWorkReplicaSetRollout as a hub would, pruned against the CRDs
//! of DIR (the project's own kinds against the project's own CRDs), and
//! each step reads them back, as `run` does, through
//! [`bind`].
//!
//! A kind DIR has no CRD for is refused, as an API server answers 404 for
//! a resource it does not serve. Each field the pruning drops is kept as a
//! warning, as an API server reports unknown fields.
//!
//! What is written, by default as the documentation tells a user to: the
//! ManifestWorkReplicaSet with OCM's fields, the design's additions in the
//! ManifestWorkReplicaSetRollout. With [`ObjectsShape::DesignApi`] the
//! additions go on the ManifestWorkReplicaSet itself and no carrier is
//! written (the controller creates an empty one, as `run` does).

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};
use thiserror::Error;

use super::config;
use rollout_controller::api::additions::ocm_status;
use rollout_controller::api::manifestworkreplicasetrollout::{bind, carrier_status};
use rollout_controller::api::prune::Schemas;
use rollout_controller::api::{
    ClusterRolloutSummary, ManifestWorkReplicaSet, ManifestWorkReplicaSetRollout,
    ManifestWorkReplicaSetStatus, PlacementSummary, crd,
};
use rollout_controller::reconcile::carrier::empty_carrier;
use rollout_controller::revision::RevisionStatus;
use rollout_controller::rollout::{
    InvalidStrategy, RawAdditions, RawStrategy, RolloutStatus, Strategy,
};

/// Where the design's additions are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ObjectsShape {
    /// OCM's fields on the ManifestWorkReplicaSet, the additions on its
    /// ManifestWorkReplicaSetRollout.
    #[default]
    Carrier,
    /// Every field on the ManifestWorkReplicaSet (the design's API), no
    /// ManifestWorkReplicaSetRollout written.
    DesignApi,
}

/// The simulated API server's settings.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// The CRDs of `--crds`, with the project's own.
    pub schemas: Arc<Schemas>,
    /// The `rolloutStrategy` as the user writes it (the additions included).
    pub strategy: RawStrategy,
    /// Where the additions go.
    pub shape: ObjectsShape,
}

impl ApiConfig {
    /// The schemas of `crds` (read from `--crds`) with the project's own
    /// CRDs for its own kinds.
    pub fn schemas(crds: Schemas) -> Schemas {
        let own: Vec<Value> = crd::own_kinds()
            .iter()
            .filter_map(|c| serde_json::to_value(c).ok())
            .collect();
        crds.with(&Schemas::from_crds(&own))
    }
}

/// Why the simulated API server refused an object or a read.
#[derive(Debug, Error)]
pub enum ApiError {
    /// No CRD of `--crds` serves the kind.
    #[error(
        "the CRDs given serve no {kind} ({api_version}): add its CustomResourceDefinition to the --crds directory (served: {served})"
    )]
    NotServed {
        /// The object's apiVersion.
        api_version: String,
        /// The object's kind.
        kind: String,
        /// What is served.
        served: String,
    },
    /// A stored object that does not read back as its type.
    #[error("reading back the stored {kind}: {source}")]
    Decode {
        /// The kind.
        kind: &'static str,
        /// The error.
        #[source]
        source: serde_json::Error,
    },
    /// The strategy read back is invalid.
    #[error(transparent)]
    Strategy(#[from] InvalidStrategy),
}

/// The stored objects of one simulation.
#[derive(Debug)]
pub(crate) struct SimApi {
    schemas: Arc<Schemas>,
    mwrs: Value,
    carrier: Value,
    warnings: Vec<String>,
}

impl SimApi {
    /// Writes the simulated ManifestWorkReplicaSet and (unless
    /// [`ObjectsShape::DesignApi`]) its carrier, then the empty carrier
    /// the controller creates when there is none.
    pub(crate) fn new(config: &ApiConfig) -> Result<SimApi, ApiError> {
        let mut api = SimApi {
            schemas: config.schemas.clone(),
            mwrs: Value::Null,
            carrier: Value::Null,
            warnings: Vec::new(),
        };
        let (strategy, additions) = match config.shape {
            ObjectsShape::DesignApi => (config.strategy.clone(), RawAdditions::default()),
            ObjectsShape::Carrier => {
                let mut ocm = config.strategy.clone();
                let additions = std::mem::take(&mut ocm.additions);
                (ocm, additions)
            }
        };
        let mwrs = json!({
            "apiVersion": "work.open-cluster-management.io/v1alpha1",
            "kind": "ManifestWorkReplicaSet",
            "metadata": {"name": config::NAME, "namespace": config::NAMESPACE,
                         "uid": "sim-mwrs", "generation": 1},
            "spec": {"manifestWorkTemplate": config::template(config::UPDATE_IMAGE),
                     "placementRefs": [{"name": config::PLACEMENT, "rolloutStrategy": strategy}]}
        });
        api.mwrs = api.store(mwrs)?;
        let carrier = match config.shape {
            ObjectsShape::Carrier => json!({
                "apiVersion": "rollout-hooks.io/v1alpha1",
                "kind": "ManifestWorkReplicaSetRollout",
                "metadata": {"name": config::NAME, "namespace": config::NAMESPACE, "generation": 1},
                "spec": {"placements": [additions_entry(&additions)]}
            }),
            ObjectsShape::DesignApi => {
                let mut empty =
                    serde_json::to_value(empty_carrier(&api.read_mwrs()?)).map_err(|source| {
                        ApiError::Decode {
                            kind: "ManifestWorkReplicaSetRollout",
                            source,
                        }
                    })?;
                empty["metadata"]["generation"] = json!(1);
                empty
            }
        };
        api.carrier = api.store(carrier)?;
        Ok(api)
    }

    /// Prunes `object` as the API server stores it; refuses a kind it does
    /// not serve.
    fn store(&mut self, mut object: Value) -> Result<Value, ApiError> {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let Some(dropped) = self.schemas.prune(&mut object) else {
            return Err(ApiError::NotServed {
                api_version: object["apiVersion"].as_str().unwrap_or_default().to_owned(),
                kind,
                served: self.schemas.kinds().join(", "),
            });
        };
        self.warnings.extend(
            dropped
                .into_iter()
                .map(|path| format!("{kind} {}: unknown field \"{path}\" dropped", config::NAME)),
        );
        Ok(object)
    }

    fn read_mwrs(&self) -> Result<ManifestWorkReplicaSet, ApiError> {
        serde_json::from_value(self.mwrs.clone()).map_err(|source| ApiError::Decode {
            kind: "ManifestWorkReplicaSet",
            source,
        })
    }

    fn read_carrier(&self) -> Result<ManifestWorkReplicaSetRollout, ApiError> {
        serde_json::from_value(self.carrier.clone()).map_err(|source| ApiError::Decode {
            kind: "ManifestWorkReplicaSetRollout",
            source,
        })
    }

    /// The ManifestWorkReplicaSet as read back and bound to its carrier.
    pub(crate) fn bound(&self) -> Result<ManifestWorkReplicaSet, ApiError> {
        Ok(bind(&self.read_mwrs()?, Some(&self.read_carrier()?)))
    }

    /// The placement's strategy, read back.
    pub(crate) fn strategy(&self) -> Result<Strategy, ApiError> {
        let bound = self.bound()?;
        let reference = bound
            .spec
            .placement_refs
            .first()
            .cloned()
            .unwrap_or_default();
        Ok(reference.strategy()?)
    }

    /// The revision fields, read back.
    pub(crate) fn revision_status(&self) -> Result<RevisionStatus, ApiError> {
        let status = self.bound()?.status.unwrap_or_default();
        Ok(RevisionStatus {
            current: status.current_revision,
            update: status.update_revision,
            aborted_time: status.aborted_time.map(|t| t.0),
        })
    }

    /// Writes the status of a step (the revisions and the placement's
    /// summary): the additions to the carrier, OCM's fields to the
    /// ManifestWorkReplicaSet, both pruned.
    pub(crate) fn write_status(
        &mut self,
        revisions: &RevisionStatus,
        placement: Option<PlacementSummary>,
    ) -> Result<(), ApiError> {
        let status = ManifestWorkReplicaSetStatus {
            current_revision: revisions.current.clone(),
            update_revision: revisions.update.clone(),
            aborted_time: revisions.aborted_time.map(Time),
            placements_summary: placement.into_iter().collect(),
            ..ManifestWorkReplicaSetStatus::default()
        };
        let generation = self.carrier["metadata"]["generation"].as_i64();
        let set_uid = self.mwrs["metadata"]["uid"].as_str().map(str::to_owned);
        let mut carrier = self.carrier.clone();
        carrier["status"] = serde_json::to_value(carrier_status(&status, set_uid, generation))
            .map_err(|source| ApiError::Decode {
                kind: "ManifestWorkReplicaSetRollout",
                source,
            })?;
        self.carrier = self.store(carrier)?;
        let mut mwrs = self.mwrs.clone();
        mwrs["status"] = ocm_status(&status);
        self.mwrs = self.store(mwrs)?;
        Ok(())
    }

    /// The carrier's status as stored (what `kubectl get mwrsrollout -o
    /// yaml` shows).
    pub(crate) fn carrier_status(&self) -> Value {
        self.carrier["status"].clone()
    }

    /// The failed and timed-out clusters of the stored carrier status:
    /// those of the rollout now, else those that aborted it.
    pub(crate) fn failed_clusters(&self) -> Vec<ClusterRolloutSummary> {
        let Ok(carrier) = self.read_carrier() else {
            return Vec::new();
        };
        let placements = carrier.status.map(|s| s.placements).unwrap_or_default();
        let failing: Vec<ClusterRolloutSummary> = placements
            .iter()
            .flat_map(|p| p.clusters.iter())
            .filter(|c| {
                matches!(
                    c.rollout_status,
                    RolloutStatus::Failed | RolloutStatus::TimeOut
                )
            })
            .cloned()
            .collect();
        if !failing.is_empty() {
            return failing;
        }
        placements
            .into_iter()
            .flat_map(|p| p.abort_failures)
            .collect()
    }

    /// Every field the API server dropped, once each, in order.
    pub(crate) fn warnings(&self) -> Vec<String> {
        let mut seen = std::collections::BTreeSet::new();
        self.warnings
            .iter()
            .filter(|w| seen.insert(w.as_str()))
            .cloned()
            .collect()
    }
}

fn additions_entry(additions: &RawAdditions) -> Value {
    let mut entry = serde_json::to_value(additions).unwrap_or_else(|_| json!({}));
    entry["name"] = json!(config::PLACEMENT);
    entry
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;

    use super::*;
    use rollout_controller::api::CrdShape;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("a timestamp")
    }

    fn schemas(shape: CrdShape) -> Arc<Schemas> {
        let crds: Vec<Value> = crd::ocm_kinds(shape)
            .iter()
            .filter_map(|c| serde_json::to_value(c).ok())
            .collect();
        Arc::new(ApiConfig::schemas(Schemas::from_crds(&crds)))
    }

    fn raw() -> RawStrategy {
        serde_json::from_value(json!({"type": "Progressive", "plugin": "smoke",
            "abortOnFailure": true, "progressive": {"maxConcurrency": 2}}))
        .unwrap_or_default()
    }

    #[test]
    fn on_ocm_crds_the_design_api_loses_the_plugin_and_the_carrier_keeps_it() {
        let design = SimApi::new(&ApiConfig {
            schemas: schemas(CrdShape::Ocm),
            strategy: raw(),
            shape: ObjectsShape::DesignApi,
        })
        .expect("stored");
        let strategy = design.strategy().expect("valid");
        assert_eq!(strategy.plugin, None);
        assert!(!strategy.abort_on_failure);
        let warnings = design.warnings();
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("spec.placementRefs[0].rolloutStrategy.plugin")),
            "{warnings:?}"
        );

        let carried = SimApi::new(&ApiConfig {
            schemas: schemas(CrdShape::Ocm),
            strategy: raw(),
            shape: ObjectsShape::Carrier,
        })
        .expect("stored");
        let strategy = carried.strategy().expect("valid");
        assert_eq!(strategy.plugin.as_deref(), Some("smoke"));
        assert!(strategy.abort_on_failure);
        assert!(carried.warnings().is_empty(), "{:?}", carried.warnings());
    }

    #[test]
    fn on_design_crds_the_design_api_keeps_the_plugin() {
        let design = SimApi::new(&ApiConfig {
            schemas: schemas(CrdShape::Design),
            strategy: raw(),
            shape: ObjectsShape::DesignApi,
        })
        .expect("stored");
        assert_eq!(
            design.strategy().expect("valid").plugin.as_deref(),
            Some("smoke")
        );
    }

    #[test]
    fn the_revisions_survive_ocm_crds_in_the_carrier() {
        let mut api = SimApi::new(&ApiConfig {
            schemas: schemas(CrdShape::Ocm),
            strategy: raw(),
            shape: ObjectsShape::DesignApi,
        })
        .expect("stored");
        let written = RevisionStatus {
            current: Some("c1".into()),
            update: Some("u2".into()),
            aborted_time: Some(at("2025-01-01T00:00:00Z")),
        };
        api.write_status(&written, None).expect("written");
        assert_eq!(api.revision_status().expect("read"), written);
        assert!(api.mwrs["status"].get("currentRevision").is_none());
    }

    #[test]
    fn a_kind_without_a_crd_is_refused() {
        let err = SimApi::new(&ApiConfig {
            schemas: Arc::new(ApiConfig::schemas(Schemas::default())),
            strategy: raw(),
            shape: ObjectsShape::Carrier,
        })
        .expect_err("no MWRS CRD");
        assert!(
            err.to_string().contains("serve no ManifestWorkReplicaSet"),
            "{err}"
        );
    }
}
