//! `rollout-controller`: the command line of the slim ManifestWorkReplicaSet
//! controller. It parses flags and calls the library; nothing else. One
//! module per group of commands: `run`, `simulate`, `hub` (`get`,
//! `dashboard`, the control verbs) and `offline` (`plan`, `crd`).

use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use rollout_console::format::error_chain;
use rollout_console::view;
use rollout_controller::control;
use rollout_proto::duration::{self, DurationError, Rules};
use rollout_wire::escaped;

mod hub;
mod offline;
mod run;
mod simulate;

use hub::{
    ControlArgs, DashboardArgs, GetArgs, PromoteArgs, control_command, dashboard_command,
    get_command,
};
use offline::{CrdArgs, PlanArgs, crd_command, plan_command};
use run::{RunArgs, run_command};
use simulate::{SimulateArgs, simulate_command};

/// Exit status for input the command cannot use (bad file, JSON or strategy).
pub(crate) const EXIT_BAD_INPUT: u8 = 2;

// The about line is the controller's, spelled out: clap's default would be
// this package's description.
#[derive(Debug, Parser)]
#[command(
    name = "rollout-controller",
    version,
    about = "A slim ManifestWorkReplicaSet controller that runs OCM rollout semantics and calls the rollout gateway."
)]
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
    /// Abort the rollout of the update revision: every updated cluster is
    /// restored to the current revision, as after a plugin's FAILED.
    Abort(ControlArgs),
    /// Start an aborted rollout again, without a template change.
    Retry(ControlArgs),
    /// Pause the rollout: no new cluster starts; clusters in flight go on.
    Pause(ControlArgs),
    /// Resume a paused rollout.
    Resume(ControlArgs),
    /// Skip the current wait (a soak, an INPROGRESS validation) of the
    /// clusters named, or of every cluster; a FAILED verdict stays failed.
    Promote(PromoteArgs),
}

/// A flag's duration: Go's syntax, not negative.
pub(crate) fn parse_duration(text: &str) -> Result<std::time::Duration, DurationError> {
    duration::parse_duration(text, Rules::NotNegative)
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
        Command::Abort(args) => control_command(&args, &control::hub::Verb::Abort),
        Command::Retry(args) => control_command(&args, &control::hub::Verb::Retry),
        Command::Pause(args) => control_command(&args, &control::hub::Verb::Pause),
        Command::Resume(args) => control_command(&args, &control::hub::Verb::Resume),
        Command::Promote(args) => control_command(
            &args.control,
            &control::hub::Verb::Promote(args.clusters.clone()),
        ),
    }
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
        for path in rollout_controller::probes::ENDPOINTS {
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
