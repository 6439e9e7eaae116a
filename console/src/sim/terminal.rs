//! The simulator's progress for a person: a header, one table row per step
//! (clusters per status, hook calls) with what happened underneath (works
//! applied, the plugin's validation messages, failures, the abort), and a
//! summary.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{self, Write};
use std::time::Duration;

use crate::format::write_line;

use super::report::{
    AppliedWork, Event, MutationReport, Outcome, Plan, Report, StepReport, Summary,
};

const STATUS_COLUMNS: [&str; 6] = [
    "ToApply",
    "Progressing",
    "Validating",
    "Succeeded",
    "Failed",
    "TimeOut",
];
const HOOK_COLUMNS: [&str; 4] = ["Begin", "Progress", "Validate", "Mutate"];
/// Where the lines under a step's row start.
const INDENT: &str = "                 ";
/// Steps applying at most this many works show their annotations.
const MAX_ANNOTATED: usize = 10;
/// Distinct changes shown per step (`--template`); the rest are counted.
const MAX_DIFFS_SHOWN: usize = 3;
/// Hook errors shown per step; the rest are counted.
const MAX_ERRORS_SHOWN: usize = 5;

pub(crate) use crate::format::{duration, ranges};

/// The manifest annotations of the works applied, one entry per key (its
/// last path segment): `key=value` when every work has the same value,
/// else the values in order: `canary-weight=5,10,15 cluster-position=1/20,2/20,3/20`.
fn annotation_line(applied: &[AppliedWork]) -> String {
    let mut keys: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for work in applied {
        for key in work.annotations.keys() {
            keys.entry(key).or_default();
        }
    }
    for (key, values) in keys.iter_mut() {
        *values = applied
            .iter()
            .map(|w| w.annotations.get(*key).map_or("-", String::as_str))
            .collect();
    }
    keys.iter()
        .map(|(key, values)| {
            let name = key.rsplit('/').next().unwrap_or(key);
            let same = values.windows(2).all(|w| w[0] == w[1]);
            if same {
                format!("{name}={}", values.first().copied().unwrap_or("-"))
            } else {
                format!("{name}={}", values.join(","))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Writes the progress for a person to `out`.
#[derive(Debug)]
pub(crate) struct Terminal<W> {
    out: W,
    tracing: bool,
    diffs: bool,
    previous: Option<(String, String)>,
    /// The failed clusters of the stored status last printed.
    status_clusters: Vec<rollout_controller::api::ClusterRolloutSummary>,
}

impl<W: Write> Terminal<W> {
    /// Progress written to `out`.
    pub(crate) fn new(out: W) -> Terminal<W> {
        Terminal {
            out,
            tracing: false,
            diffs: false,
            previous: None,
            status_clusters: Vec::new(),
        }
    }

    fn detail(&mut self, text: impl AsRef<str>) -> io::Result<()> {
        write_line(&mut self.out, &format!("{INDENT}{}", text.as_ref()))
    }

    /// What the stored status (`--crds`) says of the failed clusters, when
    /// it changed.
    fn status_clusters(&mut self, step: &StepReport) -> io::Result<()> {
        if step.status_clusters != self.status_clusters {
            for cluster in &step.status_clusters {
                let mut line = format!(
                    "status: {} {:?}",
                    cluster.cluster_name, cluster.rollout_status
                );
                if let Some(revision) = &cluster.revision {
                    let _ = write!(line, " on {revision}");
                }
                if let Some(message) = &cluster.message {
                    let _ = write!(line, ": {message}");
                }
                self.detail(line)?;
            }
            self.status_clusters.clone_from(&step.status_clusters);
        }
        Ok(())
    }

    fn applied(
        &mut self,
        applied: &[AppliedWork],
        aborting: bool,
        revision: &str,
    ) -> io::Result<()> {
        if applied.is_empty() {
            return Ok(());
        }
        let names: Vec<String> = applied.iter().map(|a| a.cluster.clone()).collect();
        let mut by: Vec<&str> = Vec::new();
        for name in applied.iter().flat_map(|a| &a.mutated_by) {
            if !by.contains(&name.as_str()) {
                by.push(name);
            }
        }
        let mut text = if aborting {
            format!(
                "rolled back {} to {}: {}",
                applied.len(),
                revision,
                ranges(&names, 4)
            )
        } else {
            format!("applied {}: {}", applied.len(), ranges(&names, 4))
        };
        if !by.is_empty() {
            let _ = write!(text, " · mutated by {}", by.join(", "));
        }
        self.detail(text)?;
        if applied.len() <= MAX_ANNOTATED {
            let line = annotation_line(applied);
            if !line.is_empty() {
                self.detail(line)?;
            }
        }
        Ok(())
    }
}

impl<W: Write> Terminal<W> {
    /// What the plugins changed in each work: each distinct change once,
    /// with the clusters it was made on.
    fn changes(&mut self, mutations: &[MutationReport]) -> io::Result<()> {
        let mut distinct: Vec<(&MutationReport, Vec<String>)> = Vec::new();
        for m in mutations {
            match distinct
                .iter_mut()
                .find(|(first, _)| first.diff == m.diff && first.mutated_by == m.mutated_by)
            {
                Some((_, clusters)) => clusters.push(m.cluster.clone()),
                None => distinct.push((m, vec![m.cluster.clone()])),
            }
        }
        for (m, clusters) in distinct.iter().take(MAX_DIFFS_SHOWN) {
            self.detail(format!(
                "{} · changed by {}:",
                ranges(clusters, 4),
                m.mutated_by.join(", ")
            ))?;
            for line in m.diff.lines() {
                self.detail(format!("  {line}"))?;
            }
        }
        if distinct.len() > MAX_DIFFS_SHOWN {
            let rest: usize = distinct[MAX_DIFFS_SHOWN..]
                .iter()
                .map(|(_, c)| c.len())
                .sum();
            self.detail(format!(
                "… and {} more changes on {rest} works (--json has each one's diff and JSON Patch)",
                distinct.len() - MAX_DIFFS_SHOWN
            ))?;
        }
        Ok(())
    }
}

/// The header of the step table: its status and hook-call columns.
fn column_header() -> String {
    let mut header = format!("{:>5} {:>10} ", "step", "time");
    for c in STATUS_COLUMNS {
        let _ = write!(header, " {c}");
    }
    header.push_str("   hook calls:");
    for c in HOOK_COLUMNS {
        let _ = write!(header, " {c}");
    }
    header
}

impl<W: Write> Report for Terminal<W> {
    fn begin(&mut self, plan: &Plan) -> io::Result<()> {
        self.tracing = plan.tracing;
        self.diffs = plan.diffs;
        self.previous = plan.previous.clone();
        let out = &mut self.out;
        write_line(
            out,
            &format!(
                "Simulated rollout of ManifestWorkReplicaSet {} to placement {}",
                plan.owner, plan.placement
            ),
        )?;
        let first = plan.clusters.first().map_or("", String::as_str);
        let last = plan.clusters.last().map_or("", String::as_str);
        write_line(
            out,
            &format!(
                "  fleet       {} clusters, {first} … {last}, in {} decision group{}",
                plan.clusters.len(),
                plan.groups,
                if plan.groups == 1 { "" } else { "s" }
            ),
        )?;
        let mut agent = format!(
            "  work agent  a work is reported progressing {} and done {} after its apply",
            plan.delay, plan.latency
        );
        if !plan.fail.is_empty() {
            let _ = write!(
                agent,
                "; {} degrade{} on the new revision",
                ranges(&plan.fail, 4),
                if plan.fail.len() == 1 { "s" } else { "" }
            );
        }
        write_line(out, &agent)?;
        write_line(out, &format!("  strategy    {}", plan.strategy))?;
        match (&plan.plugin, &plan.gateway) {
            (Some((plugin, answer)), gateway) => write_line(
                out,
                &format!(
                    "  plugin      {plugin} through the gateway at {} (Initialize: {answer})",
                    gateway.as_deref().unwrap_or("?")
                ),
            )?,
            (None, _) => write_line(
                out,
                "  plugin      none: no hook is called (OCM's own rollout)",
            )?,
        }
        match &plan.previous {
            Some((hash, image)) => write_line(
                out,
                &format!(
                    "  revisions   {} ({}) replaces {} ({}), which every cluster runs",
                    plan.update.0, plan.update.1, hash, image
                ),
            )?,
            None => write_line(
                out,
                &format!(
                    "  revisions   {} ({}), a first rollout: no earlier revision",
                    plan.update.0, plan.update.1
                ),
            )?,
        }
        if plan.tracing {
            write_line(
                out,
                "  traces      exported over OTLP: one trace per step (its id below each step)",
            )?;
        }
        for warning in &plan.api_warnings {
            write_line(out, &format!("  warning     the API server: {warning}"))?;
        }
        writeln!(out)?;
        write_line(out, &column_header())?;
        out.flush()
    }

    fn step(&mut self, step: &StepReport) -> io::Result<()> {
        write_line(&mut self.out, &step_row(step))?;
        // In the order things happen in a step: the agent's reports, the
        // plugin's verdicts, the abort, the applies; then the errors.
        self.agent_reports(step)?;
        self.validations(step)?;
        self.failures(step)?;
        self.applied(&step.applied, step.aborting, &step.revision)?;
        if self.diffs {
            self.changes(&step.mutations)?;
        }
        self.hook_errors(step)?;
        if step.real_wait
            && let Some(next) = step.next_in_seconds
        {
            self.detail(format!(
                "next step in {} of real time: the plugin decides on its own clock",
                duration(Duration::from_secs_f64(next))
            ))?;
        }
        if self.tracing {
            self.detail(format!("trace {}", step.trace_id))?;
        }
        self.status_clusters(step)?;
        self.out.flush()
    }

    fn end(&mut self, summary: &Summary) -> io::Result<()> {
        let out = &mut self.out;
        writeln!(out)?;
        write_line(out, &result_line(summary))?;
        if let Some(abort) = &summary.abort {
            abort_lines(out, abort, summary.rollback_applies)?;
        }
        write_line(out, &works_line(summary))?;
        if let Some(status) = &summary.rollout_status {
            rollout_status(out, status)?;
        }
        hook_call_lines(out, summary)?;
        if !summary.works.annotations.is_empty() {
            let annotations: Vec<String> = summary
                .works
                .annotations
                .iter()
                .map(|(key, n)| format!("{key} ({n})"))
                .collect();
            write_line(
                out,
                &format!(
                    "  annotations on the {} works applied: {}",
                    summary.works.applied,
                    annotations.join(", ")
                ),
            )?;
        }
        if let Some(list) = &summary.work_list {
            writeln!(out)?;
            work_list(out, list)?;
        }
        if matches!(summary.result, Outcome::Failed) {
            write_line(
                out,
                "  the rollout can go no further: failures beyond maxFailures, or clusters stuck, and no abort",
            )?;
        }
        out.flush()
    }
}

impl<W: Write> Terminal<W> {
    /// What the work agent reported: works turned Degraded, clusters timed
    /// out.
    fn agent_reports(&mut self, step: &StepReport) -> io::Result<()> {
        for event in &step.events {
            match event {
                Event::WorkDegraded { cluster } => {
                    self.detail(format!("✗ {cluster}: its work turned Degraded"))?;
                }
                Event::TimedOut { cluster } => {
                    self.detail(format!("✗ {cluster} timed out (progressDeadline passed)"))?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The plugin's INPROGRESS and SUCCEEDED answers, counted, with one
    /// message as an example.
    fn validations(&mut self, step: &StepReport) -> io::Result<()> {
        let v = &step.validations;
        if v.in_progress > 0 {
            let message = v.in_progress_message.as_deref().unwrap_or("");
            self.detail(format!("{} INPROGRESS · {message}", v.in_progress))?;
        }
        if v.succeeded > 0 {
            let first = step
                .verdicts
                .iter()
                .find(|v| v.result == rollout_controller::rollout::RolloutStatus::Succeeded);
            let example = first.map_or(String::new(), |v| {
                if v.message.is_empty() {
                    String::new()
                } else {
                    format!(" · {}", v.message)
                }
            });
            self.detail(format!("{} SUCCEEDED{example}", v.succeeded))?;
        }
        Ok(())
    }

    /// Each FAILED validation, then the abort.
    fn failures(&mut self, step: &StepReport) -> io::Result<()> {
        for event in &step.events {
            match event {
                Event::ValidationFailed { cluster, message } => {
                    self.detail(format!("✗ {cluster} FAILED · {message}"))?;
                }
                Event::Abort {
                    action,
                    to,
                    failures,
                    ..
                } => {
                    let failed: Vec<String> = failures
                        .iter()
                        .map(|f| format!("{} {:?}", f.cluster, f.status))
                        .collect();
                    let failed = failed.join(", ");
                    match (action.as_str(), to) {
                        ("RollBack", Some(to)) => self.detail(format!(
                            "ABORT: {failed} → rolling back to revision {to}; every hook call now says aborting = true"
                        ))?,
                        _ => self.detail(format!(
                            "ABORT: {failed} → no earlier revision to roll back to: the rollout stops"
                        ))?,
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The failed hook calls, the first [`MAX_ERRORS_SHOWN`] of them
    /// shown and the rest counted.
    fn hook_errors(&mut self, step: &StepReport) -> io::Result<()> {
        let mut errors = 0;
        for event in &step.events {
            if let Event::HookError {
                hook,
                cluster,
                code,
                message,
            } = event
            {
                errors += 1;
                if errors <= MAX_ERRORS_SHOWN {
                    let about = cluster
                        .as_deref()
                        .map_or(String::new(), |c| format!(" for {c}"));
                    self.detail(format!("! {hook}{about} failed: {code}: {message}"))?;
                }
            }
        }
        if errors > MAX_ERRORS_SHOWN {
            self.detail(format!(
                "… and {} more failed hook calls",
                errors - MAX_ERRORS_SHOWN
            ))?;
        }
        Ok(())
    }
}

/// A step's table row: its number and simulated time, the clusters per
/// status and the hook calls, under the header's columns.
fn step_row(step: &StepReport) -> String {
    let c = &step.clusters;
    let counts = [
        c.to_apply,
        c.progressing,
        c.validating,
        c.succeeded,
        c.failed,
        c.time_out,
    ];
    let h = &step.hook_calls;
    let hooks = [
        h.begin_rollout,
        h.progress_rollout,
        h.validate_rollout_completion,
        h.mutate_manifest_work,
    ];
    let elapsed = duration(Duration::from_secs_f64(step.elapsed_seconds));
    let mut row = format!("{:>5} {:>10} ", step.step, format!("+{elapsed}"));
    for (value, name) in counts.iter().zip(STATUS_COLUMNS) {
        let _ = write!(row, " {value:>w$}", w = name.len());
    }
    row.push_str(&" ".repeat("   hook calls:".len()));
    for (value, name) in hooks.iter().zip(HOOK_COLUMNS) {
        let _ = write!(row, " {value:>w$}", w = name.len());
    }
    if step.aborting {
        let _ = write!(row, "   ← rolling back to {}", step.revision);
    }
    row
}

/// How the rollout ended, after how many steps and how much time.
fn result_line(summary: &Summary) -> String {
    let simulated = duration(Duration::from_secs_f64(summary.simulated_seconds));
    let wall = duration(Duration::from_secs_f64(summary.wall_seconds));
    let mut line = format!(
        "Result: {:?} after {} steps: {simulated} simulated in {wall}",
        summary.result, summary.steps
    );
    if summary.real_wait_seconds > 0.0 {
        let _ = write!(
            line,
            " ({} of it waiting for the plugin)",
            duration(Duration::from_secs_f64(summary.real_wait_seconds))
        );
    }
    line
}

/// The abort: when, the failures that caused it, and the rollback.
fn abort_lines(
    out: &mut impl Write,
    abort: &super::report::AbortSummary,
    rolled_back: usize,
) -> io::Result<()> {
    let failed: Vec<String> = abort
        .failures
        .iter()
        .map(|f| match &f.message {
            Some(m) => format!("{} {:?} ({m})", f.cluster, f.status),
            None => format!("{} {:?}", f.cluster, f.status),
        })
        .collect();
    write_line(
        out,
        &format!(
            "  abort       at step {}: {}",
            abort.step,
            failed.join("; ")
        ),
    )?;
    if abort.action == "RollBack" {
        write_line(
            out,
            &format!(
                "  rollback    {rolled_back} works re-applied with the last good revision, aborting = true"
            ),
        )
    } else {
        write_line(out, "  rollback    none: there was no earlier revision")
    }
}

/// The works per revision, and the current revision.
fn works_line(summary: &Summary) -> String {
    let revisions: Vec<String> = summary
        .works
        .by_revision
        .iter()
        .map(|(hash, n)| {
            let name = if *hash == summary.update_revision {
                "new"
            } else if Some(hash) == summary.previous_revision.as_ref() {
                "previous"
            } else {
                "other"
            };
            format!("{n} on {hash} ({name})")
        })
        .collect();
    format!(
        "  works       {} in all: {}; currentRevision {}",
        summary.works.total,
        revisions.join(", "),
        summary.current_revision.as_deref().unwrap_or("none")
    )
}

/// The hook calls per hook, in all, while aborting, failed, and per
/// second.
fn hook_call_lines(out: &mut impl Write, summary: &Summary) -> io::Result<()> {
    let h = &summary.hook_calls;
    let calls = h.begin_rollout
        + h.progress_rollout
        + h.validate_rollout_completion
        + h.mutate_manifest_work;
    let a = &summary.aborting_hook_calls;
    let aborting = a.begin_rollout
        + a.progress_rollout
        + a.validate_rollout_completion
        + a.mutate_manifest_work;
    write_line(
        out,
        &format!(
            "  hook calls  BeginRollout {}, ProgressRollout {}, ValidateRolloutCompletion {}, MutateManifestWork {}",
            h.begin_rollout,
            h.progress_rollout,
            h.validate_rollout_completion,
            h.mutate_manifest_work
        ),
    )?;
    write_line(
        out,
        &format!(
            "              {calls} in all, {aborting} with aborting = true, {} failed; {:.0} calls/s",
            summary.hook_errors, summary.hook_calls_per_second
        ),
    )
}

/// Every work (`--list-works`): a row per work with its manifests'
/// annotations in columns.
fn work_list(out: &mut impl Write, list: &[super::report::WorkEntry]) -> io::Result<()> {
    let keys: Vec<&String> = {
        let mut keys: BTreeMap<&String, ()> = BTreeMap::new();
        for w in list {
            for k in w.annotations.keys() {
                keys.insert(k, ());
            }
        }
        keys.into_keys().collect()
    };
    let mut header = format!(
        "  {:<14} {:<12} {:>3} {:>7}  {:<11}",
        "cluster", "revision", "gen", "applies", "status"
    );
    for key in &keys {
        let _ = write!(header, "  {}", key.rsplit('/').next().unwrap_or(key));
    }
    write_line(out, &header)?;
    for w in list {
        let mut row = format!(
            "  {:<14} {:<12} {:>3} {:>7}  {:<11}",
            w.cluster,
            w.revision,
            w.generation,
            w.applies,
            format!("{:?}", w.status)
        );
        for key in &keys {
            let width = key.rsplit('/').next().unwrap_or(key).len();
            let value = w.annotations.get(*key).map_or("-", String::as_str);
            let _ = write!(row, "  {value:<width$}");
        }
        write_line(out, row.trim_end())?;
    }
    Ok(())
}

/// The ManifestWorkReplicaSetRollout's stored status: its revisions and the
/// clusters that need attention, as `kubectl get mwrsrollout -o yaml` would
/// show them.
fn rollout_status(out: &mut impl Write, status: &serde_json::Value) -> io::Result<()> {
    let text = |key: &str| status[key].as_str().unwrap_or("none").to_owned();
    write_line(
        out,
        &format!(
            "  status      ManifestWorkReplicaSetRollout: currentRevision {}, updateRevision {}, abortedTime {}",
            text("currentRevision"),
            text("updateRevision"),
            text("abortedTime")
        ),
    )?;
    for placement in status["placements"].as_array().into_iter().flatten() {
        let clusters = placement["clusters"].as_array().into_iter().flatten();
        let failures = placement["abortFailures"].as_array().into_iter().flatten();
        for (cluster, cause) in clusters
            .map(|c| (c, ""))
            .chain(failures.map(|c| (c, " (aborted the rollout)")))
        {
            let mut line = format!(
                "              {} {}{cause}",
                cluster["clusterName"].as_str().unwrap_or(""),
                cluster["rolloutStatus"].as_str().unwrap_or("")
            );
            if let Some(revision) = cluster["revision"].as_str() {
                let _ = write!(line, " on {revision}");
            }
            if let Some(message) = cluster["message"].as_str() {
                let _ = write!(line, ": {message}");
            }
            write_line(out, &line)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_are_summed_up_per_key() {
        let work = |cluster: &str, weight: &str| AppliedWork {
            cluster: cluster.into(),
            index: 1,
            aborting: false,
            revision: "r".into(),
            generation: 2,
            mutated_by: vec!["traffic-weights".into()],
            annotations: [
                (
                    "rollout-hooks.io/canary-weight".to_owned(),
                    weight.to_owned(),
                ),
                ("rollout-hooks.io/rollback".to_owned(), "true".to_owned()),
            ]
            .into(),
        };
        assert_eq!(
            annotation_line(&[work("a", "5"), work("b", "10")]),
            "canary-weight=5,10 rollback=true"
        );
        assert_eq!(annotation_line(&[]), "");
    }
}
