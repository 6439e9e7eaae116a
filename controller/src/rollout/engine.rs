//! The decision itself: OCM's rollout handler, step by step, without the
//! quadratic scans.
//!
//! The steps are those of sdk-go's `GetRolloutCluster` (REFERENCE-OCM §3):
//! split the existing statuses into current and removed; for Progressive and
//! ProgressivePerGroup run the mandatory groups first, group by group and
//! tolerating no failure, and stop there if they have anything in flight;
//! then roll out the rest cluster by cluster (`per_cluster`) or group by group
//! (`per_group`). Each cluster name is hashed once, into an index that links
//! every cluster to its group and its existing status; the passes then only
//! follow positions. Only the first `maxConcurrency` never-seen clusters are
//! ordered, so a decision costs O(N + E log E + k log k) for N clusters, E
//! existing statuses and k clusters added.
//!
//! Where OCM's inputs can be degenerate, this module picks one behaviour:
//! groups are ordered by index then name and every group counts (OCM walks
//! indices 0..n and misses groups past a gap); two groups with the same index
//! and name are one group; a cluster listed in several groups belongs to the
//! first; empty cluster names are ignored; of two existing statuses for one
//! cluster the first wins.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use super::strategy::{MandatoryGroup, RolloutKind, Strategy, Threshold};
use super::{ClusterGroup, ClusterRolloutStatus, RolloutResult, RolloutStatus};

/// Decides which clusters to roll out next.
///
/// `groups` are the placement's decision groups; `existing` the statuses of
/// clusters that already have the desired ManifestWork (any order); `now` the
/// current time. The result is a pure function of the arguments. See
/// [`RolloutResult`] for what each list holds.
pub fn decide(
    strategy: &Strategy,
    groups: &[ClusterGroup],
    existing: &[ClusterRolloutStatus],
    now: Timestamp,
) -> RolloutResult {
    let fleet = Fleet::new(groups, existing);

    let mut result = match &strategy.kind {
        RolloutKind::All(config) => {
            let everyone: Vec<usize> = (0..fleet.groups.len()).collect();
            let total = fleet.clusters.len();
            // All rolls out every cluster, tolerates as many failures as there
            // are clusters and never soaks.
            Run {
                fleet: &fleet,
                min_success_time: SignedDuration::ZERO,
                deadline: config.progress_deadline,
                now,
            }
            .per_cluster(&everyone, total, total)
        }
        RolloutKind::Progressive {
            config,
            mandatory,
            max_concurrency,
        } => {
            let run = Run {
                fleet: &fleet,
                min_success_time: config.min_success_time,
                deadline: config.progress_deadline,
                now,
            };
            // maxFailures counts against every cluster, mandatory ones included.
            let max_failures = config.max_failures.size(fleet.clusters.len(), 0);
            let (first, rest) = fleet.partition(mandatory);
            match run.mandatory_first(&first) {
                Some(result) => result,
                None => {
                    let rest_total = fleet.cluster_count_of(&rest);
                    let size = max_concurrency.size(rest_total, rest_total);
                    run.per_cluster(&rest, size, max_failures)
                }
            }
        }
        RolloutKind::ProgressivePerGroup { config, mandatory } => {
            let run = Run {
                fleet: &fleet,
                min_success_time: config.min_success_time,
                deadline: config.progress_deadline,
                now,
            };
            let (first, rest) = fleet.partition(mandatory);
            match run.mandatory_first(&first) {
                Some(result) => result,
                None => run.per_group(&rest, config.max_failures),
            }
        }
    };
    result.clusters_removed = fleet.removed.into_iter().cloned().collect();
    result
}

/// One cluster's place in the order [`rollout_order`] gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OrderedCluster<'a> {
    /// The cluster.
    pub(crate) name: &'a str,
    /// The index of the decision group it belongs to (its first).
    pub(crate) group_index: i32,
    /// That group's name.
    pub(crate) group_name: &'a str,
}

/// Every cluster of `groups`, once, in the order `strategy` rolls them out
/// when none has a status yet — the order [`decide`] adds never-seen
/// clusters in:
///
/// - `All`: every cluster by name, across groups;
/// - `Progressive`: the mandatory groups first, group by group (groups by
///   index, then name) and by name within each; then every other cluster
///   by name, across groups;
/// - `ProgressivePerGroup`: the mandatory groups first as for Progressive;
///   then the other groups one at a time, each by name.
///
/// Groups are merged as [`decide`] merges them (a cluster in several groups
/// belongs to the first; empty names are ignored), so the order does not
/// depend on the order of `groups`.
pub(crate) fn rollout_order<'a>(
    strategy: &Strategy,
    groups: &'a [ClusterGroup],
) -> Vec<OrderedCluster<'a>> {
    let fleet = Fleet::new(groups, &[]);
    let place = |c: usize| {
        let cluster = &fleet.clusters[c];
        let group = &fleet.groups[cluster.group];
        OrderedCluster {
            name: cluster.name,
            group_index: group.index,
            group_name: group.name,
        }
    };
    let by_name = |list: &mut Vec<usize>| {
        list.sort_unstable_by(|a, b| fleet.clusters[*a].name.cmp(fleet.clusters[*b].name));
    };
    let group_by_group = |list: &[usize]| -> Vec<usize> {
        list.iter()
            .flat_map(|&g| {
                let mut members = fleet.groups[g].members.clone();
                by_name(&mut members);
                members
            })
            .collect()
    };
    let positions: Vec<usize> = match &strategy.kind {
        RolloutKind::All(_) => {
            let mut all: Vec<usize> = (0..fleet.clusters.len()).collect();
            by_name(&mut all);
            all
        }
        RolloutKind::Progressive { mandatory, .. } => {
            let (first, rest) = fleet.partition(mandatory);
            let mut rest: Vec<usize> = rest
                .iter()
                .flat_map(|&g| fleet.groups[g].members.iter().copied())
                .collect();
            by_name(&mut rest);
            let mut order = group_by_group(&first);
            order.extend(rest);
            order
        }
        RolloutKind::ProgressivePerGroup { mandatory, .. } => {
            let (first, rest) = fleet.partition(mandatory);
            let mut order = group_by_group(&first);
            order.extend(group_by_group(&rest));
            order
        }
    };
    positions.into_iter().map(place).collect()
}

/// One group after merging: its clusters are those no earlier group claimed.
struct Group<'a> {
    index: i32,
    name: &'a str,
    /// Positions in [`Fleet::clusters`], in input order.
    members: Vec<usize>,
}

/// One current cluster.
struct Cluster<'a> {
    name: &'a str,
    /// Position of its group in [`Fleet::groups`].
    group: usize,
    /// Position of its existing status in [`Fleet::statuses`], if any.
    status: Option<usize>,
}

/// The inputs of one decision, indexed once so that no pass hashes again:
/// groups in rollout order, every current cluster with its group and its
/// existing status, and the statuses of removed clusters.
struct Fleet<'a> {
    groups: Vec<Group<'a>>,
    clusters: Vec<Cluster<'a>>,
    /// Existing statuses of current clusters, one per cluster, input order.
    statuses: Vec<&'a ClusterRolloutStatus>,
    /// Existing statuses of clusters in no group, one per cluster, input order.
    removed: Vec<&'a ClusterRolloutStatus>,
}

impl<'a> Fleet<'a> {
    fn new(input: &'a [ClusterGroup], existing: &'a [ClusterRolloutStatus]) -> Self {
        let mut order: Vec<&ClusterGroup> = input.iter().collect();
        order.sort_by(|a, b| (a.index, &a.name).cmp(&(b.index, &b.name)));
        let capacity = input.iter().map(|g| g.clusters.len()).sum();
        let mut groups: Vec<Group<'a>> = Vec::with_capacity(order.len());
        let mut clusters: Vec<Cluster<'a>> = Vec::with_capacity(capacity);
        let mut by_name: HashMap<&'a str, usize> = HashMap::with_capacity(capacity);
        for g in order {
            let same_key = groups
                .last()
                .is_some_and(|last| last.index == g.index && last.name == g.name);
            if !same_key {
                groups.push(Group {
                    index: g.index,
                    name: &g.name,
                    members: Vec::with_capacity(g.clusters.len()),
                });
            }
            let position = groups.len() - 1;
            for name in &g.clusters {
                if name.is_empty() {
                    continue;
                }
                if let Entry::Vacant(slot) = by_name.entry(name.as_str()) {
                    slot.insert(clusters.len());
                    groups[position].members.push(clusters.len());
                    clusters.push(Cluster {
                        name,
                        group: position,
                        status: None,
                    });
                }
            }
        }

        let mut statuses = Vec::with_capacity(existing.len());
        let mut removed = Vec::new();
        let mut removed_names = HashSet::new();
        for status in existing {
            match by_name.get(status.cluster_name.as_str()) {
                Some(&c) => {
                    if clusters[c].status.is_none() {
                        clusters[c].status = Some(statuses.len());
                        statuses.push(status);
                    }
                }
                None => {
                    if removed_names.insert(status.cluster_name.as_str()) {
                        removed.push(status);
                    }
                }
            }
        }
        Fleet {
            groups,
            clusters,
            statuses,
            removed,
        }
    }

    fn cluster_count_of(&self, groups: &[usize]) -> usize {
        groups.iter().map(|&g| self.groups[g].members.len()).sum()
    }

    /// Splits group positions into (mandatory, rest), both in rollout order.
    fn partition(&self, mandatory: &[MandatoryGroup]) -> (Vec<usize>, Vec<usize>) {
        (0..self.groups.len()).partition(|&g| {
            let group = &self.groups[g];
            mandatory.iter().any(|m| match m {
                MandatoryGroup::Name(name) => group.name == name,
                MandatoryGroup::Index(index) => group.index == *index,
            })
        })
    }
}

/// What `determine` makes of one existing status.
enum Outcome {
    /// Roll it out (or keep watching it), with this recheck time.
    Rollout(Option<Timestamp>),
    /// Its deadline, this recheck time, has passed.
    TimedOut(Timestamp),
    /// Leave it alone.
    Nothing,
}

/// OCM's `determineRolloutStatus` for one status.
fn determine(
    status: &ClusterRolloutStatus,
    min_success_time: SignedDuration,
    deadline: Option<SignedDuration>,
    now: Timestamp,
) -> Outcome {
    let start = status.last_transition_time.unwrap_or(now);
    match status.status {
        RolloutStatus::ToApply => Outcome::Rollout(status.recheck_time),
        RolloutStatus::Succeeded => {
            let soaked = add(start, min_success_time);
            if now < soaked {
                Outcome::Rollout(Some(soaked))
            } else {
                Outcome::Nothing
            }
        }
        RolloutStatus::TimeOut | RolloutStatus::Skip => Outcome::Nothing,
        RolloutStatus::Progressing | RolloutStatus::Failed | RolloutStatus::Validating => {
            match deadline {
                None => Outcome::Rollout(None),
                // At exactly the deadline the cluster has timed out.
                Some(deadline) => {
                    let at = add(start, deadline);
                    if now < at {
                        Outcome::Rollout(Some(at))
                    } else {
                        Outcome::TimedOut(at)
                    }
                }
            }
        }
    }
}

/// `start + d`, saturating at the ends of the representable range so that an
/// absurd deadline means "never" rather than an error.
fn add(start: Timestamp, d: SignedDuration) -> Timestamp {
    start.checked_add(d).unwrap_or(if d.is_negative() {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    })
}

/// The lists being built by one pass.
#[derive(Default)]
struct Lists {
    rollout: Vec<ClusterRolloutStatus>,
    timeout: Vec<ClusterRolloutStatus>,
}

impl Lists {
    /// Files `status` according to `outcome`; returns its status afterwards.
    fn file(&mut self, status: &ClusterRolloutStatus, outcome: Outcome) -> RolloutStatus {
        match outcome {
            Outcome::Rollout(recheck_time) => {
                self.rollout.push(ClusterRolloutStatus {
                    recheck_time,
                    ..status.clone()
                });
                status.status
            }
            Outcome::TimedOut(at) => {
                self.timeout.push(ClusterRolloutStatus {
                    status: RolloutStatus::TimeOut,
                    recheck_time: Some(at),
                    ..status.clone()
                });
                RolloutStatus::TimeOut
            }
            Outcome::Nothing => status.status,
        }
    }

    fn push_new(&mut self, cluster: &str, group: &Group<'_>) {
        self.rollout.push(ClusterRolloutStatus {
            cluster_name: cluster.to_owned(),
            status: RolloutStatus::ToApply,
            last_transition_time: None,
            group_index: group.index,
            group_name: group.name.to_owned(),
            recheck_time: None,
        });
    }

    fn finish(self, max_failure_breach: bool, now: Timestamp) -> RolloutResult {
        let recheck_after = self
            .rollout
            .iter()
            .filter_map(|s| s.recheck_time)
            .filter_map(|at| Duration::try_from(at.duration_since(now)).ok())
            .filter(|d| !d.is_zero())
            .min();
        RolloutResult {
            clusters_to_rollout: self.rollout,
            clusters_timeout: self.timeout,
            clusters_removed: Vec::new(),
            max_failure_breach,
            recheck_after,
        }
    }
}

/// The inputs every pass of one decision shares.
struct Run<'f, 'a> {
    fleet: &'f Fleet<'a>,
    min_success_time: SignedDuration,
    deadline: Option<SignedDuration>,
    now: Timestamp,
}

impl Run<'_, '_> {
    fn determine(&self, status: &ClusterRolloutStatus) -> Outcome {
        determine(status, self.min_success_time, self.deadline, self.now)
    }

    fn push_new(&self, lists: &mut Lists, cluster: usize) {
        let cluster = &self.fleet.clusters[cluster];
        lists.push_new(cluster.name, &self.fleet.groups[cluster.group]);
    }

    /// The mandatory groups, group by group with no failure tolerated.
    /// Returns the result when it has anything to roll out or timed out,
    /// else `None` (go on with the other groups).
    fn mandatory_first(&self, mandatory: &[usize]) -> Option<RolloutResult> {
        if mandatory.is_empty() {
            return None;
        }
        let result = self.per_group(mandatory, Threshold::Count(0));
        let busy = !result.clusters_to_rollout.is_empty() || !result.clusters_timeout.is_empty();
        busy.then_some(result)
    }

    /// OCM's `progressivePerCluster`: existing statuses in name order, then
    /// never-seen clusters of `groups` in name order, until the roll-out list
    /// holds `size` clusters. Once failures (TimeOut or Failed) exceed
    /// `max_failures`, clusters still `ToApply` are skipped and no new ones
    /// are added.
    fn per_cluster(&self, groups: &[usize], size: usize, max_failures: usize) -> RolloutResult {
        let fleet = self.fleet;
        let mut lists = Lists::default();
        let mut failures = 0usize;
        let mut breach = false;

        let mut by_name = fleet.statuses.clone();
        by_name.sort_unstable_by(|a, b| a.cluster_name.cmp(&b.cluster_name));
        for status in by_name {
            let after = if !breach || status.status != RolloutStatus::ToApply {
                lists.file(status, self.determine(status))
            } else {
                status.status
            };
            if after.is_failure() {
                failures += 1;
                breach = failures > max_failures;
            }
            if lists.rollout.len() >= size {
                return lists.finish(breach, self.now);
            }
        }
        if breach {
            return lists.finish(breach, self.now);
        }

        // Only the first `wanted` never-seen clusters by name matter: select
        // them in linear time and sort just those.
        let wanted = size.saturating_sub(lists.rollout.len());
        if wanted > 0 {
            let mut fresh: Vec<usize> = groups
                .iter()
                .flat_map(|&g| fleet.groups[g].members.iter().copied())
                .filter(|&c| fleet.clusters[c].status.is_none())
                .collect();
            let by_name =
                |a: &usize, b: &usize| fleet.clusters[*a].name.cmp(fleet.clusters[*b].name);
            if fresh.len() > wanted {
                fresh.select_nth_unstable_by(wanted - 1, by_name);
                fresh.truncate(wanted);
            }
            fresh.sort_unstable_by(by_name);
            lists.rollout.reserve(fresh.len());
            for c in fresh {
                self.push_new(&mut lists, c);
            }
        }
        lists.finish(false, self.now)
    }

    /// OCM's `progressivePerGroup`: every existing status that is not
    /// `ToApply` is determined (in input order); then group by group, the
    /// group's failures are counted against `max_failures` of the group's
    /// size and its never-seen clusters are added in name order, stopping at
    /// the first group after which the list holds more than failures, or on
    /// a breach.
    fn per_group(&self, groups: &[usize], max_failures: Threshold) -> RolloutResult {
        let fleet = self.fleet;
        let mut lists = Lists::default();
        // Statuses after determination, by position in `fleet.statuses`.
        // ToApply ones stay `None` so that their clusters are added again as
        // new, with the group they are in now.
        let mut after: Vec<Option<RolloutStatus>> = vec![None; fleet.statuses.len()];
        for (slot, status) in after.iter_mut().zip(&fleet.statuses) {
            if status.status != RolloutStatus::ToApply {
                *slot = Some(lists.file(status, self.determine(status)));
            }
        }

        let mut total_failures = 0usize;
        let mut breach = false;
        for &g in groups {
            let group = &fleet.groups[g];
            let group_max_failures = max_failures.size(group.members.len(), 0);
            let mut group_failures = 0usize;
            let mut fresh = Vec::new();
            for &c in &group.members {
                match fleet.clusters[c].status.and_then(|s| after[s]) {
                    Some(status) => {
                        if status.is_failure() {
                            group_failures += 1;
                            breach = group_failures > group_max_failures;
                        }
                    }
                    None => fresh.push(c),
                }
            }
            fresh.sort_unstable_by(|a, b| fleet.clusters[*a].name.cmp(fleet.clusters[*b].name));
            for c in fresh {
                self.push_new(&mut lists, c);
            }
            total_failures += group_failures;
            // Stop once something other than failures is rolling. Timed-out
            // clusters count as failures without being in the list, so a
            // group that only timed out (within its limit) lets the walk go on.
            if lists.rollout.len() > total_failures || breach {
                return lists.finish(breach, self.now);
            }
        }
        lists.finish(breach, self.now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::strategy::{RawStrategy, RolloutConfig};
    use RolloutStatus::{Failed, Progressing, Skip, Succeeded, TimeOut, ToApply, Validating};

    /// The reference time of the OCM tests: 2022-01-01T00:00:00Z.
    fn now() -> Timestamp {
        Timestamp::from_second(1_640_995_200).expect("valid time")
    }

    /// `now` shifted by `secs` (negative: in the past).
    fn at(secs: i64) -> Timestamp {
        add(now(), SignedDuration::from_secs(secs))
    }

    fn strategy(json: &str) -> Strategy {
        let raw: RawStrategy = serde_json::from_str(json).expect("strategy parses");
        Strategy::from_raw(&raw).expect("strategy is valid")
    }

    fn group(index: i32, name: &str, clusters: &[&str]) -> ClusterGroup {
        ClusterGroup {
            index,
            name: name.to_owned(),
            clusters: clusters.iter().map(|c| (*c).to_owned()).collect(),
        }
    }

    /// The groups of most OCM reference cases: group1 (index 0) and an
    /// unnamed group 1.
    fn two_groups() -> Vec<ClusterGroup> {
        vec![
            group(0, "group1", &["cluster1", "cluster2", "cluster3"]),
            group(1, "", &["cluster4", "cluster5", "cluster6"]),
        ]
    }

    fn three_groups() -> Vec<ClusterGroup> {
        vec![
            group(0, "group1", &["cluster1", "cluster2", "cluster3"]),
            group(1, "", &["cluster4", "cluster5", "cluster6"]),
            group(2, "", &["cluster7", "cluster8", "cluster9"]),
        ]
    }

    /// An existing status: `(cluster, status, seconds since its transition,
    /// group index, group name)`.
    fn st(
        cluster: &str,
        status: RolloutStatus,
        since: Option<i64>,
        gi: i32,
        gn: &str,
    ) -> ClusterRolloutStatus {
        ClusterRolloutStatus {
            cluster_name: cluster.to_owned(),
            status,
            last_transition_time: since.map(at),
            group_index: gi,
            group_name: gn.to_owned(),
            recheck_time: None,
        }
    }

    /// An expected output entry.
    fn out(
        cluster: &str,
        status: RolloutStatus,
        since: Option<i64>,
        recheck: Option<i64>,
        gi: i32,
        gn: &str,
    ) -> ClusterRolloutStatus {
        ClusterRolloutStatus {
            recheck_time: recheck.map(at),
            ..st(cluster, status, since, gi, gn)
        }
    }

    fn new(cluster: &str, gi: i32, gn: &str) -> ClusterRolloutStatus {
        out(cluster, ToApply, None, None, gi, gn)
    }

    fn secs(s: u64) -> Option<Duration> {
        Some(Duration::from_secs(s))
    }

    struct Case {
        name: &'static str,
        strategy: &'static str,
        groups: Vec<ClusterGroup>,
        existing: Vec<ClusterRolloutStatus>,
        want: RolloutResult,
    }

    fn check(cases: Vec<Case>) {
        for case in cases {
            let got = decide(
                &strategy(case.strategy),
                &case.groups,
                &case.existing,
                now(),
            );
            assert_eq!(got, case.want, "case: {}", case.name);
        }
    }

    #[test]
    fn determine_each_status() {
        let d90 = Some(SignedDuration::from_secs(90));
        let d0 = Some(SignedDuration::ZERO);
        let m60 = SignedDuration::from_secs(60);
        let z = SignedDuration::ZERO;
        // Ok(recheck): roll out; Err(recheck): timed out; None: nothing.
        type Want = Option<Result<Option<i64>, i64>>;
        // (name, status, minSuccessTime, deadline, want)
        type Case<'a> = (
            &'a str,
            ClusterRolloutStatus,
            SignedDuration,
            Option<SignedDuration>,
            Want,
        );
        let cases: Vec<Case> = vec![
            (
                "ToApply",
                st("c", ToApply, None, 0, ""),
                z,
                d90,
                Some(Ok(None)),
            ),
            (
                "ToApply keeps its recheck time",
                ClusterRolloutStatus {
                    recheck_time: Some(at(5)),
                    ..st("c", ToApply, None, 0, "")
                },
                z,
                d90,
                Some(Ok(Some(5))),
            ),
            ("Skip", st("c", Skip, Some(-10), 0, ""), m60, d90, None),
            (
                "TimeOut",
                st("c", TimeOut, Some(-10), 0, ""),
                m60,
                d90,
                None,
            ),
            (
                "Succeeded",
                st("c", Succeeded, Some(-10), 0, ""),
                z,
                d90,
                None,
            ),
            (
                "Succeeded soaking",
                st("c", Succeeded, Some(-30), 0, ""),
                m60,
                d90,
                Some(Ok(Some(30))),
            ),
            (
                "Succeeded soaked exactly",
                st("c", Succeeded, Some(-60), 0, ""),
                m60,
                d90,
                None,
            ),
            (
                "Succeeded soaked",
                st("c", Succeeded, Some(-120), 0, ""),
                m60,
                d90,
                None,
            ),
            (
                "Succeeded without time soaks from now",
                st("c", Succeeded, None, 0, ""),
                m60,
                None,
                Some(Ok(Some(60))),
            ),
            (
                "Succeeded without time, no soak",
                st("c", Succeeded, None, 0, ""),
                z,
                None,
                None,
            ),
            (
                "Progressing within deadline",
                st("c", Progressing, Some(-60), 0, ""),
                z,
                d90,
                Some(Ok(Some(30))),
            ),
            (
                "Progressing at deadline",
                st("c", Progressing, Some(-90), 0, ""),
                z,
                d90,
                Some(Err(0)),
            ),
            (
                "Progressing past deadline",
                st("c", Progressing, Some(-120), 0, ""),
                z,
                d90,
                Some(Err(-30)),
            ),
            (
                "Progressing, no deadline",
                st("c", Progressing, Some(-1000), 0, ""),
                z,
                None,
                Some(Ok(None)),
            ),
            (
                "Progressing, 0s deadline",
                st("c", Progressing, Some(0), 0, ""),
                z,
                d0,
                Some(Err(0)),
            ),
            (
                "Progressing without time",
                st("c", Progressing, None, 0, ""),
                z,
                d90,
                Some(Ok(Some(90))),
            ),
            (
                "Failed within deadline",
                st("c", Failed, Some(-60), 0, ""),
                z,
                d90,
                Some(Ok(Some(30))),
            ),
            (
                "Failed past deadline",
                st("c", Failed, Some(-120), 0, ""),
                z,
                d90,
                Some(Err(-30)),
            ),
            (
                "Validating within deadline",
                st("c", Validating, Some(-89), 0, ""),
                z,
                d90,
                Some(Ok(Some(1))),
            ),
            (
                "Validating at deadline",
                st("c", Validating, Some(-90), 0, ""),
                z,
                d90,
                Some(Err(0)),
            ),
            (
                "Validating, no deadline",
                st("c", Validating, Some(-90), 0, ""),
                z,
                None,
                Some(Ok(None)),
            ),
        ];
        for (name, status, min_success, deadline, want) in cases {
            let got = match determine(&status, min_success, deadline, now()) {
                Outcome::Rollout(r) => Some(Ok(r)),
                Outcome::TimedOut(r) => Some(Err(r)),
                Outcome::Nothing => None,
            };
            let want = want.map(|w| w.map(|r| r.map(at)).map_err(at));
            assert_eq!(got, want, "case: {name}");
        }
    }

    #[test]
    fn validating_times_out_at_exactly_the_deadline() {
        let s = strategy(
            r#"{"type": "Progressive", "progressive": {"progressDeadline": "90s", "maxFailures": 5}}"#,
        );
        let groups = [group(0, "", &["a"])];
        let at_deadline = [st("a", Validating, Some(-90), 0, "")];
        let got = decide(&s, &groups, &at_deadline, now());
        assert_eq!(
            got.clusters_timeout,
            [out("a", TimeOut, Some(-90), Some(0), 0, "")]
        );
        assert!(got.clusters_to_rollout.is_empty());

        let just_before = [ClusterRolloutStatus {
            last_transition_time: Some(add(at(-90), SignedDuration::from_nanos(1))),
            ..st("a", Validating, None, 0, "")
        }];
        let got = decide(&s, &groups, &just_before, now());
        assert_eq!(got.clusters_to_rollout.len(), 1);
        assert_eq!(got.clusters_to_rollout[0].status, Validating);
        assert_eq!(got.recheck_after, Some(Duration::from_nanos(1)));
        assert!(got.clusters_timeout.is_empty());
    }

    #[test]
    fn all() {
        check(vec![
            Case {
                name: "no workload yet: every cluster, by name, with its group",
                strategy: r#"{"type": "All", "all": {"progressDeadline": "90s"}}"#,
                groups: vec![
                    group(0, "group1", &["cluster2", "cluster1"]),
                    group(1, "", &["cluster3", "cluster4", "cluster5", "cluster6"]),
                ],
                existing: vec![],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        new("cluster1", 0, "group1"),
                        new("cluster2", 0, "group1"),
                        new("cluster3", 1, ""),
                        new("cluster4", 1, ""),
                        new("cluster5", 1, ""),
                        new("cluster6", 1, ""),
                    ],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "mixed statuses with a 90s deadline",
                strategy: r#"{"type": "All", "all": {"progressDeadline": "90s"}}"#,
                groups: vec![
                    group(0, "group1", &["cluster1", "cluster2"]),
                    group(1, "", &["cluster3", "cluster4", "cluster5", "cluster6"]),
                ],
                existing: vec![
                    st("cluster1", Succeeded, Some(-60), 0, "group1"),
                    st("cluster2", Failed, Some(-120), 0, "group1"),
                    st("cluster3", Progressing, Some(-120), 1, ""),
                    st("cluster4", Failed, Some(-60), 1, ""),
                    st("cluster5", Progressing, Some(-60), 1, ""),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        out("cluster4", Failed, Some(-60), Some(30), 1, ""),
                        out("cluster5", Progressing, Some(-60), Some(30), 1, ""),
                        new("cluster6", 1, ""),
                    ],
                    clusters_timeout: vec![
                        out("cluster2", TimeOut, Some(-120), Some(-30), 0, "group1"),
                        out("cluster3", TimeOut, Some(-120), Some(-30), 1, ""),
                    ],
                    recheck_after: secs(30),
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "minSuccessTime is ignored",
                strategy: r#"{"type": "All", "all": {"minSuccessTime": "10m"}}"#,
                groups: vec![group(0, "", &["a", "b"])],
                existing: vec![st("a", Succeeded, Some(-60), 0, "")],
                want: RolloutResult {
                    clusters_to_rollout: vec![new("b", 0, "")],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "failures never breach: maxFailures is the cluster count",
                strategy: r#"{"type": "All", "all": {"maxFailures": 0}}"#,
                groups: vec![group(0, "", &["a", "b", "c"])],
                existing: vec![
                    st("a", Failed, Some(-5), 0, ""),
                    st("b", TimeOut, Some(-5), 0, ""),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        out("a", Failed, Some(-5), None, 0, ""),
                        new("c", 0, ""),
                    ],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "no groups: every status is removed",
                strategy: "{}",
                groups: vec![],
                existing: vec![st("a", Progressing, Some(-5), 2, "old")],
                want: RolloutResult {
                    clusters_removed: vec![st("a", Progressing, Some(-5), 2, "old")],
                    ..RolloutResult::default()
                },
            },
        ]);
    }

    #[test]
    fn progressive() {
        check(vec![
            Case {
                name: "maxConcurrency 2, no workload yet",
                strategy: r#"{"type": "Progressive", "progressive": {"progressDeadline": "90s", "maxConcurrency": 2}}"#,
                groups: two_groups(),
                existing: vec![],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        new("cluster1", 0, "group1"),
                        new("cluster2", 0, "group1"),
                    ],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "reference case: maxConcurrency 2, maxFailures 1, deadline 90s",
                strategy: r#"{"type": "Progressive", "progressive": {"progressDeadline": "90s", "maxFailures": 1, "maxConcurrency": 2}}"#,
                groups: two_groups(),
                existing: vec![
                    st("cluster1", Succeeded, Some(-60), 0, "group1"),
                    st("cluster2", Failed, Some(-120), 0, "group1"),
                    st("cluster3", Progressing, Some(-60), 0, "group1"),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        out("cluster3", Progressing, Some(-60), Some(30), 0, "group1"),
                        new("cluster4", 1, ""),
                    ],
                    clusters_timeout: vec![out(
                        "cluster2",
                        TimeOut,
                        Some(-120),
                        Some(-30),
                        0,
                        "group1",
                    )],
                    recheck_after: secs(30),
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "maxFailures 0%: one failure breaches; applied clusters kept, no new one",
                strategy: r#"{"type": "Progressive", "progressive": {"progressDeadline": "None", "maxFailures": "0%", "maxConcurrency": "50%"}}"#,
                groups: vec![
                    group(0, "group1", &["cluster1", "cluster2"]),
                    group(1, "", &["cluster3", "cluster4", "cluster5", "cluster6"]),
                ],
                existing: vec![
                    st("cluster1", Succeeded, Some(-60), 0, "group1"),
                    st("cluster2", Failed, Some(-120), 0, "group1"),
                    st("cluster3", Progressing, Some(-60), 1, ""),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        out("cluster2", Failed, Some(-120), None, 0, "group1"),
                        out("cluster3", Progressing, Some(-60), None, 1, ""),
                    ],
                    max_failure_breach: true,
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "maxFailures 100%, maxConcurrency 50% of 6",
                strategy: r#"{"type": "Progressive", "progressive": {"progressDeadline": "None", "maxFailures": "100%", "maxConcurrency": "50%"}}"#,
                groups: vec![
                    group(0, "group1", &["cluster1", "cluster2"]),
                    group(1, "", &["cluster3", "cluster4", "cluster5", "cluster6"]),
                ],
                existing: vec![
                    st("cluster1", Succeeded, Some(-60), 0, "group1"),
                    st("cluster2", Failed, Some(-120), 0, "group1"),
                    st("cluster3", Progressing, Some(-60), 1, ""),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        out("cluster2", Failed, Some(-120), None, 0, "group1"),
                        out("cluster3", Progressing, Some(-60), None, 1, ""),
                        new("cluster4", 1, ""),
                    ],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "0s deadline times out at once; maxFailures 3 tolerates it",
                strategy: r#"{"type": "Progressive", "progressive": {"progressDeadline": "0s", "maxFailures": 3, "maxConcurrency": 2}}"#,
                groups: two_groups(),
                existing: vec![
                    st("cluster1", Succeeded, Some(-30), 0, "group1"),
                    st("cluster2", Progressing, Some(-30), 0, "group1"),
                    st("cluster3", Progressing, Some(-30), 0, "group1"),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![new("cluster4", 1, ""), new("cluster5", 1, "")],
                    clusters_timeout: vec![
                        out("cluster2", TimeOut, Some(-30), Some(-30), 0, "group1"),
                        out("cluster3", TimeOut, Some(-30), Some(-30), 0, "group1"),
                    ],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "minSuccessTime: soaking clusters stay in the list and hold their slot",
                strategy: r#"{"type": "Progressive", "progressive": {"progressDeadline": "90s", "maxFailures": "100%", "minSuccessTime": "1m", "maxConcurrency": 4}}"#,
                groups: vec![group(
                    0,
                    "group1",
                    &["cluster1", "cluster2", "cluster3", "cluster4", "cluster5"],
                )],
                existing: vec![
                    st("cluster1", Succeeded, Some(-30), 0, "group1"),
                    st("cluster2", Progressing, Some(-60), 0, "group1"),
                    st("cluster3", Progressing, Some(-30), 0, "group1"),
                    st("cluster4", Succeeded, Some(-120), 0, "group1"),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        out("cluster1", Succeeded, Some(-30), Some(30), 0, "group1"),
                        out("cluster2", Progressing, Some(-60), Some(30), 0, "group1"),
                        out("cluster3", Progressing, Some(-30), Some(60), 0, "group1"),
                        new("cluster5", 0, "group1"),
                    ],
                    recheck_after: secs(30),
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "after a breach, existing ToApply clusters are skipped",
                strategy: r#"{"type": "Progressive", "progressive": {}}"#,
                groups: vec![group(0, "", &["a", "b", "c", "d"])],
                existing: vec![
                    st("c", Progressing, Some(-5), 0, ""),
                    st("b", ToApply, None, 0, ""),
                    st("a", Failed, Some(-5), 0, ""),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        out("a", Failed, Some(-5), None, 0, ""),
                        out("c", Progressing, Some(-5), None, 0, ""),
                    ],
                    max_failure_breach: true,
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "without a breach, existing ToApply clusters are rolled out as they are",
                strategy: r#"{"type": "Progressive", "progressive": {"maxFailures": 1}}"#,
                groups: vec![group(0, "", &["a", "b", "c", "d"])],
                existing: vec![
                    st("c", Progressing, Some(-5), 0, ""),
                    st("b", ToApply, None, 7, "recorded"),
                    st("a", Failed, Some(-5), 0, ""),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        out("a", Failed, Some(-5), None, 0, ""),
                        out("b", ToApply, None, None, 7, "recorded"),
                        out("c", Progressing, Some(-5), None, 0, ""),
                        new("d", 0, ""),
                    ],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "the list stops at maxConcurrency even with more in flight",
                strategy: r#"{"type": "Progressive", "progressive": {"maxConcurrency": 1}}"#,
                groups: vec![group(0, "", &["a", "b", "c"])],
                existing: vec![
                    st("b", Progressing, Some(-5), 0, ""),
                    st("a", Validating, Some(-5), 0, ""),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![out("a", Validating, Some(-5), None, 0, "")],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "an integer maxFailures above the cluster count becomes 0",
                strategy: r#"{"type": "Progressive", "progressive": {"maxFailures": 4}}"#,
                groups: vec![group(0, "", &["a", "b", "c"])],
                existing: vec![st("a", Failed, Some(-5), 0, "")],
                want: RolloutResult {
                    clusters_to_rollout: vec![out("a", Failed, Some(-5), None, 0, "")],
                    max_failure_breach: true,
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "an existing TimeOut counts as a failure but is not reported again",
                strategy: r#"{"type": "Progressive", "progressive": {"progressDeadline": "90s"}}"#,
                groups: vec![group(0, "", &["a", "b"])],
                existing: vec![st("a", TimeOut, Some(-500), 0, "")],
                want: RolloutResult {
                    max_failure_breach: true,
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "Skip is left alone and not rolled out again",
                strategy: r#"{"type": "Progressive", "progressive": {}}"#,
                groups: vec![group(0, "", &["a", "b"])],
                existing: vec![st("a", Skip, None, 0, "")],
                want: RolloutResult {
                    clusters_to_rollout: vec![new("b", 0, "")],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "Validating holds a slot until it is decided",
                strategy: r#"{"type": "Progressive", "progressive": {"maxConcurrency": 2, "progressDeadline": "10m"}}"#,
                groups: vec![group(0, "", &["a", "b", "c", "d"])],
                existing: vec![
                    st("a", Validating, Some(-60), 0, ""),
                    st("b", Succeeded, Some(-60), 0, ""),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        out("a", Validating, Some(-60), Some(540), 0, ""),
                        new("c", 0, ""),
                    ],
                    recheck_after: secs(540),
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "without a transition time the deadline runs from now",
                strategy: r#"{"type": "Progressive", "progressive": {"progressDeadline": "2m"}}"#,
                groups: vec![group(0, "", &["a"])],
                existing: vec![st("a", Progressing, None, 0, "")],
                want: RolloutResult {
                    clusters_to_rollout: vec![out("a", Progressing, None, Some(120), 0, "")],
                    recheck_after: secs(120),
                    ..RolloutResult::default()
                },
            },
        ]);
    }

    #[test]
    fn progressive_mandatory_groups() {
        check(vec![
            Case {
                name: "mandatory group by name: timed out, nothing tolerated",
                strategy: r#"{"type": "Progressive", "progressive": {"progressDeadline": "90s", "maxConcurrency": 3,
                              "mandatoryDecisionGroups": [{"groupName": "group1"}]}}"#,
                groups: two_groups(),
                existing: vec![
                    st("cluster1", Succeeded, Some(-60), 0, "group1"),
                    st("cluster2", Failed, Some(-120), 0, "group1"),
                    st("cluster3", Progressing, Some(-60), 0, "group1"),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![out(
                        "cluster3",
                        Progressing,
                        Some(-60),
                        Some(30),
                        0,
                        "group1",
                    )],
                    clusters_timeout: vec![out(
                        "cluster2",
                        TimeOut,
                        Some(-120),
                        Some(-30),
                        0,
                        "group1",
                    )],
                    max_failure_breach: true,
                    recheck_after: secs(30),
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "mandatory group failing",
                strategy: r#"{"type": "Progressive", "progressive": {"progressDeadline": "90s", "maxConcurrency": 3,
                              "mandatoryDecisionGroups": [{"groupName": "group1"}]}}"#,
                groups: vec![
                    group(0, "group1", &["cluster1", "cluster2"]),
                    group(1, "", &["cluster3", "cluster4"]),
                    group(2, "", &["cluster5", "cluster6"]),
                ],
                existing: vec![
                    st("cluster1", Failed, Some(-120), 0, "group1"),
                    st("cluster2", Failed, Some(-60), 0, "group1"),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![out(
                        "cluster2",
                        Failed,
                        Some(-60),
                        Some(30),
                        0,
                        "group1",
                    )],
                    clusters_timeout: vec![out(
                        "cluster1",
                        TimeOut,
                        Some(-120),
                        Some(-30),
                        0,
                        "group1",
                    )],
                    max_failure_breach: true,
                    recheck_after: secs(30),
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "mandatory group succeeded: the rest goes cluster by cluster",
                strategy: r#"{"type": "Progressive", "progressive": {"maxConcurrency": 3,
                              "mandatoryDecisionGroups": [{"groupName": "group1"}]}}"#,
                groups: vec![
                    group(0, "group1", &["cluster1", "cluster2"]),
                    group(1, "", &["cluster3", "cluster4"]),
                    group(2, "", &["cluster5", "cluster6"]),
                ],
                existing: vec![
                    st("cluster1", Succeeded, Some(-60), 0, "group1"),
                    st("cluster2", Succeeded, Some(-120), 0, "group1"),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        new("cluster3", 1, ""),
                        new("cluster4", 1, ""),
                        new("cluster5", 2, ""),
                    ],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "mandatory group by index, rolled out whole regardless of maxConcurrency",
                strategy: r#"{"type": "Progressive", "progressive": {"maxConcurrency": 1,
                              "mandatoryDecisionGroups": [{"groupIndex": 1}]}}"#,
                groups: vec![
                    group(0, "a", &["x1", "x2"]),
                    group(1, "b", &["y2", "y1", "y3"]),
                ],
                existing: vec![],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        new("y1", 1, "b"),
                        new("y2", 1, "b"),
                        new("y3", 1, "b"),
                    ],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "a name matches every group of that name",
                strategy: r#"{"type": "Progressive", "progressive": {"maxConcurrency": 1,
                              "mandatoryDecisionGroups": [{"groupName": "canary"}]}}"#,
                groups: vec![
                    group(0, "canary", &["a"]),
                    group(1, "prod", &["b"]),
                    group(2, "canary", &["c"]),
                ],
                existing: vec![],
                want: RolloutResult {
                    // Groups go one at a time: the first mandatory group stops the pass.
                    clusters_to_rollout: vec![new("a", 0, "canary")],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "second mandatory group follows once the first is done",
                strategy: r#"{"type": "Progressive", "progressive": {"maxConcurrency": 1,
                              "mandatoryDecisionGroups": [{"groupName": "canary"}]}}"#,
                groups: vec![
                    group(0, "canary", &["a"]),
                    group(1, "prod", &["b"]),
                    group(2, "canary", &["c"]),
                ],
                existing: vec![st("a", Succeeded, Some(-5), 0, "canary")],
                want: RolloutResult {
                    clusters_to_rollout: vec![new("c", 2, "canary")],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "an unknown mandatory group is ignored",
                strategy: r#"{"type": "Progressive", "progressive": {"maxConcurrency": 1,
                              "mandatoryDecisionGroups": [{"groupName": "nope"}, {"groupIndex": 9}]}}"#,
                groups: vec![group(0, "a", &["x"]), group(1, "b", &["y"])],
                existing: vec![],
                want: RolloutResult {
                    clusters_to_rollout: vec![new("x", 0, "a")],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "the mandatory pass also keeps in-flight clusters of other groups (as OCM)",
                strategy: r#"{"type": "Progressive", "progressive": {"maxConcurrency": 5,
                              "mandatoryDecisionGroups": [{"groupIndex": 0}]}}"#,
                groups: vec![group(0, "", &["a"]), group(1, "", &["b", "c"])],
                existing: vec![
                    st("a", Succeeded, Some(-5), 0, ""),
                    st("b", Progressing, Some(-5), 1, ""),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![out("b", Progressing, Some(-5), None, 1, "")],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "an existing ToApply in a mandatory group is added again with its current group",
                strategy: r#"{"type": "Progressive", "progressive": {"mandatoryDecisionGroups": [{"groupName": "m"}]}}"#,
                groups: vec![group(0, "m", &["a", "b"]), group(1, "", &["c"])],
                existing: vec![
                    ClusterRolloutStatus {
                        recheck_time: Some(at(9)),
                        ..st("a", ToApply, Some(-5), 4, "stale")
                    },
                    st("b", Succeeded, Some(-5), 0, "m"),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![new("a", 0, "m")],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "maxConcurrency counts only non-mandatory clusters",
                strategy: r#"{"type": "Progressive", "progressive": {"maxConcurrency": "50%",
                              "mandatoryDecisionGroups": [{"groupIndex": 0}]}}"#,
                groups: vec![
                    group(0, "", &["a", "b", "c", "d"]),
                    group(1, "", &["e", "f"]),
                ],
                existing: ["a", "b", "c", "d"]
                    .iter()
                    .map(|c| st(c, Succeeded, Some(-5), 0, ""))
                    .collect(),
                want: RolloutResult {
                    clusters_to_rollout: vec![new("e", 1, "")],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "every group mandatory and done: nothing left",
                strategy: r#"{"type": "Progressive", "progressive": {"mandatoryDecisionGroups": [{"groupIndex": 0}]}}"#,
                groups: vec![group(0, "", &["a"])],
                existing: vec![st("a", Succeeded, Some(-5), 0, "")],
                want: RolloutResult::default(),
            },
        ]);
    }

    #[test]
    fn progressive_per_group() {
        check(vec![
            Case {
                name: "no workload yet: the first group",
                strategy: r#"{"type": "ProgressivePerGroup", "progressivePerGroup": {"progressDeadline": "90s"}}"#,
                groups: three_groups(),
                existing: vec![],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        new("cluster1", 0, "group1"),
                        new("cluster2", 0, "group1"),
                        new("cluster3", 0, "group1"),
                    ],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "first group timed out within maxFailures 2: next group",
                strategy: r#"{"type": "ProgressivePerGroup", "progressivePerGroup": {"progressDeadline": "90s", "maxFailures": 2}}"#,
                groups: three_groups(),
                existing: vec![
                    st("cluster1", Succeeded, Some(-60), 0, "group1"),
                    st("cluster2", Failed, Some(-120), 0, "group1"),
                    st("cluster3", Succeeded, Some(-60), 0, "group1"),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        new("cluster4", 1, ""),
                        new("cluster5", 1, ""),
                        new("cluster6", 1, ""),
                    ],
                    clusters_timeout: vec![out(
                        "cluster2",
                        TimeOut,
                        Some(-120),
                        Some(-30),
                        0,
                        "group1",
                    )],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "first group timed out, second succeeded: third group",
                strategy: r#"{"type": "ProgressivePerGroup", "progressivePerGroup": {"progressDeadline": "90s", "maxFailures": 2}}"#,
                groups: three_groups(),
                existing: vec![
                    st("cluster1", Succeeded, Some(-60), 0, "group1"),
                    st("cluster2", Failed, Some(-120), 0, "group1"),
                    st("cluster3", Succeeded, Some(-60), 0, "group1"),
                    st("cluster4", Succeeded, Some(-60), 1, ""),
                    st("cluster5", Succeeded, Some(-60), 1, ""),
                    st("cluster6", Succeeded, Some(-60), 1, ""),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        new("cluster7", 2, ""),
                        new("cluster8", 2, ""),
                        new("cluster9", 2, ""),
                    ],
                    clusters_timeout: vec![out(
                        "cluster2",
                        TimeOut,
                        Some(-120),
                        Some(-30),
                        0,
                        "group1",
                    )],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "first group failing, no failure tolerated",
                strategy: r#"{"type": "ProgressivePerGroup", "progressivePerGroup": {"progressDeadline": "None"}}"#,
                groups: three_groups(),
                existing: vec![
                    st("cluster1", Succeeded, Some(-60), 0, "group1"),
                    st("cluster2", Failed, Some(-120), 0, "group1"),
                    st("cluster3", Succeeded, Some(-60), 0, "group1"),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![out(
                        "cluster2",
                        Failed,
                        Some(-120),
                        None,
                        0,
                        "group1",
                    )],
                    max_failure_breach: true,
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "one failing within maxFailures 2: the failure stays, next group added",
                strategy: r#"{"type": "ProgressivePerGroup", "progressivePerGroup": {"progressDeadline": "None", "maxFailures": 2}}"#,
                groups: three_groups(),
                existing: vec![
                    st("cluster1", Succeeded, Some(-60), 0, "group1"),
                    st("cluster2", Failed, Some(-120), 0, "group1"),
                    st("cluster3", Succeeded, Some(-60), 0, "group1"),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        out("cluster2", Failed, Some(-120), None, 0, "group1"),
                        new("cluster4", 1, ""),
                        new("cluster5", 1, ""),
                        new("cluster6", 1, ""),
                    ],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "two failing over 30% of 3",
                strategy: r#"{"type": "ProgressivePerGroup", "progressivePerGroup": {"progressDeadline": "None", "maxFailures": "30%"}}"#,
                groups: three_groups(),
                existing: vec![
                    st("cluster1", Succeeded, Some(-60), 0, "group1"),
                    st("cluster2", Failed, Some(-120), 0, "group1"),
                    st("cluster3", Failed, Some(-120), 0, "group1"),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        out("cluster2", Failed, Some(-120), None, 0, "group1"),
                        out("cluster3", Failed, Some(-120), None, 0, "group1"),
                    ],
                    max_failure_breach: true,
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "mandatory group failing, 90s",
                strategy: r#"{"type": "ProgressivePerGroup", "progressivePerGroup": {"progressDeadline": "90s", "maxFailures": 2,
                              "mandatoryDecisionGroups": [{"groupName": "group1"}]}}"#,
                groups: three_groups(),
                existing: vec![
                    st("cluster1", Succeeded, Some(-60), 0, "group1"),
                    st("cluster2", Failed, Some(-120), 0, "group1"),
                    st("cluster3", Succeeded, Some(-60), 0, "group1"),
                ],
                want: RolloutResult {
                    clusters_timeout: vec![out(
                        "cluster2",
                        TimeOut,
                        Some(-120),
                        Some(-30),
                        0,
                        "group1",
                    )],
                    max_failure_breach: true,
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "mandatory group succeeded: next group",
                strategy: r#"{"type": "ProgressivePerGroup", "progressivePerGroup": {"progressDeadline": "90s",
                              "mandatoryDecisionGroups": [{"groupName": "group1"}]}}"#,
                groups: three_groups(),
                existing: vec![
                    st("cluster1", Succeeded, Some(-60), 0, "group1"),
                    st("cluster2", Succeeded, Some(-60), 0, "group1"),
                    st("cluster3", Succeeded, Some(-60), 0, "group1"),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        new("cluster4", 1, ""),
                        new("cluster5", 1, ""),
                        new("cluster6", 1, ""),
                    ],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "soaking cluster holds the group back",
                strategy: r#"{"type": "ProgressivePerGroup", "progressivePerGroup": {"minSuccessTime": "2m"}}"#,
                groups: vec![group(0, "", &["a", "b"]), group(1, "", &["c"])],
                existing: vec![
                    st("a", Succeeded, Some(-300), 0, ""),
                    st("b", Succeeded, Some(-60), 0, ""),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![out("b", Succeeded, Some(-60), Some(60), 0, "")],
                    recheck_after: secs(60),
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "existing statuses are filed in input order",
                strategy: r#"{"type": "ProgressivePerGroup", "progressivePerGroup": {}}"#,
                groups: vec![group(0, "", &["a", "b", "c"])],
                existing: vec![
                    st("c", Progressing, Some(-5), 0, ""),
                    st("a", Progressing, Some(-5), 0, ""),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        out("c", Progressing, Some(-5), None, 0, ""),
                        out("a", Progressing, Some(-5), None, 0, ""),
                        new("b", 0, ""),
                    ],
                    ..RolloutResult::default()
                },
            },
        ]);
    }

    #[test]
    fn per_group_max_failures_follow_each_groups_size() {
        // 50% of a 2-cluster group is 1; of a 4-cluster group, 2.
        let s = r#"{"type": "ProgressivePerGroup", "progressivePerGroup": {"maxFailures": "50%", "progressDeadline": "90s"}}"#;
        let groups = || {
            vec![
                group(0, "", &["a", "b"]),
                group(1, "", &["c", "d", "e", "f"]),
                group(2, "", &["g"]),
            ]
        };
        let done = |c: &str, gi: i32| st(c, Succeeded, Some(-5), gi, "");
        let failed = |c: &str, gi: i32| st(c, Failed, Some(-5), gi, "");
        let dead = |c: &str, gi: i32| st(c, Failed, Some(-120), gi, "");
        let timed_out = |c: &str, gi: i32| out(c, TimeOut, Some(-120), Some(-30), gi, "");
        check(vec![
            Case {
                name: "one of two failed: tolerated, next group",
                strategy: s,
                groups: groups(),
                existing: vec![failed("a", 0), done("b", 0)],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        out("a", Failed, Some(-5), Some(85), 0, ""),
                        new("c", 1, ""),
                        new("d", 1, ""),
                        new("e", 1, ""),
                        new("f", 1, ""),
                    ],
                    recheck_after: secs(85),
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "two of two failed: breach",
                strategy: s,
                groups: groups(),
                existing: vec![failed("a", 0), dead("b", 0)],
                want: RolloutResult {
                    clusters_to_rollout: vec![out("a", Failed, Some(-5), Some(85), 0, "")],
                    clusters_timeout: vec![timed_out("b", 0)],
                    max_failure_breach: true,
                    recheck_after: secs(85),
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "two of four timed out in the second group: tolerated",
                strategy: s,
                groups: groups(),
                existing: vec![
                    done("a", 0),
                    done("b", 0),
                    dead("c", 1),
                    dead("d", 1),
                    done("e", 1),
                    done("f", 1),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![new("g", 2, "")],
                    clusters_timeout: vec![timed_out("c", 1), timed_out("d", 1)],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "three of four timed out in the second group: breach",
                strategy: s,
                groups: groups(),
                existing: vec![
                    done("a", 0),
                    done("b", 0),
                    dead("c", 1),
                    dead("d", 1),
                    dead("e", 1),
                    done("f", 1),
                ],
                want: RolloutResult {
                    clusters_timeout: vec![timed_out("c", 1), timed_out("d", 1), timed_out("e", 1)],
                    max_failure_breach: true,
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "failures still in flight in a later group hold the rollout at the first group (as OCM)",
                strategy: s,
                groups: groups(),
                existing: vec![
                    done("a", 0),
                    done("b", 0),
                    failed("c", 1),
                    failed("d", 1),
                    failed("e", 1),
                    done("f", 1),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![
                        out("c", Failed, Some(-5), Some(85), 1, ""),
                        out("d", Failed, Some(-5), Some(85), 1, ""),
                        out("e", Failed, Some(-5), Some(85), 1, ""),
                    ],
                    recheck_after: secs(85),
                    ..RolloutResult::default()
                },
            },
        ]);
    }

    #[test]
    fn removed_clusters() {
        check(vec![
            Case {
                name: "All: removed clusters keep the group they had",
                strategy: r#"{"type": "All", "all": {"progressDeadline": "90s"}}"#,
                groups: vec![
                    group(0, "group1", &["cluster1", "cluster2"]),
                    group(1, "", &["cluster3"]),
                ],
                existing: vec![
                    st("cluster1", Succeeded, Some(-60), 0, "group1"),
                    st("cluster9", Progressing, Some(-60), 3, "gone"),
                    st("cluster3", Progressing, Some(-60), 1, ""),
                    st("cluster8", Failed, Some(-500), 0, "group1"),
                ],
                want: RolloutResult {
                    // Existing statuses come first, by name, then new clusters.
                    clusters_to_rollout: vec![
                        out("cluster3", Progressing, Some(-60), Some(30), 1, ""),
                        new("cluster2", 0, "group1"),
                    ],
                    clusters_removed: vec![
                        st("cluster9", Progressing, Some(-60), 3, "gone"),
                        st("cluster8", Failed, Some(-500), 0, "group1"),
                    ],
                    recheck_after: secs(30),
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "Progressive: a removed failure does not count",
                strategy: r#"{"type": "Progressive", "progressive": {"maxConcurrency": 1}}"#,
                groups: vec![group(0, "", &["a", "b"])],
                existing: vec![st("old", Failed, Some(-5), 0, "")],
                want: RolloutResult {
                    clusters_to_rollout: vec![new("a", 0, "")],
                    clusters_removed: vec![st("old", Failed, Some(-5), 0, "")],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "Progressive with mandatory group: removed reported on the early return",
                strategy: r#"{"type": "Progressive", "progressive": {"mandatoryDecisionGroups": [{"groupIndex": 0}]}}"#,
                groups: vec![group(0, "", &["a"]), group(1, "", &["b"])],
                existing: vec![st("old", Succeeded, Some(-5), 2, "x")],
                want: RolloutResult {
                    clusters_to_rollout: vec![new("a", 0, "")],
                    clusters_removed: vec![st("old", Succeeded, Some(-5), 2, "x")],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "ProgressivePerGroup: removed from a timed-out group",
                strategy: r#"{"type": "ProgressivePerGroup", "progressivePerGroup": {"progressDeadline": "90s", "maxFailures": 1}}"#,
                groups: vec![group(0, "g", &["a", "b"]), group(1, "", &["c"])],
                existing: vec![
                    st("a", Progressing, Some(-120), 0, "g"),
                    st("b", Succeeded, Some(-120), 0, "g"),
                    st("z", Progressing, Some(-120), 0, "g"),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![new("c", 1, "")],
                    clusters_timeout: vec![out("a", TimeOut, Some(-120), Some(-30), 0, "g")],
                    clusters_removed: vec![st("z", Progressing, Some(-120), 0, "g")],
                    ..RolloutResult::default()
                },
            },
        ]);
    }

    #[test]
    fn degenerate_inputs() {
        check(vec![
            Case {
                name: "groups out of order, duplicated keys merged, gaps in indices",
                strategy: r#"{"type": "ProgressivePerGroup", "progressivePerGroup": {}}"#,
                groups: vec![
                    group(5, "late", &["z"]),
                    group(2, "b", &["y2"]),
                    group(2, "b", &["y1"]),
                ],
                existing: vec![],
                want: RolloutResult {
                    clusters_to_rollout: vec![new("y1", 2, "b"), new("y2", 2, "b")],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "past the gap, later groups still roll out",
                strategy: r#"{"type": "ProgressivePerGroup", "progressivePerGroup": {}}"#,
                groups: vec![group(5, "late", &["z"]), group(2, "b", &["y1", "y2"])],
                existing: vec![
                    st("y1", Succeeded, None, 2, "b"),
                    st("y2", Succeeded, None, 2, "b"),
                ],
                want: RolloutResult {
                    clusters_to_rollout: vec![new("z", 5, "late")],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "a cluster in two groups belongs to the first; empty names ignored",
                strategy: "{}",
                groups: vec![group(1, "", &["a", "b", ""]), group(0, "", &["a"])],
                existing: vec![],
                want: RolloutResult {
                    clusters_to_rollout: vec![new("a", 0, ""), new("b", 1, "")],
                    ..RolloutResult::default()
                },
            },
            Case {
                name: "of two statuses for a cluster the first wins",
                strategy: "{}",
                groups: vec![group(0, "", &["a"])],
                existing: vec![
                    st("a", Succeeded, Some(-5), 0, ""),
                    st("a", Progressing, Some(-5), 0, ""),
                ],
                want: RolloutResult::default(),
            },
            Case {
                name: "an empty-named status is removed",
                strategy: "{}",
                groups: vec![group(0, "", &["a"])],
                existing: vec![st("", Progressing, Some(-5), 0, "")],
                want: RolloutResult {
                    clusters_to_rollout: vec![new("a", 0, "")],
                    clusters_removed: vec![st("", Progressing, Some(-5), 0, "")],
                    ..RolloutResult::default()
                },
            },
        ]);
    }

    #[test]
    fn recheck_after_is_the_smallest_positive_wait() {
        let s = strategy(
            r#"{"type": "Progressive", "progressive": {"progressDeadline": "90s", "minSuccessTime": "45s", "maxFailures": "100%"}}"#,
        );
        let groups = [group(0, "", &["a", "b", "c", "d"])];
        let existing = [
            st("a", Progressing, Some(-10), 0, ""),
            st("b", Succeeded, Some(-20), 0, ""),
            ClusterRolloutStatus {
                recheck_time: Some(at(-1)),
                ..st("c", ToApply, None, 0, "")
            },
            st("d", Failed, Some(-100), 0, ""),
        ];
        let got = decide(&s, &groups, &existing, now());
        assert_eq!(got.recheck_after, secs(25));
        assert_eq!(got.clusters_timeout.len(), 1);

        let nothing_waits = [st("a", Progressing, Some(-10), 0, "")];
        let no_deadline = strategy(r#"{"type": "Progressive", "progressive": {}}"#);
        assert_eq!(
            decide(&no_deadline, &groups, &nothing_waits, now()).recheck_after,
            None
        );
    }

    #[test]
    fn huge_deadlines_saturate() {
        let s = strategy(r#"{"type": "All", "all": {"progressDeadline": "2562047h"}}"#);
        let far = Timestamp::MAX;
        let groups = [group(0, "", &["a"])];
        let existing = [ClusterRolloutStatus {
            last_transition_time: Some(far),
            ..st("a", Progressing, None, 0, "")
        }];
        let got = decide(&s, &groups, &existing, now());
        assert_eq!(
            got.clusters_to_rollout[0].recheck_time,
            Some(Timestamp::MAX)
        );
    }

    #[test]
    fn abort_is_requested_on_timeout_or_breach_when_asked() {
        let groups = [group(0, "", &["a", "b"])];
        let timed_out = [st("a", Progressing, Some(-120), 0, "")];
        let failed = [st("a", Failed, Some(-1), 0, "")];
        let abort = |json: &str, existing: &[ClusterRolloutStatus]| {
            let s = strategy(json);
            let result = decide(&s, &groups, existing, now());
            crate::revision::abort_requested(&s, &result, existing)
        };
        let with = r#"{"type": "Progressive", "abortOnFailure": true, "progressive": {"progressDeadline": "90s", "maxFailures": 1}}"#;
        let without = r#"{"type": "Progressive", "progressive": {"progressDeadline": "90s", "maxFailures": 1}}"#;
        let breach = r#"{"type": "Progressive", "failureStrategy": "AbortAll", "progressive": {}}"#;
        assert!(abort(with, &timed_out));
        assert!(!abort(without, &timed_out));
        assert!(
            !abort(with, &failed),
            "one failure within maxFailures, nothing timed out"
        );
        assert!(abort(breach, &failed));
        assert!(!abort(with, &[]));
    }

    #[test]
    fn rollout_order_follows_the_strategy() {
        // Group names not in index order; the mandatory group "m" is not the
        // lowest index.
        let groups = [
            group(2, "m", &["m2", "m1"]),
            group(0, "zeta", &["c3", "c1"]),
            group(1, "alpha", &["b2", "a1", "c1"]),
        ];
        let names = |json: &str| -> Vec<(String, i32)> {
            rollout_order(&strategy(json), &groups)
                .iter()
                .map(|c| (c.name.to_owned(), c.group_index))
                .collect()
        };
        let pairs = |list: &[(&str, i32)]| -> Vec<(String, i32)> {
            list.iter().map(|(n, g)| ((*n).to_owned(), *g)).collect()
        };
        assert_eq!(
            names(r#"{"type": "All"}"#),
            pairs(&[
                ("a1", 1),
                ("b2", 1),
                ("c1", 0),
                ("c3", 0),
                ("m1", 2),
                ("m2", 2)
            ])
        );
        assert_eq!(
            names(
                r#"{"type": "Progressive", "progressive": {"mandatoryDecisionGroups": [{"groupName": "m"}]}}"#
            ),
            pairs(&[
                ("m1", 2),
                ("m2", 2),
                ("a1", 1),
                ("b2", 1),
                ("c1", 0),
                ("c3", 0)
            ])
        );
        assert_eq!(
            names(
                r#"{"type": "ProgressivePerGroup", "progressivePerGroup": {"mandatoryDecisionGroups": [{"groupIndex": 2}]}}"#
            ),
            pairs(&[
                ("m1", 2),
                ("m2", 2),
                ("c1", 0),
                ("c3", 0),
                ("a1", 1),
                ("b2", 1)
            ])
        );
    }

    #[test]
    fn strategy_default_is_all() {
        assert_eq!(
            Strategy::default().kind,
            RolloutKind::All(RolloutConfig::default())
        );
    }

    /// A literal, quadratic transcription of REFERENCE-OCM §3, against which
    /// the engine is checked on random inputs. Inputs are kept free of the
    /// degenerate cases the engine resolves its own way (unique group keys,
    /// cluster names and existing statuses).
    mod reference {
        use crate::rollout::strategy::{MandatoryGroup, RolloutKind, Strategy, Threshold};
        use crate::rollout::{ClusterGroup, ClusterRolloutStatus, RolloutResult, RolloutStatus};
        use RolloutStatus::*;
        use jiff::{SignedDuration, Timestamp};
        use std::time::Duration;

        pub(crate) fn decide(
            strategy: &Strategy,
            groups: &[ClusterGroup],
            existing: &[ClusterRolloutStatus],
            now: Timestamp,
        ) -> RolloutResult {
            let mut groups = groups.to_vec();
            groups.sort_by_key(|g| g.index);
            let all: Vec<&String> = groups.iter().flat_map(|g| &g.clusters).collect();
            let current: Vec<ClusterRolloutStatus> = existing
                .iter()
                .filter(|s| all.contains(&&s.cluster_name))
                .cloned()
                .collect();
            let removed: Vec<ClusterRolloutStatus> = existing
                .iter()
                .filter(|s| !all.contains(&&s.cluster_name))
                .cloned()
                .collect();
            let matches = |g: &ClusterGroup, m: &[MandatoryGroup]| {
                m.iter().any(|k| match k {
                    MandatoryGroup::Name(n) => &g.name == n,
                    MandatoryGroup::Index(i) => g.index == *i,
                })
            };
            let mut result = match &strategy.kind {
                RolloutKind::All(c) => per_cluster(
                    &groups,
                    all.len(),
                    all.len(),
                    SignedDuration::ZERO,
                    c.progress_deadline,
                    &current,
                    now,
                ),
                RolloutKind::Progressive {
                    config,
                    mandatory,
                    max_concurrency,
                } => {
                    let max_failures = config.max_failures.size(all.len(), 0);
                    let first: Vec<ClusterGroup> = groups
                        .iter()
                        .filter(|g| matches(g, mandatory))
                        .cloned()
                        .collect();
                    let rest: Vec<ClusterGroup> = groups
                        .iter()
                        .filter(|g| !matches(g, mandatory))
                        .cloned()
                        .collect();
                    let early = if first.is_empty() {
                        None
                    } else {
                        let r = per_group(
                            &first,
                            Threshold::Count(0),
                            config.min_success_time,
                            config.progress_deadline,
                            &current,
                            now,
                        );
                        (!r.clusters_to_rollout.is_empty() || !r.clusters_timeout.is_empty())
                            .then_some(r)
                    };
                    early.unwrap_or_else(|| {
                        let n: usize = rest.iter().map(|g| g.clusters.len()).sum();
                        let size = max_concurrency.size(n, n);
                        per_cluster(
                            &rest,
                            size,
                            max_failures,
                            config.min_success_time,
                            config.progress_deadline,
                            &current,
                            now,
                        )
                    })
                }
                RolloutKind::ProgressivePerGroup { config, mandatory } => {
                    let first: Vec<ClusterGroup> = groups
                        .iter()
                        .filter(|g| matches(g, mandatory))
                        .cloned()
                        .collect();
                    let rest: Vec<ClusterGroup> = groups
                        .iter()
                        .filter(|g| !matches(g, mandatory))
                        .cloned()
                        .collect();
                    let early = if first.is_empty() {
                        None
                    } else {
                        let r = per_group(
                            &first,
                            Threshold::Count(0),
                            config.min_success_time,
                            config.progress_deadline,
                            &current,
                            now,
                        );
                        (!r.clusters_to_rollout.is_empty() || !r.clusters_timeout.is_empty())
                            .then_some(r)
                    };
                    early.unwrap_or_else(|| {
                        per_group(
                            &rest,
                            config.max_failures,
                            config.min_success_time,
                            config.progress_deadline,
                            &current,
                            now,
                        )
                    })
                }
            };
            result.clusters_removed = removed;
            result
        }

        fn determine(
            mut s: ClusterRolloutStatus,
            min_success: SignedDuration,
            timeout: Option<SignedDuration>,
            now: Timestamp,
            rollout: &mut Vec<ClusterRolloutStatus>,
            timed_out: &mut Vec<ClusterRolloutStatus>,
        ) -> RolloutStatus {
            let start = s.last_transition_time.unwrap_or(now);
            match s.status {
                ToApply => rollout.push(s.clone()),
                Succeeded => {
                    let t = start.checked_add(min_success).unwrap_or(Timestamp::MAX);
                    if now < t {
                        s.recheck_time = Some(t);
                        rollout.push(s.clone());
                    }
                }
                TimeOut | Skip => {}
                Progressing | Failed | Validating => {
                    s.recheck_time =
                        timeout.map(|d| start.checked_add(d).unwrap_or(Timestamp::MAX));
                    match s.recheck_time {
                        Some(t) if now >= t => {
                            s.status = TimeOut;
                            timed_out.push(s.clone());
                        }
                        _ => rollout.push(s.clone()),
                    }
                }
            }
            s.status
        }

        fn finish(
            rollout: Vec<ClusterRolloutStatus>,
            timed_out: Vec<ClusterRolloutStatus>,
            breach: bool,
            now: Timestamp,
        ) -> RolloutResult {
            let mut recheck_after: Option<Duration> = None;
            for s in &rollout {
                if let Some(t) = s.recheck_time {
                    let d = t.duration_since(now);
                    if d.is_positive() {
                        let d = Duration::try_from(d).expect("positive");
                        if recheck_after.is_none_or(|m| d < m) {
                            recheck_after = Some(d);
                        }
                    }
                }
            }
            RolloutResult {
                clusters_to_rollout: rollout,
                clusters_timeout: timed_out,
                clusters_removed: vec![],
                max_failure_breach: breach,
                recheck_after,
            }
        }

        fn per_cluster(
            groups: &[ClusterGroup],
            size: usize,
            max_failures: usize,
            min_success: SignedDuration,
            timeout: Option<SignedDuration>,
            existing: &[ClusterRolloutStatus],
            now: Timestamp,
        ) -> RolloutResult {
            let (mut rollout, mut timed_out) = (vec![], vec![]);
            let mut failures = 0;
            let mut breach = false;
            let mut sorted = existing.to_vec();
            sorted.sort_by(|a, b| a.cluster_name.cmp(&b.cluster_name));
            for s in sorted {
                let status = if !breach || s.status != ToApply {
                    determine(s, min_success, timeout, now, &mut rollout, &mut timed_out)
                } else {
                    s.status
                };
                if status == TimeOut || status == Failed {
                    failures += 1;
                    breach = failures > max_failures;
                }
                if rollout.len() >= size {
                    return finish(rollout, timed_out, breach, now);
                }
            }
            if breach {
                return finish(rollout, timed_out, breach, now);
            }
            let mut clusters: Vec<(String, &ClusterGroup)> = groups
                .iter()
                .flat_map(|g| g.clusters.iter().map(move |c| (c.clone(), g)))
                .collect();
            clusters.sort_by(|a, b| a.0.cmp(&b.0));
            for (c, g) in clusters {
                if existing.iter().any(|s| s.cluster_name == c) {
                    continue;
                }
                rollout.push(ClusterRolloutStatus {
                    cluster_name: c,
                    status: ToApply,
                    last_transition_time: None,
                    group_index: g.index,
                    group_name: g.name.clone(),
                    recheck_time: None,
                });
                if rollout.len() >= size {
                    break;
                }
            }
            finish(rollout, timed_out, false, now)
        }

        fn per_group(
            groups: &[ClusterGroup],
            max_failures: Threshold,
            min_success: SignedDuration,
            timeout: Option<SignedDuration>,
            existing: &[ClusterRolloutStatus],
            now: Timestamp,
        ) -> RolloutResult {
            let (mut rollout, mut timed_out) = (vec![], vec![]);
            let mut known: Vec<(String, RolloutStatus)> = vec![];
            for s in existing {
                if s.status != ToApply {
                    let name = s.cluster_name.clone();
                    let status = determine(
                        s.clone(),
                        min_success,
                        timeout,
                        now,
                        &mut rollout,
                        &mut timed_out,
                    );
                    known.push((name, status));
                }
            }
            let mut total_failures = 0;
            let mut breach = false;
            for g in groups {
                let limit = max_failures.size(g.clusters.len(), 0);
                let mut group_failures = 0;
                let mut clusters = g.clusters.clone();
                clusters.sort();
                for c in clusters {
                    if let Some((_, status)) = known.iter().find(|(n, _)| *n == c) {
                        if *status == TimeOut || *status == Failed {
                            group_failures += 1;
                            breach = group_failures > limit;
                        }
                        continue;
                    }
                    rollout.push(ClusterRolloutStatus {
                        cluster_name: c,
                        status: ToApply,
                        last_transition_time: None,
                        group_index: g.index,
                        group_name: g.name.clone(),
                        recheck_time: None,
                    });
                }
                total_failures += group_failures;
                if rollout.len() as i64 - total_failures as i64 > 0 || breach {
                    return finish(rollout, timed_out, breach, now);
                }
            }
            finish(rollout, timed_out, breach, now)
        }
    }

    mod properties {
        use super::*;
        use crate::rollout::strategy::MandatoryGroup;
        use proptest::prelude::*;
        use proptest::strategy::Strategy;

        const STATUSES: [RolloutStatus; 7] = [
            ToApply,
            Progressing,
            Succeeded,
            Failed,
            TimeOut,
            Skip,
            Validating,
        ];

        fn threshold() -> impl Strategy<Value = Threshold> {
            prop_oneof![
                (-1i32..8).prop_map(Threshold::Count),
                (0u8..=100).prop_map(Threshold::Percent)
            ]
        }

        fn config() -> impl Strategy<Value = RolloutConfig> {
            (
                prop_oneof![Just(0i64), Just(30), Just(60)],
                prop_oneof![Just(None), Just(Some(0i64)), Just(Some(30)), Just(Some(90))],
                threshold(),
            )
                .prop_map(|(soak, deadline, max_failures)| RolloutConfig {
                    min_success_time: SignedDuration::from_secs(soak),
                    progress_deadline: deadline.map(SignedDuration::from_secs),
                    max_failures,
                })
        }

        fn mandatory() -> impl Strategy<Value = Vec<MandatoryGroup>> {
            prop::collection::vec(
                prop_oneof![
                    (0usize..3).prop_map(|i| MandatoryGroup::Name(format!("g{i}"))),
                    (0i32..5).prop_map(MandatoryGroup::Index),
                ],
                0..3,
            )
        }

        fn any_strategy() -> impl Strategy<Value = super::Strategy> {
            let kind = prop_oneof![
                config().prop_map(RolloutKind::All),
                (config(), mandatory(), threshold()).prop_map(
                    |(config, mandatory, max_concurrency)| {
                        RolloutKind::Progressive {
                            config,
                            mandatory,
                            max_concurrency,
                        }
                    }
                ),
                (config(), mandatory()).prop_map(|(config, mandatory)| {
                    RolloutKind::ProgressivePerGroup { config, mandatory }
                }),
            ];
            kind.prop_map(|kind| super::Strategy {
                kind,
                plugin: None,
                plugin_config: None,
                abort_on_failure: false,
                rollback_pace: crate::rollout::RollbackPace::AtOnce,
            })
        }

        /// Groups with unique indices and clusters, and existing statuses for
        /// some of those clusters and for a few removed ones, shuffled.
        fn fleet() -> impl Strategy<Value = (Vec<ClusterGroup>, Vec<ClusterRolloutStatus>)> {
            let groups = (
                1usize..5,
                prop::collection::vec(0usize..4, 0..5),
                prop::collection::vec(0usize..6, 0..14),
            );
            groups
                .prop_flat_map(|(n, names, assignment)| {
                    let mut groups: Vec<ClusterGroup> = (0..n)
                        .map(|i| ClusterGroup {
                            index: i as i32,
                            name: names
                                .get(i)
                                .map(|&k| {
                                    if k == 3 {
                                        String::new()
                                    } else {
                                        format!("g{k}")
                                    }
                                })
                                .unwrap_or_default(),
                            clusters: vec![],
                        })
                        .collect();
                    let mut everyone = vec![];
                    for (i, &g) in assignment.iter().enumerate() {
                        let name = format!("c{i:02}");
                        if g < n {
                            groups[g].clusters.push(name.clone());
                        }
                        everyone.push((name, g.min(n)));
                    }
                    everyone.extend((0..2).map(|i| (format!("r{i}"), 7)));
                    let picks = prop::collection::vec(
                        (any::<bool>(), 0usize..7, prop::option::of(-200i64..200)),
                        everyone.len(),
                    );
                    (Just(groups), Just(everyone), picks)
                })
                .prop_flat_map(|(groups, everyone, picks)| {
                    let existing: Vec<ClusterRolloutStatus> = everyone
                        .iter()
                        .zip(picks)
                        .filter(|(_, (keep, _, _))| *keep)
                        .map(|((name, g), (_, status, since))| ClusterRolloutStatus {
                            cluster_name: name.clone(),
                            status: STATUSES[status],
                            last_transition_time: since.map(at),
                            group_index: *g as i32,
                            group_name: String::new(),
                            recheck_time: None,
                        })
                        .collect();
                    (Just(groups).prop_shuffle(), Just(existing).prop_shuffle())
                })
        }

        proptest! {
            // The reference check is the one that finds slips in the indexing.
            #![proptest_config(ProptestConfig::with_cases(2048))]

            #[test]
            fn matches_the_reference((groups, existing) in fleet(), strategy in any_strategy()) {
                let got = decide(&strategy, &groups, &existing, now());
                let want = reference::decide(&strategy, &groups, &existing, now());
                prop_assert_eq!(got, want);
            }

        }

        /// The clusters `decide` adds, batch after batch, when each batch
        /// succeeds (long soaked) before the next decision.
        fn replayed(strategy: &super::Strategy, groups: &[ClusterGroup]) -> Vec<String> {
            let mut existing: Vec<ClusterRolloutStatus> = Vec::new();
            let mut order = Vec::new();
            loop {
                let got = decide(strategy, groups, &existing, now());
                let added: Vec<String> = got
                    .clusters_to_rollout
                    .iter()
                    .filter(|c| c.status == ToApply)
                    .map(|c| c.cluster_name.clone())
                    .collect();
                if added.is_empty() {
                    return order;
                }
                for name in added {
                    let mut done = ClusterRolloutStatus::new(name.as_str(), Succeeded);
                    done.last_transition_time = Some(Timestamp::MIN);
                    existing.push(done);
                    order.push(name);
                }
            }
        }

        proptest! {
            /// `rollout_order` is the order `decide` really adds clusters in.
            #[test]
            fn rollout_order_is_the_order_decide_adds_clusters_in(
                (groups, _) in fleet(),
                strategy in any_strategy(),
            ) {
                let want = replayed(&strategy, &groups);
                let got: Vec<String> = rollout_order(&strategy, &groups)
                    .iter()
                    .map(|c| c.name.to_owned())
                    .collect();
                prop_assert_eq!(got, want);
            }
        }

        proptest! {
            #[test]
            fn no_cluster_twice((groups, existing) in fleet(), strategy in any_strategy()) {
                let got = decide(&strategy, &groups, &existing, now());
                let mut seen = HashSet::new();
                for s in got.clusters_to_rollout.iter().chain(&got.clusters_timeout).chain(&got.clusters_removed) {
                    prop_assert!(seen.insert(s.cluster_name.clone()), "{} twice in {:?}", s.cluster_name, got);
                }
            }

            #[test]
            fn removed_is_existing_minus_current((groups, existing) in fleet(), strategy in any_strategy()) {
                let got = decide(&strategy, &groups, &existing, now());
                let current: HashSet<&str> = groups.iter().flat_map(|g| g.clusters.iter().map(String::as_str)).collect();
                let want: Vec<&ClusterRolloutStatus> =
                    existing.iter().filter(|s| !current.contains(s.cluster_name.as_str())).collect();
                let got_removed: Vec<&ClusterRolloutStatus> = got.clusters_removed.iter().collect();
                prop_assert_eq!(got_removed, want);
            }

            #[test]
            fn in_flight_within_max_concurrency(
                (groups, existing) in fleet(),
                config in config(),
                max_concurrency in threshold(),
            ) {
                let strategy = super::Strategy {
                    kind: RolloutKind::Progressive { config, mandatory: vec![], max_concurrency },
                    plugin: None,
                    plugin_config: None,
                    abort_on_failure: false,
                    rollback_pace: crate::rollout::RollbackPace::AtOnce,
                };
                let got = decide(&strategy, &groups, &existing, now());
                let total: usize = groups.iter().map(|g| g.clusters.len()).sum();
                let allowed = max_concurrency.size(total, total);
                let in_flight = got
                    .clusters_to_rollout
                    .iter()
                    .filter(|s| matches!(s.status, Progressing | Validating | ToApply))
                    .count();
                prop_assert!(in_flight <= allowed, "{} in flight, {} allowed: {:?}", in_flight, allowed, got);
                prop_assert!(got.clusters_to_rollout.len() <= allowed);
            }

            #[test]
            fn results_are_well_formed((groups, existing) in fleet(), strategy in any_strategy()) {
                let got = decide(&strategy, &groups, &existing, now());
                for s in &got.clusters_timeout {
                    prop_assert_eq!(s.status, TimeOut);
                    prop_assert!(s.recheck_time.is_some_and(|t| t <= now()));
                }
                let known: HashSet<&str> = existing.iter().map(|s| s.cluster_name.as_str()).collect();
                for s in &got.clusters_to_rollout {
                    prop_assert!(!matches!(s.status, TimeOut | Skip));
                    if !known.contains(s.cluster_name.as_str()) {
                        prop_assert!(groups.iter().any(|g| g.index == s.group_index
                            && g.name == s.group_name
                            && g.clusters.contains(&s.cluster_name)));
                    }
                }
                if let Some(after) = got.recheck_after {
                    prop_assert!(!after.is_zero());
                }
            }
        }
    }
}
