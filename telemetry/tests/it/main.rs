//! The telemetry crate's integration tests, one module per feature.
//! `log_colour` is its own binary: it sets the process-wide log subscriber.
//!
//! Run one feature with `cargo test -p rollout-telemetry --test it -- MODULE::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod exposition;
mod otlp_export;
