//! `rollout-plugin-check`: a conformance checker for rollout plugins in any
//! language. It calls a plugin endpoint the way the controller and the
//! gateway do and checks the rules they rely on (docs/plugin-api.md §6),
//! one verdict per rule.
//!
//! [`rules`] is the pure core: each rule judges what a call returned.
//! [`wire`] is a unary gRPC client over raw HTTP/2 (it sends deadlines
//! without enforcing them, and messages with fields the proto lacks), and
//! [`check`] drives the calls.

pub mod rules;
mod run;
pub mod wire;

pub use run::{DEADLINE, LARGE_STATE_CLUSTERS, SHORT_DEADLINE, SLACK, check};
pub use wire::{ConnectError, TlsFiles};
