//! A slim ManifestWorkReplicaSet controller that runs OCM's rollout semantics
//! and calls the rollout gateway.
//!
//! [`rollout`] is the pure engine: given a strategy, the placement's decision
//! groups, the clusters' current statuses and the time, it decides which
//! clusters to roll out next. [`plan`] exposes one such decision as JSON in and
//! out, for the `rollout-controller plan` command. The binary only parses
//! flags and calls into this library.

pub mod plan;
pub mod rollout;
