//! `rollout-gateway`: parses flags, starts the gateway, prints the listening
//! line, and drains on SIGTERM or SIGINT; `rollout-gateway check` validates
//! registry files and exits. Everything else is in the library.
#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
    )
)]

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use rollout_gateway::app::{self, Options, StartError};
use rollout_gateway::config::parse_duration;
use rollout_gateway::configmap::ConfigMapRef;
use rollout_gateway::files::FileLimits;
use rollout_gateway::tls::ServerTlsFiles;
use rollout_telemetry::TracingOptions;
use rollout_telemetry::logs::{self, LogFormat};
use tokio::signal::unix::{SignalKind, signal};

// mimalloc keeps freed buffers for reuse instead of returning and faulting
// them back in: with ManifestWorks of 64 KiB it cuts the gateway's CPU per call
// by a quarter (docs/decisions/0005-resident-memory.md). See .cargo/config.toml for its setting.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The local gRPC gateway between the ManifestWorkReplicaSet controller and its rollout plugins.
#[derive(Debug, Parser)]
#[command(name = "rollout-gateway", version, about)]
struct Flags {
    #[command(subcommand)]
    command: Option<Command>,
    /// A registry file; repeatable (central mode: one per hub). Reloaded on
    /// change. Default /var/run/config/work/config.yaml when no --config and
    /// no --configmap is given.
    #[arg(long = "config", env = "ROLLOUT_GATEWAY_CONFIG", value_delimiter = ',')]
    configs: Vec<PathBuf>,
    /// Watch a ConfigMap (key config.yaml) through the Kubernetes API as a
    /// registry source, as NAMESPACE/NAME; repeatable (central mode).
    #[arg(
        long = "configmap",
        value_name = "NAMESPACE/NAME",
        env = "ROLLOUT_GATEWAY_CONFIGMAP",
        value_delimiter = ','
    )]
    configmaps: Vec<ConfigMapRef>,
    /// gRPC address for the controller.
    #[arg(
        long,
        env = "ROLLOUT_GATEWAY_LISTEN",
        default_value = "127.0.0.1:10843"
    )]
    listen: SocketAddr,
    /// HTTP admin address: /healthz, /readyz, /metrics (OpenMetrics when
    /// Accept asks for it, as Prometheus does, else the Prometheus text),
    /// /debug/plugins (the registry as JSON).
    #[arg(
        long,
        env = "ROLLOUT_GATEWAY_ADMIN_LISTEN",
        default_value = "127.0.0.1:10844"
    )]
    admin_listen: SocketAddr,
    /// Serve gRPC over TLS with this certificate (PEM; central mode). Reloaded on change.
    #[arg(long, requires = "tls_key", env = "ROLLOUT_GATEWAY_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// The key of --tls-cert (PEM).
    #[arg(long, requires = "tls_cert", env = "ROLLOUT_GATEWAY_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM); the calling hub is
    /// the certificate's first DNS SAN, else its CN.
    #[arg(long, requires = "tls_cert", env = "ROLLOUT_GATEWAY_CLIENT_CA")]
    client_ca: Option<PathBuf>,
    /// Largest gRPC message accepted or sent.
    #[arg(
        long,
        env = "ROLLOUT_GATEWAY_MAX_MESSAGE_BYTES",
        default_value_t = 16 * 1024 * 1024
    )]
    max_message_bytes: usize,
    /// Runtime worker threads. The gateway is I/O-bound: one thread serves
    /// tens of thousands of calls a second and avoids cross-thread wakeups;
    /// raise it for a central gateway shared by many hubs. The calls of one
    /// connection run on the thread that serves the connection: more
    /// threads spread connections, not the calls of one.
    #[arg(long, env = "ROLLOUT_GATEWAY_WORKER_THREADS", default_value_t = 1)]
    worker_threads: usize,
    /// Log format on stderr; json lines carry trace_id and span_id inside a call.
    #[arg(
        long,
        value_enum,
        env = "ROLLOUT_GATEWAY_LOG_FORMAT",
        default_value = "text"
    )]
    log_format: LogFormat,
    /// gRPC connections past their TLS and HTTP/2 handshakes open at once;
    /// one more is closed as its handshakes end. Connections still in their
    /// handshakes do not count (--max-handshakes).
    #[arg(long, env = "ROLLOUT_GATEWAY_MAX_CONNECTIONS", default_value_t = 1024)]
    max_connections: usize,
    /// gRPC connections past their handshakes open at once from one IP
    /// address, so that one peer cannot take them all.
    #[arg(
        long,
        env = "ROLLOUT_GATEWAY_MAX_CONNECTIONS_PER_IP",
        default_value_t = 256
    )]
    max_connections_per_ip: usize,
    /// gRPC connections still in their TLS and HTTP/2 handshakes at once; a
    /// newcomer over it takes the place of another, which is closed (the
    /// oldest silent one of the address holding the most), so peers that
    /// say nothing cannot keep out one that completes its handshake.
    #[arg(long, env = "ROLLOUT_GATEWAY_MAX_HANDSHAKES", default_value_t = 256)]
    max_handshakes: usize,
    /// gRPC connections still in their handshakes from one IP address; one
    /// more is closed as soon as it is accepted.
    #[arg(
        long,
        env = "ROLLOUT_GATEWAY_MAX_HANDSHAKES_PER_IP",
        default_value_t = 32
    )]
    max_handshakes_per_ip: usize,
    /// A gRPC connection that has not completed its TLS and HTTP/2
    /// handshakes this long after it was accepted is closed.
    #[arg(long, env = "ROLLOUT_GATEWAY_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    handshake_timeout: Duration,
    /// A gRPC peer that takes none of its answers for this long (a full
    /// flow-control window, or a socket it does not read) is cut off: its
    /// connection is closed (0: never).
    #[arg(long, env = "ROLLOUT_GATEWAY_SEND_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    send_timeout: Duration,
    /// A gRPC connection with no call in progress for this long gets a GOAWAY
    /// and is closed (0: never).
    #[arg(long, env = "ROLLOUT_GATEWAY_IDLE_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    idle_timeout: Duration,
    /// A gRPC connection this old gets a GOAWAY and is closed
    /// --max-connection-age-grace later, so a client certificate whose CA was
    /// removed from --client-ca stops working within this (0: never).
    #[arg(long, env = "ROLLOUT_GATEWAY_MAX_CONNECTION_AGE", default_value = "1h", value_parser = parse_duration)]
    max_connection_age: Duration,
    /// How long calls in flight may go on after the GOAWAY of
    /// --max-connection-age before the connection is closed.
    #[arg(long, env = "ROLLOUT_GATEWAY_MAX_CONNECTION_AGE_GRACE", default_value = "30s", value_parser = parse_duration)]
    max_connection_age_grace: Duration,
    /// Bytes of gRPC calls the gateway holds at once, each from its
    /// request's first byte until its answer is taken (the request while it
    /// arrives and the plugins work, then the answer its peer has not
    /// read); a request that would go over is refused with
    /// RESOURCE_EXHAUSTED.
    #[arg(long, env = "ROLLOUT_GATEWAY_MAX_PENDING_REQUEST_BYTES", default_value_t = 256 * 1024 * 1024)]
    max_pending_request_bytes: usize,
    /// The same bound for one connection.
    #[arg(long, env = "ROLLOUT_GATEWAY_MAX_PENDING_REQUEST_BYTES_PER_CONNECTION", default_value_t = 64 * 1024 * 1024)]
    max_pending_request_bytes_per_connection: usize,
    /// A gRPC request must arrive whole within this (or the caller's
    /// grpc-timeout, if sooner), else DEADLINE_EXCEEDED.
    #[arg(long, env = "ROLLOUT_GATEWAY_REQUEST_RECEIVE_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    request_receive_timeout: Duration,
    /// An admin HTTP request must arrive and be answered within this; an idle
    /// admin connection is closed after it.
    #[arg(long, env = "ROLLOUT_GATEWAY_ADMIN_REQUEST_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    admin_request_timeout: Duration,
    /// Largest file the gateway reads (registry files, the certificate files
    /// they name, the listener's TLS files); a larger one is refused like an
    /// invalid change.
    #[arg(long, env = "ROLLOUT_GATEWAY_MAX_FILE_BYTES", default_value_t = 4 * 1024 * 1024)]
    max_file_bytes: u64,
    /// A file read that takes longer than this (a hung mount) fails; the
    /// file is not read again until that read returns.
    #[arg(long, env = "ROLLOUT_GATEWAY_FILE_READ_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    file_read_timeout: Duration,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate registry files offline, as a start-up or reload would, and
    /// exit: every problem on stdout, one per line, naming its file and
    /// field; exit status 0 when valid, 64 when not. Starts nothing.
    Check(CheckArgs),
}

#[derive(Debug, Args)]
struct CheckArgs {
    /// A registry file; repeatable, checked together as the gateway would
    /// load them. Default /var/run/config/work/config.yaml.
    #[arg(long = "config", env = "ROLLOUT_GATEWAY_CONFIG", value_delimiter = ',')]
    configs: Vec<PathBuf>,
    /// Read no certificate file the registry names (caFile,
    /// clientCertificate), for a CI job without them: everything else is
    /// checked.
    #[arg(long, env = "ROLLOUT_GATEWAY_SKIP_FILES")]
    skip_files: bool,
}

/// Exit status for a bad start-up configuration (sysexits' EX_USAGE, as the
/// contract fixes it).
const EXIT_BAD_CONFIG: u8 = 64;

fn main() -> ExitCode {
    let mut flags = Flags::parse();
    if let Some(Command::Check(args)) = flags.command.take() {
        return check(args);
    }
    logs::init(flags.log_format);
    // One worker: a current-thread runtime, on a thread of its own named like
    // a multi-thread runtime's workers. It has no injection queue and no
    // cross-thread wakeups to pay for on every call.
    let workers = flags.worker_threads.max(1);
    let mut builder = if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(workers);
        b
    };
    // The runtime starts its workers first; every later thread is the
    // blocking pool's (file reads, large checks), named apart.
    let started = std::sync::atomic::AtomicUsize::new(0);
    let pool_workers = if workers == 1 { 0 } else { workers };
    builder.thread_name_fn(move || {
        let n = started.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n < pool_workers {
            WORKER_NAME.into()
        } else {
            BLOCKING_NAME.into()
        }
    });
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(error) => {
            eprintln!("rollout-gateway: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    if workers > 1 {
        return runtime.block_on(run(flags));
    }
    let worker = std::thread::Builder::new()
        .name(WORKER_NAME.into())
        .spawn(move || runtime.block_on(run(flags)));
    match worker.map(std::thread::JoinHandle::join) {
        Ok(Ok(code)) => code,
        Ok(Err(_)) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("rollout-gateway: cannot start the runtime: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The name of the threads that run the gateway's tasks.
const WORKER_NAME: &str = "gateway-worker";
/// The name of the threads of the blocking pool.
const BLOCKING_NAME: &str = "gateway-blocking";

fn check(args: CheckArgs) -> ExitCode {
    let files = if args.configs.is_empty() {
        Options::default().configs
    } else {
        args.configs
    };
    let problems = rollout_gateway::preflight::check_files(&files, args.skip_files);
    let mut out = std::io::stdout().lock();
    // A problem quotes the file's values (names, endpoints, paths): one
    // line each, whatever bytes they hold.
    for p in &problems {
        let _ = writeln!(out, "{}", rollout_wire::escaped(&p.to_string()));
    }
    let _ = out.flush();
    if problems.is_empty() {
        eprintln!(
            "rollout-gateway check: {} file{} valid",
            files.len(),
            if files.len() == 1 { "" } else { "s" }
        );
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "rollout-gateway check: {} problem{}",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" }
        );
        ExitCode::from(EXIT_BAD_CONFIG)
    }
}

/// The gateway's options from its flags.
fn options(flags: Flags) -> Options {
    let configs = if flags.configs.is_empty() && flags.configmaps.is_empty() {
        Options::default().configs
    } else {
        flags.configs
    };
    Options {
        configs,
        listen: flags.listen,
        admin_listen: flags.admin_listen,
        max_message_bytes: flags.max_message_bytes,
        tls: match (flags.tls_cert, flags.tls_key) {
            (Some(cert), Some(key)) => Some(ServerTlsFiles {
                cert,
                key,
                client_ca: flags.client_ca,
            }),
            _ => None,
        },
        configmaps: flags.configmaps,
        tracing: TracingOptions::from_env("rollout-gateway"),
        max_connections: flags.max_connections,
        max_connections_per_ip: flags.max_connections_per_ip,
        max_handshakes: flags.max_handshakes,
        max_handshakes_per_ip: flags.max_handshakes_per_ip,
        handshake_timeout: flags.handshake_timeout,
        send_timeout: flags.send_timeout,
        idle_timeout: flags.idle_timeout,
        max_connection_age: flags.max_connection_age,
        max_connection_age_grace: flags.max_connection_age_grace,
        max_pending_request_bytes: flags.max_pending_request_bytes,
        max_pending_request_bytes_per_connection: flags.max_pending_request_bytes_per_connection,
        request_receive_timeout: flags.request_receive_timeout,
        admin_request_timeout: flags.admin_request_timeout,
        file_limits: FileLimits {
            max_bytes: flags.max_file_bytes,
            timeout: flags.file_read_timeout,
        },
        ..Options::default()
    }
}

async fn run(flags: Flags) -> ExitCode {
    // Signal handlers first: a SIGTERM right after the listening line must drain.
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(t), Ok(i)) => (t, i),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("rollout-gateway: cannot install signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let options = options(flags);
    let running = match app::start(options).await {
        Ok(r) => r,
        Err(StartError::Config(problems)) => {
            eprintln!("rollout-gateway: invalid plugin registry:");
            for p in problems {
                eprintln!("  {}", rollout_wire::escaped(&p.to_string()));
            }
            return ExitCode::from(EXIT_BAD_CONFIG);
        }
        Err(error) => {
            eprintln!(
                "rollout-gateway: {}",
                rollout_wire::escaped(&error.to_string())
            );
            return ExitCode::FAILURE;
        }
    };
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "rollout-gateway listening grpc={} admin={}",
            running.grpc_addr, running.admin_addr
        );
        let _ = out.flush();
    }
    tracing::info!(grpc = %running.grpc_addr, admin = %running.admin_addr, "listening");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: draining"),
        _ = int.recv() => tracing::info!("SIGINT: draining"),
    }
    running.shutdown().await;
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// A new flag without an environment variable fails here; the variable
    /// is the flag's name in ROLLOUT_GATEWAY_ form.
    #[test]
    fn every_flag_has_an_env_var_named_after_it() {
        rollout_test_support::flags::assert_every_flag_has_env_var(
            &super::Flags::command(),
            "ROLLOUT_GATEWAY_",
            &[],
            9,
        );
    }

    /// `--help` lists every admin endpoint, and each is routed.
    #[tokio::test]
    async fn the_help_lists_every_admin_endpoint() {
        use tower::ServiceExt as _;
        let help = Flags::command().render_long_help().to_string();
        let registry = std::sync::Arc::new(rollout_gateway::registry::Registry::new(
            Vec::new(),
            rollout_gateway::upstream::ChannelSettings::default(),
        ));
        for path in rollout_gateway::admin::ENDPOINTS {
            assert!(help.contains(path), "{path} in {help}");
            let router = rollout_gateway::admin::router(registry.clone(), Duration::from_secs(5));
            let request = axum::http::Request::get(path)
                .body(axum::body::Body::empty())
                .expect("a request");
            let answer = router.oneshot(request).await.expect("answers");
            assert_ne!(answer.status(), axum::http::StatusCode::NOT_FOUND, "{path}");
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        super::Flags::command().debug_assert();
    }

    #[test]
    fn flag_defaults_are_the_library_defaults() {
        let parsed = options(Flags::parse_from(["rollout-gateway"]));
        let library = Options::default();
        assert_eq!(parsed.max_connections, library.max_connections);
        assert_eq!(
            parsed.max_connections_per_ip,
            library.max_connections_per_ip
        );
        assert_eq!(parsed.max_handshakes, library.max_handshakes);
        assert_eq!(parsed.max_handshakes_per_ip, library.max_handshakes_per_ip);
        assert_eq!(parsed.handshake_timeout, library.handshake_timeout);
        assert_eq!(parsed.send_timeout, library.send_timeout);
        assert_eq!(parsed.idle_timeout, library.idle_timeout);
        assert_eq!(parsed.max_connection_age, library.max_connection_age);
        assert_eq!(
            parsed.max_connection_age_grace,
            library.max_connection_age_grace
        );
        assert_eq!(
            parsed.max_pending_request_bytes,
            library.max_pending_request_bytes
        );
        assert_eq!(
            parsed.max_pending_request_bytes_per_connection,
            library.max_pending_request_bytes_per_connection
        );
        assert_eq!(
            parsed.request_receive_timeout,
            library.request_receive_timeout
        );
        assert_eq!(parsed.admin_request_timeout, library.admin_request_timeout);
        assert_eq!(parsed.file_limits, library.file_limits);
        assert_eq!(parsed.max_message_bytes, library.max_message_bytes);
    }
}
