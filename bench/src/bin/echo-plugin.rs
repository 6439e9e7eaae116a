//! `echo-plugin`: a do-nothing rollout plugin, the upstream of every
//! benchmark. It serves `RolloutPluginService` (plaintext HTTP/2) on
//! `--listen`, prints `echo-plugin listening grpc=ADDR` once bound, and exits
//! 0 after draining on SIGTERM or SIGINT, printing first
//! `echo-plugin received requests=N bytes=B`: the rollout requests (every hook
//! but Initialize) it received and their message bytes.

use std::io::Write as _;
use std::net::SocketAddr;

use anyhow::Context as _;
use clap::Parser;
use rollout_bench::echo::{self, EchoMode, StateDetail};
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

/// A RolloutPluginService that answers every hook at once.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// gRPC address; port 0 picks a free one.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// MutateManifestWork answer: the work as received, empty ("unchanged"),
    /// annotated with the cluster's position, or mutated as a real plugin
    /// would (parsed, two annotations changed, serialised again).
    #[arg(long, value_enum, default_value_t = EchoMode::Echo)]
    mode: EchoMode,
    /// The name given in InitializeResponse (and in the annotation).
    #[arg(long, default_value = echo::PLUGIN_NAME)]
    name: String,
    /// The rollout state declared in InitializeResponse: the full list of
    /// every cluster's status, the counts only, or the field left unset (as a
    /// plugin written before it existed; treated as full).
    #[arg(long, value_enum, default_value_t = StateDetail::Full)]
    state_detail: StateDetail,
    /// Runtime threads. 1 (the default) runs a single-threaded runtime: the
    /// plugin does no work, so one thread keeps up and leaves the other cores
    /// to what is being measured.
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = rollout_bench::runtime(args.threads).context("cannot start the runtime")?;
    runtime.block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let address = listener.local_addr().context("no local address")?;
    // Signal handlers first, so a SIGTERM right after the line is printed
    // still drains instead of killing.
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let shutdown = async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    };
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "echo-plugin listening grpc={address}").context("cannot write to stdout")?;
    stdout.flush().context("cannot write to stdout")?;
    drop(stdout);
    let plugin =
        echo::EchoPlugin::named(&args.name, args.mode).with_state_detail(args.state_detail);
    let received = plugin.received();
    echo::serve(listener, plugin, shutdown)
        .await
        .context("the server failed")?;
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "echo-plugin received requests={} bytes={}",
        received.requests(),
        received.bytes()
    )
    .and_then(|()| stdout.flush())
    .context("cannot write to stdout")
}
