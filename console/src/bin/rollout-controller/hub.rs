//! The commands that read or write one hub with the user's kubeconfig:
//! `get`, `dashboard` and the manual control verbs.

use crate::{EXIT_BAD_INPUT, parse_duration};
use anyhow::Context;
use clap::Args;
use rollout_console::format::error_chain;
use rollout_console::{dashboard, view};
use rollout_controller::app::{self};
use rollout_controller::control;
use rollout_wire::escaped;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
#[command(
    after_help = "The page reads GET /api/rollouts, /api/rollouts/NS/NAME and the \
server-sent events of /api/events[/NS/NAME] (docs/observability.md, \"The dashboard\"). \
It writes nothing to the hub. Exit status: 0 on Ctrl-C or SIGTERM, 1 when the API server \
cannot be reached or the address cannot be bound, 2 for bad flags or a non-loopback \
--listen without --allow-remote."
)]
pub(crate) struct DashboardArgs {
    /// Where to listen (loopback unless --allow-remote).
    #[arg(long, value_name = "ADDR", default_value = dashboard::DEFAULT_LISTEN, env = "ROLLOUT_CONTROLLER_LISTEN")]
    pub(crate) listen: std::net::SocketAddr,
    /// Listen on an address that is not loopback, and answer requests for
    /// any host name: anyone who reaches it reads every rollout, with no
    /// login.
    #[arg(long, env = "ROLLOUT_CONTROLLER_ALLOW_REMOTE")]
    pub(crate) allow_remote: bool,
    /// Only this namespace's ManifestWorkReplicaSets; default: every
    /// namespace's.
    #[arg(short, long, value_name = "NS", env = "ROLLOUT_CONTROLLER_NAMESPACE")]
    pub(crate) namespace: Option<String>,
    /// The most pages served live at once (event streams); more are
    /// refused with 503.
    #[arg(long, value_name = "N", default_value_t = dashboard::DEFAULT_MAX_CLIENTS,
          value_parser = clap::value_parser!(u16).range(1..),
          env = "ROLLOUT_CONTROLLER_MAX_CLIENTS")]
    pub(crate) max_clients: u16,
    /// A kubeconfig file; default: in-cluster, else $KUBECONFIG or ~/.kube/config.
    #[arg(long, value_name = "PATH", env = "ROLLOUT_CONTROLLER_KUBECONFIG")]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// How long the first read may take before the API server counts as
    /// unreachable.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_REQUEST_TIMEOUT")]
    pub(crate) request_timeout: std::time::Duration,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Writes the request on spec.control of the ManifestWorkReplicaSetRollout bound to \
the ManifestWorkReplicaSet (with your kubeconfig's credentials); the controller acts on it in its \
next reconcile and says what came of it in the object's status.control, in `get` and in an \
Event. Exit status: 0 when written (or nothing to write), 1 when the ManifestWorkReplicaSet or its \
ManifestWorkReplicaSetRollout is not found or the API server refuses or cannot be reached, 2 for \
bad flags."
)]
pub(crate) struct ControlArgs {
    /// The ManifestWorkReplicaSet's name.
    pub(crate) name: String,
    /// Its namespace; default: the kubeconfig context's.
    #[arg(short, long, value_name = "NS", env = "ROLLOUT_CONTROLLER_NAMESPACE")]
    pub(crate) namespace: Option<String>,
    /// Why, recorded with the request.
    #[arg(long, value_name = "TEXT", env = "ROLLOUT_CONTROLLER_REASON")]
    pub(crate) reason: Option<String>,
    /// Who asks, recorded when the API server cannot say who you are (a
    /// SelfSubjectReview); default then: the kubeconfig context's user.
    #[arg(long, value_name = "NAME", env = "ROLLOUT_CONTROLLER_BY")]
    pub(crate) by: Option<String>,
    /// A kubeconfig file; default: in-cluster, else $KUBECONFIG or ~/.kube/config.
    #[arg(long, value_name = "PATH", env = "ROLLOUT_CONTROLLER_KUBECONFIG")]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// How long each API call may take.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_REQUEST_TIMEOUT")]
    pub(crate) request_timeout: std::time::Duration,
}

#[derive(Debug, Args)]
pub(crate) struct PromoteArgs {
    #[command(flatten)]
    pub(crate) control: ControlArgs,
    /// The clusters to promote, comma-separated or repeated; default: every
    /// cluster.
    #[arg(
        long = "cluster",
        visible_alias = "clusters",
        value_name = "CLUSTER",
        value_delimiter = ',',
        env = "ROLLOUT_CONTROLLER_CLUSTER"
    )]
    pub(crate) clusters: Vec<String>,
}

#[derive(Debug, Args)]
#[command(
    after_help = "As a kubectl plugin: put a copy or symlink of this binary named \
kubectl-mwrs on PATH, then `kubectl mwrs get NAME --watch`. Exit status: 0 when drawn (with \
--watch: until Ctrl-C or SIGTERM), 1 when the ManifestWorkReplicaSet is not found or the API \
server cannot be reached, 2 for bad flags."
)]
pub(crate) struct GetArgs {
    /// The ManifestWorkReplicaSet's name.
    pub(crate) name: String,
    /// Its namespace; default: the kubeconfig context's.
    #[arg(short, long, value_name = "NS", env = "ROLLOUT_CONTROLLER_NAMESPACE")]
    pub(crate) namespace: Option<String>,
    /// Keep watching and redraw on every change.
    #[arg(short, long, env = "ROLLOUT_CONTROLLER_WATCH")]
    pub(crate) watch: bool,
    /// A kubeconfig file; default: in-cluster, else $KUBECONFIG or ~/.kube/config.
    #[arg(long, value_name = "PATH", env = "ROLLOUT_CONTROLLER_KUBECONFIG")]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// How long the first read may take before the API server counts as
    /// unreachable.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, env = "ROLLOUT_CONTROLLER_REQUEST_TIMEOUT")]
    pub(crate) request_timeout: std::time::Duration,
    /// text, or json: the view as one JSON object (one per line per frame
    /// with --watch).
    #[arg(short, long, value_name = "FORMAT", default_value = "text",
          value_parser = ["text", "json"], env = "ROLLOUT_CONTROLLER_OUTPUT")]
    pub(crate) output: String,
}

pub(crate) async fn get_command(args: &GetArgs) -> anyhow::Result<ExitCode> {
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

pub(crate) async fn dashboard_command(args: &DashboardArgs) -> anyhow::Result<ExitCode> {
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

pub(crate) fn control_command(
    args: &ControlArgs,
    verb: &control::hub::Verb,
) -> anyhow::Result<ExitCode> {
    let options = control::hub::ControlOptions {
        kubeconfig: args.kubeconfig.clone(),
        namespace: args.namespace.clone(),
        name: args.name.clone(),
        request_timeout: args.request_timeout,
        reason: args.reason.clone(),
        by: args.by.clone(),
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the runtime")?;
    match runtime.block_on(control::hub::request(&options, verb)) {
        Ok(written) => {
            println!("{}", escaped(&written.message));
            Ok(ExitCode::SUCCESS)
        }
        Err(err) => {
            eprintln!("rollout-controller: {}", escaped(&error_chain(&err)));
            Ok(ExitCode::FAILURE)
        }
    }
}
