//! `smoke-test`: serves the plugin of the `smoke_test` library.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rollout_plugin_sdk::cli::{ServeArgs, run_plugin_with};
use smoke_test::{DEFAULT_MAX_TRACKED, Settings, SmokeTest, parse_duration};

/// Validates each cluster like a post-deployment smoke test: INPROGRESS for
/// the soak (from the first validation of a cluster's revision), then
/// SUCCEEDED, or FAILED for the clusters named by --fail (not while the
/// rollout aborts). A rollout's pluginConfig may set its own `soakTime` and
/// `failClusters`; the flags are the defaults. Prints `smoke-test listening
/// grpc=ADDR` once bound; drains on SIGTERM or Ctrl-C.
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Flags {
    /// gRPC address to serve on (port 0 picks a free port).
    #[arg(long, env = "SMOKE_TEST_LISTEN", default_value = "127.0.0.1:7001")]
    listen: SocketAddr,
    /// How long each cluster's revision stays INPROGRESS (500ms, 10s, 2m),
    /// unless its rollout's pluginConfig sets `soakTime`.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    soak: Duration,
    /// A cluster that fails its smoke test once soaked; repeatable, or
    /// comma-separated. A rollout's pluginConfig `failClusters` replaces the
    /// list for that rollout.
    #[arg(long = "fail", value_name = "CLUSTER", value_delimiter = ',')]
    fail: Vec<String>,
    /// How many (MWRS, cluster, revision) soaks to remember; the oldest is
    /// forgotten first.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_TRACKED)]
    max_tracked: usize,
    #[command(flatten)]
    serve: ServeArgs,
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    let plugin = SmokeTest::new(Settings {
        soak: flags.soak,
        fail: flags.fail.into_iter().collect(),
        max_tracked: flags.max_tracked,
    });
    run_plugin_with("smoke-test", plugin, flags.listen, &flags.serve)
}
