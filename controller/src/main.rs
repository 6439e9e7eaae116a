//! `rollout-controller`: the command line of the slim ManifestWorkReplicaSet
//! controller. It parses flags and calls the library; nothing else.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use jiff::Timestamp;
use rollout_controller::plan;

/// Exit status for input the command cannot use (bad file, JSON or strategy).
const EXIT_BAD_INPUT: u8 = 2;

#[derive(Debug, Parser)]
#[command(name = "rollout-controller", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// `run`, `simulate` and `crd` join `plan` here, one variant and one function
// each.
#[derive(Debug, Subcommand)]
enum Command {
    /// One decision of the rollout engine, as JSON in and out.
    Plan(PlanArgs),
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

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::Plan(args) => plan_command(&args),
    }
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
