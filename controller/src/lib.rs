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
//! ConfigMap.
//!
//! The controller itself: [`hooks`] is the gateway client (the [`hooks::Hooks`]
//! trait and its gRPC implementation), [`telemetry`] its trace spans,
//! [`revision`] the pure revision history and abort rules, [`orchestrate`]
//! one rollout step of one ManifestWorkReplicaSet over the hooks and a
//! [`orchestrate::World`] of ManifestWorks (shared by `run` and the
//! simulator), and [`reconcile`] the kube-rs controller around it.
//! [`metrics`] counts what it does for Prometheus, [`leader`] elects the
//! replica that reconciles, and [`app`] assembles `rollout-controller run`
//! from all of these.
//! [`control`] is an operator's manual control of a rollout (`abort`,
//! `retry`, `pause`, `resume`, `promote`): which requests of the carrier's
//! `spec.control` a reconcile acts on, and the command line's write of one.
//! [`kubeconfig`] is a person's command on the hub: its client from a kubeconfig.
//!
//! The command line (`rollout-controller`), the simulator, the live view
//! and the dashboard are the `rollout-console` crate, on top of this one.
//!
//! # Entry points
//!
//! The `rollout-controller` binary (in `rollout-console`) calls these:
//!
//! - `run`: [`app::client`], then [`app::run`] with [`app::RunOptions`];
//! - `plan`: [`plan::run`];
//! - `crd`: [`api::crds_yaml`], or [`api::write_crd_files`] for `--out`;
//! - `abort`, `retry`, `pause`, `resume`, `promote`:
//!   [`control::hub::request`] with [`control::hub::ControlOptions`] and a
//!   [`control::hub::Verb`].
//!
//! # Public surface
//!
//! An item is `pub` only when something outside the library names it: the
//! console (its binary, simulator, live view and dashboard), the
//! integration tests (`tests/it`), the engine benchmark or the demo crate.
//! Besides the entry points above, the tests drive the parts
//! one layer down: the kube-rs reconcile ([`reconcile::reconcile`] with a
//! [`reconcile::Context`]), the gateway client ([`hooks::GatewayHooks`]
//! behind the [`hooks::Hooks`] trait), one rollout step over ManifestWorks
//! held in memory ([`orchestrate::deploy`] with
//! [`orchestrate::memory::MemoryWorld`]), leader election
//! ([`leader::LeaderElection`], [`leader::run_when_leading`]) and Events
//! ([`events::Events`]); the benchmark calls the engine
//! ([`rollout::decide`]). The console's simulator runs the same rollout
//! step over its own world, and its views read the same resources.
//! Everything else is `pub(crate)`, and the modules below these are
//! private or crate-private.

#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
    )
)]
// A `pub` item must be reachable from the crate root, and a type a caller
// can get must be one it can name; anything else is `pub(crate)`.
#![warn(unreachable_pub, unnameable_types)]
// The docs describe the internals for contributors too (`cargo doc
// --document-private-items`), so public items' docs may link to
// crate-private ones.
#![allow(rustdoc::private_intra_doc_links)]

pub mod api;
pub mod app;
pub mod control;
pub mod events;
pub mod guard;
pub mod hooks;
pub mod kubeconfig;
pub mod leader;
pub mod metrics;
pub mod orchestrate;
pub mod plan;
pub mod probes;
pub mod reconcile;
pub mod registration;
pub mod revision;
pub mod rollout;
pub mod telemetry;
