//! The controller's integration tests, one module per feature: the
//! reconcile against kube's mock API and a real in-process gateway. The
//! `rollout-controller` binary as a user runs it is tested in
//! `console/tests/it`, over the same fixtures (`common`).
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
mod events;
mod hooks;
mod leader;
mod other_controller;
mod readiness;
mod reads;
mod reconcile;
