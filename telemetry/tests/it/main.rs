//! The telemetry crate's integration tests, one module per feature.
//! `log_colour` is its own binary: it sets the process-wide log subscriber.
//!
//! Run one feature with `cargo test -p rollout-telemetry --test it -- MODULE::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::too_many_lines,
    reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
)]

mod exposition;
mod otlp_export;
