//! A [`View`] as text, in the manner of `kubectl argo rollouts get rollout`:
//! a header (phase, message, revisions), what the controller waits for,
//! each placement's decision groups and clusters, the conditions and the
//! latest Events.

use std::fmt::Write as _;
use std::time::Duration;

use jiff::Timestamp;

use super::{ClusterView, GroupView, Phase, PlacementView, RevisionRole, View};
use crate::format::{duration, push_line, ranges, table};
use rollout_controller::rollout::RolloutStatus;

/// A group of more clusters than this lists only those not succeeded (at
/// most this many), and sums up the rest.
const MAX_ROWS_PER_GROUP: usize = 12;

fn phase_text(phase: Phase) -> &'static str {
    match phase {
        Phase::Unknown => "? Unknown",
        Phase::Progressing => "◌ Progressing",
        Phase::Healthy => "✔ Healthy",
        Phase::Degraded => "✖ Degraded",
        Phase::RollingBack => "↺ RollingBack",
        Phase::Aborted => "✖ Aborted",
        Phase::Paused => "॥ Paused",
    }
}

fn status_text(status: RolloutStatus) -> &'static str {
    match status {
        RolloutStatus::ToApply => "· ToApply",
        RolloutStatus::Progressing => "◌ Progressing",
        RolloutStatus::Validating => "◷ Validating",
        RolloutStatus::Succeeded => "✔ Succeeded",
        RolloutStatus::Failed => "✖ Failed",
        RolloutStatus::TimeOut => "⚠ TimeOut",
        RolloutStatus::Skip => "- Skip",
    }
}

fn age(now: Timestamp, then: Option<Timestamp>) -> String {
    match then {
        Some(then) => {
            let secs = now.duration_since(then).as_secs().max(0).unsigned_abs();
            duration(Duration::from_secs(secs))
        }
        None => "-".to_owned(),
    }
}

/// `view` as text, ending with a newline.
pub fn render(view: &View) -> String {
    let mut out = String::new();
    header(view, &mut out);
    if !view.waiting.is_empty() {
        out.push_str("\nWaiting for:\n");
        for line in &view.waiting {
            push_line(&mut out, &format!("  {line}"));
        }
    }
    for placement in &view.placements {
        out.push('\n');
        placement_text(view, placement, &mut out);
    }
    if !view.conditions.is_empty() {
        out.push_str("\nConditions:\n");
        let rows: Vec<Vec<String>> = view
            .conditions
            .iter()
            .map(|c| {
                vec![
                    format!("  {}", c.kind),
                    c.status.clone(),
                    c.reason.clone(),
                    c.message.clone(),
                ]
            })
            .collect();
        for line in table(&rows) {
            push_line(&mut out, &line);
        }
    }
    if !view.events.is_empty() {
        out.push_str("\nEvents:\n");
        let rows: Vec<Vec<String>> = view
            .events
            .iter()
            .map(|e| {
                let times = if e.count > 1 {
                    format!(" (×{})", e.count)
                } else {
                    String::new()
                };
                vec![
                    format!("  {}", e.kind),
                    e.reason.clone(),
                    format!("{} ago{times}", age(view.now, e.last_seen)),
                    e.note.clone(),
                ]
            })
            .collect();
        for line in table(&rows) {
            push_line(&mut out, &line);
        }
    }
    out
}

fn header(view: &View, out: &mut String) {
    let revision = |r: &Option<String>| r.clone().unwrap_or_else(|| "none".to_owned());
    let mut rows = vec![
        vec!["Name:".to_owned(), view.name.clone()],
        vec!["Namespace:".to_owned(), view.namespace.clone()],
        vec!["Status:".to_owned(), phase_text(view.phase).to_owned()],
    ];
    if !view.message.is_empty() {
        rows.push(vec!["Message:".to_owned(), view.message.clone()]);
    }
    rows.push(vec![
        "Revisions:".to_owned(),
        format!(
            "update {} · current {}",
            revision(&view.update_revision),
            revision(&view.current_revision)
        ),
    ]);
    if let Some(at) = view.aborted_time {
        rows.push(vec![
            "Aborted:".to_owned(),
            format!("{at} ({} ago)", age(view.now, Some(at))),
        ]);
    }
    if let Some(pause) = &view.paused {
        rows.push(vec![
            "Paused:".to_owned(),
            format!(
                "{} at {} ({} ago)",
                rollout_controller::api::control::who(pause.by.as_deref(), pause.reason.as_deref()),
                pause.time,
                age(view.now, Some(pause.time))
            ),
        ]);
    }
    for line in table(&rows) {
        push_line(out, &line);
    }
}

fn placement_text(view: &View, placement: &PlacementView, out: &mut String) {
    push_line(out, &format!("Placement {}", placement.name));
    push_line(out, &format!("  strategy  {}", placement.strategy));
    let plugin = placement.plugin.as_deref().unwrap_or("none");
    push_line(out, &format!("  plugin    {plugin}"));
    let c = &placement.counts;
    push_line(
        out,
        &format!(
            "  clusters  ToApply {}, Progressing {}, Validating {}, Succeeded {}, Failed {}, TimeOut {}",
            c.to_apply, c.progressing, c.validating, c.succeeded, c.failed, c.time_out
        ),
    );
    let mut rows = vec![
        [
            "GROUP", "CLUSTER", "STATUS", "REVISION", "WORK", "AGE", "MESSAGE",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    let mut notes = Vec::new();
    for group in &placement.groups {
        group_rows(view, group, &mut rows, &mut notes);
    }
    for line in table(&rows) {
        push_line(out, &format!("  {line}"));
    }
    for note in notes {
        push_line(out, &format!("  {note}"));
    }
}

fn group_label(group: &GroupView) -> String {
    if group.name.is_empty() {
        group.index.to_string()
    } else {
        format!("{} {}", group.index, group.name)
    }
}

fn revision_text(cluster: &ClusterView) -> String {
    let role = match cluster.revision_role {
        RevisionRole::Update => " (update)",
        RevisionRole::Current => " (current)",
        RevisionRole::Other => " (other)",
        RevisionRole::None => "",
    };
    format!("{}{role}", cluster.revision.as_deref().unwrap_or("-"))
}

fn group_rows(
    view: &View,
    group: &GroupView,
    rows: &mut Vec<Vec<String>>,
    notes: &mut Vec<String>,
) {
    let big = group.clusters.len() > MAX_ROWS_PER_GROUP;
    let shown: Vec<&ClusterView> = group
        .clusters
        .iter()
        .filter(|c| !big || c.status != RolloutStatus::Succeeded)
        .take(MAX_ROWS_PER_GROUP)
        .collect();
    for (i, c) in shown.iter().enumerate() {
        rows.push(vec![
            if i == 0 {
                group_label(group)
            } else {
                String::new()
            },
            c.name.clone(),
            status_text(c.status).to_owned(),
            revision_text(c),
            c.work.clone(),
            age(view.now, c.since),
            c.message.clone().unwrap_or_default(),
        ]);
    }
    if big {
        let succeeded: Vec<String> = group
            .clusters
            .iter()
            .filter(|c| c.status == RolloutStatus::Succeeded)
            .map(|c| c.name.clone())
            .collect();
        let others = group.clusters.len() - succeeded.len() - shown.len();
        let mut note = format!(
            "group {}: {} more",
            group_label(group),
            others + succeeded.len()
        );
        if !succeeded.is_empty() {
            let _ = write!(note, "; ✔ Succeeded: {}", ranges(&succeeded, 4));
        }
        notes.push(note);
    }
}
