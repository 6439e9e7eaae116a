//! Which changes of a watched kind wake a reconcile. The carrier
//! (ManifestWorkReplicaSetRollout) holds the controller's own status: a
//! reconcile that writes it must not wake the next one, or a plugin whose
//! INPROGRESS message changes on every call (a countdown) makes the
//! controller call it again at the API server's speed. Its spec, its
//! creation and its deletion do wake one.

use std::collections::HashMap;

use futures::{Stream, StreamExt};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

/// What of an object counts as a change: its identity (uid) and its spec's
/// generation (the API server bumps `metadata.generation` on spec writes
/// only, for a kind with a status subresource).
type Version = (Option<String>, Option<i64>);

/// An object's namespace and name.
type Key = (Option<String>, String);

fn version<K: Resource>(object: &K) -> Version {
    (object.uid(), object.meta().generation)
}

/// The objects of `events` whose spec changed, that appeared or that were
/// deleted; a status write alone is dropped. What it remembers is the
/// objects that exist: a relist (`Init` … `InitDone`) replaces it, so an
/// object deleted while the watch was down is forgotten.
pub(crate) fn spec_changes<K, S>(events: S) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource + Clone + Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    let mut seen: HashMap<Key, Version> = HashMap::new();
    let mut relisted: HashMap<Key, Version> = HashMap::new();
    events.filter_map(move |event| {
        let changed = match event {
            Err(error) => Some(Err(error)),
            Ok(watcher::Event::Apply(object)) => {
                let now = version(&object);
                let before = seen.insert(key(&object), now.clone());
                (before != Some(now)).then_some(Ok(object))
            }
            Ok(watcher::Event::InitApply(object)) => {
                let now = version(&object);
                relisted.insert(key(&object), now.clone());
                (seen.get(&key(&object)) != Some(&now)).then_some(Ok(object))
            }
            Ok(watcher::Event::Delete(object)) => {
                seen.remove(&key(&object));
                Some(Ok(object))
            }
            Ok(watcher::Event::Init) => {
                relisted.clear();
                None
            }
            Ok(watcher::Event::InitDone) => {
                std::mem::swap(&mut seen, &mut relisted);
                relisted.clear();
                None
            }
        };
        futures::future::ready(changed)
    })
}

fn key<K: Resource>(object: &K) -> Key {
    (object.namespace(), object.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn object(name: &str, uid: &str, generation: i64, data: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(uid.into()),
                generation: Some(generation),
                ..ObjectMeta::default()
            },
            data: Some([("status".to_owned(), data.to_owned())].into()),
            ..ConfigMap::default()
        }
    }

    fn names(events: Vec<watcher::Event<ConfigMap>>) -> Vec<String> {
        let stream = futures::stream::iter(events.into_iter().map(Ok));
        futures::executor::block_on(spec_changes(stream).collect::<Vec<_>>())
            .into_iter()
            .map(|r| {
                let o = r.expect("no error");
                format!("{}@{}", o.name_any(), o.metadata.generation.unwrap_or(0))
            })
            .collect()
    }

    #[test]
    fn a_status_write_wakes_nothing_and_a_spec_write_creation_or_deletion_does() {
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let seen = names(vec![
            Init,
            InitApply(object("a", "u1", 1, "x")),
            InitDone,
            // Status writes: same generation.
            Apply(object("a", "u1", 1, "749ms left")),
            Apply(object("a", "u1", 1, "506ms left")),
            // A spec write.
            Apply(object("a", "u1", 2, "506ms left")),
            Delete(object("a", "u1", 2, "")),
            // Re-created under the same name: a new object.
            Apply(object("a", "u2", 1, "")),
            // A relist that finds it unchanged.
            Init,
            InitApply(object("a", "u2", 1, "")),
            InitDone,
        ]);
        assert_eq!(seen, ["a@1", "a@2", "a@2", "a@1"]);
    }

    #[test]
    fn a_relist_forgets_what_is_gone() {
        use watcher::Event::{Apply, Init, InitApply, InitDone};
        let seen = names(vec![
            Init,
            InitApply(object("a", "u1", 1, "")),
            InitApply(object("b", "u2", 1, "")),
            InitDone,
            // The watch restarts; b was deleted meanwhile.
            Init,
            InitApply(object("a", "u1", 1, "")),
            InitDone,
            // b at the version it had: not remembered, so it wakes one.
            Apply(object("b", "u2", 1, "")),
            Apply(object("a", "u1", 1, "status")),
        ]);
        assert_eq!(seen, ["a@1", "b@1", "b@1"]);
    }
}
