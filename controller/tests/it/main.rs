//! The controller's integration tests, one module per feature: the
//! reconcile against kube's mock API and a real in-process gateway, and the
//! `rollout-controller` binary as a user runs it.
//!
//! Run one feature with `cargo test -p rollout-controller --test it -- MODULE::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::disallowed_methods,
    reason = "these tests time real processes and servers on the wall clock; none pauses tokio's"
)]
#![allow(
    clippy::too_many_lines,
    reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
)]

mod binding;
mod common;
mod concurrency;
mod control;
mod crd;
mod dashboard;
mod dashboard_browser;
mod events;
mod foreign_text;
mod hooks;
mod leader;
mod live_view;
mod other_controller;
mod plan_cli;
mod readiness;
mod reads;
mod reconcile;
mod refused_mutations;
mod run_cli;
mod signals;
mod simulate_cli;
mod simulate_logs;
mod simulate_template;
mod traces;
