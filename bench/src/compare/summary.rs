//! The results of a `gwbench` run: raw rounds, medians per scenario and
//! target, the figures derived against the direct baseline, the JSON file
//! and the Markdown table.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::procfs::Memory;
use super::{Scenario, TargetKind};
use crate::load::{Hook, Report};
use crate::stats::{median, round_to_tenth};

/// One `hookbench` run: one round of one scenario against one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoundRecord {
    /// 1-based round.
    pub round: usize,
    /// Scenario name.
    pub scenario: String,
    /// Target.
    pub target: TargetKind,
    /// `hookbench --json`.
    pub report: Report,
    /// CPU time of the proxy (gateway, or nginx master and workers) per call
    /// of the round, warm-up included, in µs; `None` for the direct target.
    pub proxy_cpu_micros_per_call: Option<f64>,
    /// CPU time of the echo plugin per call, in µs.
    pub plugin_cpu_micros_per_call: Option<f64>,
}

/// CPU time per call, in µs, from a tick count over some calls.
pub fn cpu_micros_per_call(ticks: u64, ticks_per_second: u64, calls: u64) -> Option<f64> {
    (calls > 0 && ticks_per_second > 0)
        .then(|| round_to_tenth(ticks as f64 * 1e6 / ticks_per_second as f64 / calls as f64))
}

/// Medians over the rounds of one scenario and target, and the comparison
/// with the direct target of the same scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetSummary {
    /// Target.
    pub target: TargetKind,
    /// Rounds that went into the medians.
    pub rounds: usize,
    /// Median of the rounds' p50 latency, µs.
    pub p50_micros: f64,
    /// Median of the rounds' p99 latency, µs.
    pub p99_micros: f64,
    /// Median of the rounds' throughput, calls per second.
    pub throughput_rps: f64,
    /// Failed calls over all rounds.
    pub errors: u64,
    /// Calls over all rounds (measured phases).
    pub requests: u64,
    /// Median proxy CPU per call, µs.
    pub proxy_cpu_micros_per_call: Option<f64>,
    /// Median plugin CPU per call, µs.
    pub plugin_cpu_micros_per_call: Option<f64>,
    /// `p50_micros` minus the direct target's.
    pub added_p50_micros: Option<f64>,
    /// `p99_micros` minus the direct target's.
    pub added_p99_micros: Option<f64>,
    /// `throughput_rps` over the direct target's.
    pub throughput_ratio: Option<f64>,
}

/// Every target of one scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScenarioSummary {
    /// The scenario.
    #[serde(flatten)]
    pub scenario: Scenario,
    /// One entry per target that has rounds, in the order of `targets`.
    pub targets: Vec<TargetSummary>,
}

/// Medians per scenario and target, with the figures derived against the
/// direct target (absent when it has no rounds).
pub fn summarize(
    scenarios: &[Scenario],
    targets: &[TargetKind],
    rounds: &[RoundRecord],
) -> Vec<ScenarioSummary> {
    scenarios
        .iter()
        .map(|scenario| {
            let mut summaries: Vec<TargetSummary> = targets
                .iter()
                .filter_map(|&target| {
                    let runs: Vec<&RoundRecord> = rounds
                        .iter()
                        .filter(|r| r.scenario == scenario.name && r.target == target)
                        .collect();
                    summarize_target(target, &runs)
                })
                .collect();
            let direct = summaries
                .iter()
                .find(|s| s.target == TargetKind::Direct)
                .cloned();
            if let Some(direct) = direct {
                for summary in &mut summaries {
                    summary.added_p50_micros =
                        Some(round_to_tenth(summary.p50_micros - direct.p50_micros));
                    summary.added_p99_micros =
                        Some(round_to_tenth(summary.p99_micros - direct.p99_micros));
                    summary.throughput_ratio = (direct.throughput_rps > 0.0).then(|| {
                        (summary.throughput_rps / direct.throughput_rps * 1000.0).round() / 1000.0
                    });
                }
            }
            ScenarioSummary {
                scenario: scenario.clone(),
                targets: summaries,
            }
        })
        .collect()
}

fn summarize_target(target: TargetKind, runs: &[&RoundRecord]) -> Option<TargetSummary> {
    let of = |f: &dyn Fn(&RoundRecord) -> Option<f64>| {
        let values: Vec<f64> = runs.iter().filter_map(|r| f(r)).collect();
        median(&values).map(round_to_tenth)
    };
    Some(TargetSummary {
        target,
        rounds: runs.len(),
        p50_micros: of(&|r| Some(r.report.latency_micros.p50))?,
        p99_micros: of(&|r| Some(r.report.latency_micros.p99))?,
        throughput_rps: of(&|r| Some(r.report.throughput_rps))?,
        errors: runs.iter().map(|r| r.report.errors).sum(),
        requests: runs.iter().map(|r| r.report.requests).sum(),
        proxy_cpu_micros_per_call: of(&|r| r.proxy_cpu_micros_per_call),
        plugin_cpu_micros_per_call: of(&|r| r.plugin_cpu_micros_per_call),
        added_p50_micros: None,
        added_p99_micros: None,
        throughput_ratio: None,
    })
}

/// How the run was set up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Settings {
    /// The hook called.
    pub hook: Hook,
    /// Rounds per scenario and target.
    pub rounds: usize,
    /// Measured seconds per `hookbench` run.
    pub duration_seconds: f64,
    /// Warm-up seconds per `hookbench` run.
    pub warmup_seconds: f64,
    /// HTTP/2 connections per `hookbench` run.
    pub connections: usize,
    /// Plugins in the gateway's registry.
    pub registered_plugins: usize,
    /// The scenarios, in order.
    pub scenarios: Vec<Scenario>,
    /// The targets, in the order of the first round.
    pub targets: Vec<TargetKind>,
}

/// The machine and the tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Environment {
    /// CPUs available to the benchmark.
    pub cpus: usize,
    /// Clock ticks per second of `/proc/PID/stat`.
    pub clock_ticks_per_second: u64,
    /// `nginx -v`, when nginx took part.
    pub nginx_version: Option<String>,
    /// Why nginx did not take part, when it did not.
    pub nginx_skipped: Option<String>,
    /// Seconds since the Unix epoch at the start.
    pub started_at_unix: u64,
}

/// Memory of the proxies, idle and after the runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryReport {
    /// The gateway right after it became ready.
    pub gateway_idle: Option<Memory>,
    /// The gateway after every round.
    pub gateway_after_runs: Option<Memory>,
    /// nginx master and workers, summed, right after start.
    pub nginx_idle: Option<Memory>,
    /// nginx master and workers, summed, after every round.
    pub nginx_after_runs: Option<Memory>,
    /// nginx processes (master and workers).
    pub nginx_processes: Option<usize>,
    /// The echo plugin after every round.
    pub plugin_after_runs: Option<Memory>,
}

/// Everything `gwbench` writes to its JSON file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BenchResults {
    /// How the run was set up.
    pub settings: Settings,
    /// The machine and the tools.
    pub environment: Environment,
    /// Medians and derived figures.
    pub summary: Vec<ScenarioSummary>,
    /// Memory of the proxies.
    pub memory: MemoryReport,
    /// Every `hookbench` run.
    pub rounds: Vec<RoundRecord>,
}

/// The Markdown tables for `docs/performance.md`.
pub fn markdown(results: &BenchResults) -> String {
    let settings = &results.settings;
    let env = &results.environment;
    let mut out = String::new();
    let nginx = match (&env.nginx_version, &env.nginx_skipped) {
        (Some(version), _) => format!(", {version}"),
        (None, Some(reason)) => format!(", nginx skipped ({reason})"),
        (None, None) => String::new(),
    };
    let _ = writeln!(
        out,
        "Hook `{}`, {} rounds of {} s per target and scenario (after {} s of warm-up), targets alternating \
         within each round; {} HTTP/2 connection(s); {} plugins registered in the gateway; {} CPUs{nginx}. \
         Figures are medians over the rounds; \"added\" is the difference to calling the plugin directly.\n",
        settings.hook.as_str(),
        settings.rounds,
        settings.duration_seconds,
        settings.warmup_seconds,
        settings.connections,
        settings.registered_plugins,
        env.cpus,
    );
    out.push_str(
        "| scenario | target | p50 µs | p99 µs | calls/s | added p50 µs | added p99 µs | calls/s vs direct | proxy CPU µs/call | errors |\n",
    );
    out.push_str("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    for scenario in &results.summary {
        for t in &scenario.targets {
            let direct = t.target == TargetKind::Direct;
            let added = |value: Option<f64>| match value {
                Some(v) if !direct => format!("{v:+.1}"),
                _ => "–".to_owned(),
            };
            let ratio = match t.throughput_ratio {
                Some(r) if !direct => format!("{r:.2}×"),
                _ => "–".to_owned(),
            };
            let cpu = t
                .proxy_cpu_micros_per_call
                .map_or("–".to_owned(), |v| format!("{v:.1}"));
            let _ = writeln!(
                out,
                "| {} | {} | {:.1} | {:.1} | {:.0} | {} | {} | {} | {} | {} |",
                scenario.scenario.name,
                t.target,
                t.p50_micros,
                t.p99_micros,
                t.throughput_rps,
                added(t.added_p50_micros),
                added(t.added_p99_micros),
                ratio,
                cpu,
                t.errors,
            );
        }
    }

    let memory = &results.memory;
    let mib = |m: Option<Memory>, peak: bool| {
        m.map_or("–".to_owned(), |m| {
            format!(
                "{:.1} MiB",
                (if peak { m.hwm_kib } else { m.rss_kib }) as f64 / 1024.0
            )
        })
    };
    out.push_str("\n| process | RSS idle | RSS after runs | peak RSS (VmHWM) after runs |\n");
    out.push_str("|---|--:|--:|--:|\n");
    if memory.gateway_idle.is_some() || memory.gateway_after_runs.is_some() {
        let _ = writeln!(
            out,
            "| rollout-gateway ({} plugins registered) | {} | {} | {} |",
            settings.registered_plugins,
            mib(memory.gateway_idle, false),
            mib(memory.gateway_after_runs, false),
            mib(memory.gateway_after_runs, true),
        );
    }
    if memory.nginx_idle.is_some() || memory.nginx_after_runs.is_some() {
        let processes = memory
            .nginx_processes
            .map_or(String::new(), |n| format!(", {n} processes summed"));
        let _ = writeln!(
            out,
            "| nginx (master + workers{processes}) | {} | {} | {} |",
            mib(memory.nginx_idle, false),
            mib(memory.nginx_after_runs, false),
            mib(memory.nginx_after_runs, true),
        );
    }
    if memory.plugin_after_runs.is_some() {
        let _ = writeln!(
            out,
            "| echo-plugin | – | {} | {} |",
            mib(memory.plugin_after_runs, false),
            mib(memory.plugin_after_runs, true),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::LatencySummary;

    fn record(round: usize, target: TargetKind, p50: f64, p99: f64, rps: f64) -> RoundRecord {
        RoundRecord {
            round,
            scenario: "c1-4k".to_owned(),
            target,
            report: Report {
                target: "http://127.0.0.1:1".to_owned(),
                hook: Hook::Mutate,
                concurrency: 1,
                connections: 1,
                work_bytes: 4096,
                requests: 1000,
                errors: 0,
                warmup_requests: 100,
                duration_seconds: 1.0,
                throughput_rps: rps,
                latency_micros: LatencySummary {
                    p50,
                    p90: p99,
                    p99,
                    max: p99,
                    mean: p50,
                },
                error_samples: Vec::new(),
            },
            proxy_cpu_micros_per_call: (target != TargetKind::Direct)
                .then_some(20.0 + round as f64),
            plugin_cpu_micros_per_call: Some(10.0),
        }
    }

    #[test]
    fn medians_and_derived_figures() {
        let scenario = Scenario::parse("c1-4k").expect("valid");
        let rounds = vec![
            record(1, TargetKind::Direct, 50.0, 90.0, 10_000.0),
            record(2, TargetKind::Direct, 40.0, 80.0, 12_000.0),
            record(3, TargetKind::Direct, 45.0, 500.0, 11_000.0),
            record(1, TargetKind::Gateway, 80.0, 150.0, 6_000.0),
            record(2, TargetKind::Gateway, 75.0, 140.0, 6_600.0),
            record(3, TargetKind::Gateway, 90.0, 145.0, 5_000.0),
        ];
        let targets = [TargetKind::Direct, TargetKind::Gateway, TargetKind::Nginx];
        let summary = summarize(std::slice::from_ref(&scenario), &targets, &rounds);
        assert_eq!(summary.len(), 1);
        // nginx has no rounds: left out.
        assert_eq!(summary[0].targets.len(), 2);
        let direct = &summary[0].targets[0];
        assert_eq!(
            (direct.p50_micros, direct.p99_micros, direct.throughput_rps),
            (45.0, 90.0, 11_000.0)
        );
        assert_eq!(direct.added_p50_micros, Some(0.0));
        assert_eq!(direct.proxy_cpu_micros_per_call, None);
        let gateway = &summary[0].targets[1];
        assert_eq!(gateway.p50_micros, 80.0);
        assert_eq!(gateway.added_p50_micros, Some(35.0));
        assert_eq!(gateway.added_p99_micros, Some(55.0));
        assert_eq!(gateway.throughput_ratio, Some(0.545));
        assert_eq!(gateway.proxy_cpu_micros_per_call, Some(22.0));
        assert_eq!(gateway.requests, 3000);

        let results = BenchResults {
            settings: Settings {
                hook: Hook::Mutate,
                rounds: 3,
                duration_seconds: 3.0,
                warmup_seconds: 0.5,
                connections: 1,
                registered_plugins: 100,
                scenarios: vec![scenario],
                targets: targets.to_vec(),
            },
            environment: Environment {
                cpus: 2,
                clock_ticks_per_second: 100,
                nginx_version: None,
                nginx_skipped: Some("--no-nginx".to_owned()),
                started_at_unix: 0,
            },
            summary,
            memory: MemoryReport {
                gateway_idle: Some(Memory {
                    rss_kib: 10240,
                    hwm_kib: 10240,
                }),
                ..MemoryReport::default()
            },
            rounds,
        };
        let table = markdown(&results);
        assert!(
            table.contains(
                "| c1-4k | gateway | 80.0 | 145.0 | 6000 | +35.0 | +55.0 | 0.55× | 22.0 | 0 |"
            ),
            "{table}"
        );
        assert!(
            table.contains("| c1-4k | direct | 45.0 | 90.0 | 11000 | – | – | – | – | 0 |"),
            "{table}"
        );
        assert!(
            table.contains("| rollout-gateway (100 plugins registered) | 10.0 MiB |"),
            "{table}"
        );
        assert!(table.contains("nginx skipped (--no-nginx)"));

        let json = serde_json::to_string(&results).expect("serializable");
        let back: BenchResults = serde_json::from_str(&json).expect("round trip");
        assert_eq!(serde_json::to_string(&back).expect("serializable"), json);
    }

    #[test]
    fn cpu_per_call() {
        assert_eq!(cpu_micros_per_call(30, 100, 10_000), Some(30.0));
        assert_eq!(cpu_micros_per_call(1, 100, 3), Some(3333.3));
        assert_eq!(cpu_micros_per_call(30, 100, 0), None);
    }
}
