//! The SDK's integration tests, one module per feature, through real
//! clients on 127.0.0.1. `log_colour` is its own binary: it sets the
//! process-wide log subscriber.
//!
//! Run one feature with `cargo test -p rollout-plugin-sdk --test it -- MODULE::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::disallowed_methods,
    reason = "these tests time real processes and servers on the wall clock; none pauses tokio's"
)]
#![allow(
    clippy::too_many_lines,
    reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
)]

mod guide;
mod server;
mod tls;
