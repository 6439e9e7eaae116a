//! The dashboard's reads: one watch per kind the live view reads, over
//! one namespace or all ([`Scope`]), kept in reflector stores; on a change
//! (at most [`MAX_FRAMES_PER_SECOND`] times a second), and every
//! [`REFRESH`] for the countdowns, the [`Fleet`] is built again and
//! published as JSON ([`Published`]) on a `tokio::sync::watch` channel,
//! which holds only the latest: a slow reader skips frames, it never
//! queues them. Nothing is written to the hub.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use super::fleet::{Fleet, Key, Objects};
use crate::view::hub::{
    ALL_WORKS_SELECTOR, Change, Changes, GetError, MAX_FRAMES_PER_SECOND, Target,
    all_events_selector, owned, watched,
};
use rollout_controller::api::labels::PLACEMENT_LABEL;
use rollout_controller::api::{
    ManifestWork, ManifestWorkReplicaSet, ManifestWorkReplicaSetRollout, PlacementDecision,
};

/// How often the fleet is built again without a change, so that the
/// countdowns ("deadline in 4m0s") move.
pub(crate) const REFRESH: Duration = Duration::from_secs(5);

/// Which ManifestWorkReplicaSets the dashboard shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Scope {
    /// One namespace's; `None`: every namespace's.
    pub(crate) namespace: Option<String>,
}

impl Scope {
    fn api<K>(&self, client: &Client) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match &self.namespace {
            Some(namespace) => Api::namespaced(client.clone(), namespace),
            None => Api::all(client.clone()),
        }
    }
}

/// The fleet as the page reads it: JSON made once per change, whatever
/// the number of readers.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Published {
    /// The list ([`super::fleet::RolloutRow`]s), a JSON array.
    pub(crate) rows: String,
    /// Each set's [`crate::view::View`], as `get -o json` prints it.
    pub(crate) views: BTreeMap<Key, String>,
    /// Why the watch is interrupted, while it is.
    pub(crate) trouble: Option<String>,
}

impl Published {
    /// `fleet` as JSON.
    pub(crate) fn of(fleet: &Fleet, trouble: Option<String>) -> Published {
        Published {
            rows: json(&fleet.rows()),
            views: fleet
                .views
                .iter()
                .map(|(key, view)| (key.clone(), json(view)))
                .collect(),
            trouble,
        }
    }

    /// `/api/rollouts`: the list, and the trouble.
    pub(crate) fn list(&self) -> String {
        format!(
            "{{\"rollouts\":{},\"trouble\":{}}}",
            self.rows,
            json(&self.trouble)
        )
    }

    /// A frame of `/api/events`: the list, the trouble, and the view of
    /// `key` (`null` when there is no such set, or no key).
    pub(crate) fn frame(&self, key: Option<&Key>) -> String {
        let view = key
            .and_then(|k| self.views.get(k))
            .map_or("null", String::as_str);
        format!(
            "{{\"rollouts\":{},\"trouble\":{},\"view\":{view}}}",
            self.rows,
            json(&self.trouble)
        )
    }
}

/// `value` as JSON. Serialising the view model cannot fail (string keys,
/// no foreign types); `null` stands in if it ever did.
fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

/// The stores of every kind the fleet is made of.
struct Stores {
    sets: Store<ManifestWorkReplicaSet>,
    carriers: Option<Store<ManifestWorkReplicaSetRollout>>,
    works: Store<ManifestWork>,
    decisions: Store<PlacementDecision>,
    events: Option<Store<Event>>,
}

impl Stores {
    fn objects(&self) -> Objects {
        Objects {
            sets: owned(self.sets.state()),
            carriers: self
                .carriers
                .as_ref()
                .map(|s| owned(s.state()))
                .unwrap_or_default(),
            works: owned(self.works.state()),
            decisions: owned(self.decisions.state()),
            events: self
                .events
                .as_ref()
                .map(|s| owned(s.state()))
                .unwrap_or_default(),
        }
    }

    async fn ready(&self) {
        // A store whose writer is gone never fills; the timeout says so.
        let _ = self.sets.wait_until_ready().await;
        if let Some(carriers) = &self.carriers {
            let _ = carriers.wait_until_ready().await;
        }
        let _ = self.works.wait_until_ready().await;
        let _ = self.decisions.wait_until_ready().await;
        if let Some(events) = &self.events {
            let _ = events.wait_until_ready().await;
        }
    }
}

/// The hub's watches of one [`Scope`], listed once.
pub(crate) struct Feed {
    stores: Stores,
    changes: Changes,
}

/// Whether a kind may be read: `Ok(false)` when the API server answers
/// `left_out` (404: the hub has no carrier CRD; 403: the reader may not
/// list Events), as `get` leaves those out; any other failure is an error.
async fn readable<K>(
    api: &Api<K>,
    what: &str,
    target: &Target,
    left_out: Option<u16>,
) -> Result<bool, GetError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if Some(status.code) == left_out => Ok(false),
        Err(e) => Err(target.error(what, e)),
    }
}

impl Feed {
    /// Lists what `scope` holds and starts watching it; fails as `get`
    /// fails (not reachable, refused, no answer within `timeout`).
    pub(crate) async fn start(
        client: &Client,
        scope: &Scope,
        target: &Target,
    ) -> Result<Feed, GetError> {
        let timeout = target.request_timeout;
        let started = tokio::time::timeout(timeout, Feed::list_and_watch(client, scope, target));
        let Feed {
            stores,
            mut changes,
        } = started.await.unwrap_or_else(|_| Err(timed_out(target)))?;
        // The stores fill only while their streams are polled.
        let drain = async { while changes.next().await.is_some() {} };
        let filled = async {
            tokio::select! {
                () = stores.ready() => {}
                () = drain => {}
            }
        };
        tokio::time::timeout(timeout, filled)
            .await
            .map_err(|_| timed_out(target))?;
        Ok(Feed { stores, changes })
    }

    async fn list_and_watch(
        client: &Client,
        scope: &Scope,
        target: &Target,
    ) -> Result<Feed, GetError> {
        let sets: Api<ManifestWorkReplicaSet> = scope.api(client);
        readable(&sets, "the ManifestWorkReplicaSets", target, None).await?;
        let carriers: Api<ManifestWorkReplicaSetRollout> = scope.api(client);
        let carriers = readable(
            &carriers,
            "the ManifestWorkReplicaSetRollouts",
            target,
            Some(404),
        )
        .await?
        .then_some(carriers);
        let works = Api::<ManifestWork>::all(client.clone());
        readable(&works, "the ManifestWorks", target, None).await?;
        let decisions: Api<PlacementDecision> = scope.api(client);
        readable(&decisions, "the PlacementDecisions", target, None).await?;
        let events: Api<Event> = scope.api(client);
        let events = readable(&events, "the Events", target, Some(403))
            .await?
            .then_some(events);
        Ok(Feed::watch(sets, carriers, works, decisions, events))
    }

    fn watch(
        sets: Api<ManifestWorkReplicaSet>,
        carriers: Option<Api<ManifestWorkReplicaSetRollout>>,
        works: Api<ManifestWork>,
        decisions: Api<PlacementDecision>,
        events: Option<Api<Event>>,
    ) -> Feed {
        let all = watcher::Config::default;
        let (sets, a) = watched(sets, all(), Change::Changed);
        let works_config = all().labels(ALL_WORKS_SELECTOR);
        let (works, b) = watched(works, works_config, Change::Changed);
        let decisions_config = all().labels(PLACEMENT_LABEL);
        let (decisions, c) = watched(decisions, decisions_config, Change::Changed);
        let mut changes = vec![a, b, c];
        let carriers = carriers.map(|api| {
            let (store, stream) = watched(api, all(), Change::Changed);
            changes.push(stream);
            store
        });
        let events = events.map(|api| {
            let config = all().fields(&all_events_selector());
            let (store, stream) = watched(api, config, Change::Changed);
            changes.push(stream);
            store
        });
        Feed {
            stores: Stores {
                sets,
                carriers,
                works,
                decisions,
                events,
            },
            changes: futures::stream::select_all(changes).boxed(),
        }
    }

    /// The fleet now, as JSON.
    pub(crate) fn published(&self) -> (Fleet, Published) {
        let fleet = Fleet::of(&self.stores.objects(), Timestamp::now());
        let published = Published::of(&fleet, None);
        (fleet, published)
    }

    /// Keeps `fleet` current until `stop` completes (see the module
    /// documentation); `previous` is what `fleet` holds now.
    pub(crate) async fn run(
        mut self,
        mut previous: Fleet,
        fleet: watch::Sender<Arc<Published>>,
        stop: impl Future<Output = ()>,
    ) {
        let mut stop = pin!(stop);
        let mut tick = tokio::time::interval(Duration::from_secs(1) / MAX_FRAMES_PER_SECOND);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut dirty = false;
        let mut built = tokio::time::Instant::now();
        let mut trouble: Option<String> = None;
        loop {
            tokio::select! {
                () = &mut stop => return,
                change = self.changes.next() => match change {
                    Some(Ok(_)) => {
                        dirty = true;
                        trouble = None;
                    }
                    Some(Err(error)) => {
                        dirty |= trouble.is_none();
                        trouble = Some(format!("the watch is interrupted ({error}); retrying"));
                    }
                    None => return,
                },
                _ = tick.tick() => {
                    if !dirty && built.elapsed() < REFRESH {
                        continue;
                    }
                    let now = Fleet::of(&self.stores.objects(), Timestamp::now()).keeping(&previous);
                    let published = Published::of(&now, trouble.clone());
                    fleet.send_if_modified(|old| {
                        let changed = **old != published;
                        if changed {
                            *old = Arc::new(published);
                        }
                        changed
                    });
                    previous = now;
                    dirty = false;
                    built = tokio::time::Instant::now();
                }
            }
        }
    }
}

fn timed_out(target: &Target) -> GetError {
    GetError::Timeout {
        at: target.at(),
        after: crate::format::duration(target.request_timeout),
    }
}
