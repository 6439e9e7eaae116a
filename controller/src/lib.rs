//! A slim ManifestWorkReplicaSet controller that runs OCM's rollout semantics
//! and calls the rollout gateway.
//!
//! [`rollout`] is the pure engine: given a strategy, the placement's decision
//! groups, the clusters' current statuses and the time, it decides which
//! clusters to roll out next. [`plan`] exposes one such decision as JSON in and
//! out, for the `rollout-controller plan` command. [`api`] holds the
//! Kubernetes resources (ManifestWorkReplicaSet with the design's additions,
//! ManifestWork, Placement, PlacementDecision, ClusterManager) and renders
//! their CRDs for `rollout-controller crd`. [`registration`] turns the
//! ClusterManager's `workConfiguration.plugins` into the gateway's registry
//! ConfigMap. The binary only parses flags and calls into this library.

pub mod api;
pub mod plan;
pub mod registration;
pub mod rollout;
