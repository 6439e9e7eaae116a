//! The demo's integration tests, one module per feature.
//!
//! Run one feature with `cargo test -p rollout-demo --test it -- MODULE::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::disallowed_methods,
    reason = "these tests time real processes and servers on the wall clock; none pauses tokio's"
)]
#![allow(
    clippy::too_many_lines,
    reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
)]

mod e2e;
mod jaeger;
