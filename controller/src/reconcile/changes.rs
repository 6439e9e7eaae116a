//! [`WorkChanges`]: the ManifestWorks' changes as reconcile triggers, taken
//! from the works' own store watch once the store holds each change.
//!
//! A second watch of the works, the controller's own, would see an agent's
//! report before the store does: the reconcile it triggers reads the work as
//! it was, and the cluster then waits for the next recheck. One watch fed
//! both, in that order, sends the API server's events once instead of twice
//! and never reads a report stale.
//!
//! The triggers go through a bounded channel to the running controller.
//! While no controller listens (this replica is not leading), they are
//! dropped rather than queued: a controller that starts reconciles every
//! ManifestWorkReplicaSet first. While one listens, a full channel holds the
//! watch back rather than lose a trigger.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{Stream, StreamExt};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use tokio::sync::{Mutex, mpsc};

use crate::api::{ManifestWork, ManifestWorkReplicaSet};

/// Triggers in the channel at most; past them the watch waits.
const CAPACITY: usize = 4096;

/// The channel from the works' watch to the controller; cheap to clone.
#[derive(Clone)]
pub(super) struct WorkChanges {
    tx: mpsc::Sender<ObjectRef<ManifestWorkReplicaSet>>,
    rx: Arc<Mutex<mpsc::Receiver<ObjectRef<ManifestWorkReplicaSet>>>>,
    listening: Arc<AtomicBool>,
}

impl WorkChanges {
    pub(super) fn new() -> WorkChanges {
        let (tx, rx) = mpsc::channel(CAPACITY);
        WorkChanges {
            tx,
            rx: Arc::new(Mutex::new(rx)),
            listening: Arc::default(),
        }
    }

    /// Passes `events` on unchanged, after sending a trigger for the owner
    /// of every work an event carries (`owner`), when a controller listens.
    pub(super) fn forward<E, S>(
        self,
        events: S,
        owner: fn(&ManifestWork) -> Option<ObjectRef<ManifestWorkReplicaSet>>,
    ) -> impl Stream<Item = Result<watcher::Event<ManifestWork>, E>>
    where
        S: Stream<Item = Result<watcher::Event<ManifestWork>, E>>,
    {
        let changes = self;
        events.then(move |event| {
            let changes = changes.clone();
            async move {
                if let Ok(event) = &event {
                    changes.send(event, owner).await;
                }
                event
            }
        })
    }

    async fn send(
        &self,
        event: &watcher::Event<ManifestWork>,
        owner: fn(&ManifestWork) -> Option<ObjectRef<ManifestWorkReplicaSet>>,
    ) {
        let work = match event {
            watcher::Event::Apply(work)
            | watcher::Event::Delete(work)
            | watcher::Event::InitApply(work) => work,
            watcher::Event::Init | watcher::Event::InitDone => return,
        };
        let Some(set) = owner(work) else { return };
        if self.listening.load(Ordering::Acquire) {
            // Closed only when the receiver is gone, which it never is.
            let _ = self.tx.send(set).await;
        }
    }

    /// The triggers, for one controller run: listening while the stream
    /// lives.
    pub(super) fn triggers(&self) -> impl Stream<Item = ObjectRef<ManifestWorkReplicaSet>> + use<> {
        let listening = Listening::on(self.listening.clone());
        futures::stream::unfold((self.rx.clone(), listening), |(rx, listening)| async move {
            let next = rx.lock().await.recv().await;
            next.map(|set| (set, (rx, listening)))
        })
    }
}

/// Sets the flag while it lives.
struct Listening(Arc<AtomicBool>);

impl Listening {
    fn on(flag: Arc<AtomicBool>) -> Listening {
        flag.store(true, Ordering::Release);
        Listening(flag)
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    fn work(name: &str, owner: Option<&str>) -> ManifestWork {
        let mut labels = serde_json::Map::new();
        if let Some(owner) = owner {
            labels.insert("owner".into(), json!(owner));
        }
        serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": name, "namespace": "cluster1", "labels": labels},
            "spec": {}
        }))
        .expect("a work")
    }

    fn owner(work: &ManifestWork) -> Option<ObjectRef<ManifestWorkReplicaSet>> {
        let owner = work.metadata.labels.as_ref()?.get("owner")?;
        Some(ObjectRef::new(owner).within("default"))
    }

    type Events = Vec<Result<watcher::Event<ManifestWork>, ()>>;

    async fn next(
        triggers: &mut (impl Stream<Item = ObjectRef<ManifestWorkReplicaSet>> + Unpin),
    ) -> Option<String> {
        tokio::time::timeout(Duration::from_millis(100), triggers.next())
            .await
            .ok()
            .flatten()
            .map(|set| set.name)
    }

    #[tokio::test]
    async fn each_change_of_an_owned_work_triggers_its_owner_once_passed_on() {
        let changes = WorkChanges::new();
        let mut triggers = Box::pin(changes.triggers());
        let events: Events = vec![
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(work("a", Some("set-a")))),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Apply(work("b", None))),
            Err(()),
            Ok(watcher::Event::Apply(work("c", Some("set-c")))),
            Ok(watcher::Event::Delete(work("a", Some("set-a")))),
        ];
        let passed: Vec<_> = changes
            .clone()
            .forward(futures::stream::iter(events), owner)
            .collect()
            .await;
        assert_eq!(passed.len(), 7, "every event passes on, errors too");
        assert_eq!(next(&mut triggers).await.as_deref(), Some("set-a"));
        assert_eq!(next(&mut triggers).await.as_deref(), Some("set-c"));
        assert_eq!(next(&mut triggers).await.as_deref(), Some("set-a"));
        assert_eq!(
            next(&mut triggers).await,
            None,
            "an unowned work triggers nothing"
        );
    }

    #[tokio::test]
    async fn with_no_controller_listening_changes_are_dropped_not_queued() {
        let changes = WorkChanges::new();
        let many: Events = (0..CAPACITY + 10)
            .map(|i| Ok(watcher::Event::Apply(work(&format!("w{i}"), Some("set")))))
            .collect();
        // More than the channel holds, and the watch is not held back.
        let passed = tokio::time::timeout(
            Duration::from_secs(5),
            changes
                .clone()
                .forward(futures::stream::iter(many), owner)
                .count(),
        )
        .await
        .expect("not held back");
        assert_eq!(passed, CAPACITY + 10);
        let mut triggers = Box::pin(changes.triggers());
        assert_eq!(next(&mut triggers).await, None, "nothing was queued");
        let one: Events = vec![Ok(watcher::Event::Apply(work("x", Some("later"))))];
        changes
            .clone()
            .forward(futures::stream::iter(one), owner)
            .count()
            .await;
        assert_eq!(next(&mut triggers).await.as_deref(), Some("later"));
        drop(triggers);
        assert!(
            !changes.listening.load(Ordering::Acquire),
            "a run that ended listens no more"
        );
    }
}
