//! `rollout-controller`: the command line of the slim ManifestWorkReplicaSet
//! controller. It parses flags and calls the library; nothing else.
#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
    )
)]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use jiff::Timestamp;
use rollout_controller::app::{self, RunOptions};
use rollout_controller::format::error_chain;
use rollout_controller::hooks::{
    DEFAULT_GATEWAY_URL, GatewayError, GatewayOptions, GatewayTlsError, GatewayTlsFiles,
    check_gateway_url,
};
use rollout_controller::leader::{self, LeaseConfig, LeaseTimings};
use rollout_controller::orchestrate::{DEFAULT_HOOK_CONCURRENCY, Settings};
use rollout_controller::reconcile::Options;
use rollout_controller::{api, dashboard, plan, sim, view};
use rollout_proto::duration::{self, DurationError, Rules};
use rollout_wire::escaped;

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
    /// Show one ManifestWorkReplicaSet's rollout as the hub sees it:
    /// placements, decision groups, each cluster's status and revision, the
    /// plugin's verdicts, the abort, and what the controller waits for.
    Get(GetArgs),
    /// Serve every ManifestWorkReplicaSet's rollout on a web page, updated
    /// live, read-only: the list, and for the one chosen its placements and
    /// decision groups as a grid of clusters, the plugin's verdicts, the
    /// abort and rollback, and what the controller waits for.
    Dashboard(DashboardArgs),
}

#[derive(Debug, Args)]
#[command(
    after_help = "The page reads GET /api/rollouts, /api/rollouts/NS/NAME and the \
server-sent events of /api/events[/NS/NAME] (docs/observability.md, \"The dashboard\"). \
It writes nothing to the hub. Exit status: 0 on Ctrl-C or SIGTERM, 1 when the API server \
cannot be reached or the address cannot be bound, 2 for bad flags or a non-loopback \
--listen without --allow-remote."
)]
struct DashboardArgs {
    /// Where to listen (loopback unless --allow-remote).
    #[arg(long, value_name = "ADDR", default_value = dashboard::DEFAULT_LISTEN, env = "ROLLOUT_CONTROLLER_LISTEN")]
    listen: std::net::SocketAddr,
    /// Listen on an address that is not loopback, and answer requests for
    /// any host name: anyone who reaches it reads every rollout, with no
    /// login.
    #[arg(long, env = "ROLLOUT_CONTROLLER_ALLOW_REMOTE")]
    allow_remote: bool,
    /// Only this namespace's ManifestWorkReplicaSets; default: every
    /// namespace's.
    #[arg(short, long, value_name = "NS", env = "ROLLOUT_CONTROLLER_NAMESPACE")]
    namespace: Option<String>,
    /// The most pages served live at once (event streams); more are
    /// refused with 503.
    #[arg(long, value_name = "N", default_value_t = dashboard::DEFAULT_MAX_CLIENTS,
          value_parser = clap::value_parser!(u16).range(1..),
          env = "ROLLOUT_CONTROLLER_MAX_CLIENTS")]
    max_clients: u16,
    /// A kubeconfig file; default: in-cluster, else $KUBECONFIG or ~/.kube/config.
    #[arg(long, value_name = "PATH", env = "ROLLOUT_CONTROLLER_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// How long the first read may take before the API server counts as
    /// unreachable.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_REQUEST_TIMEOUT")]
    request_timeout: std::time::Duration,
}

#[derive(Debug, Args)]
#[command(
    after_help = "As a kubectl plugin: put a copy or symlink of this binary named \
kubectl-mwrs on PATH, then `kubectl mwrs get NAME --watch`. Exit status: 0 when drawn (with \
--watch: until Ctrl-C or SIGTERM), 1 when the ManifestWorkReplicaSet is not found or the API \
server cannot be reached, 2 for bad flags."
)]
struct GetArgs {
    /// The ManifestWorkReplicaSet's name.
    name: String,
    /// Its namespace; default: the kubeconfig context's.
    #[arg(short, long, value_name = "NS", env = "ROLLOUT_CONTROLLER_NAMESPACE")]
    namespace: Option<String>,
    /// Keep watching and redraw on every change.
    #[arg(short, long, env = "ROLLOUT_CONTROLLER_WATCH")]
    watch: bool,
    /// A kubeconfig file; default: in-cluster, else $KUBECONFIG or ~/.kube/config.
    #[arg(long, value_name = "PATH", env = "ROLLOUT_CONTROLLER_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// How long the first read may take before the API server counts as
    /// unreachable.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_REQUEST_TIMEOUT")]
    request_timeout: std::time::Duration,
    /// text, or json: the view as one JSON object (one per line per frame
    /// with --watch).
    #[arg(short, long, value_name = "FORMAT", default_value = "text",
          value_parser = ["text", "json"], env = "ROLLOUT_CONTROLLER_OUTPUT")]
    output: String,
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
    /// Also keep the gateway's registry ConfigMap `work-controller-config` up
    /// to date with the ClusterManager's workConfiguration.plugins (leader
    /// only; an absent field leaves the ConfigMap alone), in
    /// --register-plugins-namespace.
    #[arg(long, env = "ROLLOUT_CONTROLLER_REGISTER_PLUGINS")]
    register_plugins: bool,
    /// The namespace of the registry ConfigMap (turns the registration on
    /// when given): open-cluster-management-hub in OCM's Default install
    /// mode; in Hosted mode the ClusterManager's name.
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
    /// Serve /healthz and /readyz for the kubelet, and /metrics for
    /// Prometheus (OpenMetrics when Accept asks for it, else the Prometheus
    /// text), on this address.
    #[arg(long, value_name = "ADDR", env = "ROLLOUT_CONTROLLER_HEALTH_LISTEN")]
    health_listen: Option<std::net::SocketAddr>,
    /// How many clusters of a placement have their hook calls in flight at
    /// once (each cluster's calls stay in order).
    #[arg(long, value_name = "N", env = "ROLLOUT_CONTROLLER_HOOK_CONCURRENCY", default_value_t = DEFAULT_HOOK_CONCURRENCY, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    hook_concurrency: usize,
    /// How long a ManifestWork another field manager wrote is left alone
    /// before the controller applies it again (once per such quiet period).
    #[arg(long, value_name = "D", default_value = "10m", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_CONFLICT_BACKOFF")]
    conflict_backoff: std::time::Duration,
    /// How long another field manager's write of a ManifestWorkReplicaSet's
    /// status (OCM's own controller running) keeps this controller from
    /// reconciling any ManifestWorkReplicaSet.
    #[arg(long, value_name = "D", default_value = "2m", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_OTHER_WRITER_QUIET")]
    other_writer_quiet: std::time::Duration,
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

fn parse_gateway_url(text: &str) -> Result<String, GatewayError> {
    check_gateway_url(text)?;
    Ok(text.to_owned())
}

/// Where an in-cluster pod finds its namespace.
const POD_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

impl GatewayFlags {
    /// The gateway's client options, reading the files named.
    fn options(&self, timeout: std::time::Duration) -> Result<GatewayOptions, GatewayTlsError> {
        let files = GatewayTlsFiles {
            ca: self.gateway_ca.clone(),
            identity: self.client_cert.clone().zip(self.client_key.clone()),
            server_name: self.gateway_server_name.clone(),
        };
        GatewayOptions::read(self.gateway.clone(), timeout, &files)
    }
}

impl RunArgs {
    /// Where to keep the plugin registry, if anywhere: the namespace given,
    /// else OCM's Default-mode hub namespace when --register-plugins is on.
    fn registration_namespace(&self) -> Option<String> {
        self.register_plugins_namespace.clone().or_else(|| {
            self.register_plugins
                .then(|| rollout_controller::registration::DEFAULT_NAMESPACE.to_owned())
        })
    }

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

/// A flag's duration: Go's syntax, not negative.
fn parse_duration(text: &str) -> Result<std::time::Duration, DurationError> {
    duration::parse_duration(text, Rules::NotNegative)
}

#[derive(Debug, Args)]
#[command(
    after_help = "The fleet runs the previous revision (an Argo Rollout of web:1.0); the update \
revision (web:1.1) is rolled out, one step per reconcile, on a simulated clock that jumps to the \
next event, except while a plugin is validating: then it follows the real clock, since a plugin \
measures its own waits. With --template FILE the update revision is your own ManifestWork \
template instead (a ManifestWork, a ManifestWorkReplicaSet or a ManifestWork spec, in YAML or \
JSON), and each step shows what the plugins changed in each work as a diff (--json: a \
`mutations` array with a JSON Patch and the diff per work); the fleet starts empty unless \
--previous-template gives the revision it runs. Exit status: 0 when the rollout ran to its end (Succeeded, Aborted or \
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
    /// The agent reports Applied only, never Progressing or Degraded, as
    /// OCM's agent does for a template without `conditionRules`: every
    /// cluster then counts as progressing until its progressDeadline.
    #[arg(long, env = "ROLLOUT_CONTROLLER_NO_CONDITION_RULES")]
    no_condition_rules: bool,
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
    /// The strategy's rollbackPace: how an abort restores the updated
    /// clusters, AtOnce (every one in one step, the failing ones first; the
    /// default) or Strategy (at the rollout strategy's pace).
    // Checked with the rest of the strategy, by the strategy's own parser.
    #[arg(long, value_name = "PACE", env = "ROLLOUT_CONTROLLER_ROLLBACK_PACE")]
    rollback_pace: Option<String>,
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
    /// Roll out this ManifestWork template (YAML or JSON: a ManifestWork,
    /// a ManifestWorkReplicaSet or a ManifestWork spec) instead of the
    /// built-in Argo Rollout, and show what the plugins change in it.
    #[arg(long, value_name = "FILE", env = "ROLLOUT_CONTROLLER_TEMPLATE")]
    template: Option<PathBuf>,
    /// The template the fleet runs before the rollout (with --template;
    /// without it the fleet starts empty).
    #[arg(
        long,
        value_name = "FILE",
        requires = "template",
        env = "ROLLOUT_CONTROLLER_PREVIOUS_TEMPLATE"
    )]
    previous_template: Option<PathBuf>,
    /// At the end, write the rollout_controller_* metrics the run recorded
    /// (as `run` serves them on /metrics, OpenMetrics text) to FILE.
    #[arg(long, value_name = "FILE", env = "ROLLOUT_CONTROLLER_METRICS")]
    metrics: Option<PathBuf>,
    /// Store the ManifestWorkReplicaSet and its ManifestWorkReplicaSetRollout
    /// in a simulated API server that prunes them against the CRDs in DIR
    /// (OCM's own, from the open-cluster-management.io/api module, for a
    /// hub as it is), and read them back
    /// each step, as on a real hub.
    #[arg(long, value_name = "DIR", env = "ROLLOUT_CONTROLLER_CRDS")]
    crds: Option<PathBuf>,
    /// With --crds: write the plugin and the abort on the
    /// ManifestWorkReplicaSet itself (the design's API) instead of its
    /// ManifestWorkReplicaSetRollout.
    #[arg(long, requires = "crds", env = "ROLLOUT_CONTROLLER_DESIGN_API")]
    design_api: bool,
}

impl SimulateArgs {
    /// The simulation these flags describe.
    fn config(&self) -> anyhow::Result<sim::Config> {
        let flags = sim::StrategyFlags {
            kind: self.strategy.clone(),
            max_concurrency: self.max_concurrency.clone(),
            max_failures: self.max_failures.clone(),
            progress_deadline: self.progress_deadline.clone(),
            min_success_time: self.min_success_time.clone(),
            mandatory_groups: self.mandatory_groups.clone(),
            plugin: self.plugin.clone(),
            plugin_config: self.plugin_config.clone(),
            abort_on_failure: self.abort_on_failure,
            rollback_pace: self.rollback_pace.clone(),
        };
        let mut config = sim::Config::new(self.clusters, flags.strategy()?);
        if let Some(dir) = &self.crds {
            let crds = api::prune::Schemas::from_dir(dir)?;
            config.api = Some(sim::api::ApiConfig {
                schemas: std::sync::Arc::new(sim::api::ApiConfig::schemas(crds)),
                strategy: flags.raw()?,
                shape: if self.design_api {
                    sim::api::ObjectsShape::DesignApi
                } else {
                    sim::api::ObjectsShape::Carrier
                },
            });
        }
        config.groups = self.groups;
        config.fail = self.fail.iter().cloned().collect();
        config.apply_latency = self.apply_latency;
        config.agent_delay = self.agent_delay;
        config.agent_progressing = !self.no_condition_rules;
        config.jitter = self.latency_jitter / 100.0;
        config.seed = self.seed;
        config.tick = self.step;
        config.first_rollout = self.first_rollout;
        config.max_steps = self.max_steps;
        config.settings.validation_poll = self.validation_poll;
        config.settings.hook_concurrency = self.hook_concurrency;
        config.list_works = self.list_works;
        config.template = self
            .template
            .as_deref()
            .map(sim::template::load)
            .transpose()?;
        config.previous_template = self
            .previous_template
            .as_deref()
            .map(sim::template::load)
            .transpose()?;
        // A template of the user's own has no earlier revision unless one
        // is given.
        if config.template.is_some() && config.previous_template.is_none() {
            config.first_rollout = true;
        }
        config.check()?;
        Ok(config)
    }
}

#[derive(Debug, Args)]
struct CrdArgs {
    /// Write one file per CRD and a kustomization.yaml into DIR (created if
    /// missing) instead of printing.
    /// Every shape goes there: the project's own CRDs at the top, OCM's
    /// kinds without the additions under ocm/ and with them under design/.
    #[arg(long, value_name = "DIR", env = "ROLLOUT_CONTROLLER_OUT")]
    out: Option<PathBuf>,
    /// Print OCM's kinds without the design's additions: this crate's
    /// schemas minus the fields the design adds. Not OCM's own CRDs (their
    /// schemas and defaults differ): validate against those, from the
    /// `open-cluster-management.io/api` module, where fidelity matters.
    #[arg(
        long,
        conflicts_with = "out",
        env = "ROLLOUT_CONTROLLER_WITHOUT_ADDITIONS"
    )]
    without_additions: bool,
    /// The former name of --without-additions (deprecated; it never printed
    /// OCM's own CRDs).
    #[arg(
        long,
        hide = true,
        conflicts_with = "out",
        env = "ROLLOUT_CONTROLLER_OCM_SHAPED"
    )]
    ocm_shaped: bool,
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let mut clap_command = Cli::command();
    if args
        .first()
        .is_some_and(|argv0| view::is_kubectl_plugin(argv0))
    {
        clap_command = clap_command
            .name(view::KUBECTL_PLUGIN_COMMAND)
            .bin_name(view::KUBECTL_PLUGIN_COMMAND);
    }
    let cli = Cli::from_arg_matches(&clap_command.get_matches_from(args))
        .unwrap_or_else(|error| error.exit());
    match command(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!(
                "rollout-controller: {}",
                escaped(&error_chain(err.as_ref()))
            );
            ExitCode::FAILURE
        }
    }
}

fn command(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(args) => {
            let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
            let result = runtime.block_on(run_command(*args));
            // Reconciles dropped at shutdown may still hold tasks; they
            // must not keep the process up.
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
            result
        }
        Command::Simulate(args) => simulate_command(&args),
        Command::Plan(args) => plan_command(&args),
        Command::Crd(args) => crd_command(&args),
        Command::Get(args) => {
            let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
            runtime.block_on(get_command(&args))
        }
        Command::Dashboard(args) => {
            let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
            runtime.block_on(dashboard_command(&args))
        }
    }
}

async fn get_command(args: &GetArgs) -> anyhow::Result<ExitCode> {
    let options = view::hub::GetOptions {
        kubeconfig: args.kubeconfig.clone(),
        namespace: args.namespace.clone(),
        name: args.name.clone(),
        watch: args.watch,
        request_timeout: args.request_timeout,
        json: args.output == "json",
    };
    match view::hub::get(&options, app::signal()).await {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(err) => {
            eprintln!("rollout-controller get: {}", escaped(&error_chain(&err)));
            Ok(ExitCode::FAILURE)
        }
    }
}

async fn dashboard_command(args: &DashboardArgs) -> anyhow::Result<ExitCode> {
    let options = dashboard::DashboardOptions {
        kubeconfig: args.kubeconfig.clone(),
        namespace: args.namespace.clone(),
        listen: args.listen,
        allow_remote: args.allow_remote,
        max_clients: usize::from(args.max_clients),
        request_timeout: args.request_timeout,
    };
    if let Err(err) = dashboard::check_listen(options.listen, options.allow_remote) {
        eprintln!("rollout-controller dashboard: {err}");
        return Ok(ExitCode::from(EXIT_BAD_INPUT));
    }
    let ready = |addr: std::net::SocketAddr| {
        if options.allow_remote && !addr.ip().is_loopback() {
            eprintln!(
                "rollout-controller dashboard: WARNING: listening on {addr}, beyond loopback: \
                 anyone who reaches it reads every rollout of the hub, with no login"
            );
        }
        eprintln!("rollout-controller dashboard: serving http://{addr}/ (read-only; Ctrl-C stops)");
    };
    match dashboard::dashboard(&options, ready, app::signal()).await {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(err) => {
            eprintln!(
                "rollout-controller dashboard: {}",
                escaped(&error_chain(&err))
            );
            Ok(ExitCode::FAILURE)
        }
    }
}

async fn run_command(args: RunArgs) -> anyhow::Result<ExitCode> {
    // Listening from the first moment: a signal during start-up stops it
    // cleanly too.
    let signal = app::signal();
    rollout_telemetry::logs::init(args.log_format);
    let options = RunOptions {
        gateway: args.gateway.options(args.hook_timeout)?,
        reconcile: Options {
            hub_name: args.hub_name.clone(),
            settings: Settings {
                hook_concurrency: args.hook_concurrency,
                conflict_backoff: args.conflict_backoff,
                ..Settings::default()
            },
            other_writer_quiet: args.other_writer_quiet,
            ..Options::default()
        },
        register_plugins_namespace: args.registration_namespace(),
        health_listen: args.health_listen,
        leader_election: args.leader_election()?,
    };
    let client = app::client(args.kubeconfig.as_deref()).await?;
    app::run(client, options, signal, |_| {}).await?;
    Ok(ExitCode::SUCCESS)
}

fn simulate_command(args: &SimulateArgs) -> anyhow::Result<ExitCode> {
    let bad_input = |err: &dyn std::fmt::Display| -> anyhow::Result<ExitCode> {
        eprintln!("rollout-controller simulate: {}", escaped(&err.to_string()));
        Ok(ExitCode::from(EXIT_BAD_INPUT))
    };
    let config = match args.config() {
        Ok(config) => config,
        Err(err) => return bad_input(&format!("{err:#}")),
    };
    init_simulate_logs();
    let options = match args.gateway.options(args.hook_timeout) {
        Ok(gateway) => sim::SimulateOptions {
            config,
            gateway,
            json: args.json,
            metrics_file: args.metrics.clone(),
            summary_file: args.summary.clone(),
        },
        Err(err) => return bad_input(&error_chain(&err)),
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    match runtime.block_on(sim::simulate(options)) {
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(err @ sim::SimulateError::Gateway(_)) => bad_input(&err),
        Err(err @ sim::SimulateError::Simulation { .. }) => {
            eprintln!("rollout-controller simulate: {}", escaped(&err.to_string()));
            Ok(ExitCode::FAILURE)
        }
        Err(err) => Err(err.into()),
    }
}

/// Logs go to stderr, quiet by default: stdout is the progress.
fn init_simulate_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(rollout_telemetry::logs::stderr_colour())
        .with_writer(std::io::stderr)
        .fmt_fields(rollout_telemetry::logs::TextFields)
        .init();
}

fn crd_command(args: &CrdArgs) -> anyhow::Result<ExitCode> {
    match &args.out {
        Some(dir) => api::write_crd_files(dir)?,
        None => {
            if args.ocm_shaped {
                eprintln!(
                    "rollout-controller crd: --ocm-shaped is deprecated; it is \
                     --without-additions (this crate's CRDs minus the design's fields, \
                     not OCM's own CRDs)"
                );
            }
            let shape = if args.without_additions || args.ocm_shaped {
                api::CrdShape::Ocm
            } else {
                api::CrdShape::Design
            };
            print!("{}", api::crds_yaml(shape)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn plan_command(args: &PlanArgs) -> anyhow::Result<ExitCode> {
    // The input's `now` fixes the clock; the real one is only a fallback.
    let output = match plan::run(&args.input, Timestamp::now()) {
        Ok(output) => output,
        Err(err) => {
            eprintln!("rollout-controller plan: {}", escaped(&err.to_string()));
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
        rollout_test_support::flags::assert_every_flag_has_env_var(
            &super::Cli::command(),
            "ROLLOUT_CONTROLLER_",
            &POD_VARIABLES,
            40,
        );
    }
}
