//! Where a reconcile reads: kube-runtime reflector stores of the
//! ManifestWorks (by the owner label), Placements, PlacementDecisions,
//! ControllerRevisions and ManifestWorkReplicaSetRollouts, fed by watches [`spawn_reflectors`] runs next to the
//! controller's. Once every store has listed ([`Stores::synced`]), a
//! reconcile reads nothing from the API server; until then (and in a
//! [`Context`](super::Context) nobody started the watches for) it reads
//! through the API as before. Writes always go through the API.

use std::sync::{Arc, Mutex};

use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::ListParams;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use super::changes::WorkChanges;
use super::written::OwnWrites;
use super::{Error, KubeWorld};
use crate::api::labels::{MWRS_OWNER_LABEL, PLACEMENT_LABEL};
use crate::api::placement::DecisionGroupError;
use crate::api::{
    ManifestWork, ManifestWorkReplicaSetRollout, Placement, PlacementDecision, decision_groups,
};
use crate::orchestrate::World;
use crate::rollout::ClusterGroup;

/// The reflector stores a reconcile reads. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Stores {
    /// ManifestWorks with the owner label, in every namespace.
    pub(crate) works: Store<ManifestWork>,
    /// Placements, in every namespace.
    pub(crate) placements: Store<Placement>,
    /// PlacementDecisions with the placement label, in every namespace.
    pub(crate) decisions: Store<PlacementDecision>,
    /// ControllerRevisions with the owner label, in every namespace.
    pub(crate) revisions: Store<ControllerRevision>,
    /// ManifestWorkReplicaSetRollouts, in every namespace.
    pub(crate) carriers: Store<ManifestWorkReplicaSetRollout>,
}

/// The writing halves of [`Stores`], for whoever runs the watches (or a
/// test that plays them).
pub struct StoreWriters {
    /// Of [`Stores::works`].
    pub works: Writer<ManifestWork>,
    /// Of [`Stores::placements`].
    pub placements: Writer<Placement>,
    /// Of [`Stores::decisions`].
    pub decisions: Writer<PlacementDecision>,
    /// Of [`Stores::revisions`].
    pub revisions: Writer<ControllerRevision>,
    /// Of [`Stores::carriers`].
    pub carriers: Writer<ManifestWorkReplicaSetRollout>,
}

/// Empty stores and their writers.
pub(crate) fn stores() -> (Stores, StoreWriters) {
    let (works, works_writer) = reflector::store();
    let (placements, placements_writer) = reflector::store();
    let (decisions, decisions_writer) = reflector::store();
    let (revisions, revisions_writer) = reflector::store();
    let (carriers, carriers_writer) = reflector::store();
    (
        Stores {
            works,
            placements,
            decisions,
            revisions,
            carriers,
        },
        StoreWriters {
            works: works_writer,
            placements: placements_writer,
            decisions: decisions_writer,
            revisions: revisions_writer,
            carriers: carriers_writer,
        },
    )
}

fn ready<K>(store: &Store<K>) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    // A store that has listed once answers at once.
    store
        .wait_until_ready()
        .now_or_never()
        .is_some_and(|r| r.is_ok())
}

impl Stores {
    /// Whether every store has listed its objects once.
    pub(crate) fn synced(&self) -> bool {
        ready(&self.works)
            && ready(&self.placements)
            && ready(&self.decisions)
            && ready(&self.revisions)
            && ready(&self.carriers)
    }
}

/// The stores and their writers, the writers handed out once.
pub(super) struct Cache {
    stores: Stores,
    writers: Mutex<Option<StoreWriters>>,
    /// The works' changes as triggers, from the works' store watch.
    pub(super) changes: WorkChanges,
    /// The works this controller wrote, until the store shows them.
    pub(super) written: Arc<OwnWrites>,
}

impl Cache {
    pub(super) fn new() -> Cache {
        let (stores, writers) = stores();
        Cache {
            stores,
            writers: Mutex::new(Some(writers)),
            changes: WorkChanges::new(),
            written: Arc::default(),
        }
    }

    /// The writers, the first time only.
    pub(super) fn take_writers(&self) -> Option<StoreWriters> {
        self.writers.lock().ok().and_then(|mut w| w.take())
    }

    /// The stores when synced.
    pub(super) fn synced(&self) -> Option<&Stores> {
        self.stores.synced().then_some(&self.stores)
    }
}

/// Runs one watch per store, feeding it (with the watcher's default
/// backoff), until aborted (or the runtime ends, if the handles are
/// dropped).
pub(super) fn spawn_reflectors(
    client: &Client,
    writers: StoreWriters,
    changes: &WorkChanges,
    written: &Arc<OwnWrites>,
) -> Vec<JoinHandle<()>> {
    let labelled = |label: &str| watcher::Config::default().labels(label).any_semantic();
    let written = Arc::clone(written);
    let works = reflector::reflector(
        writers.works,
        watcher(Api::all(client.clone()), labelled(MWRS_OWNER_LABEL)),
    )
    .default_backoff()
    .inspect_ok(move |event| written.seen(event));
    vec![
        drain::<ManifestWork>(changes.clone().forward(works, super::owner_of_work)),
        feed(
            Api::all(client.clone()),
            watcher::Config::default().any_semantic(),
            writers.placements,
        ),
        feed(
            Api::all(client.clone()),
            labelled(PLACEMENT_LABEL),
            writers.decisions,
        ),
        feed(
            Api::all(client.clone()),
            labelled(MWRS_OWNER_LABEL),
            writers.revisions,
        ),
        feed(
            Api::all(client.clone()),
            watcher::Config::default().any_semantic(),
            writers.carriers,
        ),
    ]
}

fn feed<K>(api: Api<K>, config: watcher::Config, writer: Writer<K>) -> JoinHandle<()>
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    drain::<K>(reflector::reflector(writer, watcher(api, config)).default_backoff())
}

/// Runs a store's watch, logging its failures (it retries on its own).
fn drain<K>(
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
) -> JoinHandle<()>
where
    K: Resource<DynamicType = ()> + Send + 'static,
{
    tokio::spawn(async move {
        events
            .for_each(|event| async move {
                if let Err(error) = event {
                    tracing::warn!(kind = %K::kind(&()), %error, "watch failed; retrying");
                }
            })
            .await;
    })
}

/// The reads of one reconcile: from the stores when they are synced, else
/// from the API.
pub(super) struct Reads<'a> {
    pub(super) client: &'a Client,
    pub(super) world: &'a KubeWorld,
    pub(super) stores: Option<&'a Stores>,
    pub(super) written: &'a OwnWrites,
}

fn has_label<K: ResourceExt>(object: &K, key: &str, value: &str) -> bool {
    object.labels().get(key).map(String::as_str) == Some(value)
}

impl Reads<'_> {
    /// The ManifestWorks labelled with `owner_label`; from the store, with
    /// this controller's writes it does not show yet ([`OwnWrites`]).
    pub(super) async fn works(&self, owner_label: &str) -> Result<Vec<Arc<ManifestWork>>, Error> {
        let belongs = |w: &ManifestWork| has_label(w, MWRS_OWNER_LABEL, owner_label);
        match self.stores {
            Some(stores) => Ok(self
                .written
                .overlay(stores.works.state_filter(belongs), belongs)),
            None => Ok(self.world.list_works(owner_label).await?),
        }
    }

    /// The ControllerRevisions in `namespace` labelled with `owner_label`.
    pub(super) async fn revisions(
        &self,
        namespace: &str,
        owner_label: &str,
    ) -> Result<Vec<Arc<ControllerRevision>>, Error> {
        match self.stores {
            Some(stores) => Ok(stores.revisions.state_filter(|r| {
                r.namespace().as_deref() == Some(namespace)
                    && has_label(r, MWRS_OWNER_LABEL, owner_label)
            })),
            None => {
                let api: Api<ControllerRevision> = Api::namespaced(self.client.clone(), namespace);
                let params =
                    ListParams::default().labels(&format!("{MWRS_OWNER_LABEL}={owner_label}"));
                api.list(&params)
                    .await
                    .map(|list| list.items.into_iter().map(Arc::new).collect())
                    .map_err(|source| Error::kube("listing ControllerRevisions", source))
            }
        }
    }

    /// The ManifestWorkReplicaSetRollouts of `namespace`.
    pub(super) async fn carriers(
        &self,
        namespace: &str,
    ) -> Result<Vec<Arc<ManifestWorkReplicaSetRollout>>, Error> {
        match self.stores {
            Some(stores) => Ok(stores
                .carriers
                .state_filter(|c| c.namespace().as_deref() == Some(namespace))),
            None => {
                let api: Api<ManifestWorkReplicaSetRollout> =
                    Api::namespaced(self.client.clone(), namespace);
                api.list(&ListParams::default())
                    .await
                    .map(|list| list.items.into_iter().map(Arc::new).collect())
                    .map_err(|source| {
                        Error::kube("listing the ManifestWorkReplicaSetRollouts", source)
                    })
            }
        }
    }

    /// The decision groups of `placement` in `namespace`; `Ok(None)` when
    /// the placement does not exist; the inner `Err` when its decisions'
    /// group labels cannot be read.
    pub(super) async fn placement_groups(
        &self,
        namespace: &str,
        placement: &str,
    ) -> Result<Result<Option<Vec<ClusterGroup>>, DecisionGroupError>, Error> {
        let decisions: Vec<PlacementDecision> = match self.stores {
            Some(stores) => {
                let key = reflector::ObjectRef::new(placement).within(namespace);
                if stores.placements.get(&key).is_none() {
                    return Ok(Ok(None));
                }
                stores
                    .decisions
                    .state_filter(|d| {
                        d.namespace().as_deref() == Some(namespace)
                            && has_label(d, PLACEMENT_LABEL, placement)
                    })
                    .iter()
                    .map(|d| PlacementDecision::clone(d))
                    .collect()
            }
            None => {
                let placements: Api<Placement> = Api::namespaced(self.client.clone(), namespace);
                if placements
                    .get_opt(placement)
                    .await
                    .map_err(|source| Error::kube("reading a Placement", source))?
                    .is_none()
                {
                    return Ok(Ok(None));
                }
                let api: Api<PlacementDecision> = Api::namespaced(self.client.clone(), namespace);
                api.list(&ListParams::default().labels(&format!("{PLACEMENT_LABEL}={placement}")))
                    .await
                    .map_err(|source| Error::kube("listing PlacementDecisions", source))?
                    .items
            }
        };
        // In name order, as the API lists them.
        let mut decisions = decisions;
        decisions.sort_by_key(ResourceExt::name_any);
        Ok(decision_groups(&decisions).map(Some))
    }
}
