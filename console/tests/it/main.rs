//! The console's integration tests, one module per feature: the
//! `rollout-controller` binary as a user runs it, and the readers of the hub
//! it serves (`get`, `get --watch`, `dashboard`) against a fake hub.
//!
//! Run one feature with `cargo test -p rollout-console --test it -- MODULE::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::disallowed_methods,
    reason = "these tests time real processes and servers on the wall clock; none pauses tokio's"
)]
#![allow(
    clippy::too_many_lines,
    reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
)]

// The controller's fixtures, one copy for both crates' tests: the scripted
// plugin, the in-process gateway, the scripted API server and its `Hub`.
// This crate uses a part of them.
mod child;
#[path = "../../../controller/tests/it/common/mod.rs"]
#[allow(dead_code, reason = "the controller's tests use the rest")]
mod common;
mod fake_hub;

mod crd;
mod dashboard;
mod dashboard_browser;
mod foreign_text;
mod live_view;
mod plan_cli;
mod refused_mutations;
mod run_cli;
mod signals;
mod simulate_cli;
mod simulate_logs;
mod simulate_template;
mod traces;
