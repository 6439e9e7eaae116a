//! `hostile-client`: starts `rollout-gateway` (the release binary next to
//! this one, or `--gateway`), attacks it on loopback with half-sent requests
//! and idle HTTP/2 connections, and prints the gateway's resident memory
//! before, during and after, as a Markdown table (docs/security.md).
//! Arguments after `--` go to the gateway (to try other limits).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Parser;
use rollout_bench::hostile::{self, Answers, Attack};
use rollout_bench::units::{parse_duration, parse_size_usize};
use rollout_harness::process::ChildGuard;
use rollout_harness::procfs;
use tokio::process::Command;

/// Measures the gateway's memory under a hostile HTTP/2 client.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// The gateway binary (default: rollout-gateway next to this executable).
    #[arg(long)]
    gateway: Option<PathBuf>,
    /// Connections carrying half-sent requests.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Half-sent requests (streams) per connection.
    #[arg(long, default_value_t = 16)]
    streams: usize,
    /// The message size each request declares.
    #[arg(long, default_value = "16MiB", value_parser = parse_size_usize)]
    declared: usize,
    /// The bytes of it each request sends before stalling.
    #[arg(long, default_value = "15MiB", value_parser = parse_size_usize)]
    sent: usize,
    /// HTTP/2 connections that handshake and then say nothing.
    #[arg(long, default_value_t = 500)]
    idle: usize,
    /// How long the attack is held before it is closed.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    hold: Duration,
    /// How long after closing the memory is measured again.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    settle: Duration,
    /// Arguments for the gateway.
    #[arg(last = true)]
    gateway_args: Vec<String>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = rollout_bench::runtime(2).context("cannot start the runtime")?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("cannot make a temporary directory")?;
    let (mut child, addr) = start_gateway(&args, dir.path()).await?;
    let pid = child.pid()?;
    let memory = || procfs::read_memory(pid).map(|m| m.rss_kib);

    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = memory()?;
    let attack = Attack {
        connections: args.connections,
        streams: args.streams,
        declared: args.declared,
        sent: args.sent,
        idle: args.idle,
    };
    eprintln!(
        "hostile-client: {} connections x {} streams declaring {} bytes, sending {}; {} idle connections; holding {:?}",
        attack.connections, attack.streams, attack.declared, attack.sent, attack.idle, args.hold
    );
    let mut running = hostile::start(addr, &attack).await?;
    let mut during = 0;
    let held = tokio::time::Instant::now() + args.hold;
    while tokio::time::Instant::now() < held {
        during = during.max(memory()?);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answers = running.tally().await;
    drop(running);
    tokio::time::sleep(args.settle).await;
    let after = procfs::read_memory(pid)?;
    child.ensure_running()?;
    report(
        &args,
        &attack,
        &answers,
        [before, during, after.rss_kib, after.hwm_kib],
    );
    child.stop(Duration::from_secs(15)).await;
    Ok(())
}

/// Starts the gateway (`--gateway`, or the one next to this executable)
/// with one plugin whose port is closed, and returns it with its gRPC
/// address.
async fn start_gateway(args: &Args, dir: &Path) -> anyhow::Result<(ChildGuard, SocketAddr)> {
    let gateway = match &args.gateway {
        Some(path) => path.clone(),
        None => std::env::current_exe()
            .context("cannot find this executable")?
            .with_file_name("rollout-gateway"),
    };
    if !gateway.is_file() {
        bail!(
            "rollout-gateway not found at {}: build it with `cargo build --release -p rollout-gateway` (or pass --gateway)",
            gateway.display()
        );
    }
    let config = dir.join("config.yaml");
    // One plugin whose port is closed: the requests never get that far.
    std::fs::write(
        &config,
        "plugins:\n  - name: p\n    endpoint: 127.0.0.1:9\n    insecure: true\n",
    )?;
    let mut command = Command::new(&gateway);
    command
        .arg("--config")
        .arg(&config)
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(&args.gateway_args);
    let (mut child, stdout) =
        ChildGuard::spawn("rollout-gateway", command, &dir.join("gateway.log"))?;
    let line = child
        .wait_for_line(stdout, "rollout-gateway listening", Duration::from_secs(10))
        .await?;
    let addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("grpc="))
        .context("no grpc= in the listening line")?
        .parse()
        .context("a bad grpc address")?;
    Ok((child, addr))
}

/// Prints the memory table (`kib`: before, during at its highest, after
/// closing, and the peak) and what the half-sent requests got.
fn report(args: &Args, attack: &Attack, answers: &Answers, kib: [u64; 4]) {
    let mib = |kib: u64| format!("{:.0}", kib as f64 / 1024.0);
    println!(
        "| gateway RSS, MiB | before | during (max) | after closing (+{:?}) | peak |",
        args.settle
    );
    println!("|---|---|---|---|---|");
    let [before, during, after, peak] = kib;
    println!(
        "| {} | {} | {} | {} | {} |",
        if args.gateway_args.is_empty() {
            "defaults".to_string()
        } else {
            args.gateway_args.join(" ")
        },
        mib(before),
        mib(during),
        mib(after),
        mib(peak)
    );
    println!();
    println!(
        "half-sent requests: {} refused RESOURCE_EXHAUSTED, {} DEADLINE_EXCEEDED, {} other, {} still waiting after {:?}; {} of {} connections closed by the gateway",
        answers.resource_exhausted,
        answers.deadline_exceeded,
        answers.other,
        answers.waiting,
        args.hold,
        answers.closed_connections,
        attack.connections + attack.idle
    );
}
