//! The results of a `gwbench` run: raw rounds, medians per scenario and
//! target, the figures derived against the direct baseline, the cost of
//! exported tracing (the traced gateway against the untraced one), the
//! performance goals checked against the medians ([`goals`]), the JSON file
//! and the Markdown tables.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::machine::LoadAverage;
use super::{Scenario, TargetKind};
use rollout_harness::load::{Report, hook_flag};
use rollout_harness::procfs::Memory;
use rollout_harness::stats::{median, round_to_tenth};
use rollout_proto::HookKind;

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
    /// Tracing on vs off: present when both gateways and the direct target
    /// have rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing: Option<TracingOverhead>,
}

/// What exporting spans costs in one scenario: the traced gateway's figures
/// next to the untraced gateway's. Latencies are "added" ones (over the
/// direct target), so the plugin's own time does not dilute the ratio.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TracingOverhead {
    /// Added p50 of the untraced gateway, µs.
    pub added_p50_off_micros: f64,
    /// Added p50 of the traced gateway, µs.
    pub added_p50_on_micros: f64,
    /// `added_p50_on_micros / added_p50_off_micros` (1.15 = 15 % more);
    /// `None` when the untraced gateway added nothing measurable (≤ 0).
    pub added_p50_ratio: Option<f64>,
    /// Added p99 of the untraced gateway, µs.
    pub added_p99_off_micros: f64,
    /// Added p99 of the traced gateway, µs.
    pub added_p99_on_micros: f64,
    /// `added_p99_on_micros / added_p99_off_micros`, as for p50.
    pub added_p99_ratio: Option<f64>,
    /// The traced gateway's throughput over the untraced one's.
    pub throughput_ratio: Option<f64>,
    /// Proxy CPU per call of the untraced gateway, µs.
    pub proxy_cpu_off_micros_per_call: Option<f64>,
    /// Proxy CPU per call of the traced gateway, µs.
    pub proxy_cpu_on_micros_per_call: Option<f64>,
}

/// The goal for tracing: the added latency with spans exported at most this
/// much above the added latency without ("at most 15% more" at one call in flight;
/// the goals allow [`TRACING_GOAL_RATIO_C32`]
/// at 32).
pub const TRACING_GOAL_RATIO: f64 = 1.15;

/// `on / off` to three decimals; `None` unless `off` is positive.
pub fn ratio(on: f64, off: f64) -> Option<f64> {
    (off > 0.0 && on.is_finite()).then(|| (on / off * 1000.0).round() / 1000.0)
}

/// A ratio as a change in percent: 1.083 → `+8.3 %`, 0.95 → `-5.0 %`.
pub fn percent_change(ratio: f64) -> String {
    let percent = (ratio - 1.0) * 100.0;
    // No "-0.0 %".
    let percent = if percent.abs() < 0.05 { 0.0 } else { percent };
    format!("{percent:+.1} %")
}

/// Tracing on vs off from the summaries of one scenario: `None` unless the
/// direct target and both gateways are there (the added figures need the
/// direct one).
pub fn tracing_overhead(targets: &[TargetSummary]) -> Option<TracingOverhead> {
    let find = |kind| targets.iter().find(|t| t.target == kind);
    let off = find(TargetKind::Gateway)?;
    let on = find(TargetKind::GatewayTraced)?;
    let (p50_off, p50_on) = (off.added_p50_micros?, on.added_p50_micros?);
    let (p99_off, p99_on) = (off.added_p99_micros?, on.added_p99_micros?);
    Some(TracingOverhead {
        added_p50_off_micros: p50_off,
        added_p50_on_micros: p50_on,
        added_p50_ratio: ratio(p50_on, p50_off),
        added_p99_off_micros: p99_off,
        added_p99_on_micros: p99_on,
        added_p99_ratio: ratio(p99_on, p99_off),
        throughput_ratio: ratio(on.throughput_rps, off.throughput_rps),
        proxy_cpu_off_micros_per_call: off.proxy_cpu_micros_per_call,
        proxy_cpu_on_micros_per_call: on.proxy_cpu_micros_per_call,
    })
}

/// Spans a call through the traced gateway should produce with one plugin:
/// the server span and the client span of its one attempt.
pub const EXPECTED_SPANS_PER_CALL: u64 = 2;

/// Below this share of the expected spans, `gwbench` warns: the export is
/// broken, or the gateway's batch processor dropped spans (queue full).
pub const SPAN_SHORTFALL_WARNING: f64 = 0.9;

/// What the OTLP receiver got from the traced gateway, against the calls
/// made through it, so a silently broken export shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpanReport {
    /// Calls made through the traced gateway over every round and scenario,
    /// warm-up and failed calls included.
    pub calls: u64,
    /// Spans the receiver got.
    pub spans_received: u64,
    /// Export requests (batches) the receiver got.
    pub export_requests: u64,
    /// `spans_received / calls`, to three decimals.
    pub spans_per_call: Option<f64>,
    /// What one call should produce ([`EXPECTED_SPANS_PER_CALL`]).
    pub expected_spans_per_call: u64,
    /// Whether the count was taken after the traced gateway exited on
    /// SIGTERM, i.e. after its final flush; if not, up to a batch (and the
    /// spans of the last `OTEL_BSP_SCHEDULE_DELAY`) may be missing.
    pub flushed: bool,
    /// The `OTEL_*` variables the traced gateway ran with.
    pub exporter_env: BTreeMap<String, String>,
}

impl SpanReport {
    /// The report for `spans_received` spans in `export_requests` batches
    /// over `calls` calls.
    pub fn new(
        calls: u64,
        spans_received: u64,
        export_requests: u64,
        flushed: bool,
        exporter_env: BTreeMap<String, String>,
    ) -> Self {
        Self {
            calls,
            spans_received,
            export_requests,
            spans_per_call: (calls > 0)
                .then(|| (spans_received as f64 / calls as f64 * 1000.0).round() / 1000.0),
            expected_spans_per_call: EXPECTED_SPANS_PER_CALL,
            flushed,
            exporter_env,
        }
    }

    /// Spans the calls should have produced.
    pub fn expected_spans(&self) -> u64 {
        self.calls.saturating_mul(self.expected_spans_per_call)
    }

    /// A warning when the receiver got far fewer spans than expected.
    pub fn shortfall_warning(&self) -> Option<String> {
        let expected = self.expected_spans();
        if expected == 0 || self.spans_received as f64 >= expected as f64 * SPAN_SHORTFALL_WARNING {
            return None;
        }
        let share = self.spans_received as f64 / expected as f64 * 100.0;
        let mut why = if self.spans_received == 0 {
            "nothing arrived: the traced gateway did not export (check its log)".to_owned()
        } else {
            "the export failed in part, or the gateway's batch processor dropped spans \
             (queue full; see OTEL_BSP_MAX_QUEUE_SIZE)"
                .to_owned()
        };
        if !self.flushed {
            why.push_str("; the traced gateway did not stop cleanly, so its last batch is missing");
        }
        if self.exporter_env.contains_key("OTEL_TRACES_SAMPLER") {
            why.push_str("; OTEL_TRACES_SAMPLER is set, which may sample spans out");
        }
        Some(format!(
            "the OTLP receiver got {} spans for {} calls through the traced gateway, \
             {share:.1} % of the {expected} expected ({} per call): {why}",
            self.spans_received, self.calls, self.expected_spans_per_call
        ))
    }
}

/// Calls made through `target` over `rounds`, warm-up included.
pub fn calls_made(rounds: &[RoundRecord], target: TargetKind) -> u64 {
    rounds
        .iter()
        .filter(|r| r.target == target)
        .map(|r| r.report.requests + r.report.warmup_requests)
        .sum()
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
                tracing: tracing_overhead(&summaries),
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

/// The goal's bound on the gateway's peak resident memory with
/// [`MEMORY_GOAL_PLUGINS`] plugins registered, MiB.
pub const MEMORY_GOAL_MIB: f64 = 16.0;
/// The registry size the memory goal is stated for.
pub const MEMORY_GOAL_PLUGINS: usize = 100;
/// The goal's bound on tracing at 32 calls in flight: the traced gateway's
/// added p50 at most this times the untraced one's (at one call in flight
/// it is [`TRACING_GOAL_RATIO`]).
pub const TRACING_GOAL_RATIO_C32: f64 = 1.30;
/// The scenarios of the goals at one call in flight.
pub const GOAL_C1_SCENARIOS: [&str; 2] = ["c1-4k", "c1-4k-mut"];
/// The scenario of the throughput goal under load.
pub const GOAL_C32_SCENARIO: &str = "c32-4k-mut";

/// Whether a goal is met by the run's medians.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum GoalStatus {
    /// The figure is on the right side of the yardstick (ties count).
    Met,
    /// It is not.
    Missed,
    /// The run has no figure for it (a scenario or a target left out, or
    /// a ratio over nothing); [`Goal::note`] says why.
    NotMeasured,
}

impl GoalStatus {
    /// `met`, `missed`, `not measured`.
    pub fn as_str(self) -> &'static str {
        match self {
            GoalStatus::Met => "met",
            GoalStatus::Missed => "missed",
            GoalStatus::NotMeasured => "not measured",
        }
    }
}

/// What a goal's figures are, for printing them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum GoalUnit {
    /// Added latency, µs.
    AddedMicros,
    /// CPU time per call, µs.
    MicrosPerCall,
    /// Throughput over the direct target's (`calls/s vs direct`).
    ShareOfDirect,
    /// Resident memory, MiB.
    Mib,
    /// Traced over untraced added latency (1.15 = 15 % more).
    Ratio,
}

impl GoalUnit {
    /// A figure of this unit as the tables show it.
    pub fn format(self, value: f64) -> String {
        match self {
            GoalUnit::AddedMicros => format!("{value:+.1} µs"),
            GoalUnit::MicrosPerCall => format!("{value:.1} µs"),
            GoalUnit::ShareOfDirect => format!("{value:.2}×"),
            GoalUnit::Mib => format!("{value:.1} MiB"),
            GoalUnit::Ratio => percent_change(value),
        }
    }
}

/// One performance goal, checked against the run's medians.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Goal {
    /// The goal, e.g. `c1-4k: gateway added p50 ≤ HAProxy's`.
    pub goal: String,
    /// The scenario whose medians it uses, if any.
    pub scenario: Option<String>,
    /// The gateway's figure.
    pub figure: Option<f64>,
    /// What it is held against: the yardstick's figure or a fixed bound.
    pub yardstick: Option<f64>,
    /// What the yardstick is, e.g. `haproxy`, `nginx`, `bound`.
    pub yardstick_name: String,
    /// The unit of both figures.
    pub unit: GoalUnit,
    /// `figure ≤ yardstick` (true) or `figure ≥ yardstick` (false).
    pub at_most: bool,
    /// Met, missed or not measured.
    pub status: GoalStatus,
    /// Why it was not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Goal {
    /// A goal comparing `figure` with `yardstick`; not measured when either
    /// is missing, with `missing` saying why.
    #[allow(clippy::too_many_arguments)]
    fn compare(
        goal: String,
        scenario: Option<&str>,
        figure: Result<f64, Missing>,
        yardstick: Result<f64, Missing>,
        yardstick_name: &str,
        unit: GoalUnit,
        at_most: bool,
    ) -> Self {
        let (status, note) = match (&figure, &yardstick) {
            (Ok(figure), Ok(yardstick)) => {
                let met = if at_most {
                    figure <= yardstick
                } else {
                    figure >= yardstick
                };
                (
                    if met {
                        GoalStatus::Met
                    } else {
                        GoalStatus::Missed
                    },
                    None,
                )
            }
            (Err(why), _) | (_, Err(why)) => (GoalStatus::NotMeasured, Some(why.to_string())),
        };
        Self {
            goal,
            scenario: scenario.map(str::to_owned),
            figure: figure.ok(),
            yardstick: yardstick.ok(),
            yardstick_name: yardstick_name.to_owned(),
            unit,
            at_most,
            status,
            note,
        }
    }
}

/// Why a run lacks a goal's figure or yardstick: the goal's `note`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
enum Missing {
    #[error("scenario {0} did not run")]
    Scenario(String),
    #[error("{target} skipped ({reason})")]
    Skipped { target: TargetKind, reason: String },
    #[error("{target} did not run in {scenario}")]
    Target {
        target: TargetKind,
        scenario: String,
    },
    #[error("no {what} for {target} in {scenario}")]
    Figure {
        what: &'static str,
        target: TargetKind,
        scenario: String,
    },
    #[error("{0} plugins registered, the goal is stated for {MEMORY_GOAL_PLUGINS}")]
    TooFewPlugins(usize),
    #[error("the gateway's memory was not read")]
    Memory,
    #[error("the traced gateway did not run at {0} in flight with 4 KiB works")]
    Traced(usize),
    #[error("no tracing comparison in {0} (the untraced gateway or direct is missing)")]
    TracingComparison(String),
    #[error("the untraced gateway added no measurable p50 in {0}")]
    UntracedP50(String),
}

/// The bound on the gateway's CPU per call against the minimal `h2`
/// forwarder's at one call in flight: at most 15 % more.
pub const FORWARDER_GOAL_FACTOR_C1: f64 = 1.15;
/// The same at 32 calls in flight: at most 20 % more.
pub const FORWARDER_GOAL_FACTOR_C32: f64 = 1.20;
/// How much cheaper per call than Envoy the gateway must be, in every
/// scenario: Envoy's CPU per call at least 1.5 times the gateway's.
pub const ENVOY_GOAL_FACTOR: f64 = 1.5;

/// Picks one figure out of a target's summary.
type Pick = fn(&TargetSummary) -> Option<f64>;

/// The figures of one run, each found or the reason it is missing.
struct Figures<'a> {
    results: &'a BenchResults,
}

impl Figures<'_> {
    /// `what` (picked by `pick`) of `target` in scenario `name`, or why the
    /// run has none.
    fn get(
        &self,
        name: &str,
        target: TargetKind,
        what: &'static str,
        pick: Pick,
    ) -> Result<f64, Missing> {
        let results = self.results;
        let summary = results
            .summary
            .iter()
            .find(|s| s.scenario.name == name)
            .ok_or_else(|| Missing::Scenario(name.to_owned()))?;
        let target_summary = summary
            .targets
            .iter()
            .find(|t| t.target == target)
            .ok_or_else(|| match results.environment.skipped(target) {
                Some(reason) if !results.settings.targets.contains(&target) => Missing::Skipped {
                    target,
                    reason: reason.to_owned(),
                },
                _ => Missing::Target {
                    target,
                    scenario: name.to_owned(),
                },
            })?;
        pick(target_summary).ok_or_else(|| Missing::Figure {
            what,
            target,
            scenario: name.to_owned(),
        })
    }
}

const ADDED_P50: Pick = |t| t.added_p50_micros;
const ADDED_P99: Pick = |t| t.added_p99_micros;
const CPU: Pick = |t| t.proxy_cpu_micros_per_call;
const SHARE: Pick = |t| t.throughput_ratio;

/// The performance goals, checked against the medians of `results` (its
/// `summary`, `memory` and `settings`; `goals` is not read):
///
/// - at one call in flight, 4 KiB, with the echo plugin (`c1-4k`) and the
///   mutating one (`c1-4k-mut`): the gateway's added p50 at most HAProxy's
///   and at most nginx's, its CPU per call at most nginx's, its added p99 at
///   most nginx's;
/// - 32 in flight with the mutating plugin (`c32-4k-mut`): the gateway's
///   throughput over the direct one's at least HAProxy's;
/// - against the yardsticks of its own dependency: CPU per call at most
///   15 % above the minimal `h2` forwarder's at one call in flight, 20 % at
///   32, and at most the tonic forwarder's at one call in flight; in every
///   scenario, at most Envoy's divided by 1.5;
/// - the gateway's peak resident memory (`VmHWM` after the runs) at most
///   16 MiB with 100 plugins registered;
/// - for every 4 KiB scenario the traced gateway ran in at 1 and at 32 in
///   flight: its added p50 at most 15 % (1 in flight) or 30 % (32) above
///   the untraced gateway's.
///
/// A goal whose figures the run lacks is "not measured", saying why.
pub fn goals(results: &BenchResults) -> Vec<Goal> {
    let figures = Figures { results };
    let mut goals = Vec::new();
    for name in GOAL_C1_SCENARIOS {
        goals.extend(one_call_goals(&figures, name));
    }
    goals.push(throughput_goal(&figures));
    goals.extend(floor_goals(&figures));
    goals.push(memory_goal(results));
    goals.extend(tracing_goals(results));
    goals
}

/// One call in flight in scenario `name`: latency and CPU against nginx and
/// HAProxy.
fn one_call_goals(figures: &Figures<'_>, name: &str) -> Vec<Goal> {
    let rows: [(&str, TargetKind, Pick, GoalUnit); 4] = [
        (
            "added p50",
            TargetKind::Haproxy,
            ADDED_P50,
            GoalUnit::AddedMicros,
        ),
        (
            "added p50",
            TargetKind::Nginx,
            ADDED_P50,
            GoalUnit::AddedMicros,
        ),
        (
            "CPU per call",
            TargetKind::Nginx,
            CPU,
            GoalUnit::MicrosPerCall,
        ),
        (
            "added p99",
            TargetKind::Nginx,
            ADDED_P99,
            GoalUnit::AddedMicros,
        ),
    ];
    rows.into_iter()
        .map(|(what, yardstick, pick, unit)| {
            Goal::compare(
                format!("{name}: gateway {what} ≤ {}'s", yardstick.display_name()),
                Some(name),
                figures.get(name, TargetKind::Gateway, what, pick),
                figures.get(name, yardstick, what, pick),
                yardstick.as_str(),
                unit,
                true,
            )
        })
        .collect()
}

/// 32 in flight: the gateway's share of the direct throughput against
/// HAProxy's.
fn throughput_goal(figures: &Figures<'_>) -> Goal {
    let what = "calls/s vs direct";
    Goal::compare(
        format!("{GOAL_C32_SCENARIO}: gateway {what} ≥ HAProxy's"),
        Some(GOAL_C32_SCENARIO),
        figures.get(GOAL_C32_SCENARIO, TargetKind::Gateway, what, SHARE),
        figures.get(GOAL_C32_SCENARIO, TargetKind::Haproxy, what, SHARE),
        TargetKind::Haproxy.as_str(),
        GoalUnit::ShareOfDirect,
        false,
    )
}

/// The gateway's CPU per call against the forwarders on its own
/// dependencies (the `h2` floor, the tonic build) and against Envoy. Each
/// bound is the yardstick's figure scaled, named so (`h2-forwarder × 1.15`).
fn floor_goals(figures: &Figures<'_>) -> Vec<Goal> {
    let what = "CPU per call";
    let cpu_goal = |name: &str, yardstick: TargetKind, scale: f64, bound: String| {
        Goal::compare(
            format!("{name}: gateway {what} ≤ {bound}"),
            Some(name),
            figures.get(name, TargetKind::Gateway, what, CPU),
            figures
                .get(name, yardstick, what, CPU)
                .map(|cpu| round_to_tenth(cpu * scale)),
            &if scale == 1.0 {
                yardstick.as_str().to_owned()
            } else if scale > 1.0 {
                format!("{yardstick} × {scale}")
            } else {
                format!("{yardstick} ÷ {}", 1.0 / scale)
            },
            GoalUnit::MicrosPerCall,
            true,
        )
    };
    let mut goals = Vec::new();
    for name in GOAL_C1_SCENARIOS {
        goals.push(cpu_goal(
            name,
            TargetKind::H2Forwarder,
            FORWARDER_GOAL_FACTOR_C1,
            format!(
                "h2-forwarder's {}",
                percent_change(FORWARDER_GOAL_FACTOR_C1)
            ),
        ));
        goals.push(cpu_goal(
            name,
            TargetKind::TonicForwarder,
            1.0,
            "tonic-forwarder's".to_owned(),
        ));
    }
    goals.push(cpu_goal(
        GOAL_C32_SCENARIO,
        TargetKind::H2Forwarder,
        FORWARDER_GOAL_FACTOR_C32,
        format!(
            "h2-forwarder's {}",
            percent_change(FORWARDER_GOAL_FACTOR_C32)
        ),
    ));
    for summary in &figures.results.summary {
        goals.push(cpu_goal(
            &summary.scenario.name,
            TargetKind::Envoy,
            1.0 / ENVOY_GOAL_FACTOR,
            format!("Envoy's ÷ {ENVOY_GOAL_FACTOR}"),
        ));
    }
    goals
}

/// The gateway's peak resident memory with the registry the goal names.
fn memory_goal(results: &BenchResults) -> Goal {
    let registered = results.settings.registered_plugins;
    let peak = if registered < MEMORY_GOAL_PLUGINS {
        Err(Missing::TooFewPlugins(registered))
    } else {
        results
            .memory
            .gateway_after_runs
            .map(|m| round_to_tenth(m.hwm_kib as f64 / 1024.0))
            .ok_or(Missing::Memory)
    };
    Goal::compare(
        format!(
            "gateway peak RSS ≤ {MEMORY_GOAL_MIB} MiB with {MEMORY_GOAL_PLUGINS} plugins registered"
        ),
        None,
        peak,
        Ok(MEMORY_GOAL_MIB),
        "bound",
        GoalUnit::Mib,
        true,
    )
}

/// What exporting spans adds to the added p50, at 1 and at 32 in flight.
fn tracing_goals(results: &BenchResults) -> Vec<Goal> {
    let mut goals = Vec::new();
    for (concurrency, bound) in [(1, TRACING_GOAL_RATIO), (32, TRACING_GOAL_RATIO_C32)] {
        let goal = |name: &str| {
            format!(
                "{name}: traced gateway added p50 ≤ untraced {}",
                percent_change(bound)
            )
        };
        let traced: Vec<&ScenarioSummary> = results
            .summary
            .iter()
            .filter(|s| {
                s.scenario.concurrency == concurrency
                    && s.scenario.work_bytes == 4 << 10
                    && s.targets
                        .iter()
                        .any(|t| t.target == TargetKind::GatewayTraced)
            })
            .collect();
        if traced.is_empty() {
            goals.push(Goal::compare(
                goal(&format!("c{concurrency}-4k")),
                None,
                Err(Missing::Traced(concurrency)),
                Ok(bound),
                "bound",
                GoalUnit::Ratio,
                true,
            ));
        }
        for summary in traced {
            let name = summary.scenario.name.as_str();
            let ratio = summary
                .tracing
                .as_ref()
                .ok_or_else(|| Missing::TracingComparison(name.to_owned()))
                .and_then(|t| {
                    t.added_p50_ratio
                        .ok_or_else(|| Missing::UntracedP50(name.to_owned()))
                });
            goals.push(Goal::compare(
                goal(name),
                Some(name),
                ratio,
                Ok(bound),
                "bound",
                GoalUnit::Ratio,
                true,
            ));
        }
    }
    goals
}

/// The goals table: one row per goal with the gateway's figure, the
/// yardstick and whether it is met.
fn goals_markdown(goals: &[Goal], out: &mut String) {
    if goals.is_empty() {
        return;
    }
    out.push_str("\nGoals, from the medians above:\n\n");
    out.push_str("| goal | gateway | yardstick | result |\n|---|--:|--:|---|\n");
    for goal in goals {
        let value = |v: Option<f64>| v.map_or("–".to_owned(), |v| goal.unit.format(v));
        let yardstick = match goal.yardstick {
            Some(_) if goal.yardstick_name == "bound" => value(goal.yardstick),
            Some(_) => format!("{} ({})", value(goal.yardstick), goal.yardstick_name),
            None => format!("– ({})", goal.yardstick_name),
        };
        let result = match (&goal.status, &goal.note) {
            (GoalStatus::NotMeasured, Some(note)) => format!("not measured: {note}"),
            (status, _) => format!("**{}**", status.as_str()),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {yardstick} | {result} |",
            goal.goal,
            value(goal.figure)
        );
    }
}

/// How the run was set up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Settings {
    /// The hook called.
    #[serde(with = "hook_flag")]
    pub hook: HookKind,
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
    /// The scenarios the traced gateway ran in (it is left out of the
    /// others).
    #[serde(default)]
    pub traced_scenarios: Vec<String>,
    /// `gwbench`'s command line, the program first.
    #[serde(default)]
    pub command_line: Vec<String>,
}

/// The machine and the tools.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Environment {
    /// CPUs available to the benchmark.
    pub cpus: usize,
    /// The CPU model (`model name` in `/proc/cpuinfo`).
    #[serde(default)]
    pub cpu_model: Option<String>,
    /// The kernel release.
    #[serde(default)]
    pub kernel: Option<String>,
    /// The 1, 5 and 15 minute load averages when the run started.
    #[serde(default)]
    pub load_average_start: Option<LoadAverage>,
    /// The same when the rounds ended.
    #[serde(default)]
    pub load_average_end: Option<LoadAverage>,
    /// Clock ticks per second of `/proc/PID/stat`.
    pub clock_ticks_per_second: u64,
    /// Each yardstick's version, or why it did not take part.
    #[serde(default)]
    pub yardsticks: BTreeMap<TargetKind, YardstickRun>,
    /// The commit of the working directory gwbench ran in (`git rev-parse
    /// HEAD`), when it is a checkout.
    #[serde(default)]
    pub commit: Option<String>,
    /// Seconds since the Unix epoch at the start.
    pub started_at_unix: u64,
}

impl Environment {
    /// Why `target` did not take part, when it is a yardstick that did not.
    pub fn skipped(&self, target: TargetKind) -> Option<&str> {
        self.yardsticks.get(&target)?.skipped.as_deref()
    }
}

/// A yardstick's version (`nginx -v`, `haproxy -v`, …; the build for the
/// forwarders), or why it did not take part.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct YardstickRun {
    /// Its version, when it took part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Why it did not, when it did not (`--no-envoy`, not installed, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// A yardstick's memory: every process of it, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxyMemory {
    /// Right after it started.
    pub idle: Option<Memory>,
    /// After every round.
    pub after_runs: Option<Memory>,
    /// Its processes (nginx: master and workers; one per route for the
    /// forwarders and nghttpx, which take one upstream each).
    pub processes: usize,
}

/// Memory of the proxies, idle and after the runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryReport {
    /// The gateway right after it became ready.
    pub gateway_idle: Option<Memory>,
    /// The gateway after every round.
    pub gateway_after_runs: Option<Memory>,
    /// The traced gateway right after it became ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traced_gateway_idle: Option<Memory>,
    /// The traced gateway after every round.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traced_gateway_after_runs: Option<Memory>,
    /// Each yardstick that took part.
    #[serde(default)]
    pub yardsticks: BTreeMap<TargetKind, ProxyMemory>,
    /// The echo plugin after every round.
    pub plugin_after_runs: Option<Memory>,
    /// The mutating plugin after every round.
    #[serde(default)]
    pub mutate_plugin_after_runs: Option<Memory>,
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
    /// What the OTLP receiver got from the traced gateway, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spans: Option<SpanReport>,
    /// The performance goals, from the medians ([`goals`]).
    #[serde(default)]
    pub goals: Vec<Goal>,
    /// Every `hookbench` run.
    pub rounds: Vec<RoundRecord>,
}

/// The Markdown tables for `docs/performance.md`: the machine and the
/// command, the medians, tracing on vs off, memory, and the goals.
pub fn markdown(results: &BenchResults) -> String {
    let mut out = String::new();
    machine_markdown(results, &mut out);
    settings_markdown(results, &mut out);
    medians_markdown(results, &mut out);
    tracing_markdown(results, &mut out);
    memory_markdown(results, &mut out);
    goals_markdown(&results.goals, &mut out);
    out
}

/// One paragraph on how the run was made, with the yardsticks' versions.
fn settings_markdown(results: &BenchResults, out: &mut String) {
    let settings = &results.settings;
    let env = &results.environment;
    let mut tools = String::new();
    for (target, run) in &env.yardsticks {
        match (&run.version, &run.skipped) {
            (Some(version), _) => {
                let _ = write!(tools, ", {version}");
            }
            (None, Some(reason)) => {
                let _ = write!(tools, ", {} skipped ({reason})", target.display_name());
            }
            (None, None) => {}
        }
    }
    let commit = env
        .commit
        .as_deref()
        .map_or(String::new(), |commit| format!(" Commit `{commit}`."));
    let _ = writeln!(
        out,
        "Hook `{}`, {} rounds of {} s per target and scenario (after {} s of warm-up), targets alternating \
         within each round; {} HTTP/2 connection(s); {} plugins registered in the gateway; {} CPUs{tools}. \
         Figures are medians over the rounds; \"added\" is the difference to calling the plugin directly; \
         scenarios ending in `-mut` call the mutating plugin.{commit}\n",
        hook_flag::name(settings.hook),
        settings.rounds,
        settings.duration_seconds,
        settings.warmup_seconds,
        settings.connections,
        settings.registered_plugins,
        env.cpus,
    );
}

/// The medians: one row per scenario and target.
fn medians_markdown(results: &BenchResults, out: &mut String) {
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
}

/// Resident memory of every process that took part.
fn memory_markdown(results: &BenchResults, out: &mut String) {
    let memory = &results.memory;
    let mut rows = vec![
        (
            format!(
                "rollout-gateway ({} plugins registered)",
                results.settings.registered_plugins
            ),
            memory.gateway_idle,
            memory.gateway_after_runs,
        ),
        (
            "rollout-gateway, spans exported (gateway-traced)".to_owned(),
            memory.traced_gateway_idle,
            memory.traced_gateway_after_runs,
        ),
    ];
    for (target, proxy) in &memory.yardsticks {
        let name = format!(
            "{} ({} processes summed)",
            target.display_name(),
            proxy.processes
        );
        rows.push((name, proxy.idle, proxy.after_runs));
    }
    rows.push(("echo-plugin".to_owned(), None, memory.plugin_after_runs));
    rows.push((
        "echo-plugin --mode mutate".to_owned(),
        None,
        memory.mutate_plugin_after_runs,
    ));
    let mib = |m: Option<Memory>, peak: bool| {
        m.map_or("–".to_owned(), |m| {
            let kib = if peak { m.hwm_kib } else { m.rss_kib };
            format!("{:.1} MiB", kib as f64 / 1024.0)
        })
    };
    out.push_str("\n| process | RSS idle | RSS after runs | peak RSS (VmHWM) after runs |\n");
    out.push_str("|---|--:|--:|--:|\n");
    for (name, idle, after) in rows {
        if idle.is_some() || after.is_some() {
            let _ = writeln!(
                out,
                "| {name} | {} | {} | {} |",
                mib(idle, false),
                mib(after, false),
                mib(after, true),
            );
        }
    }
}

/// The machine and the command line, above the tables.
fn machine_markdown(results: &BenchResults, out: &mut String) {
    let env = &results.environment;
    let load = |l: Option<LoadAverage>| {
        l.map_or("–".to_owned(), |LoadAverage(one, five, fifteen)| {
            format!("{one:.2} {five:.2} {fifteen:.2}")
        })
    };
    if env.cpu_model.is_some() || env.kernel.is_some() || env.load_average_start.is_some() {
        let _ = writeln!(
            out,
            "Machine: {}, {} CPUs, Linux {}; load average (1/5/15 min) {} at the start, {} at the end.\n",
            env.cpu_model.as_deref().unwrap_or("CPU model unknown"),
            env.cpus,
            env.kernel.as_deref().unwrap_or("?"),
            load(env.load_average_start),
            load(env.load_average_end),
        );
    }
    if !results.settings.command_line.is_empty() {
        let _ = writeln!(
            out,
            "Command: `{}`\n",
            results.settings.command_line.join(" ")
        );
    }
}

/// The "tracing on vs off" table and the span count, when the traced
/// gateway ran.
fn tracing_markdown(results: &BenchResults, out: &mut String) {
    let rows: Vec<(&str, &TracingOverhead)> = results
        .summary
        .iter()
        .filter_map(|s| Some((s.scenario.name.as_str(), s.tracing.as_ref()?)))
        .collect();
    if rows.is_empty() && results.spans.is_none() {
        return;
    }
    let _ = writeln!(
        out,
        "\nTracing on vs off: `gateway-traced` is a second gateway exporting every span over OTLP/gRPC \
         to a receiver in gwbench that counts and discards them; `gateway` exports none. \
         \"Cost\" is the traced gateway's added latency over the untraced one's \
         (goals: at most {} at 1 call in flight, {} at 32).\n",
        percent_change(TRACING_GOAL_RATIO),
        percent_change(TRACING_GOAL_RATIO_C32)
    );
    if !rows.is_empty() {
        out.push_str(
            "| scenario | added p50 µs off → on | p50 cost | added p99 µs off → on | p99 cost | calls/s on vs off | proxy CPU µs/call off → on |\n",
        );
        out.push_str("|---|--:|--:|--:|--:|--:|--:|\n");
    }
    for (scenario, t) in rows {
        let cost = |off: f64, on: f64, ratio: Option<f64>| {
            let percent = ratio.map_or(String::new(), |r| format!(" ({})", percent_change(r)));
            format!("{:+.1} µs{percent}", on - off)
        };
        let cpu = |v: Option<f64>| v.map_or("–".to_owned(), |v| format!("{v:.1}"));
        let _ = writeln!(
            out,
            "| {scenario} | {:.1} → {:.1} | {} | {:.1} → {:.1} | {} | {} | {} → {} |",
            t.added_p50_off_micros,
            t.added_p50_on_micros,
            cost(
                t.added_p50_off_micros,
                t.added_p50_on_micros,
                t.added_p50_ratio
            ),
            t.added_p99_off_micros,
            t.added_p99_on_micros,
            cost(
                t.added_p99_off_micros,
                t.added_p99_on_micros,
                t.added_p99_ratio
            ),
            t.throughput_ratio
                .map_or("–".to_owned(), |r| format!("{r:.2}×")),
            cpu(t.proxy_cpu_off_micros_per_call),
            cpu(t.proxy_cpu_on_micros_per_call),
        );
    }
    if let Some(spans) = &results.spans {
        let per_call = spans
            .spans_per_call
            .map_or("–".to_owned(), |v| format!("{v:.2}"));
        let _ = writeln!(
            out,
            "\nSpans received by the OTLP receiver: {} in {} export requests, for {} calls through \
             `gateway-traced` (warm-up included): {per_call} per call, {} expected{}.",
            spans.spans_received,
            spans.export_requests,
            spans.calls,
            spans.expected_spans_per_call,
            if spans.flushed {
                ""
            } else {
                " (counted without the final flush)"
            },
        );
        if let Some(warning) = spans.shortfall_warning() {
            let _ = writeln!(out, "\n**Warning:** {warning}.");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rollout_harness::stats::LatencySummary;

    fn record(round: usize, target: TargetKind, p50: f64, p99: f64, rps: f64) -> RoundRecord {
        RoundRecord {
            round,
            scenario: "c1-4k".to_owned(),
            target,
            report: Report {
                target: "http://127.0.0.1:1".to_owned(),
                hook: HookKind::MutateManifestWork,
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
                hook: HookKind::MutateManifestWork,
                rounds: 3,
                duration_seconds: 3.0,
                warmup_seconds: 0.5,
                connections: 1,
                registered_plugins: 100,
                scenarios: vec![scenario],
                targets: targets.to_vec(),
                traced_scenarios: Vec::new(),
                command_line: Vec::new(),
            },
            environment: Environment {
                cpus: 2,
                clock_ticks_per_second: 100,
                yardsticks: BTreeMap::from([(
                    TargetKind::Nginx,
                    YardstickRun {
                        version: None,
                        skipped: Some("--no-nginx".to_owned()),
                    },
                )]),
                started_at_unix: 0,
                ..Environment::default()
            },
            summary,
            memory: MemoryReport {
                gateway_idle: Some(Memory {
                    rss_kib: 10240,
                    hwm_kib: 10240,
                }),
                ..MemoryReport::default()
            },
            spans: None,
            goals: Vec::new(),
            rounds,
        };
        let table = markdown(&results);
        // No traced gateway: no tracing section.
        assert!(!table.contains("Tracing on vs off"), "{table}");
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
    fn tracing_on_vs_off() {
        let scenario = Scenario::parse("c1-4k").expect("valid");
        let rounds = vec![
            record(1, TargetKind::Direct, 40.0, 80.0, 10_000.0),
            record(1, TargetKind::Gateway, 80.0, 180.0, 8_000.0),
            record(1, TargetKind::GatewayTraced, 86.0, 210.0, 7_600.0),
            record(2, TargetKind::Direct, 40.0, 80.0, 10_000.0),
            record(2, TargetKind::Gateway, 80.0, 180.0, 8_000.0),
            record(2, TargetKind::GatewayTraced, 86.0, 210.0, 7_600.0),
        ];
        let targets = [
            TargetKind::Direct,
            TargetKind::Gateway,
            TargetKind::GatewayTraced,
        ];
        let summary = summarize(std::slice::from_ref(&scenario), &targets, &rounds);
        let overhead = summary[0].tracing.clone().expect("both gateways ran");
        assert_eq!(
            overhead,
            TracingOverhead {
                added_p50_off_micros: 40.0,
                added_p50_on_micros: 46.0,
                added_p50_ratio: Some(1.15),
                added_p99_off_micros: 100.0,
                added_p99_on_micros: 130.0,
                added_p99_ratio: Some(1.3),
                throughput_ratio: Some(0.95),
                proxy_cpu_off_micros_per_call: Some(21.5),
                proxy_cpu_on_micros_per_call: Some(21.5),
            }
        );
        // Without the direct target there is no "added", hence no comparison.
        let no_direct = summarize(
            std::slice::from_ref(&scenario),
            &targets[1..],
            &rounds[1..3],
        );
        assert_eq!(no_direct[0].tracing, None);
        // Without the traced gateway neither.
        let untraced = summarize(std::slice::from_ref(&scenario), &targets[..2], &rounds);
        assert_eq!(untraced[0].tracing, None);

        assert_eq!(calls_made(&rounds, TargetKind::GatewayTraced), 2200);
        assert_eq!(calls_made(&rounds, TargetKind::Nginx), 0);
        let mut env = BTreeMap::new();
        env.insert(
            "OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(),
            "http://127.0.0.1:4317".to_owned(),
        );
        let spans = SpanReport::new(2200, 4400, 9, true, env);
        assert_eq!(spans.spans_per_call, Some(2.0));
        assert_eq!(spans.shortfall_warning(), None);

        let results = BenchResults {
            settings: Settings {
                hook: HookKind::MutateManifestWork,
                rounds: 2,
                duration_seconds: 3.0,
                warmup_seconds: 0.5,
                connections: 1,
                registered_plugins: 100,
                scenarios: vec![scenario],
                targets: targets.to_vec(),
                traced_scenarios: Vec::new(),
                command_line: Vec::new(),
            },
            environment: Environment {
                cpus: 2,
                clock_ticks_per_second: 100,
                started_at_unix: 0,
                ..Environment::default()
            },
            summary,
            memory: MemoryReport {
                traced_gateway_idle: Some(Memory {
                    rss_kib: 12288,
                    hwm_kib: 12288,
                }),
                ..MemoryReport::default()
            },
            spans: Some(spans),
            goals: Vec::new(),
            rounds,
        };
        let table = markdown(&results);
        assert!(
            table.contains("(goals: at most +15.0 % at 1 call in flight, +30.0 % at 32)"),
            "{table}"
        );
        assert!(
            table.contains(
                "| c1-4k | 40.0 → 46.0 | +6.0 µs (+15.0 %) | 100.0 → 130.0 | +30.0 µs (+30.0 %) | 0.95× | 21.5 → 21.5 |"
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "| c1-4k | gateway-traced | 86.0 | 210.0 | 7600 | +46.0 | +130.0 | 0.76× | 21.5 | 0 |"
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "Spans received by the OTLP receiver: 4400 in 9 export requests, for 2200 calls \
                 through `gateway-traced` (warm-up included): 2.00 per call, 2 expected."
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "| rollout-gateway, spans exported (gateway-traced) | 12.0 MiB | – | – |"
            ),
            "{table}"
        );
        let json = serde_json::to_string(&results).expect("serializable");
        assert!(json.contains("\"gateway-traced\""), "{json}");
        let back: BenchResults = serde_json::from_str(&json).expect("round trip");
        assert_eq!(back, results);
    }

    #[test]
    fn ratios_and_percentages() {
        assert_eq!(ratio(46.0, 40.0), Some(1.15));
        assert_eq!(ratio(1.0, 3.0), Some(0.333));
        // The untraced gateway added nothing: no meaningful ratio.
        assert_eq!(ratio(5.0, 0.0), None);
        assert_eq!(ratio(5.0, -2.0), None);
        assert_eq!(percent_change(1.083), "+8.3 %");
        assert_eq!(percent_change(0.95), "-5.0 %");
        assert_eq!(percent_change(1.0), "+0.0 %");
        assert_eq!(percent_change(0.9999), "+0.0 %");
        assert_eq!(percent_change(TRACING_GOAL_RATIO), "+15.0 %");
    }

    #[test]
    fn span_shortfall() {
        let report = |spans, flushed, sampler: bool| {
            let mut env = BTreeMap::new();
            if sampler {
                env.insert("OTEL_TRACES_SAMPLER".to_owned(), "traceidratio".to_owned());
            }
            SpanReport::new(1000, spans, 4, flushed, env)
        };
        // 2 per call, or a little below (a few lost at the edges): fine.
        assert_eq!(report(2000, true, false).shortfall_warning(), None);
        assert_eq!(report(1800, true, false).shortfall_warning(), None);
        // More than expected (retries make more client spans): fine.
        assert_eq!(report(2600, true, false).shortfall_warning(), None);
        let nothing = report(0, true, false).shortfall_warning().expect("warned");
        assert!(nothing.contains("got 0 spans for 1000 calls"), "{nothing}");
        assert!(nothing.contains("did not export"), "{nothing}");
        let half = report(1000, false, true)
            .shortfall_warning()
            .expect("warned");
        assert!(half.contains("50.0 % of the 2000 expected"), "{half}");
        assert!(half.contains("dropped spans"), "{half}");
        assert!(half.contains("did not stop cleanly"), "{half}");
        assert!(half.contains("OTEL_TRACES_SAMPLER"), "{half}");
        // The table carries the warning too.
        let results = BenchResults {
            settings: Settings {
                hook: HookKind::MutateManifestWork,
                rounds: 1,
                duration_seconds: 1.0,
                warmup_seconds: 0.0,
                connections: 1,
                registered_plugins: 1,
                scenarios: Vec::new(),
                targets: vec![TargetKind::GatewayTraced],
                traced_scenarios: Vec::new(),
                command_line: Vec::new(),
            },
            environment: Environment {
                cpus: 2,
                clock_ticks_per_second: 100,
                started_at_unix: 0,
                ..Environment::default()
            },
            summary: Vec::new(),
            memory: MemoryReport::default(),
            spans: Some(report(0, true, false)),
            goals: Vec::new(),
            rounds: Vec::new(),
        };
        let table = markdown(&results);
        assert!(
            table.contains("\n**Warning:** the OTLP receiver got 0 spans for 1000 calls"),
            "{table}"
        );
        assert!(table.contains("0.00 per call, 2 expected."), "{table}");
        // No calls: nothing to compare.
        let none = SpanReport::new(0, 0, 0, true, BTreeMap::new());
        assert_eq!(none.spans_per_call, None);
        assert_eq!(none.shortfall_warning(), None);
    }

    /// One round of `scenario` against `target`.
    fn run(
        scenario: &str,
        target: TargetKind,
        p50: f64,
        p99: f64,
        rps: f64,
        cpu: f64,
    ) -> RoundRecord {
        let mut record = record(1, target, p50, p99, rps);
        record.scenario = scenario.to_owned();
        record.proxy_cpu_micros_per_call = (target != TargetKind::Direct).then_some(cpu);
        record
    }

    fn goal<'a>(goals: &'a [Goal], name: &str) -> &'a Goal {
        goals
            .iter()
            .find(|g| g.goal == name)
            .unwrap_or_else(|| panic!("no goal {name:?} in {goals:#?}"))
    }

    #[test]
    fn goals_from_the_medians() {
        use TargetKind::{Direct, Gateway, GatewayTraced, Haproxy, Nginx};
        let scenarios: Vec<Scenario> = ["c1-4k", "c1-4k-mut", "c32-4k-mut"]
            .map(|name| Scenario::parse(name).expect("valid"))
            .to_vec();
        let mut rounds = vec![
            // c1-4k: the gateway adds 70 µs, nginx 80, HAProxy 60; p99 +150 vs nginx +140.
            run("c1-4k", Direct, 50.0, 100.0, 10_000.0, 0.0),
            run("c1-4k", Gateway, 120.0, 250.0, 8_000.0, 60.0),
            run("c1-4k", Nginx, 130.0, 240.0, 7_000.0, 70.0),
            run("c1-4k", Haproxy, 110.0, 200.0, 9_000.0, 50.0),
            // c1-4k-mut: no HAProxy; the gateway ties with nginx.
            run("c1-4k-mut", Direct, 60.0, 100.0, 9_000.0, 0.0),
            run("c1-4k-mut", Gateway, 140.0, 200.0, 7_000.0, 80.0),
            run("c1-4k-mut", GatewayTraced, 156.0, 230.0, 6_500.0, 90.0),
            run("c1-4k-mut", Nginx, 140.0, 200.0, 7_000.0, 80.0),
            // c32-4k-mut: the gateway keeps 0.65 of direct, HAProxy 0.67.
            run("c32-4k-mut", Direct, 600.0, 900.0, 40_000.0, 0.0),
            run("c32-4k-mut", Gateway, 1000.0, 2000.0, 26_000.0, 30.0),
            run("c32-4k-mut", GatewayTraced, 1100.0, 2400.0, 24_000.0, 40.0),
            run("c32-4k-mut", Haproxy, 900.0, 1500.0, 26_800.0, 25.0),
        ];
        // A second round for c1-4k's gateway: the goals read medians, not
        // single rounds (median of 120 and 100 is 110: +60, a tie with HAProxy).
        let mut second = run("c1-4k", Gateway, 100.0, 250.0, 8_000.0, 60.0);
        second.round = 2;
        rounds.push(second);
        let targets = [Direct, Gateway, GatewayTraced, Nginx, Haproxy];
        let mut results = BenchResults {
            settings: Settings {
                hook: HookKind::MutateManifestWork,
                rounds: 1,
                duration_seconds: 3.0,
                warmup_seconds: 0.5,
                connections: 1,
                registered_plugins: 100,
                scenarios: scenarios.clone(),
                targets: targets.to_vec(),
                traced_scenarios: vec!["c1-4k-mut".to_owned(), "c32-4k-mut".to_owned()],
                command_line: vec!["gwbench".to_owned(), "--rounds".to_owned(), "1".to_owned()],
            },
            environment: Environment {
                cpus: 2,
                cpu_model: Some("Test CPU @ 2.0GHz".to_owned()),
                kernel: Some("6.1.0".to_owned()),
                load_average_start: Some(LoadAverage(1.5, 1.25, 1.0)),
                load_average_end: Some(LoadAverage(2.0, 1.5, 1.0)),
                ..Environment::default()
            },
            summary: summarize(&scenarios, &targets, &rounds),
            memory: MemoryReport {
                gateway_after_runs: Some(Memory {
                    rss_kib: 13 << 10,
                    hwm_kib: 14 << 10,
                }),
                ..MemoryReport::default()
            },
            spans: None,
            goals: Vec::new(),
            rounds,
        };
        let goals = goals(&results);
        let status = |name: &str| goal(&goals, name).status;

        let c1 = goal(&goals, "c1-4k: gateway added p50 ≤ HAProxy's");
        assert_eq!(
            (c1.figure, c1.yardstick, c1.status, c1.at_most),
            (Some(60.0), Some(60.0), GoalStatus::Met, true)
        );
        assert_eq!(
            status("c1-4k: gateway added p50 ≤ nginx's"),
            GoalStatus::Met
        );
        let cpu = goal(&goals, "c1-4k: gateway CPU per call ≤ nginx's");
        assert_eq!(
            (cpu.figure, cpu.yardstick, cpu.status),
            (Some(60.0), Some(70.0), GoalStatus::Met)
        );
        let p99 = goal(&goals, "c1-4k: gateway added p99 ≤ nginx's");
        assert_eq!(
            (p99.figure, p99.yardstick, p99.status),
            (Some(150.0), Some(140.0), GoalStatus::Missed)
        );

        let missing = goal(&goals, "c1-4k-mut: gateway added p50 ≤ HAProxy's");
        assert_eq!(missing.status, GoalStatus::NotMeasured);
        assert_eq!(
            missing.note.as_deref(),
            Some("haproxy did not run in c1-4k-mut")
        );
        assert_eq!(missing.figure, Some(80.0));
        assert_eq!(
            status("c1-4k-mut: gateway added p50 ≤ nginx's"),
            GoalStatus::Met
        );

        let share = goal(&goals, "c32-4k-mut: gateway calls/s vs direct ≥ HAProxy's");
        assert_eq!(
            (share.figure, share.yardstick, share.status, share.at_most),
            (Some(0.65), Some(0.67), GoalStatus::Missed, false)
        );

        let memory = goal(
            &goals,
            "gateway peak RSS ≤ 16 MiB with 100 plugins registered",
        );
        assert_eq!(
            (memory.figure, memory.status),
            (Some(14.0), GoalStatus::Met)
        );

        // Traced: +96 over +80 at c1 (+20 %, over 15 %), +500 over +400 at c32 (+25 %).
        let c1_traced = goal(
            &goals,
            "c1-4k-mut: traced gateway added p50 ≤ untraced +15.0 %",
        );
        assert_eq!(
            (c1_traced.figure, c1_traced.status),
            (Some(1.2), GoalStatus::Missed)
        );
        let c32_traced = goal(
            &goals,
            "c32-4k-mut: traced gateway added p50 ≤ untraced +30.0 %",
        );
        assert_eq!(
            (c32_traced.figure, c32_traced.status),
            (Some(1.25), GoalStatus::Met)
        );
        // Per one-call scenario 4 against nginx and HAProxy, 1 throughput,
        // 5 against the forwarders, 1 against Envoy per scenario, memory, tracing.
        assert_eq!(goals.len(), 4 + 4 + 1 + 5 + 3 + 1 + 2);

        results.goals = goals;
        let table = markdown(&results);
        for row in [
            "| c1-4k: gateway added p50 ≤ HAProxy's | +60.0 µs | +60.0 µs (haproxy) | **met** |",
            "| c1-4k: gateway added p99 ≤ nginx's | +150.0 µs | +140.0 µs (nginx) | **missed** |",
            "| c1-4k: gateway CPU per call ≤ nginx's | 60.0 µs | 70.0 µs (nginx) | **met** |",
            "| c1-4k-mut: gateway added p50 ≤ HAProxy's | +80.0 µs | – (haproxy) | not measured: haproxy did not run in c1-4k-mut |",
            "| c32-4k-mut: gateway calls/s vs direct ≥ HAProxy's | 0.65× | 0.67× (haproxy) | **missed** |",
            "| gateway peak RSS ≤ 16 MiB with 100 plugins registered | 14.0 MiB | 16.0 MiB | **met** |",
            "| c1-4k-mut: traced gateway added p50 ≤ untraced +15.0 % | +20.0 % | +15.0 % | **missed** |",
            "Machine: Test CPU @ 2.0GHz, 2 CPUs, Linux 6.1.0; load average (1/5/15 min) 1.50 1.25 1.00 at the start, 2.00 1.50 1.00 at the end.",
            "Command: `gwbench --rounds 1`",
        ] {
            assert!(table.contains(row), "{row}\n{table}");
        }
        let json = serde_json::to_value(&results).expect("serializable");
        assert_eq!(json["goals"][0]["status"], "met");
        assert_eq!(json["goals"][4]["status"], "notMeasured");
        assert_eq!(json["environment"]["loadAverageStart"][0], 1.5);
        assert_eq!(json["settings"]["commandLine"][0], "gwbench");

        // Fewer plugins registered than the goal says, no traced gateway, no
        // HAProxy: not measured, saying why.
        results.settings.registered_plugins = 10;
        results.settings.targets = vec![Direct, Gateway, Nginx];
        results.summary = summarize(&scenarios, &results.settings.targets, &results.rounds);
        results.environment.yardsticks.insert(
            Haproxy,
            YardstickRun {
                version: None,
                skipped: Some("--no-haproxy".to_owned()),
            },
        );
        let goals = super::goals(&results);
        assert_eq!(
            goal(&goals, "c1-4k: gateway added p50 ≤ HAProxy's")
                .note
                .as_deref(),
            Some("haproxy skipped (--no-haproxy)")
        );
        let memory = goal(
            &goals,
            "gateway peak RSS ≤ 16 MiB with 100 plugins registered",
        );
        assert_eq!(memory.status, GoalStatus::NotMeasured);
        assert_eq!(
            memory.note.as_deref(),
            Some("10 plugins registered, the goal is stated for 100")
        );
        let c1_traced = goal(&goals, "c1-4k: traced gateway added p50 ≤ untraced +15.0 %");
        assert_eq!(c1_traced.status, GoalStatus::NotMeasured);
        assert!(
            c1_traced
                .note
                .as_deref()
                .is_some_and(|n| n.contains("did not run at 1 in flight")),
            "{c1_traced:?}"
        );
    }

    #[test]
    fn earlier_results_still_read() {
        // A results file written before the traced gateway existed, kept as
        // a fixture (its figures are history, not a claim of the docs).
        let json = include_str!("testdata/results-before-tracing.json");
        let results: BenchResults = serde_json::from_str(json).expect("readable");
        assert!(results.spans.is_none());
        assert!(results.summary.iter().all(|s| s.tracing.is_none()));
        assert!(!markdown(&results).contains("Tracing on vs off"));
        assert!(results.goals.is_empty());
        assert!(
            results
                .settings
                .scenarios
                .iter()
                .all(|s| s.plugin_mode == super::super::PluginMode::Echo)
        );
        // Its goals can still be computed: HAProxy and the mutating
        // scenarios were not measured then.
        let goals = goals(&results);
        assert_eq!(
            goal(&goals, "c1-4k: gateway added p50 ≤ HAProxy's").status,
            GoalStatus::NotMeasured
        );
        assert_ne!(
            goal(&goals, "c1-4k: gateway added p50 ≤ nginx's").status,
            GoalStatus::NotMeasured
        );
    }

    #[test]
    fn cpu_per_call() {
        assert_eq!(cpu_micros_per_call(30, 100, 10_000), Some(30.0));
        assert_eq!(cpu_micros_per_call(1, 100, 3), Some(3333.3));
        assert_eq!(cpu_micros_per_call(30, 100, 0), None);
    }
}
