//! The commands that need no hub and no gateway: `plan` and `crd`.

use crate::EXIT_BAD_INPUT;
use anyhow::Context;
use clap::Args;
use jiff::Timestamp;
use rollout_controller::{api, plan};
use rollout_wire::escaped;
use std::path::PathBuf;
use std::process::ExitCode;
#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// The input document; `-` reads standard input.
    #[arg(long, value_name = "FILE", env = "ROLLOUT_CONTROLLER_INPUT")]
    pub(crate) input: String,
    /// Indent the output.
    #[arg(long, env = "ROLLOUT_CONTROLLER_PRETTY")]
    pub(crate) pretty: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CrdArgs {
    /// Write one file per CRD and a kustomization.yaml into DIR (created if
    /// missing) instead of printing.
    /// Every shape goes there: the project's own CRDs at the top, OCM's
    /// kinds without the additions under ocm/ and with them under design/.
    #[arg(long, value_name = "DIR", env = "ROLLOUT_CONTROLLER_OUT")]
    pub(crate) out: Option<PathBuf>,
    /// Print OCM's kinds without the design's additions: this crate's
    /// schemas minus the fields the design adds. Not OCM's own CRDs (their
    /// schemas and defaults differ): validate against those, from the
    /// `open-cluster-management.io/api` module, where fidelity matters.
    #[arg(
        long,
        conflicts_with = "out",
        env = "ROLLOUT_CONTROLLER_WITHOUT_ADDITIONS"
    )]
    pub(crate) without_additions: bool,
    /// The former name of --without-additions (deprecated; it never printed
    /// OCM's own CRDs).
    #[arg(
        long,
        hide = true,
        conflicts_with = "out",
        env = "ROLLOUT_CONTROLLER_OCM_SHAPED"
    )]
    pub(crate) ocm_shaped: bool,
}

pub(crate) fn crd_command(args: &CrdArgs) -> anyhow::Result<ExitCode> {
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

pub(crate) fn plan_command(args: &PlanArgs) -> anyhow::Result<ExitCode> {
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
