//! The SDK's integration tests, one module per feature, through real
//! clients on 127.0.0.1. `log_colour` is its own binary: it sets the
//! process-wide log subscriber.
//!
//! Run one feature with `cargo test -p rollout-plugin-sdk --test it -- MODULE::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod guide;
mod server;
mod tls;
