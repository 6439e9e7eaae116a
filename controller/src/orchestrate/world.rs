//! Where the ManifestWorks live ([`World`]) and how a write to it fails
//! ([`WorldError`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use thiserror::Error;

use crate::api::ManifestWork;
#[cfg(doc)]
use crate::orchestrate::conflict::FIELD_MANAGER;

/// A write to the world that failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{action} ManifestWork {namespace}/{name}: {message}")]
pub struct WorldError {
    /// `listing`, `applying`, `annotating` or `deleting`.
    pub action: &'static str,
    /// The work's namespace (its cluster); empty for a list.
    pub namespace: String,
    /// The work's name; empty for a list.
    pub name: String,
    /// What went wrong.
    pub message: String,
    /// Whether the API server refused an apply with 409 Conflict: another
    /// field manager owns a field the apply would change.
    pub conflict: bool,
}

impl WorldError {
    /// A work (or, with empty names, the step's template) that could not be
    /// encoded as JSON.
    pub(crate) fn encoding(namespace: String, name: String, err: serde_json::Error) -> WorldError {
        WorldError {
            action: "encoding",
            namespace,
            name,
            message: err.to_string(),
            conflict: false,
        }
    }
}

/// Where the ManifestWorks live: the hub's API server for `run`, memory for
/// the simulator. Every method is one operation; the orchestration makes
/// several at once.
pub trait World: Send + Sync {
    /// Every ManifestWork labelled with the owner label value `owner_label`,
    /// in every namespace.
    fn list_works(
        &self,
        owner_label: &str,
    ) -> impl Future<Output = Result<Vec<Arc<ManifestWork>>, WorldError>> + Send;

    /// Creates or updates `work` (server-side apply with field manager
    /// [`FIELD_MANAGER`]: the controller owns the fields it sets) and
    /// returns it as stored. With `force` the apply takes over fields
    /// another manager owns; without, such a change is refused
    /// ([`WorldError::conflict`]).
    fn apply_work(
        &self,
        work: ManifestWork,
        force: bool,
    ) -> impl Future<Output = Result<ManifestWork, WorldError>> + Send;

    /// Sets `annotations` on the work, leaving everything else as it is.
    fn annotate_work(
        &self,
        namespace: &str,
        name: &str,
        annotations: BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), WorldError>> + Send;

    /// Deletes the work; a work already gone is not an error.
    fn delete_work(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), WorldError>> + Send;
}
