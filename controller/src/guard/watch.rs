//! The ClusterManagers watched for OCM's gate (the I/O of [`super`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use super::{Guard, gate_enabled};
use crate::api::ClusterManager;

/// Keeps `guard` told which ClusterManagers enable OCM's
/// ManifestWorkReplicaSet controller, until the watch ends (never,
/// normally). A hub with no ClusterManager CRD (OCM installed without its
/// operator) has no gate to find: the watch retries, the status writes
/// still count.
pub(crate) async fn watch_gates(client: Client, guard: Arc<Guard>) {
    let resource = ApiResource::erase::<ClusterManager>(&());
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
    let mut warned = false;
    // The names listed since the watch (re)started its list; the gates of
    // the others are forgotten once it ends.
    let mut listed: Option<BTreeSet<String>> = None;
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                let name = object.name_any();
                if let Some(listed) = listed.as_mut() {
                    listed.insert(name.clone());
                }
                let enabled = serde_json::to_value(&object)
                    .ok()
                    .and_then(|raw| serde_json::from_value::<ClusterManager>(raw).ok())
                    .map(|cm| gate_enabled(&cm));
                if enabled == Some(true) {
                    tracing::warn!(cluster_manager = %name, "the ClusterManager enables OCM's own ManifestWorkReplicaSet controller; reconciling nothing while it does");
                }
                // A ClusterManager that cannot be read as one is taken as
                // enabling it: fail closed.
                guard.set_gate(&name, Some(enabled.unwrap_or(true)));
            }
            Ok(watcher::Event::Delete(object)) => guard.set_gate(&object.name_any(), None),
            Ok(watcher::Event::Init) => listed = Some(BTreeSet::new()),
            Ok(watcher::Event::InitDone) => {
                if let Some(listed) = listed.take() {
                    guard.retain_gates(&listed);
                }
            }
            Err(error) if !warned => {
                warned = true;
                tracing::warn!(%error, "cannot watch ClusterManagers for OCM's ManifestWorkReplicaSet gate; retrying (another controller is still found by its status writes)");
            }
            Err(error) => tracing::debug!(%error, "watching ClusterManagers"),
        }
    }
}
