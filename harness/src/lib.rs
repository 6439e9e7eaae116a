//! What the demo and the benchmarks both drive: processes and the load on
//! them.
//!
//! - [`process`]: a child process killed with its group when dropped
//!   ([`process::ChildGuard`]), waits for a port or an HTTP answer;
//! - [`procfs`]: a process's CPU and memory from `/proc`;
//! - [`load`]: concurrent unary calls of one hook, per-request latency, a
//!   JSON report (behind `hookbench` and the demo's load);
//! - [`manifest`]: the ManifestWork payloads of the calls;
//! - [`stats`]: percentiles and rounding of the reports.

// A `pub` item must be reachable from the crate root; anything else is
// `pub(crate)`.
#![warn(unreachable_pub)]

pub mod load;
pub mod manifest;
pub mod process;
pub mod procfs;
pub mod stats;
