//! `rollout-plugin-check`: a conformance checker for rollout plugins in any
//! language. It calls a plugin endpoint the way the controller and the
//! gateway do and checks the rules they rely on (docs/plugin-api.md §6),
//! one verdict per rule.
//!
//! # Entry points
//!
//! [`check`] connects to a plugin ([`TlsFiles`] for TLS; [`ConnectError`]
//! when it cannot) and returns one [`Outcome`] per [`Rule`], each with its
//! [`Verdict`]; the binary prints them and fails on any `Fail`.
//!
//! Inside, the modules are private: `rules` is the pure core (each rule
//! judges what a call returned), `client` is a unary gRPC client over raw
//! HTTP/2 (it sends deadlines without enforcing them, and messages with
//! fields the proto lacks) that reads answers by the gateway's wire rules
//! (`rollout_wire`), and `run` drives the calls.

#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
    )
)]
// A `pub` item must be reachable from the crate root; anything else is
// `pub(crate)`.
#![warn(unreachable_pub)]

mod client;
mod rules;
mod run;

pub use client::{ConnectError, TlsFiles};
pub use rules::{Outcome, Rule, Verdict};
pub use run::check;
