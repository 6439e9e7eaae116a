//! `rollout-gateway`: the one local gRPC endpoint the ManifestWorkReplicaSet
//! controller talks to, which routes each rollout hook to the plugins behind
//! a name.
//!
//! The pieces, in the order a call meets them: [`transport`] accepts HTTP/2
//! connections ([`transport::server`]) and speaks gRPC's wire format
//! ([`transport::grpc`]); [`service`] reads the target name and the caller's
//! deadline and decodes the message;
//! [`registry`] resolves the name in the current snapshot (hot-reloaded from
//! [`config`] files by [`watch`]); [`router`] calls the plugins through their
//! resilience [`stack`] (concurrency bound, retries with a budget, circuit
//! breaker) and [`upstream`] connections (one, a concurrent fan-out, or the ordered mutate
//! chain checked by [`manifest`]) and merges the answers; [`error`] is the one
//! place that turns failures into gRPC statuses. [`telemetry`] traces every
//! call and attempt and counts them; [`transport::health`] is the gRPC health service;
//! [`admin`] serves health, metrics and debug endpoints; [`app`] assembles
//! everything; [`check`] validates registry files offline.

pub mod admin;
pub mod app;
pub mod check;
pub mod config;
pub mod configmap;
pub mod error;
pub mod hooks;
pub mod manifest;
pub mod registry;
pub mod router;
pub mod service;
pub mod stack;
pub mod telemetry;
pub mod tls;
pub mod transport;
pub mod upstream;
pub mod watch;
