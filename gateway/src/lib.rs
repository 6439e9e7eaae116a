//! `rollout-gateway`: the one local gRPC endpoint the ManifestWorkReplicaSet
//! controller talks to, which routes each rollout hook to the plugins behind
//! a name.
//!
//! The pieces, in the order a call meets them: [`server`] accepts HTTP/2
//! connections; [`service`] reads the target name and the caller's deadline
//! and decodes the message ([`grpc`] is the wire format);
//! [`registry`] resolves the name in the current snapshot (hot-reloaded from
//! [`config`] files by [`watch`]); [`router`] calls the plugins through their
//! resilience [`stack`] (concurrency bound, retries with a budget, circuit
//! breaker) and [`upstream`] connections (one, a concurrent fan-out, or the ordered mutate
//! chain checked by [`manifest`]) and merges the answers; [`error`] is the one
//! place that turns failures into gRPC statuses. [`telemetry`] traces every
//! call and attempt and counts them; [`health`] is the gRPC health service;
//! [`admin`] serves health, metrics and debug endpoints; [`app`] assembles
//! everything; [`check`] validates registry files offline.

pub mod admin;
pub mod app;
pub mod check;
pub mod config;
pub mod configmap;
pub mod error;
pub mod grpc;
pub mod health;
pub mod hooks;
pub mod io;
pub mod manifest;
pub mod registry;
pub mod router;
pub mod server;
pub mod service;
pub mod stack;
pub mod telemetry;
pub mod tls;
pub mod upstream;
pub mod watch;
