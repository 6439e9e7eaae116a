//! `rollout-plugin-check`: a conformance checker for rollout plugins in any
//! language. It calls a plugin endpoint the way the controller and the
//! gateway do and checks the rules they rely on (docs/plugin-api.md §6),
//! one verdict per rule.
//!
//! [`rules`] is the pure core: each rule judges what a call returned.
//! [`client`] is a unary gRPC client over raw HTTP/2 (it sends deadlines
//! without enforcing them, and messages with fields the proto lacks) that
//! reads answers by the gateway's wire rules (`rollout_wire`), and
//! [`check`] drives the calls.

pub mod client;
pub mod rules;
mod run;

pub use client::{ConnectError, TlsFiles};
pub use run::{DEADLINE, LARGE_STATE_CLUSTERS, SHORT_DEADLINE, SLACK, check};
