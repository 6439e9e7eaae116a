//! What one step says on the reconcile span, so that an abort is found in
//! Jaeger by `error=true` or `ocm.rollout.aborted=true`:
//!
//! - the step that starts an abort sets `ocm.rollout.aborted` (true),
//!   `ocm.rollout.abort.action` (`RollBack` or `Stop`),
//!   `ocm.rollout.abort.placement`, `ocm.rollout.abort.clusters` (the
//!   failed and timed-out clusters, comma-separated) and
//!   `ocm.rollout.plugin` (the placement's plugin, when it has one); adds
//!   the event `rollout aborted` (the same attributes) and, for a rollback,
//!   `rollback started` (with `ocm.rollout.rollback.revision`); and sets an
//!   error status saying which clusters failed and why, and what follows;
//! - every step of a rollback (or of a stopped rollout) sets
//!   `ocm.rollout.aborting` (true).

use opentelemetry::KeyValue;
use opentelemetry::trace::{Status, TraceContextExt};
use rollout_telemetry::outcome::bounded;

use super::{AbortReport, DeployInput, DeployOutcome};
use crate::revision::AbortAction;

/// Clusters named in `ocm.rollout.abort.clusters` at most; the rest are
/// counted (`… and 12 more`).
const MAX_CLUSTERS_NAMED: usize = 20;

/// Marks the reconcile span of `input` with what `outcome` says of an abort.
pub(super) fn record_step(input: &DeployInput<'_>, outcome: &DeployOutcome) {
    let span = input.trace.span();
    if outcome.placements.iter().any(|p| p.aborting) {
        span.set_attribute(KeyValue::new("ocm.rollout.aborting", true));
    }
    let Some(abort) = &outcome.abort else {
        return;
    };
    let plugin = input
        .placements
        .iter()
        .find(|p| p.name == abort.placement)
        .and_then(|p| p.strategy.plugin.as_deref());
    let mut attributes = vec![
        KeyValue::new("ocm.rollout.aborted", true),
        KeyValue::new("ocm.rollout.abort.action", action_name(abort.action)),
        KeyValue::new("ocm.rollout.abort.placement", abort.placement.clone()),
        KeyValue::new("ocm.rollout.abort.clusters", cluster_list(abort)),
    ];
    if let Some(plugin) = plugin {
        attributes.push(KeyValue::new("ocm.rollout.plugin", plugin.to_owned()));
    }
    span.set_attributes(attributes.clone());
    span.add_event("rollout aborted", attributes);
    let rollback_to = match abort.action {
        AbortAction::RollBack => input.current_hash,
        _ => None,
    };
    if let Some(revision) = rollback_to {
        span.add_event(
            "rollback started",
            vec![KeyValue::new(
                "ocm.rollout.rollback.revision",
                revision.to_owned(),
            )],
        );
    }
    span.set_status(Status::error(bounded(description(
        &input.update.hash,
        abort,
        rollback_to,
    ))));
}

fn action_name(action: AbortAction) -> &'static str {
    match action {
        AbortAction::Proceed => "Proceed",
        AbortAction::RollBack => "RollBack",
        AbortAction::Stop => "Stop",
    }
}

/// The failed clusters' names, the first [`MAX_CLUSTERS_NAMED`] of them.
fn cluster_list(abort: &AbortReport) -> String {
    let mut names: Vec<&str> = abort
        .failures
        .iter()
        .take(MAX_CLUSTERS_NAMED)
        .map(|c| c.cluster.as_str())
        .collect();
    let more = abort.failures.len().saturating_sub(MAX_CLUSTERS_NAMED);
    let more = format!("… and {more} more");
    if abort.failures.len() > MAX_CLUSTERS_NAMED {
        names.push(&more);
    }
    names.join(",")
}

/// `rollout of revision U aborted: placement P: c2 Failed (why), c3
/// TimeOut; rolling back to revision C` (or `; nothing to roll back to, the
/// rollout is stopped`).
fn description(update: &str, abort: &AbortReport, rollback_to: Option<&str>) -> String {
    let failures = abort.failure_list();
    let then = match rollback_to {
        Some(revision) => format!("rolling back to revision {revision}"),
        None => "nothing to roll back to, the rollout is stopped".to_owned(),
    };
    format!(
        "rollout of revision {update} aborted: placement {}: {}; {then}",
        abort.placement,
        failures.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orchestrate::ClusterReport;
    use crate::rollout::RolloutStatus;

    fn report(cluster: &str, status: RolloutStatus, message: Option<&str>) -> ClusterReport {
        ClusterReport {
            cluster: cluster.into(),
            status,
            group_index: 0,
            group_name: String::new(),
            last_transition_time: None,
            revision: None,
            message: message.map(str::to_owned),
        }
    }

    #[test]
    fn the_description_names_the_failures_and_what_follows() {
        let abort = AbortReport {
            requested: None,
            placement: "canary".into(),
            action: AbortAction::RollBack,
            failures: vec![
                report("c2", RolloutStatus::Failed, Some("error rate 7%")),
                report("c3", RolloutStatus::TimeOut, None),
            ],
        };
        assert_eq!(
            description("r2", &abort, Some("r1")),
            "rollout of revision r2 aborted: placement canary: c2 Failed (error rate 7%), c3 TimeOut; rolling back to revision r1"
        );
        assert!(description("r2", &abort, None).ends_with("the rollout is stopped"));
        assert_eq!(cluster_list(&abort), "c2,c3");
    }

    #[test]
    fn many_failed_clusters_are_counted_past_the_first_twenty() {
        let abort = AbortReport {
            requested: None,
            placement: "p".into(),
            action: AbortAction::Stop,
            failures: (1..=25)
                .map(|i| report(&format!("c{i}"), RolloutStatus::Failed, None))
                .collect(),
        };
        let list = cluster_list(&abort);
        assert!(list.starts_with("c1,c2,"), "{list}");
        assert!(list.ends_with("c20,… and 5 more"), "{list}");
    }
}
