//! `run`: the controller itself, and the gateway flags `simulate` shares.

use crate::parse_duration;
use anyhow::Context;
use clap::Args;
use rollout_controller::app::{self, RunOptions};
use rollout_controller::hooks::{
    DEFAULT_GATEWAY_URL, GatewayError, GatewayOptions, GatewayTlsError, GatewayTlsFiles,
    check_gateway_url,
};
use rollout_controller::leader::{self, LeaseConfig, LeaseTimings};
use rollout_controller::orchestrate::{DEFAULT_HOOK_CONCURRENCY, Settings};
use rollout_controller::reconcile::Tunables;
use std::path::PathBuf;
use std::process::ExitCode;
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) gateway: GatewayFlags,
    /// A kubeconfig file; default: in-cluster, else $KUBECONFIG or ~/.kube/config.
    #[arg(long, value_name = "PATH", env = "ROLLOUT_CONTROLLER_KUBECONFIG")]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// The deadline of each hook call (a Go duration, at most 30s).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_HOOK_TIMEOUT")]
    pub(crate) hook_timeout: std::time::Duration,
    /// The hub's name, sent in InitializeRequest.hub_name.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "",
        env = "ROLLOUT_CONTROLLER_HUB_NAME"
    )]
    pub(crate) hub_name: String,
    /// Also keep the gateway's registry ConfigMap `work-controller-config` up
    /// to date with the ClusterManager's workConfiguration.plugins (leader
    /// only; an absent field leaves the ConfigMap alone), in
    /// --register-plugins-namespace.
    #[arg(long, env = "ROLLOUT_CONTROLLER_REGISTER_PLUGINS")]
    pub(crate) register_plugins: bool,
    /// The namespace of the registry ConfigMap (turns the registration on
    /// when given): open-cluster-management-hub in OCM's Default install
    /// mode; in Hosted mode the ClusterManager's name.
    #[arg(
        long,
        value_name = "NS",
        env = "ROLLOUT_CONTROLLER_REGISTER_PLUGINS_NAMESPACE"
    )]
    pub(crate) register_plugins_namespace: Option<String>,
    /// Log format on stderr; json lines carry trace_id and span_id inside a reconcile.
    #[arg(
        long,
        value_enum,
        default_value = "text",
        env = "ROLLOUT_CONTROLLER_LOG_FORMAT"
    )]
    pub(crate) log_format: rollout_telemetry::logs::LogFormat,
    /// Serve /healthz and /readyz for the kubelet, and /metrics for
    /// Prometheus (OpenMetrics when Accept asks for it, else the Prometheus
    /// text), on this address.
    #[arg(long, value_name = "ADDR", env = "ROLLOUT_CONTROLLER_HEALTH_LISTEN")]
    pub(crate) health_listen: Option<std::net::SocketAddr>,
    /// How many clusters of a placement have their hook calls in flight at
    /// once (each cluster's calls stay in order).
    #[arg(long, value_name = "N", env = "ROLLOUT_CONTROLLER_HOOK_CONCURRENCY", default_value_t = DEFAULT_HOOK_CONCURRENCY, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(crate) hook_concurrency: usize,
    /// How long a ManifestWork another field manager wrote is left alone
    /// before the controller applies it again (once per such quiet period).
    #[arg(long, value_name = "D", default_value = "10m", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_CONFLICT_BACKOFF")]
    pub(crate) conflict_backoff: std::time::Duration,
    /// How long another field manager's write of a ManifestWorkReplicaSet's
    /// status (OCM's own controller running) keeps this controller from
    /// reconciling any ManifestWorkReplicaSet.
    #[arg(long, value_name = "D", default_value = "2m", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_OTHER_WRITER_QUIET")]
    pub(crate) other_writer_quiet: std::time::Duration,
    /// Reconcile only while holding a coordination.k8s.io Lease, so that
    /// several replicas can run and exactly one reconciles.
    #[arg(long, env = "ROLLOUT_CONTROLLER_LEADER_ELECT")]
    pub(crate) leader_elect: bool,
    /// The Lease's namespace; default: the pod's (in-cluster).
    #[arg(long, value_name = "NS", env = "POD_NAMESPACE")]
    pub(crate) leader_election_namespace: Option<String>,
    /// The Lease's name.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "rollout-controller",
        env = "ROLLOUT_CONTROLLER_LEADER_ELECTION_NAME"
    )]
    pub(crate) leader_election_name: String,
    /// This replica's name in the Lease (made unique per process); default:
    /// the pod's name.
    #[arg(long, value_name = "ID", env = "POD_NAME")]
    pub(crate) leader_election_identity: Option<String>,
    /// How long a lease lasts without renewal (whole seconds).
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_LEASE_DURATION")]
    pub(crate) lease_duration: std::time::Duration,
    /// How long the leader goes on without renewing before it stops
    /// reconciling (shorter than --lease-duration).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_RENEW_DEADLINE")]
    pub(crate) renew_deadline: std::time::Duration,
    /// How often a candidate tries and the leader renews.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_RETRY_PERIOD")]
    pub(crate) retry_period: std::time::Duration,
}

/// How the gateway is reached: one set of flags for `run` and `simulate`.
#[derive(Debug, Args)]
pub(crate) struct GatewayFlags {
    /// The rollout gateway's gRPC address: http://HOST:PORT (plaintext) or
    /// https://HOST:PORT (TLS).
    #[arg(long, value_name = "URL", default_value = DEFAULT_GATEWAY_URL, value_parser = parse_gateway_url, env = "ROLLOUT_CONTROLLER_GATEWAY")]
    pub(crate) gateway: String,
    /// The CA bundle (PEM) that signed a TLS gateway's certificate (an
    /// `https://` --gateway).
    #[arg(long, value_name = "FILE", env = "ROLLOUT_CONTROLLER_GATEWAY_CA")]
    pub(crate) gateway_ca: Option<PathBuf>,
    /// The client certificate (PEM) presented to a central gateway; its
    /// first DNS SAN (else its CN) names this hub. Needs --client-key.
    #[arg(
        long,
        value_name = "FILE",
        requires = "client_key",
        env = "ROLLOUT_CONTROLLER_CLIENT_CERT"
    )]
    pub(crate) client_cert: Option<PathBuf>,
    /// The key (PEM) of --client-cert.
    #[arg(
        long,
        value_name = "FILE",
        requires = "client_cert",
        env = "ROLLOUT_CONTROLLER_CLIENT_KEY"
    )]
    pub(crate) client_key: Option<PathBuf>,
    /// The name to verify in the gateway's certificate, when not the
    /// --gateway host.
    #[arg(
        long,
        value_name = "NAME",
        env = "ROLLOUT_CONTROLLER_GATEWAY_SERVER_NAME"
    )]
    pub(crate) gateway_server_name: Option<String>,
}

fn parse_gateway_url(text: &str) -> Result<String, GatewayError> {
    check_gateway_url(text)?;
    Ok(text.to_owned())
}

/// Where an in-cluster pod finds its namespace.
const POD_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

impl GatewayFlags {
    /// The gateway's client options, reading the files named.
    pub(crate) fn options(
        &self,
        timeout: std::time::Duration,
    ) -> Result<GatewayOptions, GatewayTlsError> {
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
    pub(crate) fn registration_namespace(&self) -> Option<String> {
        self.register_plugins_namespace.clone().or_else(|| {
            self.register_plugins
                .then(|| rollout_controller::registration::DEFAULT_NAMESPACE.to_owned())
        })
    }

    /// The Lease to elect a leader with, if asked.
    pub(crate) fn leader_election(&self) -> anyhow::Result<Option<LeaseConfig>> {
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

pub(crate) async fn run_command(args: RunArgs) -> anyhow::Result<ExitCode> {
    // Listening from the first moment: a signal during start-up stops it
    // cleanly too.
    let signal = app::signal();
    rollout_telemetry::logs::init(args.log_format);
    let options = RunOptions {
        gateway: args.gateway.options(args.hook_timeout)?,
        reconcile: Tunables {
            hub_name: args.hub_name.clone(),
            settings: Settings {
                hook_concurrency: args.hook_concurrency,
                conflict_backoff: args.conflict_backoff,
                ..Settings::default()
            },
            other_writer_quiet: args.other_writer_quiet,
            ..Tunables::default()
        },
        register_plugins_namespace: args.registration_namespace(),
        health_listen: args.health_listen,
        leader_election: args.leader_election()?,
    };
    let client = app::client(args.kubeconfig.as_deref()).await?;
    app::run(client, options, signal, |_| {}).await?;
    Ok(ExitCode::SUCCESS)
}
