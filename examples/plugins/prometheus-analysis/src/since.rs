//! When a cluster was updated: where its samples start and its deadline
//! runs from.
//!
//! The request's own state says it: the cluster's entry in
//! `rollout_status` carries `last_transition_time`, when it became
//! Validating (its work applied and done progressing). That is the same on
//! every replica of the plugin and across restarts. A request without it
//! (an older caller, or a caller that sent counts only) falls back to the
//! first validation this process saw for the same MWRS, cluster and
//! revision, at most `capacity` of them remembered.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rollout_plugin_sdk::proto::RolloutPluginRequest;

/// The cluster's update, from `request`'s `rollout_status`.
pub fn from_request(request: &RolloutPluginRequest) -> Option<SystemTime> {
    let state = request.rollout_status.as_ref()?;
    let entry = [
        &state.progressing,
        &state.completed,
        &state.timed_out,
        &state.removed,
    ]
    .into_iter()
    .flatten()
    .find(|c| c.cluster_name == request.cluster_name)?;
    let at = entry.last_transition_time.as_ref()?;
    let secs = u64::try_from(at.seconds).ok()?;
    let nanos = u32::try_from(at.nanos).ok()?;
    UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
}

/// What a first-seen time is kept for: one revision of one MWRS on one
/// cluster.
type Key = (String, String, String, String);

/// The first validation seen of each key, at most `capacity` of them,
/// forgetting the oldest first.
#[derive(Debug)]
pub struct FirstSeen {
    at: HashMap<Key, SystemTime>,
    order: VecDeque<Key>,
    capacity: usize,
}

impl FirstSeen {
    /// An empty table of at most `capacity` keys (at least 1).
    pub fn new(capacity: usize) -> Self {
        Self {
            at: HashMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// When `request`'s cluster was first seen at its revision; `now`
    /// when new (then recorded).
    pub fn first_seen(&mut self, request: &RolloutPluginRequest, now: SystemTime) -> SystemTime {
        let key = (
            request.mwrs_namespace.clone(),
            request.mwrs_name.clone(),
            request.cluster_name.clone(),
            request.desired_revision.clone(),
        );
        if let Some(at) = self.at.get(&key) {
            return *at;
        }
        while self.order.len() >= self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.at.remove(&oldest);
            }
        }
        self.at.insert(key.clone(), now);
        self.order.push_back(key);
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rollout_plugin_sdk::proto::{ClusterRolloutStatus, RolloutState, RolloutStatus};
    use rollout_plugin_sdk::testing;

    fn entry(cluster: &str, secs: Option<i64>) -> ClusterRolloutStatus {
        ClusterRolloutStatus {
            cluster_name: cluster.into(),
            rollout_status: RolloutStatus::Validating.into(),
            last_transition_time: secs.map(|seconds| prost_types::Timestamp { seconds, nanos: 5 }),
            ..Default::default()
        }
    }

    #[test]
    fn the_update_is_the_cluster_s_last_transition() {
        let mut request = testing::rollout("c2", 2, 3);
        assert_eq!(from_request(&request), None, "no state");
        request.rollout_status = Some(RolloutState {
            completed: vec![entry("c1", Some(100))],
            progressing: vec![entry("c2", Some(200)), entry("c3", None)],
            ..Default::default()
        });
        assert_eq!(
            from_request(&request),
            Some(UNIX_EPOCH + Duration::new(200, 5))
        );
        request.cluster_name = "c3".into();
        assert_eq!(from_request(&request), None, "never transitioned");
        request.cluster_name = "c9".into();
        assert_eq!(from_request(&request), None, "not listed");
    }

    #[test]
    fn first_seen_is_kept_per_revision_and_bounded() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1000);
        let later = t0 + Duration::from_secs(5);
        let mut seen = FirstSeen::new(2);
        let a = testing::rollout("a", 1, 2);
        let mut a2 = a.clone();
        a2.desired_revision = "rev-2".into();
        assert_eq!(seen.first_seen(&a, t0), t0);
        assert_eq!(seen.first_seen(&a, later), t0);
        assert_eq!(
            seen.first_seen(&a2, later),
            later,
            "a new revision starts anew"
        );
        assert_eq!(seen.first_seen(&testing::rollout("b", 2, 2), later), later);
        assert_eq!(
            seen.first_seen(&a, later),
            later,
            "the oldest was forgotten"
        );
    }
}
