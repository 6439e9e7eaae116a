//! Never two writers: whether OCM's own ManifestWorkReplicaSet controller
//! runs on the hub, found from what it leaves behind. Pure, but for the
//! watch of the ClusterManagers (`watch.rs`).
//!
//! Two controllers that both roll a ManifestWorkReplicaSet out rewrite its
//! status and its works in a loop, each write waking the other, and OCM's
//! controller strips this controller's labels from the works it rewrites.
//! So the reconcile does nothing for any set while one of these holds
//! ([`Guard::finding`]):
//!
//! - a ClusterManager turns OCM's gate on
//!   (`spec.workConfiguration.featureGates`: `ManifestWorkReplicaSet`,
//!   `mode: Enable`): OCM's operator then runs OCM's controller;
//! - another field manager wrote a ManifestWorkReplicaSet's status within
//!   the quiet period (`run --other-writer-quiet`, two minutes by default):
//!   a controller this one cannot see from the ClusterManager (started by
//!   hand, another operator, a hub without one) is writing it now.
//!
//! Each finding names what was found, for the carrier's `OtherController`
//! condition, the Event, the log line and `/readyz`.

mod watch;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;

use crate::api::{ClusterManager, ManifestWorkReplicaSet};
use crate::orchestrate::FIELD_MANAGER;
pub(crate) use watch::watch_gates;

/// The gate of OCM's ManifestWorkReplicaSet controller.
pub(crate) const OCM_GATE: &str = "ManifestWorkReplicaSet";

/// The default of [`Guard`]'s quiet period.
pub const DEFAULT_OTHER_WRITER_QUIET: Duration = Duration::from_secs(120);

/// What shows another ManifestWorkReplicaSet controller at work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finding {
    /// A ClusterManager enables OCM's controller.
    Gate {
        /// The ClusterManager's name.
        cluster_manager: String,
    },
    /// Another field manager wrote a ManifestWorkReplicaSet's status.
    StatusWriter {
        /// `namespace/name` of the set.
        mwrs: String,
        /// The field manager.
        manager: String,
        /// When it last wrote.
        at: Timestamp,
    },
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::Gate { cluster_manager } => write!(
                f,
                "ClusterManager {cluster_manager} enables OCM's own ManifestWorkReplicaSet \
                 controller (workConfiguration.featureGates: {OCM_GATE} mode Enable); set its \
                 mode to Disable to have this controller roll out"
            ),
            Finding::StatusWriter { mwrs, manager, at } => write!(
                f,
                "field manager {manager:?} wrote the status of ManifestWorkReplicaSet {mwrs} at \
                 {at}: another ManifestWorkReplicaSet controller (OCM's own?) is running; stop \
                 it, and this controller goes on once that status has been left alone for the \
                 quiet period (--other-writer-quiet)"
            ),
        }
    }
}

/// Whether `cluster_manager` turns OCM's ManifestWorkReplicaSet controller
/// on.
pub(crate) fn gate_enabled(cluster_manager: &ClusterManager) -> bool {
    cluster_manager
        .spec
        .work_configuration
        .iter()
        .flat_map(|w| &w.feature_gates)
        .any(|g| g.feature == OCM_GATE && g.mode.as_deref() == Some("Enable"))
}

/// The last write of `mwrs`'s status by a field manager other than this
/// controller's: the manager and when.
pub(crate) fn foreign_status_writer(mwrs: &ManifestWorkReplicaSet) -> Option<(String, Timestamp)> {
    mwrs.managed_fields()
        .iter()
        .filter(|e| e.subresource.as_deref() == Some("status"))
        .filter_map(|e| {
            let manager = e.manager.as_deref()?;
            let at = e.time.as_ref()?.0;
            (manager != FIELD_MANAGER).then(|| (manager.to_owned(), at))
        })
        .max_by_key(|(_, at)| *at)
}

/// What the controller has found of another ManifestWorkReplicaSet
/// controller; shared by the reconciles, the ClusterManager watch and
/// `/readyz`.
#[derive(Debug)]
pub struct Guard {
    quiet: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Per ClusterManager, whether it enables OCM's controller.
    gates: BTreeMap<String, bool>,
    /// The latest foreign status write seen.
    writer: Option<(String, String, Timestamp)>,
}

impl Default for Guard {
    fn default() -> Self {
        Guard::new(DEFAULT_OTHER_WRITER_QUIET)
    }
}

impl Guard {
    /// A guard for which a foreign status write counts for `quiet`.
    pub fn new(quiet: Duration) -> Guard {
        Guard {
            quiet,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records what the ClusterManager `name` says (`None`: it is gone).
    pub(crate) fn set_gate(&self, name: &str, enabled: Option<bool>) {
        let mut state = self.state();
        match enabled {
            Some(enabled) => state.gates.insert(name.to_owned(), enabled),
            None => state.gates.remove(name),
        };
    }

    /// Forgets the ClusterManagers not in `names` (a re-list ended).
    pub(crate) fn retain_gates(&self, names: &std::collections::BTreeSet<String>) {
        self.state().gates.retain(|name, _| names.contains(name));
    }

    /// Records a foreign write of `mwrs`'s status, if it has one later than
    /// the one known.
    pub(crate) fn observe(&self, mwrs: &ManifestWorkReplicaSet) {
        let Some((manager, at)) = foreign_status_writer(mwrs) else {
            return;
        };
        let mut state = self.state();
        if state
            .writer
            .as_ref()
            .is_none_or(|(_, _, known)| at > *known)
        {
            let key = format!(
                "{}/{}",
                mwrs.namespace().unwrap_or_default(),
                mwrs.name_any()
            );
            state.writer = Some((key, manager, at));
        }
    }

    /// What shows another controller at work at `now`, if anything: a
    /// gate before a status write.
    pub(crate) fn finding(&self, now: Timestamp) -> Option<Finding> {
        let state = self.state();
        if let Some((name, _)) = state.gates.iter().find(|(_, on)| **on) {
            return Some(Finding::Gate {
                cluster_manager: name.clone(),
            });
        }
        let (mwrs, manager, at) = state.writer.as_ref()?;
        let quiet = jiff::SignedDuration::try_from(self.quiet).unwrap_or(jiff::SignedDuration::MAX);
        let until = at.saturating_add(quiet).unwrap_or(Timestamp::MAX);
        (now < until).then(|| Finding::StatusWriter {
            mwrs: mwrs.clone(),
            manager: manager.clone(),
            at: *at,
        })
    }

    /// How long after `now` the finding of a status write ends (the next
    /// look), if that is what holds the controller back.
    pub(crate) fn recheck(&self, now: Timestamp) -> Option<Duration> {
        match self.finding(now)? {
            Finding::Gate { .. } => None,
            Finding::StatusWriter { at, .. } => {
                let quiet = jiff::SignedDuration::try_from(self.quiet).ok()?;
                let left = at.saturating_add(quiet).ok()?.duration_since(now);
                Duration::try_from(left).ok()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn mwrs(managed: serde_json::Value) -> ManifestWorkReplicaSet {
        serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1alpha1",
            "kind": "ManifestWorkReplicaSet",
            "metadata": {"name": "hello", "namespace": "default", "managedFields": managed},
            "spec": {"placementRefs": [{"name": "a"}]}
        }))
        .expect("an MWRS")
    }

    fn entry(manager: &str, subresource: Option<&str>, time: &str) -> serde_json::Value {
        let mut e = json!({"manager": manager, "operation": "Update",
                           "apiVersion": "work.open-cluster-management.io/v1alpha1",
                           "time": time, "fieldsType": "FieldsV1", "fieldsV1": {}});
        if let Some(s) = subresource {
            e["subresource"] = json!(s);
        }
        e
    }

    #[test]
    fn only_another_managers_status_write_is_foreign() {
        let t = "2026-01-01T00:00:00Z";
        assert_eq!(
            foreign_status_writer(&mwrs(json!([
                entry(FIELD_MANAGER, Some("status"), t),
                entry("kubectl", None, t)
            ]))),
            None
        );
        let found = foreign_status_writer(&mwrs(json!([
            entry(FIELD_MANAGER, Some("status"), "2026-01-01T00:05:00Z"),
            entry("work", Some("status"), "2026-01-01T00:01:00Z"),
            entry("other", Some("status"), "2026-01-01T00:02:00Z"),
        ])))
        .expect("found");
        assert_eq!(found.0, "other");
    }

    #[test]
    fn a_status_write_counts_for_the_quiet_period_and_a_gate_while_it_is_on() {
        let guard = Guard::new(Duration::from_secs(60));
        let at: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        assert_eq!(guard.finding(at), None);
        guard.observe(&mwrs(json!([entry(
            "work",
            Some("status"),
            "2026-01-01T00:00:00Z"
        )])));
        let found = guard.finding(at + jiff::SignedDuration::from_secs(59));
        assert!(
            matches!(&found, Some(Finding::StatusWriter { manager, mwrs, .. }) if manager == "work" && mwrs == "default/hello"),
            "{found:?}"
        );
        assert_eq!(guard.recheck(at), Some(Duration::from_secs(60)));
        assert_eq!(
            guard.finding(at + jiff::SignedDuration::from_secs(60)),
            None
        );

        let cm: ClusterManager = serde_json::from_value(json!({
            "apiVersion": "operator.open-cluster-management.io/v1", "kind": "ClusterManager",
            "metadata": {"name": "cluster-manager"},
            "spec": {"workConfiguration": {"featureGates": [
                {"feature": "ManifestWorkReplicaSet", "mode": "Enable"}]}}
        }))
        .expect("a ClusterManager");
        assert!(gate_enabled(&cm));
        guard.set_gate("cluster-manager", Some(gate_enabled(&cm)));
        let later = at + jiff::SignedDuration::from_secs(3600);
        assert_eq!(
            guard.finding(later),
            Some(Finding::Gate {
                cluster_manager: "cluster-manager".into()
            })
        );
        assert!(
            guard
                .finding(later)
                .unwrap()
                .to_string()
                .contains("mode to Disable")
        );
        guard.set_gate("cluster-manager", None);
        assert_eq!(guard.finding(later), None);
        let mut off = cm.clone();
        off.spec.work_configuration.as_mut().unwrap().feature_gates[0].mode =
            Some("Disable".into());
        assert!(!gate_enabled(&off));
    }
}
