//! [`OwnWrites`]: the ManifestWorks this controller wrote, remembered until
//! its store shows them.
//!
//! A write's answer is the object as stored; its watch event comes later.
//! A reconcile that starts in between (the set's own status patch triggers
//! one at once) would read the work as it was before the write, find it
//! out of date, and apply or annotate it again: the same patch, a request
//! for nothing. Reads therefore see the written copy in place of the
//! store's while the store's is older, and a written work the store does
//! not hold yet.
//!
//! "Older" is by `resourceVersion`: the API server's are integers that grow
//! with every write (etcd's revision). A version that does not parse is
//! never compared: that write is not remembered and the store is read as
//! it is. An entry goes when the store shows its version or a later one,
//! when the watch reports the work deleted, when this controller deletes
//! it, or after [`TTL`] whatever happens (a watch that relisted past it):
//! a bounded memory, at most one entry per work, and a stale entry costs
//! at worst one write again, as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::watcher;
use tokio::time::Instant;

use crate::api::ManifestWork;

/// How long a written copy is kept at most.
pub(super) const TTL: Duration = Duration::from_secs(60);

/// A work's key: its namespace and name.
type Key = (String, String);

/// One written copy.
struct Entry {
    work: Arc<ManifestWork>,
    version: u64,
    at: Instant,
}

/// The written copies, shared by the reconciles and the works' watch.
#[derive(Default)]
pub(crate) struct OwnWrites {
    entries: Mutex<Entries>,
}

/// The copies by work, and when those past [`TTL`] were last dropped.
#[derive(Default)]
struct Entries {
    by_work: HashMap<Key, Entry>,
    swept: Option<Instant>,
}

fn key(work: &ManifestWork) -> Key {
    (work.namespace().unwrap_or_default(), work.name_any())
}

fn version(work: &ManifestWork) -> Option<u64> {
    work.metadata.resource_version.as_deref()?.parse().ok()
}

impl OwnWrites {
    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        // A panic while holding the lock left a map, which is still one.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Remembers `work` as a write answered it; entries past [`TTL`] go,
    /// looked for at most every quarter of it (a wave of writes does not
    /// walk the map once per write).
    pub(crate) fn record(&self, work: ManifestWork) {
        let Some(version) = version(&work) else {
            return;
        };
        let now = Instant::now();
        let mut entries = self.entries();
        if entries
            .swept
            .is_none_or(|swept| now.duration_since(swept) >= TTL / 4)
        {
            entries
                .by_work
                .retain(|_, entry| now.duration_since(entry.at) < TTL);
            entries.swept = Some(now);
        }
        entries.by_work.insert(
            key(&work),
            Entry {
                work: Arc::new(work),
                version,
                at: now,
            },
        );
    }

    /// Forgets the work `namespace/name` (this controller deleted it).
    pub(crate) fn forget(&self, namespace: &str, name: &str) {
        self.entries()
            .by_work
            .remove(&(namespace.to_owned(), name.to_owned()));
    }

    /// What the works' watch reports, once the store holds it: a work
    /// deleted, or shown at the written version or later, is forgotten.
    pub(super) fn seen(&self, event: &watcher::Event<ManifestWork>) {
        match event {
            watcher::Event::Delete(work) => {
                self.entries().by_work.remove(&key(work));
            }
            watcher::Event::Apply(work) | watcher::Event::InitApply(work) => {
                let entries = &mut self.entries().by_work;
                if entries.is_empty() {
                    return;
                }
                let key = key(work);
                if entries
                    .get(&key)
                    .is_some_and(|entry| version(work).is_some_and(|v| v >= entry.version))
                {
                    entries.remove(&key);
                }
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }

    /// `stored` (the store's works for one set, those `belongs` takes) with
    /// each work the store holds older than written replaced by the written
    /// copy, and the written works the store does not hold yet added.
    pub(super) fn overlay(
        &self,
        stored: Vec<Arc<ManifestWork>>,
        belongs: impl Fn(&ManifestWork) -> bool,
    ) -> Vec<Arc<ManifestWork>> {
        let now = Instant::now();
        let guard = self.entries();
        let entries = &guard.by_work;
        // Between waves nothing is remembered: the store as it is, no key
        // made per work.
        if entries.is_empty() {
            return stored;
        }
        let live = |entry: &&Entry| now.duration_since(entry.at) < TTL;
        // The remembered works the store holds (older or not).
        let mut held = std::collections::HashSet::new();
        let mut works: Vec<Arc<ManifestWork>> = stored
            .into_iter()
            .map(|work| {
                let key = key(&work);
                let Some(entry) = entries.get(&key) else {
                    return work;
                };
                held.insert(key);
                let newer =
                    live(&entry) && version(&work).is_some_and(|stored| stored < entry.version);
                if newer { Arc::clone(&entry.work) } else { work }
            })
            .collect();
        works.extend(
            entries
                .iter()
                .filter(|(key, entry)| !held.contains(*key) && live(entry))
                .filter(|(_, entry)| belongs(&entry.work))
                .map(|(_, entry)| Arc::clone(&entry.work)),
        );
        works
    }

    /// How many written copies are remembered.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries().by_work.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(name: &str, version: &str, owner: &str) -> ManifestWork {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "work.open-cluster-management.io/v1",
            "kind": "ManifestWork",
            "metadata": {
                "name": name,
                "namespace": "cluster1",
                "resourceVersion": version,
                "labels": {"owner": owner},
            },
            "spec": {},
        }))
        .expect("a ManifestWork")
    }

    fn versions(works: &[Arc<ManifestWork>]) -> Vec<(String, String)> {
        let mut found: Vec<_> = works
            .iter()
            .map(|w| (w.name_any(), w.resource_version().unwrap_or_default()))
            .collect();
        found.sort();
        found
    }

    fn owned_by(owner: &'static str) -> impl Fn(&ManifestWork) -> bool {
        move |w| w.labels().get("owner").map(String::as_str) == Some(owner)
    }

    #[tokio::test]
    async fn a_store_behind_the_write_reads_the_written_copy_and_one_caught_up_reads_itself() {
        let written = OwnWrites::default();
        written.record(work("a", "12", "set"));
        let behind = written.overlay(vec![Arc::new(work("a", "9", "set"))], owned_by("set"));
        assert_eq!(versions(&behind), [("a".into(), "12".into())]);
        // The agent wrote after this controller: the store is newer.
        let ahead = written.overlay(vec![Arc::new(work("a", "15", "set"))], owned_by("set"));
        assert_eq!(versions(&ahead), [("a".into(), "15".into())]);
    }

    #[tokio::test]
    async fn a_work_created_is_read_before_the_store_holds_it_but_only_by_its_own_set() {
        let written = OwnWrites::default();
        written.record(work("new", "20", "set"));
        let store = vec![Arc::new(work("old", "3", "set"))];
        assert_eq!(
            versions(&written.overlay(store.clone(), owned_by("set"))),
            [("new".into(), "20".into()), ("old".into(), "3".into())]
        );
        assert_eq!(
            versions(&written.overlay(store, owned_by("other"))),
            [("old".into(), "3".into())]
        );
    }

    #[tokio::test]
    async fn the_watch_forgets_what_the_store_shows_and_what_was_deleted() {
        let written = OwnWrites::default();
        written.record(work("a", "12", "set"));
        written.record(work("b", "13", "set"));
        // An event from before the write keeps the copy.
        written.seen(&watcher::Event::Apply(work("a", "11", "set")));
        assert_eq!(written.len(), 2);
        written.seen(&watcher::Event::Apply(work("a", "12", "set")));
        written.seen(&watcher::Event::Delete(work("b", "14", "set")));
        assert_eq!(written.len(), 0);
        // Deleted by someone else: not brought back.
        assert!(written.overlay(Vec::new(), owned_by("set")).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_copy_is_kept_no_longer_than_the_ttl() {
        let written = OwnWrites::default();
        written.record(work("a", "12", "set"));
        tokio::time::advance(TTL).await;
        assert!(written.overlay(Vec::new(), owned_by("set")).is_empty());
        let stale = written.overlay(vec![Arc::new(work("a", "9", "set"))], owned_by("set"));
        assert_eq!(versions(&stale), [("a".into(), "9".into())]);
        written.record(work("b", "30", "set"));
        assert_eq!(
            written.len(),
            1,
            "the expired copy went with the next write"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_wave_of_writes_sweeps_once_and_an_unswept_copy_past_the_ttl_is_not_read() {
        let written = OwnWrites::default();
        written.record(work("a", "12", "set"));
        tokio::time::advance(TTL - Duration::from_secs(1)).await;
        written.record(work("b", "13", "set"));
        tokio::time::advance(Duration::from_secs(2)).await;
        written.record(work("c", "14", "set"));
        assert_eq!(written.len(), 3, "no sweep two seconds after the last");
        let stale = written.overlay(vec![Arc::new(work("a", "9", "set"))], owned_by("set"));
        assert_eq!(
            versions(&stale),
            [
                ("a".into(), "9".into()),
                ("b".into(), "13".into()),
                ("c".into(), "14".into())
            ]
        );
        tokio::time::advance(TTL / 4).await;
        written.record(work("d", "15", "set"));
        assert_eq!(written.len(), 3, "a went with the next sweep");
    }

    #[tokio::test]
    async fn a_version_that_is_no_number_is_never_remembered_or_compared() {
        let written = OwnWrites::default();
        written.record(work("a", "v7", "set"));
        assert_eq!(written.len(), 0);
        written.record(work("b", "8", "set"));
        let odd = written.overlay(vec![Arc::new(work("b", "x", "set"))], owned_by("set"));
        assert_eq!(versions(&odd), [("b".into(), "x".into())]);
        written.forget("cluster1", "b");
        assert_eq!(written.len(), 0);
    }
}
