//! The gateway's integration tests, one module per feature, against real
//! gateways and plugin servers on 127.0.0.1. `plugin_bytes` is its own
//! binary: it measures latency and must not share the process with other
//! tests.
//!
//! Run one feature with `cargo test -p rollout-gateway --test it -- MODULE::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::disallowed_methods,
    reason = "these tests time real processes and servers on the wall clock; none pauses tokio's"
)]
#![allow(
    clippy::too_many_lines,
    reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
)]

mod admin_port;
mod bad_input;
mod binary_memory;
mod bounds;
mod cert_rotation;
mod check_command;
mod common;
mod configmap;
mod fail_closed;
mod foreign_text;
mod handshakes;
mod hostile_clients;
mod hubs;
mod observability;
mod plugin_answers;
mod plugin_failures;
mod plugin_trace;
mod process;
mod properties;
mod refused_streams;
mod reload;
mod resilience;
mod restarts;
mod routing;
mod schema;
mod state_detail;
mod tls;
