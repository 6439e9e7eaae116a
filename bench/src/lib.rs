//! Benchmark tools for the rollout-plugin gateway.
//!
//! - [`echo`]: the do-nothing (or mutating) plugin behind `echo-plugin`, the
//!   upstream of every benchmark;
//! - [`compare`]: the pure parts of `gwbench`, the driver that compares the
//!   plugin called directly, through `rollout-gateway` (with and without
//!   exported tracing) and through yardsticks (a minimal `h2` forwarder, a
//!   tonic forwarder, nginx, HAProxy, nghttpx, Envoy): scenarios, generated
//!   configurations, `/proc` readings, the machine, summaries and goals;
//! - [`otlp`]: the OTLP/gRPC trace receiver the traced gateway exports to;
//! - [`units`]: flag values.
//!
//! The load generator, the process guard, `/proc` readings, payloads and
//! percentiles are in `rollout-harness`, which the demo shares.

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

pub mod compare;
pub mod echo;
pub mod hostile;
pub mod otlp;
pub mod units;

/// A runtime of `threads` threads: a current-thread runtime for 1 (no
/// cross-thread wakeups, which a tool that mostly waits does not need), a
/// multi-thread one above.
pub fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    }
}
