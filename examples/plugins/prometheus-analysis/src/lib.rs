//! `prometheus-analysis`, a rollout plugin that validates each cluster with
//! PromQL checks over a window of samples, as an Argo Rollouts
//! AnalysisTemplate with its Prometheus provider or a Flagger metric check
//! does: success rate at least 0.99, p99 latency at most 0.5 s, errors at
//! most N.
//!
//! It implements `ValidateRolloutCompletion` (the checks) and
//! `BeginRollout` (the rollout's configuration refused before its first
//! cluster is touched). Entry points:
//!
//! - [`Analysis`], the plugin: [`Analysis::plan`] reads a request's
//!   configuration, [`Analysis::validate_at`] answers it.
//! - [`config`]: the flags' [`config::Defaults`], the `--config` file and
//!   the rollout's `pluginConfig.prometheus` as [`config::Layer`]s, made
//!   into a [`config::Plan`] that reports every problem with its path.
//! - [`template`]: a check's query, with placeholders escaped for the
//!   PromQL string they stand in.
//! - [`prometheus`]: the range query client (timeout, TLS, bearer token,
//!   bounded answer) and the decoding of its answers.
//! - [`verdict`]: the pure decision from the answers; which failure is
//!   INPROGRESS and which FAILED is documented there and in the README.
//!
//! Layers, bottom first: `template`, `since` → `config` → `prometheus` →
//! `verdict` → `analysis`.

#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
    )
)]
#![warn(unreachable_pub)]

mod analysis;
pub mod config;
pub mod prometheus;
pub mod since;
pub mod template;
pub mod verdict;

pub use analysis::{Analysis, FIRST_SEEN_CAPACITY, NAME};
