//! `rollout-controller`: the command line of the slim ManifestWorkReplicaSet
//! controller. It parses flags and calls the library; nothing else.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use jiff::Timestamp;
use rollout_controller::{api, plan};

/// Exit status for input the command cannot use (bad file, JSON or strategy).
const EXIT_BAD_INPUT: u8 = 2;

#[derive(Debug, Parser)]
#[command(name = "rollout-controller", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// `run` and `simulate` join `plan` and `crd` here, one variant and one
// function each.
#[derive(Debug, Subcommand)]
enum Command {
    /// One decision of the rollout engine, as JSON in and out.
    Plan(PlanArgs),
    /// Print the CRDs the controller uses, as multi-document YAML.
    Crd(CrdArgs),
}

#[derive(Debug, Args)]
struct PlanArgs {
    /// The input document; `-` reads standard input.
    #[arg(long, value_name = "FILE")]
    input: String,
    /// Indent the output.
    #[arg(long)]
    pretty: bool,
}

#[derive(Debug, Args)]
struct CrdArgs {
    /// Write one file per CRD and a kustomization.yaml into DIR (created if
    /// missing) instead of printing.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::Plan(args) => plan_command(&args),
        Command::Crd(args) => crd_command(&args),
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
