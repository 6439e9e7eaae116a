//! `rollback-mutator`: serves the plugin of the `rollback_mutator` library.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use rollback_mutator::RollbackMutator;
use rollout_plugin_sdk::cli::{ServeArgs, run_plugin_with};

/// While a rollout aborts, marks every manifest of the rolled-back work
/// (`rollout-hooks.io/rollback: "true"`, `rollout-hooks.io/rollback-revision`)
/// and makes Argo Rollouts skip their canary steps (blue-green: promote at
/// once); leaves other works unchanged. Prints `rollback-mutator listening
/// grpc=ADDR` once bound; drains on SIGTERM or Ctrl-C.
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Flags {
    /// gRPC address to serve on (port 0 picks a free port).
    #[arg(
        long,
        env = "ROLLBACK_MUTATOR_LISTEN",
        default_value = "127.0.0.1:7003"
    )]
    listen: SocketAddr,
    #[command(flatten)]
    serve: ServeArgs,
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    run_plugin_with(
        "rollback-mutator",
        RollbackMutator,
        flags.listen,
        &flags.serve,
    )
}
