//! `rollout-controller`: the command line of the slim ManifestWorkReplicaSet
//! controller. It parses flags and calls the library; nothing else.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use jiff::Timestamp;
use rollout_controller::app::{self, RunOptions};
use rollout_controller::hooks::{
    DEFAULT_GATEWAY_URL, GatewayHooks, GatewayOptions, GatewayTls, check_gateway_url,
};
use rollout_controller::leader::{self, LeaseConfig, LeaseTimings};
use rollout_controller::metrics::{ControllerMetrics, Metered};
use rollout_controller::orchestrate::{DEFAULT_HOOK_CONCURRENCY, Settings};
use rollout_controller::reconcile::Options;
use rollout_controller::rollout::duration::parse_go_duration;
use rollout_controller::telemetry::{Telemetry, TracingOptions};
use rollout_controller::{api, plan, sim};

/// Exit status for input the command cannot use (bad file, JSON or strategy).
const EXIT_BAD_INPUT: u8 = 2;

#[derive(Debug, Parser)]
#[command(name = "rollout-controller", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Reconcile ManifestWorkReplicaSets in a cluster, calling the rollout
    /// gateway at each phase.
    Run(Box<RunArgs>),
    /// Roll one ManifestWorkReplicaSet out over an in-memory fleet of
    /// simulated clusters, through the real gateway and plugins.
    Simulate(Box<SimulateArgs>),
    /// One decision of the rollout engine, as JSON in and out.
    Plan(PlanArgs),
    /// Print the CRDs the controller uses, as multi-document YAML.
    Crd(CrdArgs),
}

#[derive(Debug, Args)]
struct PlanArgs {
    /// The input document; `-` reads standard input.
    #[arg(long, value_name = "FILE", env = "ROLLOUT_CONTROLLER_INPUT")]
    input: String,
    /// Indent the output.
    #[arg(long, env = "ROLLOUT_CONTROLLER_PRETTY")]
    pretty: bool,
}

#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    gateway: GatewayFlags,
    /// A kubeconfig file; default: in-cluster, else $KUBECONFIG or ~/.kube/config.
    #[arg(long, value_name = "PATH", env = "ROLLOUT_CONTROLLER_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The deadline of each hook call (a Go duration, at most 30s).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_HOOK_TIMEOUT")]
    hook_timeout: std::time::Duration,
    /// The hub's name, sent in InitializeRequest.hub_name.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "",
        env = "ROLLOUT_CONTROLLER_HUB_NAME"
    )]
    hub_name: String,
    /// Also keep the gateway's registry ConfigMap `work-controller-config` in
    /// NS up to date with the ClusterManager's workConfiguration.plugins.
    #[arg(
        long,
        value_name = "NS",
        env = "ROLLOUT_CONTROLLER_REGISTER_PLUGINS_NAMESPACE"
    )]
    register_plugins_namespace: Option<String>,
    /// Log format on stderr; json lines carry trace_id and span_id inside a reconcile.
    #[arg(
        long,
        value_enum,
        default_value = "text",
        env = "ROLLOUT_CONTROLLER_LOG_FORMAT"
    )]
    log_format: rollout_telemetry::logs::LogFormat,
    /// Serve /healthz and /readyz for the kubelet, and /metrics
    /// (OpenMetrics) for Prometheus, on this address.
    #[arg(long, value_name = "ADDR", env = "ROLLOUT_CONTROLLER_HEALTH_LISTEN")]
    health_listen: Option<std::net::SocketAddr>,
    /// How many clusters of a placement have their hook calls in flight at
    /// once (each cluster's calls stay in order).
    #[arg(long, value_name = "N", env = "ROLLOUT_CONTROLLER_HOOK_CONCURRENCY", default_value_t = DEFAULT_HOOK_CONCURRENCY, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    hook_concurrency: usize,
    /// Reconcile only while holding a coordination.k8s.io Lease, so that
    /// several replicas can run and exactly one reconciles.
    #[arg(long, env = "ROLLOUT_CONTROLLER_LEADER_ELECT")]
    leader_elect: bool,
    /// The Lease's namespace; default: the pod's (in-cluster).
    #[arg(long, value_name = "NS", env = "POD_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// The Lease's name.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "rollout-controller",
        env = "ROLLOUT_CONTROLLER_LEADER_ELECTION_NAME"
    )]
    leader_election_name: String,
    /// This replica's name in the Lease (made unique per process); default:
    /// the pod's name.
    #[arg(long, value_name = "ID", env = "POD_NAME")]
    leader_election_identity: Option<String>,
    /// How long a lease lasts without renewal (whole seconds).
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_LEASE_DURATION")]
    lease_duration: std::time::Duration,
    /// How long the leader goes on without renewing before it stops
    /// reconciling (shorter than --lease-duration).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_RENEW_DEADLINE")]
    renew_deadline: std::time::Duration,
    /// How often a candidate tries and the leader renews.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_RETRY_PERIOD")]
    retry_period: std::time::Duration,
}

/// How the gateway is reached: one set of flags for `run` and `simulate`.
#[derive(Debug, Args)]
struct GatewayFlags {
    /// The rollout gateway's gRPC address: http://HOST:PORT (plaintext) or
    /// https://HOST:PORT (TLS).
    #[arg(long, value_name = "URL", default_value = DEFAULT_GATEWAY_URL, value_parser = parse_gateway_url, env = "ROLLOUT_CONTROLLER_GATEWAY")]
    gateway: String,
    /// The CA bundle (PEM) that signed a TLS gateway's certificate (an
    /// `https://` --gateway).
    #[arg(long, value_name = "FILE", env = "ROLLOUT_CONTROLLER_GATEWAY_CA")]
    gateway_ca: Option<PathBuf>,
    /// The client certificate (PEM) presented to a central gateway; its
    /// first DNS SAN (else its CN) names this hub. Needs --client-key.
    #[arg(
        long,
        value_name = "FILE",
        requires = "client_key",
        env = "ROLLOUT_CONTROLLER_CLIENT_CERT"
    )]
    client_cert: Option<PathBuf>,
    /// The key (PEM) of --client-cert.
    #[arg(
        long,
        value_name = "FILE",
        requires = "client_cert",
        env = "ROLLOUT_CONTROLLER_CLIENT_KEY"
    )]
    client_key: Option<PathBuf>,
    /// The name to verify in the gateway's certificate, when not the
    /// --gateway host.
    #[arg(
        long,
        value_name = "NAME",
        env = "ROLLOUT_CONTROLLER_GATEWAY_SERVER_NAME"
    )]
    gateway_server_name: Option<String>,
}

fn parse_gateway_url(text: &str) -> Result<String, String> {
    check_gateway_url(text).map_err(|e| e.to_string())?;
    Ok(text.to_owned())
}

/// Where an in-cluster pod finds its namespace.
const POD_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

impl GatewayFlags {
    /// The gateway's client options, reading the files named.
    fn options(&self, timeout: std::time::Duration) -> anyhow::Result<GatewayOptions> {
        Ok(GatewayOptions {
            url: self.gateway.clone(),
            timeout,
            tls: self.tls()?,
        })
    }

    /// The TLS settings towards the gateway, reading the files named.
    fn tls(&self) -> anyhow::Result<Option<GatewayTls>> {
        let read = |path: &PathBuf| {
            std::fs::read(path).with_context(|| format!("reading {}", path.display()))
        };
        let https = self.gateway.starts_with("https://");
        if !https && self.gateway_ca.is_none() && self.client_cert.is_none() {
            return Ok(None);
        }
        if !https {
            anyhow::bail!("--gateway-ca and --client-cert need an https:// --gateway");
        }
        let identity = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
            _ => None,
        };
        Ok(Some(GatewayTls {
            ca_pem: self.gateway_ca.as_ref().map(read).transpose()?,
            identity,
            domain: self.gateway_server_name.clone(),
        }))
    }
}

impl RunArgs {
    /// The Lease to elect a leader with, if asked.
    fn leader_election(&self) -> anyhow::Result<Option<LeaseConfig>> {
        if !self.leader_elect {
            return Ok(None);
        }
        let timings = LeaseTimings {
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
        };
        timings.check().context("--leader-elect")?;
        let namespace = match &self.leader_election_namespace {
            Some(namespace) => namespace.clone(),
            None => std::fs::read_to_string(POD_NAMESPACE_FILE)
                .map(|n| n.trim().to_owned())
                .with_context(|| {
                    format!(
                        "--leader-elect needs --leader-election-namespace (or POD_NAMESPACE) \
                         outside a pod: reading {POD_NAMESPACE_FILE}"
                    )
                })?,
        };
        let base = self
            .leader_election_identity
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "rollout-controller".to_owned());
        Ok(Some(LeaseConfig {
            namespace,
            name: self.leader_election_name.clone(),
            identity: leader::identity(&base),
            timings,
        }))
    }
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let d = parse_go_duration(text).map_err(|e| e.to_string())?;
    std::time::Duration::try_from(d).map_err(|_| format!("{text:?} is negative"))
}

#[derive(Debug, Args)]
#[command(
    after_help = "The fleet runs the previous revision (an Argo Rollout of web:1.0); the update \
revision (web:1.1) is rolled out, one step per reconcile, on a simulated clock that jumps to the \
next event, except while a plugin is validating: then it follows the real clock, since a plugin \
measures its own waits. Exit status: 0 when the rollout ran to its end (Succeeded, Aborted or \
Failed), 2 for bad flags, 1 when the gateway cannot be reached or the rollout does not end."
)]
struct SimulateArgs {
    /// Clusters in the fleet, named cluster-001, cluster-002, …
    #[arg(
        long,
        value_name = "N",
        default_value_t = 20,
        env = "ROLLOUT_CONTROLLER_CLUSTERS"
    )]
    clusters: usize,
    /// Decision groups: contiguous runs of clusters named group-0, group-1, …
    #[arg(
        long,
        value_name = "G",
        default_value_t = 1,
        env = "ROLLOUT_CONTROLLER_GROUPS"
    )]
    groups: usize,
    /// The rollout strategy type.
    #[arg(long, value_name = "TYPE", default_value = "All",
          value_parser = ["All", "Progressive", "ProgressivePerGroup"],
        env = "ROLLOUT_CONTROLLER_STRATEGY"
    )]
    strategy: String,
    /// maxConcurrency (Progressive): a count or a percentage such as 25%.
    #[arg(long, value_name = "X", env = "ROLLOUT_CONTROLLER_MAX_CONCURRENCY")]
    max_concurrency: Option<String>,
    /// maxFailures: a count or a percentage.
    #[arg(long, value_name = "X", env = "ROLLOUT_CONTROLLER_MAX_FAILURES")]
    max_failures: Option<String>,
    /// progressDeadline: a Go duration such as 10m, or None.
    #[arg(long, value_name = "D", env = "ROLLOUT_CONTROLLER_PROGRESS_DEADLINE")]
    progress_deadline: Option<String>,
    /// minSuccessTime (Progressive, ProgressivePerGroup): a Go duration.
    #[arg(long, value_name = "D", env = "ROLLOUT_CONTROLLER_MIN_SUCCESS_TIME")]
    min_success_time: Option<String>,
    /// mandatoryDecisionGroups: group names or indices, comma-separated.
    #[arg(
        long,
        value_name = "GROUP",
        value_delimiter = ',',
        env = "ROLLOUT_CONTROLLER_MANDATORY_GROUPS"
    )]
    mandatory_groups: Vec<String>,
    /// abortOnFailure: roll the updated clusters back on a failure.
    #[arg(long, env = "ROLLOUT_CONTROLLER_ABORT_ON_FAILURE")]
    abort_on_failure: bool,
    /// The plugin or gateway pipeline to call; none: no hook (OCM's own
    /// rollout) and no gateway needed.
    #[arg(long, value_name = "NAME", env = "ROLLOUT_CONTROLLER_PLUGIN")]
    plugin: Option<String>,
    /// rolloutStrategy.pluginConfig: the plugin's settings for this rollout,
    /// a JSON object sent with every hook call (such as
    /// '{"soakTime":"2s","failClusters":["cluster-008"]}' for smoke-test).
    #[arg(long, value_name = "JSON", env = "ROLLOUT_CONTROLLER_PLUGIN_CONFIG")]
    plugin_config: Option<String>,
    #[command(flatten)]
    gateway: GatewayFlags,
    /// The deadline of each hook call (at most 30s).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_HOOK_TIMEOUT")]
    hook_timeout: std::time::Duration,
    /// A cluster whose work of the new revision turns Degraded; repeatable
    /// or comma-separated.
    #[arg(
        long = "fail",
        value_name = "CLUSTER",
        value_delimiter = ',',
        env = "ROLLOUT_CONTROLLER_FAIL"
    )]
    fail: Vec<String>,
    /// One JSON object per step, then the summary, one per line.
    #[arg(long, env = "ROLLOUT_CONTROLLER_JSON")]
    json: bool,
    /// Simulated time from a work's apply to done (or Degraded).
    #[arg(long, value_name = "D", default_value = "30s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_APPLY_LATENCY")]
    apply_latency: std::time::Duration,
    /// Simulated time from a work's apply to the agent's first report
    /// (Applied, Progressing).
    #[arg(long, value_name = "D", default_value = "1s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_AGENT_DELAY")]
    agent_delay: std::time::Duration,
    /// Vary each latency by up to ± this percentage.
    #[arg(
        long,
        value_name = "PCT",
        default_value_t = 0.0,
        env = "ROLLOUT_CONTROLLER_LATENCY_JITTER"
    )]
    latency_jitter: f64,
    /// Seeds the latency variation.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        env = "ROLLOUT_CONTROLLER_SEED"
    )]
    seed: u64,
    /// Move the simulated clock by this much per step instead of to the
    /// next event (like a resync period).
    #[arg(long, value_name = "D", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_STEP")]
    step: Option<std::time::Duration>,
    /// How soon to ask a plugin again when it answers INPROGRESS without
    /// recheck_after (real time).
    #[arg(long, value_name = "D", default_value = "1s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_VALIDATION_POLL")]
    validation_poll: std::time::Duration,
    /// Start from an empty fleet (no earlier revision: an abort stops the
    /// rollout instead of rolling back).
    #[arg(long, env = "ROLLOUT_CONTROLLER_FIRST_ROLLOUT")]
    first_rollout: bool,
    /// Give up (exit 1) after this many steps.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 100_000,
        env = "ROLLOUT_CONTROLLER_MAX_STEPS"
    )]
    max_steps: usize,
    /// List every work at the end (cluster, revision, manifest annotations).
    #[arg(long, env = "ROLLOUT_CONTROLLER_LIST_WORKS")]
    list_works: bool,
    /// Also write the summary, as JSON, to FILE.
    #[arg(long, value_name = "FILE", env = "ROLLOUT_CONTROLLER_SUMMARY")]
    summary: Option<PathBuf>,
    /// How many clusters have their hook calls in flight at once (each
    /// cluster's calls stay in order).
    #[arg(long, value_name = "N", env = "ROLLOUT_CONTROLLER_HOOK_CONCURRENCY", default_value_t = DEFAULT_HOOK_CONCURRENCY, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    hook_concurrency: usize,
    /// At the end, write the rollout_controller_* metrics the run recorded
    /// (as `run` serves them on /metrics, OpenMetrics text) to FILE.
    #[arg(long, value_name = "FILE", env = "ROLLOUT_CONTROLLER_METRICS")]
    metrics: Option<PathBuf>,
}

impl SimulateArgs {
    /// The simulation these flags describe.
    fn config(&self) -> Result<sim::Config, sim::ConfigError> {
        let strategy = sim::StrategyFlags {
            kind: self.strategy.clone(),
            max_concurrency: self.max_concurrency.clone(),
            max_failures: self.max_failures.clone(),
            progress_deadline: self.progress_deadline.clone(),
            min_success_time: self.min_success_time.clone(),
            mandatory_groups: self.mandatory_groups.clone(),
            plugin: self.plugin.clone(),
            plugin_config: self.plugin_config.clone(),
            abort_on_failure: self.abort_on_failure,
        }
        .strategy()?;
        let mut config = sim::Config::new(self.clusters, strategy);
        config.groups = self.groups;
        config.fail = self.fail.iter().cloned().collect();
        config.apply_latency = self.apply_latency;
        config.agent_delay = self.agent_delay;
        config.jitter = self.latency_jitter / 100.0;
        config.seed = self.seed;
        config.tick = self.step;
        config.first_rollout = self.first_rollout;
        config.max_steps = self.max_steps;
        config.settings.validation_poll = self.validation_poll;
        config.settings.hook_concurrency = self.hook_concurrency;
        config.list_works = self.list_works;
        config.check()?;
        Ok(config)
    }
}

#[derive(Debug, Args)]
struct CrdArgs {
    /// Write one file per CRD and a kustomization.yaml into DIR (created if
    /// missing) instead of printing.
    #[arg(long, value_name = "DIR", env = "ROLLOUT_CONTROLLER_OUT")]
    out: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match command(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("rollout-controller: {}", error_text(&err));
            ExitCode::FAILURE
        }
    }
}

/// `err` and its causes on one line, each cause only when its text is not
/// already in the line: most errors repeat their source in their own text,
/// and the chain would otherwise say the same thing several times.
fn error_text(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

fn command(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(args) => {
            let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
            runtime.block_on(run_command(*args))
        }
        Command::Simulate(args) => simulate_command(&args),
        Command::Plan(args) => plan_command(&args),
        Command::Crd(args) => crd_command(&args),
    }
}

async fn run_command(args: RunArgs) -> anyhow::Result<ExitCode> {
    rollout_telemetry::logs::init(args.log_format);
    let options = RunOptions {
        gateway: args.gateway.options(args.hook_timeout)?,
        reconcile: Options {
            hub_name: args.hub_name.clone(),
            settings: Settings {
                hook_concurrency: args.hook_concurrency,
                ..Settings::default()
            },
            ..Options::default()
        },
        register_plugins_namespace: args.register_plugins_namespace.clone(),
        health_listen: args.health_listen,
        leader_election: args.leader_election()?,
    };
    let client = app::client(args.kubeconfig.as_deref()).await?;
    app::run(client, options, app::signal(), |_| {}).await?;
    Ok(ExitCode::SUCCESS)
}

fn simulate_command(args: &SimulateArgs) -> anyhow::Result<ExitCode> {
    let config = match args.config() {
        Ok(config) => config,
        Err(err) => {
            eprintln!("rollout-controller simulate: {err}");
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
    };
    // Logs go to stderr, quiet by default: stdout is the progress.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(rollout_telemetry::logs::stderr_colour())
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    runtime.block_on(async {
        let telemetry = Telemetry::new(&TracingOptions::from_env(
            rollout_controller::telemetry::DEFAULT_SERVICE_NAME,
        ))?;
        let options = match args.gateway.options(args.hook_timeout) {
            Ok(options) => options,
            Err(err) => {
                eprintln!("rollout-controller simulate: {err:#}");
                return Ok(ExitCode::from(EXIT_BAD_INPUT));
            }
        };
        let gateway = match GatewayHooks::new(&options, telemetry.clone()) {
            Ok(gateway) => gateway,
            Err(err) => {
                eprintln!("rollout-controller simulate: --gateway: {err}");
                return Ok(ExitCode::from(EXIT_BAD_INPUT));
            }
        };
        let metrics = std::sync::Arc::new(ControllerMetrics::new());
        let mut config = config;
        config.metrics = Some(metrics.clone());
        let hooks = sim::Recorder::new(Metered::new(gateway, metrics.clone()));
        let mut report: Box<dyn sim::Report> = if args.json {
            Box::new(sim::JsonLines::new(std::io::stdout()))
        } else {
            Box::new(sim::terminal::Terminal::new(std::io::stdout()))
        };
        let url = args.plugin.as_ref().map(|_| args.gateway.gateway.as_str());
        let result = sim::run(&config, &hooks, &telemetry, url, report.as_mut()).await;
        let exporter = telemetry.clone();
        let _ = tokio::task::spawn_blocking(move || exporter.shutdown()).await;
        if let Some(path) = &args.metrics {
            std::fs::write(path, metrics.encode())
                .with_context(|| format!("writing {}", path.display()))?;
        }
        let summary = match result {
            Ok(summary) => summary,
            Err(err) => {
                eprintln!(
                    "rollout-controller simulate: {}",
                    simulate_error(&err, args)
                );
                return Ok(ExitCode::FAILURE);
            }
        };
        if let Some(path) = &args.summary {
            let text = serde_json::to_string_pretty(&summary).context("encoding the summary")?;
            std::fs::write(path, text + "\n")
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// What went wrong, and what to do about it.
fn simulate_error(err: &sim::SimError, args: &SimulateArgs) -> String {
    let gateway = &args.gateway.gateway;
    match err {
        sim::SimError::Initialize { error, .. } | sim::SimError::GatewayLost(error)
            if sim::SimError::is_unreachable(error) =>
        {
            format!(
                "cannot reach the rollout gateway at {gateway} ({}). Start one \
                 (rollout-gateway --config FILE) or point --gateway at it; without --plugin \
                 no gateway is needed.",
                error.message
            )
        }
        sim::SimError::Initialize { plugin, error } if error.code == tonic::Code::NotFound => {
            format!(
                "the gateway at {gateway} has no plugin or pipeline named {plugin:?} ({}). \
                 Add it to the gateway's registry, or name another with --plugin.",
                error.message
            )
        }
        other => other.to_string(),
    }
}

fn crd_command(args: &CrdArgs) -> anyhow::Result<ExitCode> {
    let Some(dir) = &args.out else {
        print!("{}", api::crds_yaml()?);
        return Ok(ExitCode::SUCCESS);
    };
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for file in api::crd_files()? {
        let path = dir.join(&file.name);
        std::fs::write(&path, &file.contents)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn plan_command(args: &PlanArgs) -> anyhow::Result<ExitCode> {
    // The input's `now` fixes the clock; the real one is only a fallback.
    let output = match plan::run(&args.input, Timestamp::now()) {
        Ok(output) => output,
        Err(err) => {
            eprintln!("rollout-controller plan: {err}");
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
    };
    let text = if args.pretty {
        serde_json::to_string_pretty(&output)
    } else {
        serde_json::to_string(&output)
    }
    .context("encoding the plan")?;
    println!("{text}");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Flags whose variables Kubernetes' downward API conventionally sets.
    const POD_VARIABLES: [(&str, &str); 2] = [
        ("leader-election-namespace", "POD_NAMESPACE"),
        ("leader-election-identity", "POD_NAME"),
    ];

    /// Every flag of every subcommand, as (subcommand path, long name, env).
    fn flags(cmd: &clap::Command, at: &str, out: &mut Vec<(String, String, Option<String>)>) {
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if matches!(long, "help" | "version") {
                continue;
            }
            let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
            out.push((at.to_owned(), long.to_owned(), env));
        }
        for sub in cmd.get_subcommands() {
            flags(sub, &format!("{at} {}", sub.get_name()), out);
        }
    }

    /// An error whose text holds its source's is said once.
    #[test]
    fn an_error_chain_is_said_once() {
        let root = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let err = anyhow::Error::new(root)
            .context("reading /k: no such file")
            .context("configuring");
        assert_eq!(
            super::error_text(&err),
            "configuring: reading /k: no such file"
        );
    }

    /// `run --help` lists every endpoint of --health-listen.
    #[test]
    fn the_help_lists_every_health_endpoint() {
        let mut cli = super::Cli::command();
        let run = cli.find_subcommand_mut("run").expect("run");
        let help = run.render_long_help().to_string();
        for path in rollout_controller::health::ENDPOINTS {
            assert!(help.contains(path), "{path} in {help}");
        }
    }

    /// `run` and `simulate` refuse a gateway address without a scheme at
    /// flag parsing, showing both right forms; `simulate` takes the TLS
    /// flags `run` has.
    #[test]
    fn the_gateway_flags_are_checked_and_shared() {
        use clap::Parser;
        for sub in ["run", "simulate"] {
            let err = super::Cli::try_parse_from([
                "rollout-controller",
                sub,
                "--gateway",
                "127.0.0.1:10843",
            ])
            .expect_err("a bare address")
            .to_string();
            assert!(
                err.contains("http://127.0.0.1:10843") && err.contains("https://127.0.0.1:10843"),
                "{sub}: {err}"
            );
            let ok = super::Cli::try_parse_from([
                "rollout-controller",
                sub,
                "--gateway",
                "https://gateway.ns:10843",
                "--gateway-ca",
                "ca.pem",
                "--client-cert",
                "hub.pem",
                "--client-key",
                "hub.key",
                "--gateway-server-name",
                "gateway",
            ]);
            assert!(ok.is_ok(), "{sub}: {ok:?}");
        }
    }

    /// A new flag without an environment variable fails here; the variable
    /// is the flag's name in ROLLOUT_CONTROLLER_ form (one name for a flag
    /// shared by subcommands), but for the pod's own variables.
    #[test]
    fn every_flag_has_an_env_var_named_after_it() {
        let mut all = Vec::new();
        flags(&super::Cli::command(), "rollout-controller", &mut all);
        assert!(all.len() >= 40, "{all:?}");
        for (at, long, env) in all {
            let want = POD_VARIABLES
                .iter()
                .find(|(flag, _)| *flag == long)
                .map(|(_, var)| (*var).to_owned())
                .unwrap_or_else(|| {
                    format!(
                        "ROLLOUT_CONTROLLER_{}",
                        long.to_uppercase().replace('-', "_")
                    )
                });
            assert_eq!(env.as_deref(), Some(want.as_str()), "{at} --{long}");
        }
    }
}
