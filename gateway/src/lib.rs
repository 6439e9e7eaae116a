//! `rollout-gateway`: the one local gRPC endpoint the ManifestWorkReplicaSet
//! controller talks to, which routes each rollout hook to the plugins behind
//! a name.
//!
//! # Entry points
//!
//! - [`app::start`] runs a gateway from [`app::Options`] and returns
//!   [`app::Running`]: the bound addresses, the [`registry::Registry`], and
//!   [`app::Running::shutdown`] to drain. The binary (`main.rs`) only turns
//!   flags into these options ([`files::FileLimits`],
//!   [`tls::ServerTlsFiles`], [`configmap::ConfigMapRef`]); the controller's
//!   acceptance tests start a gateway in-process the same way.
//! - [`preflight::check_files`] is `rollout-gateway check`: registry files
//!   validated offline.
//! - [`config`] is the registry file: [`config::parse`] into a typed
//!   [`config::Config`], [`config::json_schema`], and the small parsers the
//!   validator uses (durations, endpoints, status codes, DNS names).
//!
//! The rest of the public surface serves the integration tests, benchmarks
//! and fuzz targets that drive one piece alone: the [`registry`]'s snapshot
//! and resolution (fed by [`configmap::spawn`]), [`admin::router`],
//! [`transport::grpc`]'s framing and [`transport::pending`]'s byte pools,
//! [`manifest`]'s identity checks, [`hooks`]' request and answer types,
//! [`upstream`], [`telemetry`], [`error`]'s call errors and [`tls::hub_of`].
//! Everything else is `pub(crate)`.
//!
//! # Inside
//!
//! The pieces, in the order a call meets them: [`transport`], the bottom
//! layer, accepts HTTP/2 connections ([`transport::server`], generic over the
//! service it drives), speaks gRPC's wire format ([`transport::grpc`]) and
//! sends answers within bounds ([`transport::send`]); [`service`] is the one
//! stack every call on the port goes through (receive limits and deadline,
//! the health service or resolution and routing), under its rescue layer,
//! the one place the gateway's own failures ([`error`]) become gRPC
//! statuses (a plugin's status passes through as data); [`registry`] resolves
//! names in the current snapshot (hot-reloaded from [`config`] files by
//! [`watch`], read through [`files`]); [`fanout`] calls the plugins through
//! their resilience [`plugin_stack`] (concurrency bound, retries with a budget,
//! circuit breaker) and [`upstream`] connections (one, a concurrent fan-out,
//! or the ordered mutate chain checked by [`manifest`]) and merges the
//! answers. [`telemetry`] traces every call and attempt and counts them;
//! [`admin`] serves health, metrics and debug endpoints; [`app`] assembles
//! everything; [`preflight`] validates registry files offline.

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
// These docs are read by the gateway's maintainers (`cargo doc
// --document-private-items`): they link to the crate-private pieces they
// describe.
#![allow(rustdoc::private_intra_doc_links)]

pub mod admin;
pub mod app;
pub mod config;
pub mod configmap;
pub mod error;
mod fanout;
pub mod files;
pub mod hooks;
pub mod hub;
pub mod manifest;
mod plugin_stack;
pub mod preflight;
pub mod registry;
mod service;
pub mod telemetry;
pub mod tls;
pub mod transport;
pub mod upstream;
mod watch;
