//! The hook requests (docs/plugin-api.md §1), built from one placement's state. Pure.
//!
//! - `total_cluster_count`: the clusters of the placement (every decision
//!   group, each cluster once).
//! - `cluster_index`: the 1-based position of `cluster_name` in the order
//!   the placement's strategy really rolls its clusters out
//!   ([`RolloutOrder`], [`rollout::rollout_order`]): the mandatory decision
//!   groups first, group by group (groups by index, then name) and by name
//!   within each; then, for `Progressive` (and `All`), every other cluster by
//!   name across groups, and for `ProgressivePerGroup` the other groups one
//!   at a time, each by name. A cluster listed in several groups counts in
//!   the first. So with groups `0: [c2, c1]` and `1: [a9]`, Progressive
//!   gives `a9` 1 of 3, `c1` 2 of 3, `c2` 3 of 3, and ProgressivePerGroup
//!   `c1`, `c2`, `a9`. It does not change while the placement's decisions
//!   and strategy stay the same.
//! - `rollout_status` ([`rollout_state`]), each list in rollout order, every
//!   entry with its `manifest_revision_name` (the revision hash its work
//!   carries, or the desired revision for a cluster about to get one), its
//!   `last_transition_time` and its decision group:
//!   - `completed`: clusters `Succeeded` with the desired revision (soaking
//!     or not);
//!   - `progressing`: clusters in flight with the desired revision:
//!     `Progressing`, `Validating`, `Failed` before its deadline, `ToApply`
//!     applied but not yet seen by the agent; and the clusters this reconcile
//!     is about to roll out (`ToApply`) — so BeginRollout and
//!     MutateManifestWork already count the cluster they are about;
//!   - `timed_out`: clusters whose deadline passed (`TimeOut`);
//!   - `removed`: clusters with a ManifestWork that left the placement.
//! - `counts` ([`rollout_counts`]): the number of the placement's clusters
//!   in each status, on every request.
//! - `rollout_status` is sent only to a target that wants it
//!   ([`crate::hooks::StateDetail`]); it is encoded once per phase and the
//!   bytes shared by the phase's requests ([`Requests`]).
//! - `desired_revision`: the revision being rolled out: the update
//!   revision, or the current revision while aborting (`aborting = true`).
//! - `plugin_config_json`: the strategy's `pluginConfig`, the same bytes
//!   (encoded once, when the strategy was validated) on every request of
//!   the rollout, aborting or not.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use jiff::Timestamp;
use rollout_proto::v1alpha1 as proto;

use crate::api::ClusterCounts;
use crate::hooks::RolloutRequest;
use crate::rollout::{self, ClusterGroup, ClusterRolloutStatus, RolloutStatus, Strategy};

/// One cluster's place in its placement's rollout order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Position {
    /// 1-based.
    pub(crate) index: usize,
    /// Its decision group's index.
    pub(crate) group_index: i32,
    /// Its decision group's name.
    pub(crate) group_name: String,
}

/// The rollout order of a placement's clusters (see the module
/// documentation).
#[derive(Debug, Clone, Default)]
pub struct RolloutOrder {
    clusters: Vec<String>,
    positions: HashMap<String, Position>,
}

impl RolloutOrder {
    /// The order in which `strategy` rolls out `groups`' clusters
    /// ([`rollout::rollout_order`]); empty names are ignored.
    pub fn new(strategy: &Strategy, groups: &[ClusterGroup]) -> RolloutOrder {
        let mut order = RolloutOrder::default();
        for placed in rollout::rollout_order(strategy, groups) {
            order.clusters.push(placed.name.to_owned());
            order.positions.insert(
                placed.name.to_owned(),
                Position {
                    index: order.clusters.len(),
                    group_index: placed.group_index,
                    group_name: placed.group_name.to_owned(),
                },
            );
        }
        order
    }

    /// The number of clusters.
    pub(crate) fn total(&self) -> usize {
        self.clusters.len()
    }

    /// The clusters, in order.
    pub fn clusters(&self) -> &[String] {
        &self.clusters
    }

    /// Where `cluster` is; `None` if it is not in the placement.
    pub(crate) fn position(&self, cluster: &str) -> Option<&Position> {
        self.positions.get(cluster)
    }

    /// Whether `cluster` is in the placement.
    pub(crate) fn contains(&self, cluster: &str) -> bool {
        self.positions.contains_key(cluster)
    }

    /// A sort key: position, clusters outside the placement last by name.
    fn key<'a>(&self, cluster: &'a str) -> (usize, &'a str) {
        (
            self.position(cluster).map_or(usize::MAX, |p| p.index),
            cluster,
        )
    }
}

/// A cluster's status as reported to plugins: the status and the revision
/// its work carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reported {
    /// The status, with its group and time.
    pub(crate) status: ClusterRolloutStatus,
    /// The revision hash.
    pub(crate) revision: String,
}

impl Reported {
    /// `status` with `revision`.
    pub(crate) fn new(status: ClusterRolloutStatus, revision: impl Into<String>) -> Reported {
        Reported {
            status,
            revision: revision.into(),
        }
    }
}

/// The proto enum of a status.
pub(crate) fn proto_status(status: RolloutStatus) -> proto::RolloutStatus {
    match status {
        RolloutStatus::ToApply => proto::RolloutStatus::ToApply,
        RolloutStatus::Progressing => proto::RolloutStatus::Progressing,
        RolloutStatus::Succeeded => proto::RolloutStatus::Succeeded,
        RolloutStatus::Failed => proto::RolloutStatus::Failed,
        RolloutStatus::TimeOut => proto::RolloutStatus::TimeOut,
        RolloutStatus::Skip => proto::RolloutStatus::Skip,
        RolloutStatus::Validating => proto::RolloutStatus::Validating,
    }
}

/// A protobuf timestamp.
pub(crate) fn proto_time(at: Timestamp) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: at.as_second(),
        nanos: at.subsec_nanosecond(),
    }
}

fn to_proto(reported: &Reported) -> proto::ClusterRolloutStatus {
    let s = &reported.status;
    proto::ClusterRolloutStatus {
        cluster_name: s.cluster_name.clone(),
        rollout_status: proto_status(s.status) as i32,
        manifest_revision_name: reported.revision.clone(),
        last_transition_time: s.last_transition_time.map(proto_time),
        group_index: s.group_index,
        group_name: s.group_name.clone(),
    }
}

/// The clusters of a request's state, before they are sorted into lists:
/// `observed` holds the statuses of the clusters whose work is the desired
/// revision, `timed_out` those the decision timed out, `to_roll_out` the
/// clusters about to be rolled out, `removed` the clusters that left the
/// placement.
#[derive(Debug, Clone)]
pub(crate) struct RolloutStateLists<'a> {
    /// The placement's rollout order.
    pub(crate) order: &'a RolloutOrder,
    /// Clusters with a work of the desired revision.
    pub(crate) observed: Vec<Reported>,
    /// Clusters whose deadline passed in this decision.
    pub(crate) timed_out: Vec<Reported>,
    /// Clusters about to be rolled out.
    pub(crate) to_roll_out: Vec<Reported>,
    /// Clusters that left the placement.
    pub(crate) removed: Vec<Reported>,
}

/// The `rollout_status` of a request (see the module documentation). A
/// cluster appears in one list only: timed out first, then observed, then
/// about to roll out.
pub(crate) fn rollout_state(lists: &RolloutStateLists<'_>) -> proto::RolloutState {
    let order = lists.order;
    let timed_out_names: HashSet<&str> = lists
        .timed_out
        .iter()
        .map(|r| r.status.cluster_name.as_str())
        .collect();
    let observed_names: HashSet<&str> = lists
        .observed
        .iter()
        .map(|r| r.status.cluster_name.as_str())
        .collect();
    let sorted = |mut list: Vec<&Reported>| -> Vec<proto::ClusterRolloutStatus> {
        list.sort_by(|a, b| {
            order
                .key(&a.status.cluster_name)
                .cmp(&order.key(&b.status.cluster_name))
        });
        list.into_iter().map(to_proto).collect()
    };
    let live = |r: &&Reported| !timed_out_names.contains(r.status.cluster_name.as_str());
    let completed = lists
        .observed
        .iter()
        .filter(live)
        .filter(|r| r.status.status == RolloutStatus::Succeeded)
        .collect();
    let progressing = lists
        .observed
        .iter()
        .filter(live)
        .filter(|r| {
            matches!(
                r.status.status,
                RolloutStatus::ToApply
                    | RolloutStatus::Progressing
                    | RolloutStatus::Validating
                    | RolloutStatus::Failed
            )
        })
        .chain(
            lists
                .to_roll_out
                .iter()
                .filter(live)
                .filter(|r| !observed_names.contains(r.status.cluster_name.as_str())),
        )
        .collect();
    proto::RolloutState {
        completed: sorted(completed),
        progressing: sorted(progressing),
        timed_out: sorted(lists.timed_out.iter().collect()),
        removed: sorted(lists.removed.iter().collect()),
    }
}

/// The `counts` of a request: each cluster of the placement once, in the
/// status the step sees it in: `TimeOut` when the decision timed it out,
/// else its observed status, else `ToApply` (no work of the desired
/// revision; the clusters about to be rolled out are among them, as the
/// engine decided on them as `ToApply`). The first seven add up to
/// `total_cluster_count`; `removed` counts the clusters that left.
pub(crate) fn rollout_counts(lists: &RolloutStateLists<'_>) -> proto::RolloutCounts {
    let timed_out: HashSet<&str> = lists
        .timed_out
        .iter()
        .map(|r| r.status.cluster_name.as_str())
        .collect();
    let observed: HashMap<&str, RolloutStatus> = lists
        .observed
        .iter()
        .map(|r| (r.status.cluster_name.as_str(), r.status.status))
        .collect();
    // The status → counter rule is the one the MWRS status summary uses.
    let mut counts = ClusterCounts::default();
    for cluster in lists.order.clusters() {
        let status = if timed_out.contains(cluster.as_str()) {
            RolloutStatus::TimeOut
        } else {
            observed
                .get(cluster.as_str())
                .copied()
                .unwrap_or(RolloutStatus::ToApply)
        };
        counts.add(status);
    }
    proto::RolloutCounts {
        to_apply: counts.to_apply,
        progressing: counts.progressing,
        validating: counts.validating,
        succeeded: counts.succeeded,
        failed: counts.failed,
        timed_out: counts.time_out,
        skip: counts.skip,
        removed: i32::try_from(lists.removed.len()).unwrap_or(i32::MAX),
    }
}

/// Identifies the rollout a request is about.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestScope<'a> {
    /// The ManifestWorkReplicaSet's name.
    pub(crate) mwrs_name: &'a str,
    /// Its namespace.
    pub(crate) mwrs_namespace: &'a str,
    /// The placement.
    pub(crate) placement: &'a str,
    /// The revision being rolled out.
    pub(crate) desired_revision: &'a str,
    /// Whether this is a rollback to the current revision.
    pub(crate) aborting: bool,
    /// The strategy's `pluginConfig`, encoded ([`Strategy::plugin_config`]).
    pub(crate) plugin_config: Option<&'a Bytes>,
}

/// The requests of one phase of a step: one scope, one state (encoded
/// once, or left out for a counts-only target) and one set of counts,
/// shared by every request built from it.
#[derive(Debug, Clone)]
pub(crate) struct Requests<'a> {
    scope: RequestScope<'a>,
    order: &'a RolloutOrder,
    state: Option<Bytes>,
    counts: proto::RolloutCounts,
}

impl<'a> Requests<'a> {
    /// Requests in `scope` over `order`, carrying `state` (the encoded
    /// `RolloutState`; `None` leaves `rollout_status` out) and `counts`.
    pub(crate) fn new(
        scope: RequestScope<'a>,
        order: &'a RolloutOrder,
        state: Option<Bytes>,
        counts: proto::RolloutCounts,
    ) -> Requests<'a> {
        Requests {
            scope,
            order,
            state,
            counts,
        }
    }

    /// The placement-wide request (ProgressRollout): no `cluster_name`,
    /// `cluster_index` 0.
    pub(crate) fn placement(&self) -> RolloutRequest {
        RolloutRequest {
            mwrs_name: self.scope.mwrs_name.to_owned(),
            mwrs_namespace: self.scope.mwrs_namespace.to_owned(),
            placement_name: self.scope.placement.to_owned(),
            cluster_name: String::new(),
            total_cluster_count: i32::try_from(self.order.total()).unwrap_or(i32::MAX),
            rollout_status: self.state.clone(),
            desired_revision: self.scope.desired_revision.to_owned(),
            aborting: self.scope.aborting,
            cluster_index: 0,
            counts: Some(self.counts),
            plugin_config_json: self.scope.plugin_config.cloned(),
        }
    }

    /// The request of a per-cluster hook for `cluster`, with its
    /// `cluster_index` (0 if it is not in the placement).
    pub(crate) fn cluster(&self, cluster: &str) -> RolloutRequest {
        let index = self.order.position(cluster).map_or(0, |p| p.index);
        RolloutRequest {
            cluster_name: cluster.to_owned(),
            cluster_index: i32::try_from(index).unwrap_or(i32::MAX),
            ..self.placement()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(index: i32, name: &str, clusters: &[&str]) -> ClusterGroup {
        ClusterGroup {
            index,
            name: name.into(),
            clusters: clusters.iter().map(|c| c.to_string()).collect(),
        }
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).expect("time")
    }

    fn strategy(json: &str) -> Strategy {
        let raw: crate::rollout::RawStrategy = serde_json::from_str(json).expect("strategy");
        Strategy::from_raw(&raw).expect("valid")
    }

    fn per_group() -> Strategy {
        strategy(r#"{"type": "ProgressivePerGroup"}"#)
    }

    #[test]
    fn cluster_index_follows_the_engine_order() {
        // Group names not in index order, a cluster in two groups, and a
        // mandatory group ("late") that is not the lowest index.
        let groups = [
            group(1, "", &["a9"]),
            group(0, "canary", &["c2", "c1", "", "c1"]),
            group(0, "alpha", &["z0"]),
            // A cluster in a later group counts in the first.
            group(2, "late", &["c2", "b1"]),
        ];
        let order = RolloutOrder::new(&per_group(), &groups);
        assert_eq!(order.clusters(), ["z0", "c1", "c2", "a9", "b1"]);
        assert_eq!(order.total(), 5);
        let c2 = order.position("c2").expect("in the placement");
        assert_eq!(
            (c2.index, c2.group_index, c2.group_name.as_str()),
            (3, 0, "canary")
        );
        assert_eq!(order.position("b1").map(|p| p.index), Some(5));
        assert_eq!(order.position("gone"), None);
        assert!(RolloutOrder::new(&per_group(), &[]).clusters().is_empty());

        // Progressive: the mandatory group first, then by name across groups.
        let progressive = strategy(
            r#"{"type": "Progressive", "progressive": {"mandatoryDecisionGroups": [{"groupName": "late"}]}}"#,
        );
        let order = RolloutOrder::new(&progressive, &groups);
        assert_eq!(order.clusters(), ["b1", "a9", "c1", "c2", "z0"]);
        let b1 = order.position("b1").expect("in the placement");
        assert_eq!(
            (b1.index, b1.group_index, b1.group_name.as_str()),
            (1, 2, "late")
        );
        // PerGroup: the mandatory group, then group by group.
        let mandatory = strategy(
            r#"{"type": "ProgressivePerGroup", "progressivePerGroup": {"mandatoryDecisionGroups": [{"groupIndex": 2}]}}"#,
        );
        let order = RolloutOrder::new(&mandatory, &groups);
        assert_eq!(order.clusters(), ["b1", "z0", "c1", "c2", "a9"]);
        // All: by name.
        let all = RolloutOrder::new(&Strategy::default(), &groups);
        assert_eq!(all.clusters(), ["a9", "b1", "c1", "c2", "z0"]);
    }

    #[test]
    fn state_lists_are_disjoint_and_ordered() {
        let order = RolloutOrder::new(
            &per_group(),
            &[group(0, "g", &["c1", "c2", "c3", "c4", "c5", "c6"])],
        );
        let st = |c: &str, s: RolloutStatus, t: Option<i64>| {
            let mut status = ClusterRolloutStatus::new(c, s).in_group(0, "g");
            status.last_transition_time = t.map(at);
            status
        };
        let observed = vec![
            Reported::new(st("c3", RolloutStatus::Validating, Some(3)), "r2"),
            Reported::new(st("c1", RolloutStatus::Succeeded, Some(1)), "r2"),
            Reported::new(st("c2", RolloutStatus::Failed, Some(2)), "r2"),
            Reported::new(st("c4", RolloutStatus::Progressing, Some(4)), "r2"),
        ];
        // c4's deadline passed in this decision.
        let timed_out = vec![Reported::new(
            st("c4", RolloutStatus::TimeOut, Some(4)),
            "r2",
        )];
        let to_roll_out = vec![
            Reported::new(st("c6", RolloutStatus::ToApply, None), "r2"),
            Reported::new(st("c5", RolloutStatus::ToApply, None), "r2"),
            // Already observed: listed once.
            Reported::new(st("c3", RolloutStatus::ToApply, None), "r2"),
        ];
        let removed = vec![Reported::new(
            ClusterRolloutStatus::new("old", RolloutStatus::Succeeded),
            "r1",
        )];
        let lists = RolloutStateLists {
            order: &order,
            observed,
            timed_out,
            to_roll_out,
            removed,
        };
        let state = rollout_state(&lists);
        // Each cluster once, as the step sees it: c4 timed out, c5 and c6
        // (about to roll out) still ToApply.
        assert_eq!(
            rollout_counts(&lists),
            proto::RolloutCounts {
                to_apply: 2,
                progressing: 0,
                validating: 1,
                succeeded: 1,
                failed: 1,
                timed_out: 1,
                skip: 0,
                removed: 1,
            }
        );
        let names = |list: &[proto::ClusterRolloutStatus]| {
            list.iter()
                .map(|c| c.cluster_name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&state.completed), ["c1"]);
        assert_eq!(names(&state.progressing), ["c2", "c3", "c5", "c6"]);
        assert_eq!(names(&state.timed_out), ["c4"]);
        assert_eq!(names(&state.removed), ["old"]);
        let c3 = &state.progressing[1];
        assert_eq!(c3.rollout_status, proto::RolloutStatus::Validating as i32);
        assert_eq!(c3.manifest_revision_name, "r2");
        assert_eq!(c3.last_transition_time, Some(proto_time(at(3))));
        assert_eq!((c3.group_index, c3.group_name.as_str()), (0, "g"));
        assert_eq!(
            state.timed_out[0].rollout_status,
            proto::RolloutStatus::TimeOut as i32
        );
        assert_eq!(state.progressing[2].last_transition_time, None);
    }

    #[test]
    fn requests_carry_the_scope_and_position() {
        let config = Bytes::from_static(br#"{"soakTime":"1s"}"#);
        let order = RolloutOrder::new(&per_group(), &[group(0, "", &["c1", "c2", "c3"])]);
        let scope = RequestScope {
            mwrs_name: "hello",
            mwrs_namespace: "default",
            placement: "p",
            desired_revision: "r1",
            aborting: true,
            plugin_config: Some(&config),
        };
        let counts = proto::RolloutCounts {
            to_apply: 3,
            ..proto::RolloutCounts::default()
        };
        let state = crate::hooks::encode_state(&proto::RolloutState {
            completed: vec![proto::ClusterRolloutStatus {
                cluster_name: "c1".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        let requests = Requests::new(scope, &order, Some(state.clone()), counts);
        let progress = requests.placement();
        assert_eq!(
            (
                progress.cluster_name.as_str(),
                progress.cluster_index,
                progress.total_cluster_count
            ),
            ("", 0, 3)
        );
        assert!(progress.aborting);
        assert_eq!(progress.desired_revision, "r1");
        assert_eq!(progress.counts, Some(counts));
        let begin = requests.cluster("c2");
        // The state is the phase's bytes, shared, not a copy.
        assert_eq!(
            begin.rollout_status.as_ref().map(|b| b.as_ptr()),
            Some(state.as_ptr())
        );
        assert_eq!(begin.counts, Some(counts));
        // So is the plugin configuration, on every request of the rollout.
        for request in [&progress, &begin] {
            assert_eq!(
                request.plugin_config_json.as_ref().map(|b| b.as_ptr()),
                Some(config.as_ptr())
            );
        }
        assert_eq!(
            begin.decode_full().plugin_config_json,
            r#"{"soakTime":"1s"}"#
        );
        let counts_only = Requests::new(scope, &order, None, counts).cluster("c2");
        assert_eq!(counts_only.rollout_status, None);
        assert_eq!(counts_only.decode_full().rollout_status, None);
        assert_eq!(counts_only.decode_full().counts, Some(counts));
        assert_eq!(
            (begin.cluster_name.as_str(), begin.cluster_index),
            ("c2", 2)
        );
        assert_eq!(
            (
                begin.mwrs_name.as_str(),
                begin.mwrs_namespace.as_str(),
                begin.placement_name.as_str()
            ),
            ("hello", "default", "p")
        );
        assert_eq!(requests.cluster("x").cluster_index, 0);
        assert_eq!(
            proto_time("2025-01-01T00:00:00.5Z".parse().expect("time")),
            prost_types::Timestamp {
                seconds: 1_735_689_600,
                nanos: 500_000_000
            }
        );
    }
}
