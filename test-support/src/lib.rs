//! Fixtures shared by the tests of the workspace's crates, one copy of each:
//! a crate lists this one under `[dev-dependencies]` only, and this crate
//! depends on no crate of the project, so that every crate's tests may use
//! it without an import running upward.
//!
//! - [`otlp`]: an OTLP/gRPC trace receiver on 127.0.0.1 that keeps every
//!   span, and readers of a span's attributes, events and status.
//! - [`h2_peer`]: a server written on the wire with the `h2` crate, for the
//!   misbehaving peers tonic will not play, and a gRPC answer written by
//!   hand.
//! - [`metrics`]: `GET /metrics` with given `Accept` headers, strict readers
//!   of the OpenMetrics and Prometheus text formats, and promtool.
//! - [`log_colour`]: a test binary started again as a child, on a pipe or on
//!   a terminal, to see whether its text logs are coloured.
//! - [`flags`]: every flag of a clap command reads an environment variable
//!   named after it.
//! - [`prometheus`]: a real Prometheus server from Debian's package, on
//!   127.0.0.1, scraping the targets a test serves.
//! - [`chromium`]: a real headless Chromium from Debian's package, one
//!   page driven over the DevTools protocol on a pipe.
//! - [`ocm_api`]: OCM's own CRDs, from the `open-cluster-management.io/api`
//!   Go module at the version `localhub/parts/go.mod` pins.
#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
    )
)]

pub mod chromium;
pub mod flags;
pub mod h2_peer;
pub mod log_colour;
pub mod metrics;
pub mod ocm_api;
pub mod otlp;
pub mod prometheus;
