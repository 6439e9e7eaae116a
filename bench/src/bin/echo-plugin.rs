//! `echo-plugin`: a do-nothing rollout plugin, the upstream of every
//! benchmark. It serves `RolloutPluginService` (plaintext HTTP/2) on
//! `--listen`, prints `echo-plugin listening grpc=ADDR` once bound, and exits
//! 0 after draining on SIGTERM or SIGINT, printing first
//! `echo-plugin received requests=N bytes=B`: the rollout requests (every hook
//! but Initialize) it received and their message bytes.
//!
//! With `--loopback-aliases N` it also serves the same plugin on the same port
//! of 127.0.0.2 … (N aliases, see `echo::loopback_alias`), so one process
//! stands for N + 1 plugins at distinct endpoints, and the listening line
//! gains a field: `echo-plugin listening grpc=127.0.0.1:PORT
//! aliases=127.0.0.2-LAST` (printed once every alias is bound).

use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use anyhow::{Context as _, bail};
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
    /// Also serve on the same port of this many loopback aliases: 127.0.0.2,
    /// 127.0.0.3, … (127.0.0.255 is followed by 127.0.1.0). Needs --listen
    /// on 127.0.0.1.
    #[arg(long, default_value_t = 0)]
    loopback_aliases: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = rollout_bench::runtime(args.threads).context("cannot start the runtime")?;
    runtime.block_on(serve(args))
}

/// Binds `listen`, then the same port on each of `aliases` loopback
/// aliases. Returns the listeners (`listen`'s first) and the listening line.
async fn bind(listen: SocketAddr, aliases: usize) -> anyhow::Result<(Vec<TcpListener>, String)> {
    if aliases > 0 && listen.ip() != IpAddr::V4(Ipv4Addr::LOCALHOST) {
        bail!("--loopback-aliases needs --listen on 127.0.0.1, not {listen}");
    }
    if aliases > echo::MAX_LOOPBACK_ALIASES {
        bail!(
            "--loopback-aliases {aliases} is more than the {} there are",
            echo::MAX_LOOPBACK_ALIASES
        );
    }
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let address = listener.local_addr().context("no local address")?;
    let mut line = format!("echo-plugin listening grpc={address}");
    let mut listeners = vec![listener];
    for index in 1..=aliases {
        let ip =
            echo::loopback_alias(index).with_context(|| format!("no loopback alias {index}"))?;
        let alias = SocketAddr::new(ip.into(), address.port());
        listeners.push(
            TcpListener::bind(alias)
                .await
                .with_context(|| format!("cannot listen on {alias} (loopback alias {index})"))?,
        );
    }
    if let (Some(first), Some(last)) = (echo::loopback_alias(1), echo::loopback_alias(aliases)) {
        line = format!("{line} aliases={first}-{last}");
    }
    Ok((listeners, line))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let (listeners, line) = bind(args.listen, args.loopback_aliases).await?;
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
    writeln!(stdout, "{line}").context("cannot write to stdout")?;
    stdout.flush().context("cannot write to stdout")?;
    drop(stdout);
    let plugin =
        echo::EchoPlugin::named(&args.name, args.mode).with_state_detail(args.state_detail);
    let received = plugin.received();
    echo::serve_all(listeners, plugin, shutdown)
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
