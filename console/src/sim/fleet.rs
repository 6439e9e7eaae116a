//! The simulated fleet: the clusters' names, their decision groups, and the
//! ManifestWorks with a work agent playing every managed cluster.
//!
//! - Clusters are `cluster-001`, `cluster-002`, …: at least 3 digits, more
//!   when the fleet needs them (`cluster-0001` from 1,000 clusters on).
//! - Decision groups `group-0`, `group-1`, … split the fleet in contiguous
//!   runs whose sizes differ by at most one.
//! - The [`Agent`] is the work agent of every cluster, on the simulated
//!   clock: a work applied at `t` is reported Applied and Progressing at
//!   `t + delay`, and done (Progressing False) at `t + latency`; a failing
//!   cluster's work of the update revision turns Degraded (Progressing and
//!   Degraded True) instead. An agent without condition rules
//!   ([`AgentConfig::progressing`] false) reports Applied only, as OCM's
//!   agent does for a template without `conditionRules`. Latencies may vary per cluster and generation
//!   (`jitter`), reproducibly from a seed. Each report is a change of the
//!   work, which wakes the controller (`run` watches ManifestWorks), so
//!   each is a step of the simulation.
//! - [`FleetWorld`] is the [`World`] the orchestration writes to: the
//!   in-memory [`MemoryWorld`], with the agent reacting to every apply.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

use rollout_controller::api::ManifestWork;
use rollout_controller::api::labels::{CONTROLLER_HASH_LABEL, fnv1a64};
use rollout_controller::api::manifestwork::{CONDITION_AVAILABLE, ManifestWorkStatus};
use rollout_controller::orchestrate::memory::MemoryWorld;
use rollout_controller::orchestrate::{World, WorldError};
use rollout_controller::rollout::ClusterGroup;
use rollout_controller::rollout::work_status::{APPLIED, DEGRADED, PROGRESSING};

/// The names of a fleet of `n` clusters: `cluster-001` … with at least 3
/// digits, as many as `n` has when more.
pub fn cluster_names(n: usize) -> Vec<String> {
    let width = n.to_string().len().max(3);
    (1..=n).map(|i| format!("cluster-{i:0width$}")).collect()
}

/// `clusters` split into `groups` decision groups `group-0`, `group-1`, …
/// (indices from 0), each a contiguous run, sizes differing by at most one.
/// `groups` is at least 1 and at most the number of clusters (the caller
/// checks).
pub(crate) fn decision_groups(clusters: &[String], groups: usize) -> Vec<ClusterGroup> {
    let n = clusters.len();
    let groups = groups.clamp(1, n.max(1));
    (0..groups)
        .map(|g| ClusterGroup {
            index: i32::try_from(g).unwrap_or(i32::MAX),
            name: format!("group-{g}"),
            clusters: clusters[g * n / groups..(g + 1) * n / groups].to_vec(),
        })
        .collect()
}

/// How the work agent behaves.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AgentConfig {
    /// From apply to the first report (Applied, Progressing).
    pub(crate) delay: Duration,
    /// From apply to done (or Degraded).
    pub(crate) latency: Duration,
    /// Each latency is `latency × (1 ± jitter)`, uniformly, in `0..=1`.
    pub(crate) jitter: f64,
    /// Seeds the jitter.
    pub(crate) seed: u64,
    /// Clusters whose work of [`AgentConfig::failing_revision`] turns
    /// Degraded.
    pub(crate) fail: BTreeSet<String>,
    /// The revision that fails on [`AgentConfig::fail`] clusters (the
    /// update revision; the restored one works).
    pub(crate) failing_revision: String,
    /// Whether the agent reports `Progressing` and `Degraded`: OCM's agent
    /// sets them only from the template's condition rules. Without them it
    /// reports `Applied` and `Available` alone.
    pub(crate) progressing: bool,
}

/// A change the agent makes to a work when its latency has passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Transition {
    /// The cluster (the work's namespace).
    pub(crate) cluster: String,
    /// The work's name.
    pub(crate) name: String,
    /// The generation it applies to; a work applied again since is left
    /// alone.
    pub(crate) generation: i64,
    /// What the agent reports.
    pub(crate) progress: Progress,
}

/// The work agent of every cluster: which work changes when. Pure: it
/// decides, [`FleetWorld`] writes.
#[derive(Debug)]
pub(crate) struct Agent {
    config: AgentConfig,
    pending: BTreeMap<(Timestamp, u64), Transition>,
    sequence: u64,
}

impl Agent {
    /// An agent with nothing pending.
    pub(crate) fn new(config: AgentConfig) -> Agent {
        Agent {
            config,
            pending: BTreeMap::new(),
            sequence: 0,
        }
    }

    /// The latency of `cluster`'s work at `generation`: the configured one,
    /// varied by the jitter, the same for the same seed, cluster and
    /// generation.
    pub(crate) fn latency(&self, cluster: &str, generation: i64) -> Duration {
        let jitter = self.config.jitter.clamp(0.0, 1.0);
        if jitter == 0.0 {
            return self.config.latency;
        }
        let key = format!("{}/{cluster}/{generation}", self.config.seed);
        // A uniform draw in [-1, 1] from the key's hash.
        let unit = (splitmix64(fnv1a64(key.as_bytes())) >> 11) as f64 / (1u64 << 53) as f64;
        let factor = 1.0 + jitter * (2.0 * unit - 1.0);
        self.config.latency.mul_f64(factor.max(0.0))
    }

    /// Records that `work` (as stored, with its generation) was applied at
    /// `now`: schedules its first report (Applied, Progressing) after the
    /// delay, and done or Degraded after the latency (the first report is
    /// skipped when the latency is not longer than the delay).
    pub(crate) fn applied(&mut self, work: &ManifestWork, now: Timestamp) {
        let cluster = work.namespace().unwrap_or_default();
        let generation = work.metadata.generation.unwrap_or(0);
        let degraded = self.config.fail.contains(&cluster)
            && work.labels().get(CONTROLLER_HASH_LABEL) == Some(&self.config.failing_revision);
        let latency = self.latency(&cluster, generation);
        let after = |d: Duration| now.checked_add(d).unwrap_or(Timestamp::MAX);
        if self.config.delay < latency {
            self.schedule(
                after(self.config.delay),
                &cluster,
                work,
                Progress::Progressing,
            );
        }
        let end = if degraded {
            Progress::Degraded
        } else {
            Progress::Done
        };
        self.schedule(after(latency), &cluster, work, end);
    }

    fn schedule(&mut self, at: Timestamp, cluster: &str, work: &ManifestWork, progress: Progress) {
        self.sequence += 1;
        self.pending.insert(
            (at, self.sequence),
            Transition {
                cluster: cluster.to_owned(),
                name: work.name_any(),
                generation: work.metadata.generation.unwrap_or(0),
                progress,
            },
        );
    }

    /// The transitions due at `now` or before, in time order, removed from
    /// the schedule.
    pub(crate) fn due(&mut self, now: Timestamp) -> Vec<(Timestamp, Transition)> {
        let mut due = Vec::new();
        while let Some(entry) = self.pending.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let at = entry.key().0;
            due.push((at, entry.remove()));
        }
        due
    }

    /// When the next transition is due.
    pub(crate) fn next_due(&self) -> Option<Timestamp> {
        self.pending.keys().next().map(|(at, _)| *at)
    }

    /// How many transitions are pending.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.pending.len()
    }
}

/// SplitMix64's finalizer: spreads a hash's bits.
fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Where a work stands, as its conditions say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    /// Applied and progressing.
    Progressing,
    /// Applied and done.
    Done,
    /// Applied, still progressing, and degraded.
    Degraded,
}

/// The conditions the agent reports for a work at `generation`: Applied and
/// Available True since `applied_at`; with `progressing` (the template has
/// condition rules) Progressing (and Degraded) as `progress` says, since
/// `at`.
pub(crate) fn conditions(
    generation: i64,
    applied_at: Timestamp,
    progress: Progress,
    at: Timestamp,
    progressing: bool,
) -> Vec<Condition> {
    let condition = |kind: &str, status: &str, since: Timestamp, reason: &str| Condition {
        type_: kind.to_owned(),
        status: status.to_owned(),
        observed_generation: Some(generation),
        last_transition_time: Time(since),
        reason: reason.to_owned(),
        message: String::new(),
    };
    let mut list = vec![
        condition(APPLIED, "True", applied_at, "AppliedManifestWorkComplete"),
        condition(
            CONDITION_AVAILABLE,
            "True",
            applied_at,
            "ResourcesAvailable",
        ),
    ];
    if !progressing {
        return list;
    }
    match progress {
        Progress::Progressing => list.push(condition(PROGRESSING, "True", at, "Applying")),
        Progress::Done => list.push(condition(PROGRESSING, "False", at, "Completed")),
        Progress::Degraded => {
            list.push(condition(PROGRESSING, "True", applied_at, "Applying"));
            list.push(condition(DEGRADED, "True", at, "RolloutFailed"));
        }
    }
    list
}

/// The ManifestWorks of the fleet, in memory, with the [`Agent`] reacting
/// to every apply at the simulated time [`FleetWorld::set_now`] gave.
#[derive(Debug)]
pub(crate) struct FleetWorld {
    memory: MemoryWorld,
    agent: Mutex<Agent>,
    now: Mutex<Timestamp>,
}

impl FleetWorld {
    /// An empty fleet whose agent behaves as `config` says, at `now`.
    pub(crate) fn new(config: AgentConfig, now: Timestamp) -> FleetWorld {
        FleetWorld {
            memory: MemoryWorld::new(),
            agent: Mutex::new(Agent::new(config)),
            now: Mutex::new(now),
        }
    }

    /// Sets the simulated time of the writes that follow.
    pub(crate) fn set_now(&self, now: Timestamp) {
        if let Ok(mut t) = self.now.lock() {
            *t = now;
        }
    }

    fn now(&self) -> Timestamp {
        self.now.lock().map(|t| *t).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn reports_progressing(&self) -> bool {
        self.agent.lock().map_or(true, |a| a.config.progressing)
    }

    /// Puts in a work as the previous rollout left it: applied, done, its
    /// status set as the agent reported it at `since`.
    pub(crate) fn seed(&self, mut work: ManifestWork, since: Timestamp) {
        let generation = work.metadata.generation.unwrap_or(1);
        work.metadata.generation = Some(generation);
        work.status = Some(ManifestWorkStatus {
            conditions: conditions(
                generation,
                since,
                Progress::Done,
                since,
                self.reports_progressing(),
            ),
            ..ManifestWorkStatus::default()
        });
        self.memory.insert(work);
    }

    /// Plays the agent up to `now`: every report due is written to its work
    /// (unless the work was applied again since). Returns the clusters
    /// whose work turned Degraded.
    pub(crate) fn advance(&self, now: Timestamp) -> Vec<String> {
        let due = match self.agent.lock() {
            Ok(mut agent) => agent.due(now),
            Err(_) => return Vec::new(),
        };
        let progressing = self.reports_progressing();
        let mut degraded = Vec::new();
        for (at, t) in due {
            let mut changed = false;
            self.memory.update(&t.cluster, &t.name, |work| {
                if work.metadata.generation.unwrap_or(0) != t.generation {
                    return;
                }
                let status = work.status.get_or_insert_default();
                // Applied since the first report of this generation.
                let applied_at = status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == APPLIED && c.observed_generation == Some(t.generation))
                    .map_or(at, |c| c.last_transition_time.0);
                status.conditions =
                    conditions(t.generation, applied_at, t.progress, at, progressing);
                changed = true;
            });
            if changed && progressing && t.progress == Progress::Degraded {
                degraded.push(t.cluster);
            }
        }
        degraded
    }

    /// When the agent changes a work next.
    pub(crate) fn next_transition(&self) -> Option<Timestamp> {
        self.agent.lock().ok().and_then(|a| a.next_due())
    }

    /// Every work, by cluster.
    pub(crate) fn works(&self) -> Vec<ManifestWork> {
        self.memory.all()
    }

    /// The work `cluster/name`.
    pub(crate) fn get(&self, cluster: &str, name: &str) -> Option<ManifestWork> {
        self.memory.get(cluster, name)
    }
}

impl World for FleetWorld {
    async fn list_works(&self, owner_label: &str) -> Result<Vec<Arc<ManifestWork>>, WorldError> {
        self.memory.list_works(owner_label).await
    }

    async fn apply_work(
        &self,
        work: ManifestWork,
        force: bool,
    ) -> Result<ManifestWork, WorldError> {
        let stored = self.memory.apply_work(work, force).await?;
        let now = self.now();
        if let Ok(mut agent) = self.agent.lock() {
            agent.applied(&stored, now);
        }
        Ok(stored)
    }

    async fn annotate_work(
        &self,
        namespace: &str,
        name: &str,
        annotations: BTreeMap<String, String>,
    ) -> Result<(), WorldError> {
        self.memory
            .annotate_work(namespace, name, annotations)
            .await
    }

    async fn delete_work(&self, namespace: &str, name: &str) -> Result<(), WorldError> {
        self.memory.delete_work(namespace, name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rollout_controller::api::ManifestWorkSpec;
    use rollout_controller::rollout::RolloutStatus;
    use rollout_controller::rollout::work_status::{self, Validation};

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).expect("time")
    }

    fn config(fail: &[&str]) -> AgentConfig {
        AgentConfig {
            delay: Duration::from_secs(1),
            latency: Duration::from_secs(30),
            jitter: 0.0,
            seed: 1,
            fail: fail.iter().map(|c| c.to_string()).collect(),
            failing_revision: "v2".into(),
            progressing: true,
        }
    }

    fn work(cluster: &str, revision: &str) -> ManifestWork {
        let mut spec = ManifestWorkSpec::default();
        spec.extra
            .insert("revision".into(), serde_json::json!(revision));
        let mut work = ManifestWork::new("web-0123abcd", spec);
        work.metadata.namespace = Some(cluster.into());
        work.metadata.labels = Some(BTreeMap::from([(
            CONTROLLER_HASH_LABEL.to_owned(),
            revision.to_owned(),
        )]));
        work
    }

    fn status(world: &FleetWorld, cluster: &str, validation: Validation) -> RolloutStatus {
        let work = world.get(cluster, "web-0123abcd").expect("the work");
        work_status::derive(
            work.metadata.generation.unwrap_or(0),
            &work.rollout_conditions(),
            validation,
        )
        .status
    }

    #[test]
    fn names_have_at_least_three_digits() {
        assert_eq!(
            cluster_names(3),
            ["cluster-001", "cluster-002", "cluster-003"]
        );
        assert_eq!(cluster_names(999)[998], "cluster-999");
        let big = cluster_names(1000);
        assert_eq!(
            (big[0].as_str(), big[999].as_str()),
            ("cluster-0001", "cluster-1000")
        );
        assert_eq!(cluster_names(10_000)[41], "cluster-00042");
        // Names sort as numbers do.
        let mut sorted = big.clone();
        sorted.sort();
        assert_eq!(sorted, big);
    }

    #[test]
    fn groups_are_contiguous_and_even() {
        let names = cluster_names(10);
        let groups = decision_groups(&names, 3);
        let sizes: Vec<usize> = groups.iter().map(|g| g.clusters.len()).collect();
        assert_eq!(sizes, [3, 3, 4]);
        assert_eq!((groups[1].index, groups[1].name.as_str()), (1, "group-1"));
        assert_eq!(groups[1].clusters[0], "cluster-004");
        let all: Vec<String> = groups.into_iter().flat_map(|g| g.clusters).collect();
        assert_eq!(all, names);
        assert_eq!(decision_groups(&names, 1)[0].clusters.len(), 10);
    }

    #[test]
    fn a_work_is_reported_then_done_after_the_latency() {
        let world = FleetWorld::new(config(&[]), at(0));
        let stored = apply_now(world.apply_work(work("cluster-001", "v2"), false));
        assert_eq!(stored.metadata.generation, Some(1));
        // Applied, not yet seen by the agent.
        assert_eq!(
            status(&world, "cluster-001", Validation::Plugin),
            RolloutStatus::ToApply
        );
        assert_eq!(world.next_transition(), Some(at(1)));
        world.advance(at(1));
        assert_eq!(
            status(&world, "cluster-001", Validation::Plugin),
            RolloutStatus::Progressing
        );
        assert_eq!(world.next_transition(), Some(at(30)));
        assert!(world.advance(at(29)).is_empty());
        assert_eq!(
            status(&world, "cluster-001", Validation::Plugin),
            RolloutStatus::Progressing
        );
        world.advance(at(30));
        assert_eq!(
            status(&world, "cluster-001", Validation::Plugin),
            RolloutStatus::Validating
        );
        assert_eq!(
            status(&world, "cluster-001", Validation::None),
            RolloutStatus::Succeeded
        );
        assert_eq!(world.next_transition(), None);
        // The conditions' times are the reports', on the simulated clock.
        let work = world.get("cluster-001", "web-0123abcd").expect("work");
        let time = |kind: &str| {
            work.rollout_conditions()
                .into_iter()
                .find(|c| c.kind == kind)
                .and_then(|c| c.last_transition_time)
        };
        assert_eq!(time(APPLIED), Some(at(1)));
        assert_eq!(time(PROGRESSING), Some(at(30)));
    }

    #[test]
    fn a_latency_within_the_delay_reports_done_at_once() {
        let world = FleetWorld::new(
            AgentConfig {
                latency: Duration::ZERO,
                ..config(&[])
            },
            at(0),
        );
        apply_now(world.apply_work(work("cluster-001", "v2"), false));
        assert_eq!(world.next_transition(), Some(at(0)));
        world.advance(at(0));
        assert_eq!(
            status(&world, "cluster-001", Validation::None),
            RolloutStatus::Succeeded
        );
        assert_eq!(world.next_transition(), None);
    }

    #[test]
    fn a_failing_cluster_degrades_on_the_update_revision_only() {
        let world = FleetWorld::new(config(&["cluster-002"]), at(0));
        apply_now(world.apply_work(work("cluster-002", "v2"), false));
        assert!(world.advance(at(1)).is_empty());
        assert_eq!(world.advance(at(30)), ["cluster-002"]);
        for validation in [Validation::None, Validation::Plugin] {
            assert_eq!(
                status(&world, "cluster-002", validation),
                RolloutStatus::Failed
            );
        }
        // Rolled back to v1 (a new generation): done.
        world.set_now(at(40));
        let stored = apply_now(world.apply_work(work("cluster-002", "v1"), false));
        assert_eq!(stored.metadata.generation, Some(2));
        assert_eq!(
            status(&world, "cluster-002", Validation::None),
            RolloutStatus::ToApply,
            "the Degraded condition of generation 1 is stale"
        );
        assert!(world.advance(at(70)).is_empty());
        assert_eq!(
            status(&world, "cluster-002", Validation::None),
            RolloutStatus::Succeeded
        );
    }

    #[test]
    fn an_agent_without_condition_rules_reports_applied_only() {
        let world = FleetWorld::new(
            AgentConfig {
                progressing: false,
                ..config(&["cluster-002"])
            },
            at(0),
        );
        for cluster in ["cluster-001", "cluster-002"] {
            apply_now(world.apply_work(work(cluster, "v2"), false));
        }
        assert!(world.advance(at(60)).is_empty(), "nothing turns Degraded");
        for cluster in ["cluster-001", "cluster-002"] {
            let work = world.get(cluster, "web-0123abcd").expect("work");
            let kinds: Vec<String> = work
                .rollout_conditions()
                .into_iter()
                .map(|c| c.kind)
                .collect();
            assert_eq!(kinds, [APPLIED, CONDITION_AVAILABLE], "{cluster}");
            // The design's fallback: still progressing, since Applied.
            let derived = work_status::derive(
                work.metadata.generation.unwrap_or(0),
                &work.rollout_conditions(),
                Validation::Plugin,
            );
            assert_eq!(derived.status, RolloutStatus::Progressing, "{cluster}");
            assert_eq!(derived.last_transition_time, Some(at(1)), "{cluster}");
        }
    }

    #[test]
    fn a_reapplied_work_ignores_its_old_transitions() {
        let world = FleetWorld::new(config(&[]), at(0));
        apply_now(world.apply_work(work("cluster-001", "v2"), false));
        world.advance(at(1));
        // Applied again with another spec at 10 s: generation 2, reported
        // at 11 s, done at 40 s.
        world.set_now(at(10));
        let mut changed = work("cluster-001", "v2");
        changed.spec.extra.insert("x".into(), serde_json::json!(1));
        let stored = apply_now(world.apply_work(changed, false));
        assert_eq!(stored.metadata.generation, Some(2));
        world.advance(at(30));
        assert_eq!(
            status(&world, "cluster-001", Validation::None),
            RolloutStatus::Progressing,
            "the generation-1 transition does not finish generation 2"
        );
        world.advance(at(40));
        assert_eq!(
            status(&world, "cluster-001", Validation::None),
            RolloutStatus::Succeeded
        );
    }

    #[test]
    fn jitter_varies_latencies_reproducibly() {
        let agent = Agent::new(AgentConfig {
            jitter: 0.5,
            ..config(&[])
        });
        let latencies: Vec<Duration> = cluster_names(50)
            .iter()
            .map(|c| agent.latency(c, 1))
            .collect();
        assert!(
            latencies
                .iter()
                .all(|d| *d >= Duration::from_secs(15) && *d <= Duration::from_secs(45)),
            "{latencies:?}"
        );
        let distinct: BTreeSet<Duration> = latencies.iter().copied().collect();
        assert!(distinct.len() > 40, "{distinct:?}");
        assert_eq!(agent.latency("cluster-001", 1), latencies[0]);
        let other_seed = Agent::new(AgentConfig {
            jitter: 0.5,
            seed: 2,
            ..config(&[])
        });
        assert_ne!(other_seed.latency("cluster-001", 1), latencies[0]);
        assert_eq!(
            Agent::new(config(&[])).latency("cluster-001", 1),
            Duration::from_secs(30)
        );
    }

    #[test]
    fn transitions_come_in_time_order() {
        let mut agent = Agent::new(AgentConfig {
            jitter: 0.9,
            ..config(&[])
        });
        for cluster in cluster_names(20) {
            agent.applied(&work(&cluster, "v2"), at(0));
        }
        assert_eq!(agent.pending(), 40, "a report and an end each");
        let due = agent.due(at(60));
        assert_eq!(due.len(), 40);
        assert!(due.windows(2).all(|w| w[0].0 <= w[1].0));
        assert_eq!(agent.next_due(), None);
    }

    /// Applies on a runtime of its own; the in-memory world never fails.
    fn apply_now(
        future: impl std::future::Future<Output = Result<ManifestWork, WorldError>>,
    ) -> ManifestWork {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(future)
            .expect("applied")
    }
}
