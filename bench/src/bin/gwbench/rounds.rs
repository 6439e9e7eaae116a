//! The rounds: every scenario against every target, alternating, each run
//! a `hookbench` with the CPU its target spent.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use rollout_bench::compare::summary::{RoundRecord, cpu_micros_per_call};
use rollout_bench::compare::{Scenario, TargetKind};
use rollout_harness::load::{Report, hook_flag};
use rollout_harness::process as processes;
use rollout_harness::procfs;
use tokio::process::Command;

use crate::launch::{Target, Traced};
use crate::plan::Plan;
use crate::running::Running;

/// Runs every round: each scenario against each target that runs in it,
/// the order rotating from round to round.
pub(crate) async fn run_rounds(
    plan: &Plan,
    running: &mut Running,
) -> anyhow::Result<Vec<RoundRecord>> {
    let args = &plan.args;
    let ticks_per_second = procfs::clock_ticks_per_second();
    let targets = running.targets();
    let in_scenario = |scenario: &Scenario| -> Vec<&Target> {
        targets
            .iter()
            .filter(|t| t.runs_in(scenario, &plan.traced_scenarios))
            .collect()
    };
    let runs = args.rounds
        * plan
            .scenarios
            .iter()
            .map(|s| in_scenario(s).len())
            .sum::<usize>();
    let estimate = (args.duration + args.warmup).as_secs_f64() * runs as f64;
    eprintln!(
        "gwbench: {runs} runs, about {:.0} s (plus start-up and hookbench's own)",
        estimate.ceil()
    );
    let mut records = Vec::with_capacity(runs);
    for round in 1..=args.rounds {
        for scenario in &plan.scenarios {
            let in_scenario = in_scenario(scenario);
            // Rotate the order every round so no target always runs first
            // (after a pause) or last (on a warmer machine).
            let offset = (round - 1) % in_scenario.len();
            for index in 0..in_scenario.len() {
                let target = in_scenario[(offset + index) % in_scenario.len()];
                running.ensure_running()?;
                eprint!(
                    "round {round}/{} {} {} ... ",
                    args.rounds, scenario.name, target.kind
                );
                let plugin_pid = running
                    .plugins
                    .get(&scenario.plugin_mode)
                    .map(|plugin| plugin.pid)
                    .context("no plugin for the scenario")?;
                let record =
                    run_round(plan, round, scenario, target, plugin_pid, ticks_per_second).await?;
                eprintln!("{}", progress(&record, running.traced.as_ref()));
                records.push(record);
            }
        }
    }
    Ok(records)
}

/// The progress line of one run: its latency, throughput, CPU and errors.
pub(crate) fn progress(record: &RoundRecord, traced: Option<&Traced>) -> String {
    let latency = &record.report.latency_micros;
    let mut line = format!(
        "p50 {:.1} µs, p99 {:.1} µs, {:.0} calls/s",
        latency.p50, latency.p99, record.report.throughput_rps
    );
    if let Some(cpu) = record.proxy_cpu_micros_per_call {
        let _ = write!(line, ", proxy CPU {cpu:.1} µs/call");
    }
    if let (TargetKind::GatewayTraced, Some(traced)) = (record.target, traced) {
        let _ = write!(line, ", {} spans so far", traced.receiver.counts().spans);
    }
    if record.report.errors > 0 {
        let _ = write!(
            line,
            ", {} ERRORS: {:?}",
            record.report.errors, record.report.error_samples
        );
    }
    line
}

/// One hookbench run against one target, with the CPU time the target's
/// processes and the plugin spent on it.
pub(crate) async fn run_round(
    plan: &Plan,
    round: usize,
    scenario: &Scenario,
    target: &Target,
    plugin_pid: u32,
    ticks_per_second: u64,
) -> anyhow::Result<RoundRecord> {
    let args = &plan.args;
    let url = target.urls.get(&scenario.plugin_mode).with_context(|| {
        format!(
            "{} has no route to the {} plugin",
            target.kind,
            scenario.plugin_mode.plugin_name()
        )
    })?;
    let mut command = Command::new(&plan.hookbench);
    command
        .args(["--target", url])
        .args(["--hook", hook_flag::name(args.hook)])
        .args(["--concurrency", &scenario.concurrency.to_string()])
        .args(["--connections", &args.connections.to_string()])
        .args(["--work-bytes", &scenario.work_bytes.to_string()])
        .args(["--duration", &seconds(args.duration)])
        .args(["--warmup", &seconds(args.warmup)])
        .args(["--timeout", &seconds(args.timeout)])
        .args(["--threads", &args.hookbench_threads.to_string()])
        .arg("--json");
    if target.kind.is_gateway() {
        command.args(["--plugin", scenario.plugin_mode.plugin_name()]);
    }

    let proxy_before = procfs::cpu_ticks(&target.proxy_pids);
    let plugin_before = procfs::cpu_ticks(&[plugin_pid]);
    let output = processes::output(command)
        .await
        .context("cannot run hookbench")?;
    let proxy_ticks = procfs::cpu_ticks(&target.proxy_pids).saturating_sub(proxy_before);
    let plugin_ticks = procfs::cpu_ticks(&[plugin_pid]).saturating_sub(plugin_before);

    // hookbench prints its report even when every call failed (and exits 1).
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Report = serde_json::from_str(stdout.trim()).with_context(|| {
        format!(
            "hookbench against {} ({url}) gave no report ({}): {}",
            target.kind,
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )
    })?;
    // The ticks cover the warm-up as well, so divide by every call made.
    let calls = report.requests + report.warmup_requests;
    Ok(RoundRecord {
        round,
        scenario: scenario.name.clone(),
        target: target.kind,
        proxy_cpu_micros_per_call: if target.proxy_pids.is_empty() {
            None
        } else {
            cpu_micros_per_call(proxy_ticks, ticks_per_second, calls)
        },
        plugin_cpu_micros_per_call: cpu_micros_per_call(plugin_ticks, ticks_per_second, calls),
        report,
    })
}

/// A duration as hookbench reads it (`3s`, `0.5s`).
pub(crate) fn seconds(duration: Duration) -> String {
    format!("{}s", duration.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use rollout_bench::units::parse_duration;

    use super::*;

    #[test]
    fn durations_for_hookbench() {
        assert_eq!(seconds(Duration::from_secs(3)), "3s");
        assert_eq!(seconds(Duration::from_millis(500)), "0.5s");
        assert_eq!(
            parse_duration(&seconds(Duration::from_millis(1250))),
            Ok(Duration::from_millis(1250))
        );
    }
}
