//! Benchmark tools for the rollout-plugin gateway.
//!
//! - [`load`]: the load generator behind `hookbench` (concurrent unary calls
//!   of one hook, per-request latency, a JSON report);
//! - [`echo`]: the do-nothing plugin behind `echo-plugin`, the upstream of
//!   every benchmark;
//! - [`compare`]: the pure parts of `gwbench`, the driver that compares the
//!   plugin called directly, through `rollout-gateway` and through nginx
//!   (scenarios, generated configurations, `/proc` readings, summaries);
//! - [`manifest`], [`stats`], [`units`]: payloads, percentiles, flag values.

pub mod compare;
pub mod echo;
pub mod load;
pub mod manifest;
pub mod process;
pub mod stats;
pub mod units;
