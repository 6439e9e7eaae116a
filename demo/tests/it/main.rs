//! The demo's integration tests, one module per feature.
//!
//! Run one feature with `cargo test -p rollout-demo --test it -- MODULE::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod e2e;
mod jaeger;
