//! `hookbench`: a load generator for `RolloutPluginService` hooks. It keeps
//! `--concurrency` calls in flight over `--connections` HTTP/2 connections
//! for `--duration` (or `--requests` calls) after `--warmup`, and reports
//! throughput and latency percentiles, as text or with `--json` as one JSON
//! object. It exits 1 when it cannot start or when every call failed.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use rollout_bench::units::{parse_duration, parse_size};
use rollout_harness::load::{self, LoadConfig, Report, Stop, hook_flag};
use rollout_proto::HookKind;

/// Load generator for rollout plugins and the rollout-plugin gateway.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The plugin, gateway or proxy: http://HOST:PORT (plaintext HTTP/2).
    #[arg(long)]
    target: String,
    /// The hook to call.
    #[arg(long, value_parser = hook_flag::parse, default_value = "mutate")]
    hook: HookKind,
    /// Calls in flight at any time.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Separate HTTP/2 connections; calls go round-robin over them.
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// ManifestWork JSON size for `mutate`: 4KiB, 64KiB, 4MiB or bytes.
    #[arg(long, default_value = "4KiB", value_parser = parse_size)]
    work_bytes: u64,
    /// Target plugin or pipeline, sent as `ocm-rollout-plugin` metadata (needed by the gateway).
    #[arg(long)]
    plugin: Option<String>,
    /// How long to measure (e.g. 5s, 500ms).
    #[arg(long, default_value = "5s", value_parser = parse_duration, conflicts_with = "requests")]
    duration: Duration,
    /// Measure exactly this many calls instead of a duration.
    #[arg(long)]
    requests: Option<u64>,
    /// Unmeasured calls first, for this long.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    warmup: Duration,
    /// grpc-timeout of every call.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
    /// Also count the latency of failed calls (to measure how fast a target
    /// fails, e.g. an open circuit); by default only successes count.
    #[arg(long)]
    latency_of_errors: bool,
    /// Runtime threads; see the comment in `main`.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Print one JSON object instead of a summary.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(report) => {
            print_report(&report, args.json);
            if report.requests > 0 && report.errors < report.requests {
                ExitCode::SUCCESS
            } else {
                eprintln!("hookbench: every call failed");
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("hookbench: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> anyhow::Result<Report> {
    let config = LoadConfig {
        target: args.target.clone(),
        hook: args.hook,
        concurrency: args.concurrency,
        connections: args.connections,
        work_bytes: usize::try_from(args.work_bytes).context("--work-bytes is too large")?,
        plugin: args.plugin.clone(),
        stop: args
            .requests
            .map_or(Stop::After(args.duration), Stop::Requests),
        warmup: args.warmup,
        timeout: args.timeout,
        latency_of_errors: args.latency_of_errors,
    };
    // One thread by default: the generator usually shares a small machine
    // with the system under test, and a single-threaded runtime caps its own
    // CPU at one core, spends nothing on work stealing or cross-thread
    // wake-ups, and still drives hundreds of concurrent calls since each one
    // is mostly waiting. `--threads N` is there for targets fast enough to
    // make one generator thread the bottleneck.
    let runtime = rollout_bench::runtime(args.threads).context("cannot start the runtime")?;
    Ok(runtime.block_on(load::run(&config))?)
}

fn print_report(report: &Report, json: bool) {
    if json {
        match serde_json::to_string(report) {
            Ok(line) => println!("{line}"),
            Err(error) => eprintln!("hookbench: cannot write the report: {error}"),
        }
        return;
    }
    let latency = &report.latency_micros;
    println!(
        "hookbench {} -> {} (concurrency {}, {} connection(s), {} byte work)",
        hook_flag::name(report.hook),
        report.target,
        report.concurrency,
        report.connections,
        report.work_bytes
    );
    println!(
        "  calls       {} in {:.2} s, {} errors ({} warm-up calls not counted)",
        report.requests, report.duration_seconds, report.errors, report.warmup_requests
    );
    println!("  throughput  {:.0} calls/s", report.throughput_rps);
    println!(
        "  latency µs  p50 {:.1}  p90 {:.1}  p99 {:.1}  max {:.1}  mean {:.1}",
        latency.p50, latency.p90, latency.p99, latency.max, latency.mean
    );
    for sample in &report.error_samples {
        println!("  error       {sample}");
    }
}
