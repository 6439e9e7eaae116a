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
#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
    )
)]

mod args;
mod launch;
mod plan;
mod rounds;
mod running;
mod yardsticks;

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, anyhow};
use clap::Parser;
use rollout_bench::compare::TargetKind;
use rollout_bench::compare::machine;
use rollout_bench::compare::summary::{
    BenchResults, Environment, Settings, goals, markdown, summarize,
};
use tokio::signal::unix::{SignalKind, signal};

use crate::args::Args;
use crate::launch::set_world_readable;
use crate::plan::Plan;
use crate::rounds::run_rounds;
use crate::running::{Running, count_spans, read_memory_after_runs, start_all};

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

fn write_results(path: &Path, results: &BenchResults) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let json = serde_json::to_string_pretty(results).context("cannot serialize the results")?;
    std::fs::write(path, json + "\n").with_context(|| format!("cannot write {}", path.display()))
}
