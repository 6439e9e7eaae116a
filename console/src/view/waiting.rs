//! What the controller waits for, or why it stopped, as lines for a
//! person: the abort and rollback, the clusters it validates (with the
//! plugin's message), those still progressing (with their deadline), the
//! failures, hook calls failing, and what it applies next.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use super::{ClusterView, PlacementView, View, find};
use crate::format::{duration, ranges};
use rollout_controller::api::conditions::{
    PLACEMENT_VERIFIED, PLUGIN_LOADED, PROGRESSING, REASON_PLUGIN_CALL_FAILED,
};
use rollout_controller::rollout::RolloutStatus;

/// How many clusters of one kind get a line each; the rest are summed up.
const MAX_LINES_PER_KIND: usize = 5;

/// `d` as a Go duration, whole seconds.
fn span(d: SignedDuration) -> String {
    duration(Duration::from_secs(d.as_secs().unsigned_abs()))
}

fn short(revision: Option<&str>) -> &str {
    revision.unwrap_or("?")
}

/// The lines of `view` (see the module documentation).
pub(crate) fn lines(view: &View) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(at) = view.aborted_time {
        lines.push(abort_line(view, at));
    }
    control_lines(view, &mut lines);
    if let Some(c) = find(&view.conditions, PLACEMENT_VERIFIED).filter(|c| c.status == "False") {
        lines.push(format!(
            "placements not usable ({}): {}",
            c.reason, c.message
        ));
    }
    if let Some(c) = find(&view.conditions, PLUGIN_LOADED).filter(|c| c.status == "False") {
        lines.push(format!("plugin not loaded: {}", c.message));
    }
    if let Some(c) =
        find(&view.conditions, PROGRESSING).filter(|c| c.reason == REASON_PLUGIN_CALL_FAILED)
    {
        lines.push(format!("hook calls failing: {}", c.message));
    }
    for placement in &view.placements {
        if let Some(problem) = &placement.problem {
            lines.push(format!("placement {}: {problem}", placement.name));
        }
        placement_lines(view, placement, &mut lines);
    }
    if lines.is_empty() {
        if view.phase == super::Phase::Healthy {
            lines.push(format!(
                "nothing: revision {} runs on every cluster",
                short(view.update_revision.as_deref())
            ));
        } else if view.phase == super::Phase::Unknown {
            lines.push("the controller has not reported on this ManifestWorkReplicaSet yet".into());
        }
    }
    lines
}

/// The pause, and the operators' requests that are not read yet or did
/// nothing.
fn control_lines(view: &View, lines: &mut Vec<String>) {
    if let Some(pause) = &view.paused {
        let who =
            rollout_controller::api::control::who(pause.by.as_deref(), pause.reason.as_deref());
        let read = if pause.observed {
            ""
        } else {
            " (the controller has not read it yet)"
        };
        let waiting = view
            .placements
            .iter()
            .flat_map(|p| &p.groups)
            .flat_map(|g| &g.clusters)
            .filter(|c| c.status == RolloutStatus::ToApply)
            .count();
        lines.push(format!(
            "a resume: paused {who} {} ago{read}; no new cluster starts ({waiting} to apply), `rollout-controller resume {}` lifts it",
            span(view.now.duration_since(pause.time)),
            view.name
        ));
    }
    for request in &view.requests {
        let at = request.requested_time.strftime("%H:%M:%SZ");
        match request.result {
            None => lines.push(format!(
                "the controller to read the {} requested {} at {at}",
                request.kind,
                request.who()
            )),
            Some("Acted") => {}
            Some(_) => lines.push(format!(
                "nothing more for the {} requested {} at {at}: it did nothing, {}",
                request.kind,
                request.who(),
                request.message
            )),
        }
    }
}

fn abort_line(view: &View, at: Timestamp) -> String {
    let ago = span(view.now.duration_since(at));
    let clusters = view
        .placements
        .iter()
        .flat_map(|p| &p.groups)
        .flat_map(|g| &g.clusters);
    let left = clusters
        .filter(|c| c.status != RolloutStatus::Succeeded)
        .count();
    let at = at.strftime("%H:%M:%SZ");
    // An abort an operator asked for names them.
    let by = view
        .requests
        .iter()
        .find(|r| r.kind == "abort" && r.result == Some("Acted"))
        .map(|r| format!(" {}", r.who()))
        .unwrap_or_default();
    match &view.current_revision {
        None => format!(
            "aborted{by} at {at} ({ago} ago): no earlier revision to roll back to, the rollout is stopped"
        ),
        Some(current) if left == 0 => {
            format!(
                "aborted{by} at {at} ({ago} ago): revision {current} is restored on every cluster"
            )
        }
        Some(current) => format!(
            "aborted{by} at {at} ({ago} ago): rolling back {left} cluster{} to revision {current}",
            if left == 1 { "" } else { "s" }
        ),
    }
}

fn of_status(placement: &PlacementView, status: RolloutStatus) -> Vec<&ClusterView> {
    placement
        .groups
        .iter()
        .flat_map(|g| &g.clusters)
        .filter(|c| c.status == status)
        .collect()
}

/// `shown` lines, then "… and N more" for the rest.
fn capped(list: &[&ClusterView], line: impl Fn(&ClusterView) -> String, out: &mut Vec<String>) {
    out.extend(list.iter().take(MAX_LINES_PER_KIND).map(|c| line(c)));
    if list.len() > MAX_LINES_PER_KIND {
        out.push(format!("… and {} more", list.len() - MAX_LINES_PER_KIND));
    }
}

fn placement_lines(view: &View, placement: &PlacementView, out: &mut Vec<String>) {
    let plugin = placement.plugin.as_deref().unwrap_or("the plugin");
    for c in of_status(placement, RolloutStatus::Failed) {
        let why = c.message.as_deref().unwrap_or("its work is Degraded");
        out.push(format!("✗ {} failed: {why}", c.name));
    }
    for c in of_status(placement, RolloutStatus::TimeOut) {
        out.push(format!(
            "✗ {} timed out: it did not finish within progressDeadline",
            c.name
        ));
    }
    let validating = of_status(placement, RolloutStatus::Validating);
    capped(
        &validating,
        |c| match &c.message {
            Some(m) => format!("validating {}: {plugin} says INPROGRESS: {m}", c.name),
            None => format!("validating {}: waiting for {plugin}'s verdict", c.name),
        },
        out,
    );
    let progressing = of_status(placement, RolloutStatus::Progressing);
    capped(&progressing, |c| progressing_line(view, placement, c), out);
    let to_apply: Vec<String> = of_status(placement, RolloutStatus::ToApply)
        .iter()
        .map(|c| c.name.clone())
        .collect();
    if !to_apply.is_empty() && !placement.max_failure_breach {
        let (verb, when) = match (view.aborted_time, &view.paused) {
            (Some(_), _) => ("to roll back", "as the strategy allows"),
            (None, Some(_)) => ("to apply", "once resumed"),
            (None, None) => ("to apply", "as the strategy allows"),
        };
        out.push(format!(
            "{} cluster{} {verb}, {when}: {}",
            to_apply.len(),
            if to_apply.len() == 1 { "" } else { "s" },
            ranges(&to_apply, 4)
        ));
    }
    if placement.max_failure_breach {
        out.push(format!(
            "placement {}: more clusters failed than maxFailures allows; no new cluster is rolled out",
            placement.name
        ));
    }
}

fn progressing_line(view: &View, placement: &PlacementView, c: &ClusterView) -> String {
    let mut line = format!("waiting for {} to finish progressing", c.name);
    let Some(since) = c.since else {
        return line;
    };
    let elapsed = view.now.duration_since(since);
    let deadline = placement
        .progress_deadline_seconds
        .map(|s| SignedDuration::from_secs(s) - elapsed);
    match deadline {
        Some(left) if left.is_negative() => {
            line.push_str(&format!(" (deadline passed {} ago)", span(-left)));
        }
        Some(left) => line.push_str(&format!(" (deadline in {})", span(left))),
        None => line.push_str(&format!(" (for {}, no progressDeadline)", span(elapsed))),
    }
    line
}
