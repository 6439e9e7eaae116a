//! `otlp-receiver`: gwbench's do-nothing OTLP/gRPC trace receiver as a
//! process of its own, for scripts that run gateways themselves
//! (`bench/profile/alternate.py --otlp-receiver`). It listens on `--listen`,
//! prints `otlp-receiver listening otlp=ADDR` once bound, then
//! `spans=N exports=M` each time a second passes with new spans, and exits
//! on SIGTERM or SIGINT after a last count line.

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use rollout_bench::otlp::SpanReceiver;
use tokio::signal::unix::{SignalKind, signal};

/// Counts the spans exported to it and discards them.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// OTLP/gRPC address; port 0 picks a free one.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let receiver = SpanReceiver::start(args.listen)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "otlp-receiver listening otlp={}", receiver.address)?;
    out.flush()?;
    let runtime = rollout_bench::runtime(1).context("cannot start the runtime")?;
    runtime.block_on(async {
        let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
        let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut last = receiver.counts();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = terminate.recv() => break,
                _ = interrupt.recv() => break,
            }
            let now = receiver.counts();
            if now != last {
                writeln!(out, "spans={} exports={}", now.spans, now.exports)?;
                out.flush()?;
                last = now;
            }
        }
        let now = receiver.counts();
        writeln!(out, "spans={} exports={}", now.spans, now.exports)?;
        out.flush()?;
        anyhow::Ok(())
    })
}
