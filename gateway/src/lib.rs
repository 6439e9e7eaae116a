//! `rollout-gateway`: the one local gRPC endpoint the ManifestWorkReplicaSet
//! controller talks to, which routes each rollout hook to the plugins behind
//! a name.
//!
//! The pieces, in the order a call meets them: [`transport`], the bottom
//! layer, accepts HTTP/2 connections ([`transport::server`], generic over the
//! service it drives), speaks gRPC's wire format ([`transport::grpc`]) and
//! sends answers within bounds ([`transport::send`]); [`service`] is the one
//! stack every call on the port goes through (receive limits and deadline,
//! the health service or resolution and routing), under [`error`]'s rescue
//! layer, the one place failures become gRPC statuses; [`registry`] resolves
//! names in the current snapshot (hot-reloaded from [`config`] files by
//! [`watch`], read through [`files`]); [`router`] calls the plugins through
//! their resilience [`stack`] (concurrency bound, retries with a budget,
//! circuit breaker) and [`upstream`] connections (one, a concurrent fan-out,
//! or the ordered mutate chain checked by [`manifest`]) and merges the
//! answers. [`telemetry`] traces every call and attempt and counts them;
//! [`admin`] serves health, metrics and debug endpoints; [`app`] assembles
//! everything; [`check`] validates registry files offline.

pub mod admin;
pub mod app;
pub mod check;
pub mod config;
pub mod configmap;
pub mod error;
pub mod files;
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
