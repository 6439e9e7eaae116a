//! [`MemoryWorld`]: ManifestWorks held in memory, for the simulator and
//! tests. It behaves as the API server does where the orchestration can
//! tell: an apply that changes the spec bumps `metadata.generation`, an
//! apply replaces the labels, annotations and spec it is given and keeps the
//! status, a delete of a missing work succeeds. Field ownership is kept
//! roughly: an apply without force over a work whose `managedFields` give
//! another manager the controller's fields is refused as a conflict, and a
//! forced one takes them over (drops the other managers' entries, the
//! status subresource's aside).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use kube::ResourceExt;

use thiserror::Error;

use super::{World, WorldAction, WorldError, WorldErrorKind, conflict};
use crate::api::ManifestWork;
use crate::api::labels::MWRS_OWNER_LABEL;

/// One write, as recorded by [`MemoryWorld::writes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Write {
    /// An apply of `namespace/name`.
    Apply(String, String),
    /// An annotation of `namespace/name`.
    Annotate(String, String),
    /// A delete of `namespace/name`.
    Delete(String, String),
}

/// ManifestWorks in memory, keyed by namespace and name, shared with the
/// lists handed out (as a watch cache shares them).
#[derive(Debug, Default)]
pub struct MemoryWorld {
    works: Mutex<BTreeMap<(String, String), Arc<ManifestWork>>>,
    writes: Mutex<Vec<Write>>,
}

impl MemoryWorld {
    /// An empty world.
    pub fn new() -> MemoryWorld {
        MemoryWorld::default()
    }

    /// Puts `work` in as it is (status included), as if another party wrote
    /// it.
    pub fn insert(&self, work: ManifestWork) {
        let key = (work.namespace().unwrap_or_default(), work.name_any());
        if let Ok(mut works) = self.works.lock() {
            works.insert(key, Arc::new(work));
        }
    }

    /// The work `namespace/name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<ManifestWork> {
        let works = self.works.lock().ok()?;
        works
            .get(&(namespace.to_owned(), name.to_owned()))
            .map(|w| ManifestWork::clone(w))
    }

    /// Every work, by namespace then name.
    pub fn all(&self) -> Vec<ManifestWork> {
        self.works
            .lock()
            .map(|w| w.values().map(|w| ManifestWork::clone(w)).collect())
            .unwrap_or_default()
    }

    /// Changes the work `namespace/name` in place (to play the work agent);
    /// false if there is none.
    pub fn update(
        &self,
        namespace: &str,
        name: &str,
        change: impl FnOnce(&mut ManifestWork),
    ) -> bool {
        let Ok(mut works) = self.works.lock() else {
            return false;
        };
        match works.get_mut(&(namespace.to_owned(), name.to_owned())) {
            Some(work) => {
                change(Arc::make_mut(work));
                true
            }
            None => false,
        }
    }

    /// The writes so far, in order.
    #[cfg(test)]
    pub(crate) fn writes(&self) -> Vec<Write> {
        self.writes.lock().map(|w| w.clone()).unwrap_or_default()
    }

    fn record(&self, write: Write) {
        if let Ok(mut writes) = self.writes.lock() {
            writes.push(write);
        }
    }
}

/// Why the in-memory world refused an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub(crate) enum MemoryWorldError {
    /// A thread panicked while holding the works.
    #[error("the in-memory world is poisoned")]
    Poisoned,
    /// An apply without force over fields another manager owns.
    #[error("another field manager owns fields of the work")]
    ForeignOwned,
    /// No such work.
    #[error("not found")]
    NotFound,
}

fn poisoned(action: WorldAction) -> WorldError {
    WorldError::new(
        action,
        "",
        "",
        WorldErrorKind::Other,
        MemoryWorldError::Poisoned,
    )
}

impl World for MemoryWorld {
    async fn list_works(&self, owner_label: &str) -> Result<Vec<Arc<ManifestWork>>, WorldError> {
        let works = self
            .works
            .lock()
            .map_err(|_| poisoned(WorldAction::Listing))?;
        Ok(works
            .values()
            .filter(|w| w.labels().get(MWRS_OWNER_LABEL).map(String::as_str) == Some(owner_label))
            .cloned()
            .collect())
    }

    async fn apply_work(
        &self,
        work: ManifestWork,
        force: bool,
    ) -> Result<ManifestWork, WorldError> {
        let (namespace, name) = (work.namespace().unwrap_or_default(), work.name_any());
        let stored = {
            let mut works = self
                .works
                .lock()
                .map_err(|_| poisoned(WorldAction::Applying))?;
            let key = (namespace.clone(), name.clone());
            if !force && works.get(&key).is_some_and(|w| conflict::foreign_owned(w)) {
                return Err(WorldError::new(
                    WorldAction::Applying,
                    namespace,
                    name,
                    WorldErrorKind::Conflict,
                    MemoryWorldError::ForeignOwned,
                ));
            }
            let stored = match works.remove(&key) {
                Some(old) => {
                    let mut old = Arc::unwrap_or_clone(old);
                    if let Some(entries) = old.metadata.managed_fields.as_mut() {
                        entries.retain(|e| {
                            e.manager.as_deref() == Some(conflict::FIELD_MANAGER)
                                || e.subresource.as_deref().is_some_and(|s| !s.is_empty())
                        });
                    }
                    if old.spec != work.spec {
                        old.metadata.generation = Some(old.metadata.generation.unwrap_or(0) + 1);
                    }
                    old.metadata.labels = work.metadata.labels.clone();
                    old.metadata.annotations = work.metadata.annotations.clone();
                    old.spec = work.spec;
                    old
                }
                None => {
                    let mut new = work;
                    new.metadata.generation = Some(1);
                    new.status = None;
                    new
                }
            };
            works.insert(key, Arc::new(stored.clone()));
            stored
        };
        self.record(Write::Apply(namespace, name));
        Ok(stored)
    }

    async fn annotate_work(
        &self,
        namespace: &str,
        name: &str,
        annotations: BTreeMap<String, String>,
    ) -> Result<(), WorldError> {
        let found = self.update(namespace, name, |work| {
            work.metadata
                .annotations
                .get_or_insert_default()
                .extend(annotations);
        });
        if !found {
            return Err(WorldError::new(
                WorldAction::Annotating,
                namespace,
                name,
                WorldErrorKind::NotFound,
                MemoryWorldError::NotFound,
            ));
        }
        self.record(Write::Annotate(namespace.to_owned(), name.to_owned()));
        Ok(())
    }

    async fn delete_work(&self, namespace: &str, name: &str) -> Result<(), WorldError> {
        {
            let mut works = self
                .works
                .lock()
                .map_err(|_| poisoned(WorldAction::Deleting))?;
            works.remove(&(namespace.to_owned(), name.to_owned()));
        }
        self.record(Write::Delete(namespace.to_owned(), name.to_owned()));
        Ok(())
    }
}
