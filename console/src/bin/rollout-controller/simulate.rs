//! `simulate`: a rollout of a simulated fleet through a real gateway.

use crate::run::GatewayFlags;
use crate::{EXIT_BAD_INPUT, parse_duration};
use anyhow::Context;
use clap::Args;
use rollout_console::format::error_chain;
use rollout_console::sim;
use rollout_controller::api;
use rollout_controller::orchestrate::DEFAULT_HOOK_CONCURRENCY;
use rollout_wire::escaped;
use std::path::PathBuf;
use std::process::ExitCode;
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
pub(crate) struct SimulateArgs {
    /// Clusters in the fleet, named cluster-001, cluster-002, …
    #[arg(
        long,
        value_name = "N",
        default_value_t = 20,
        env = "ROLLOUT_CONTROLLER_CLUSTERS"
    )]
    pub(crate) clusters: usize,
    /// Decision groups: contiguous runs of clusters named group-0, group-1, …
    #[arg(
        long,
        value_name = "G",
        default_value_t = 1,
        env = "ROLLOUT_CONTROLLER_GROUPS"
    )]
    pub(crate) groups: usize,
    /// The rollout strategy type.
    #[arg(long, value_name = "TYPE", default_value = "All",
          value_parser = ["All", "Progressive", "ProgressivePerGroup"],
        env = "ROLLOUT_CONTROLLER_STRATEGY"
    )]
    pub(crate) strategy: String,
    /// maxConcurrency (Progressive): a count or a percentage such as 25%.
    #[arg(long, value_name = "X", env = "ROLLOUT_CONTROLLER_MAX_CONCURRENCY")]
    pub(crate) max_concurrency: Option<String>,
    /// maxFailures: a count or a percentage.
    #[arg(long, value_name = "X", env = "ROLLOUT_CONTROLLER_MAX_FAILURES")]
    pub(crate) max_failures: Option<String>,
    /// progressDeadline: a Go duration such as 10m, or None.
    #[arg(long, value_name = "D", env = "ROLLOUT_CONTROLLER_PROGRESS_DEADLINE")]
    pub(crate) progress_deadline: Option<String>,
    /// minSuccessTime (Progressive, ProgressivePerGroup): a Go duration.
    #[arg(long, value_name = "D", env = "ROLLOUT_CONTROLLER_MIN_SUCCESS_TIME")]
    pub(crate) min_success_time: Option<String>,
    /// mandatoryDecisionGroups: group names or indices, comma-separated.
    #[arg(
        long,
        value_name = "GROUP",
        value_delimiter = ',',
        env = "ROLLOUT_CONTROLLER_MANDATORY_GROUPS"
    )]
    pub(crate) mandatory_groups: Vec<String>,
    /// abortOnFailure: roll the updated clusters back on a failure.
    #[arg(long, env = "ROLLOUT_CONTROLLER_ABORT_ON_FAILURE")]
    pub(crate) abort_on_failure: bool,
    /// The plugin or gateway pipeline to call; none: no hook (OCM's own
    /// rollout) and no gateway needed.
    #[arg(long, value_name = "NAME", env = "ROLLOUT_CONTROLLER_PLUGIN")]
    pub(crate) plugin: Option<String>,
    /// rolloutStrategy.pluginConfig: the plugin's settings for this rollout,
    /// a JSON object sent with every hook call (such as
    /// '{"soakTime":"2s","failClusters":["cluster-008"]}' for smoke-test).
    #[arg(long, value_name = "JSON", env = "ROLLOUT_CONTROLLER_PLUGIN_CONFIG")]
    pub(crate) plugin_config: Option<String>,
    #[command(flatten)]
    pub(crate) gateway: GatewayFlags,
    /// The deadline of each hook call (at most 30s).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_HOOK_TIMEOUT")]
    pub(crate) hook_timeout: std::time::Duration,
    /// A cluster whose work of the new revision turns Degraded; repeatable
    /// or comma-separated.
    #[arg(
        long = "fail",
        value_name = "CLUSTER",
        value_delimiter = ',',
        env = "ROLLOUT_CONTROLLER_FAIL"
    )]
    pub(crate) fail: Vec<String>,
    /// One JSON object per step, then the summary, one per line.
    #[arg(long, env = "ROLLOUT_CONTROLLER_JSON")]
    pub(crate) json: bool,
    /// Simulated time from a work's apply to done (or Degraded).
    #[arg(long, value_name = "D", default_value = "30s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_APPLY_LATENCY")]
    pub(crate) apply_latency: std::time::Duration,
    /// Simulated time from a work's apply to the agent's first report
    /// (Applied, Progressing).
    #[arg(long, value_name = "D", default_value = "1s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_AGENT_DELAY")]
    pub(crate) agent_delay: std::time::Duration,
    /// The agent reports Applied only, never Progressing or Degraded, as
    /// OCM's agent does for a template without `conditionRules`: every
    /// cluster then counts as progressing until its progressDeadline.
    #[arg(long, env = "ROLLOUT_CONTROLLER_NO_CONDITION_RULES")]
    pub(crate) no_condition_rules: bool,
    /// Vary each latency by up to ± this percentage.
    #[arg(
        long,
        value_name = "PCT",
        default_value_t = 0.0,
        env = "ROLLOUT_CONTROLLER_LATENCY_JITTER"
    )]
    pub(crate) latency_jitter: f64,
    /// Seeds the latency variation.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        env = "ROLLOUT_CONTROLLER_SEED"
    )]
    pub(crate) seed: u64,
    /// Move the simulated clock by this much per step instead of to the
    /// next event (like a resync period).
    #[arg(long, value_name = "D", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_STEP")]
    pub(crate) step: Option<std::time::Duration>,
    /// How soon to ask a plugin again when it answers INPROGRESS without
    /// recheck_after (real time).
    #[arg(long, value_name = "D", default_value = "1s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_VALIDATION_POLL")]
    pub(crate) validation_poll: std::time::Duration,
    /// Start from an empty fleet (no earlier revision: an abort stops the
    /// rollout instead of rolling back).
    #[arg(long, env = "ROLLOUT_CONTROLLER_FIRST_ROLLOUT")]
    pub(crate) first_rollout: bool,
    /// The strategy's rollbackPace: how an abort restores the updated
    /// clusters, AtOnce (every one in one step, the failing ones first; the
    /// default) or Strategy (at the rollout strategy's pace).
    // Checked with the rest of the strategy, by the strategy's own parser.
    #[arg(long, value_name = "PACE", env = "ROLLOUT_CONTROLLER_ROLLBACK_PACE")]
    pub(crate) rollback_pace: Option<String>,
    /// Give up (exit 1) after this many steps.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 100_000,
        env = "ROLLOUT_CONTROLLER_MAX_STEPS"
    )]
    pub(crate) max_steps: usize,
    /// List every work at the end (cluster, revision, manifest annotations).
    #[arg(long, env = "ROLLOUT_CONTROLLER_LIST_WORKS")]
    pub(crate) list_works: bool,
    /// Also write the summary, as JSON, to FILE.
    #[arg(long, value_name = "FILE", env = "ROLLOUT_CONTROLLER_SUMMARY")]
    pub(crate) summary: Option<PathBuf>,
    /// How many clusters have their hook calls in flight at once (each
    /// cluster's calls stay in order).
    #[arg(long, value_name = "N", env = "ROLLOUT_CONTROLLER_HOOK_CONCURRENCY", default_value_t = DEFAULT_HOOK_CONCURRENCY, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(crate) hook_concurrency: usize,
    /// Roll out this ManifestWork template (YAML or JSON: a ManifestWork,
    /// a ManifestWorkReplicaSet or a ManifestWork spec) instead of the
    /// built-in Argo Rollout, and show what the plugins change in it.
    #[arg(long, value_name = "FILE", env = "ROLLOUT_CONTROLLER_TEMPLATE")]
    pub(crate) template: Option<PathBuf>,
    /// The template the fleet runs before the rollout (with --template;
    /// without it the fleet starts empty).
    #[arg(
        long,
        value_name = "FILE",
        requires = "template",
        env = "ROLLOUT_CONTROLLER_PREVIOUS_TEMPLATE"
    )]
    pub(crate) previous_template: Option<PathBuf>,
    /// At the end, write the rollout_controller_* metrics the run recorded
    /// (as `run` serves them on /metrics, OpenMetrics text) to FILE.
    #[arg(long, value_name = "FILE", env = "ROLLOUT_CONTROLLER_METRICS")]
    pub(crate) metrics: Option<PathBuf>,
    /// Store the ManifestWorkReplicaSet and its ManifestWorkReplicaSetRollout
    /// in a simulated API server that prunes them against the CRDs in DIR
    /// (OCM's own, from the open-cluster-management.io/api module, for a
    /// hub as it is), and read them back
    /// each step, as on a real hub.
    #[arg(long, value_name = "DIR", env = "ROLLOUT_CONTROLLER_CRDS")]
    pub(crate) crds: Option<PathBuf>,
    /// With --crds: write the plugin and the abort on the
    /// ManifestWorkReplicaSet itself (the design's API) instead of its
    /// ManifestWorkReplicaSetRollout.
    #[arg(long, requires = "crds", env = "ROLLOUT_CONTROLLER_DESIGN_API")]
    pub(crate) design_api: bool,
}

impl SimulateArgs {
    /// The simulation these flags describe.
    pub(crate) fn config(&self) -> anyhow::Result<sim::Config> {
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

pub(crate) fn simulate_command(args: &SimulateArgs) -> anyhow::Result<ExitCode> {
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
pub(crate) fn init_simulate_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(rollout_telemetry::logs::stderr_colour())
        .with_writer(std::io::stderr)
        .fmt_fields(rollout_telemetry::logs::TextFields)
        .init();
}
