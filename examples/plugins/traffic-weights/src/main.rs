//! `traffic-weights`: serves the plugin of the `traffic_weights` library.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use rollout_plugin_sdk::cli::{ServeArgs, run_plugin_with};
use traffic_weights::TrafficWeights;

/// Annotates each workload manifest with the cluster's position in the
/// rollout (`rollout-hooks.io/cluster-position: "3/10"`) and a canary weight
/// (`rollout-hooks.io/canary-weight: "30"`, round(100 * index / total); 100
/// while aborting). Prints `traffic-weights listening grpc=ADDR` once bound;
/// drains on SIGTERM or Ctrl-C.
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Flags {
    /// gRPC address to serve on (port 0 picks a free port).
    #[arg(long, env = "TRAFFIC_WEIGHTS_LISTEN", default_value = "127.0.0.1:7002")]
    listen: SocketAddr,
    #[command(flatten)]
    serve: ServeArgs,
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    run_plugin_with(
        "traffic-weights",
        TrafficWeights,
        flags.listen,
        &flags.serve,
    )
}
