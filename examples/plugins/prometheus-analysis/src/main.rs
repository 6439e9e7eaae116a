//! `prometheus-analysis`: serves the plugin of the `prometheus_analysis`
//! library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use prometheus_analysis::Analysis;
use prometheus_analysis::config::{self, Defaults, Layer};
use prometheus_analysis::prometheus::{ClientOptions, Prometheus};
use rollout_plugin_sdk::cli::{ServeArgs, run_plugin_with};
use rollout_proto::duration::{self, Rules};

/// Validates each cluster with PromQL checks over a window of samples:
/// INPROGRESS until every check has enough samples, SUCCEEDED when all of
/// them pass, FAILED naming the query, the value and the threshold of one
/// that does not. The checks come from the rollout's pluginConfig
/// (`prometheus.checks`) or from --config. Prometheus down, slow or
/// answering errors never passes a cluster. Prints `prometheus-analysis
/// listening grpc=ADDR` once bound; drains on SIGTERM or Ctrl-C.
#[derive(Debug, Parser)]
#[command(version, about, long_about)]
struct Flags {
    /// gRPC address to serve on (port 0 picks a free port).
    #[arg(
        long,
        env = "PROMETHEUS_ANALYSIS_LISTEN",
        default_value = "127.0.0.1:7004"
    )]
    listen: SocketAddr,
    /// Prometheus's base URL: http(s)://host:port, with an optional path
    /// prefix.
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:9090")]
    prometheus_url: String,
    /// The CA bundle (PEM) an https Prometheus's certificate must chain to;
    /// required for https (the system's roots are not trusted).
    #[arg(long, value_name = "FILE")]
    prometheus_ca_file: Option<PathBuf>,
    /// A client certificate (PEM) to present to Prometheus: mutual TLS.
    #[arg(long, value_name = "FILE", requires = "prometheus_key_file")]
    prometheus_cert_file: Option<PathBuf>,
    /// The private key of --prometheus-cert-file (PEM).
    #[arg(long, value_name = "FILE", requires = "prometheus_cert_file")]
    prometheus_key_file: Option<PathBuf>,
    /// A file holding a bearer token for Prometheus, read at each query.
    #[arg(long, value_name = "FILE")]
    prometheus_token_file: Option<PathBuf>,
    /// The longest one query may take, connection and answer included
    /// (at most 25s: the caller's deadline is 30 s).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = query_timeout)]
    query_timeout: Duration,
    /// The largest answer read from Prometheus, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    max_response_bytes: usize,
    /// A JSON file with the keys of pluginConfig.prometheus (checks,
    /// deadline, window, interval, minSamples): the defaults of every
    /// rollout, over the flags below.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// How long after a cluster's update its checks may stay undecided
    /// (too few samples, Prometheus unreachable); FAILED after that.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = positive)]
    deadline: Duration,
    /// How far back samples count (never before the cluster's update).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = positive)]
    window: Duration,
    /// The step between two samples.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = positive)]
    interval: Duration,
    /// How many finite samples, all passing, a check needs.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    min_samples: u32,
    #[command(flatten)]
    serve: ServeArgs,
}

fn positive(text: &str) -> Result<Duration, String> {
    match duration::parse_duration(text, Rules::NotNegative) {
        Ok(d) if d.is_zero() => Err("must be more than zero".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

fn query_timeout(text: &str) -> Result<Duration, String> {
    let d = positive(text)?;
    if d > Duration::from_secs(25) {
        return Err("at most 25s: the caller's deadline is 30 s".into());
    }
    Ok(d)
}

/// The plugin the flags describe, its files read and checked.
fn build(flags: &Flags) -> Result<Analysis, String> {
    let defaults = Defaults {
        deadline: flags.deadline,
        window: flags.window,
        interval: flags.interval,
        min_samples: flags.min_samples,
    };
    let file = match &flags.config {
        None => Layer::default(),
        Some(path) => {
            let source = format!("--config {}", path.display());
            let text = std::fs::read_to_string(path).map_err(|e| format!("{source}: {e}"))?;
            let layer = config::file_layer(&text, &source).map_err(|e| e.to_string())?;
            // A file whose checks could never pass is refused at start.
            if layer.checks.is_some() {
                config::plan(&defaults, &[&layer], &source).map_err(|e| e.to_string())?;
            }
            layer
        }
    };
    let prometheus = Prometheus::new(&ClientOptions {
        url: flags.prometheus_url.clone(),
        ca_file: flags.prometheus_ca_file.clone(),
        identity: flags
            .prometheus_cert_file
            .clone()
            .zip(flags.prometheus_key_file.clone()),
        token_file: flags.prometheus_token_file.clone(),
        timeout: flags.query_timeout,
        max_response_bytes: flags.max_response_bytes,
    })
    .map_err(|e| e.to_string())?;
    Ok(Analysis::new(defaults, file, prometheus))
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    match build(&flags) {
        Ok(plugin) => run_plugin_with(
            prometheus_analysis::NAME,
            plugin,
            flags.listen,
            &flags.serve,
        ),
        Err(e) => {
            eprintln!("{}: error: {e}", prometheus_analysis::NAME);
            ExitCode::from(2)
        }
    }
}
