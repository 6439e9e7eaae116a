//! Where the ManifestWorks live ([`World`]) and how an operation on them
//! fails ([`WorldError`]).

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use crate::api::ManifestWork;
#[cfg(doc)]
use crate::orchestrate::conflict::FIELD_MANAGER;

/// What an operation on the world was doing when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WorldAction {
    /// Listing an owner's works.
    Listing,
    /// Applying a work.
    Applying,
    /// Setting annotations on a work.
    Annotating,
    /// Deleting a work.
    Deleting,
    /// Encoding a work (or the step's template) as JSON.
    Encoding,
}

impl fmt::Display for WorldAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WorldAction::Listing => "listing",
            WorldAction::Applying => "applying",
            WorldAction::Annotating => "annotating",
            WorldAction::Deleting => "deleting",
            WorldAction::Encoding => "encoding",
        })
    }
}

/// Why the world refused an operation, from the API server's status code
/// (or what the in-memory world found): what a caller decides on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WorldErrorKind {
    /// 409 Conflict: another field manager owns a field the apply would
    /// change.
    Conflict,
    /// 403 Forbidden: the controller's identity may not do it.
    Forbidden,
    /// 404 Not Found.
    NotFound,
    /// 422 Invalid: the API server rejects the object.
    Invalid,
    /// The object could not be encoded as JSON; nothing was sent.
    Encoding,
    /// Anything else: the connection, a server error, throttling.
    Other,
}

impl WorldErrorKind {
    /// The kind of a Kubernetes client error.
    pub(crate) fn of_kube(error: &kube::Error) -> WorldErrorKind {
        match error {
            kube::Error::Api(status) if status.is_conflict() => WorldErrorKind::Conflict,
            kube::Error::Api(status) if status.is_forbidden() => WorldErrorKind::Forbidden,
            kube::Error::Api(status) if status.is_not_found() => WorldErrorKind::NotFound,
            kube::Error::Api(status) if status.is_invalid() => WorldErrorKind::Invalid,
            _ => WorldErrorKind::Other,
        }
    }
}

/// An operation on the world that failed, with its cause kept (a
/// `kube::Error`, a JSON error, the in-memory world's own).
#[derive(Debug, Clone)]
pub struct WorldError {
    /// What was being done.
    pub(crate) action: WorldAction,
    /// The work's namespace (its cluster); empty for a list.
    pub(crate) namespace: String,
    /// The work's name; empty for a list.
    pub(crate) name: String,
    /// Why it was refused.
    pub(crate) kind: WorldErrorKind,
    /// The cause (shared, so that an outcome holding the error can be
    /// cloned).
    pub(crate) source: Arc<dyn std::error::Error + Send + Sync>,
}

impl fmt::Display for WorldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let WorldError {
            action,
            namespace,
            name,
            source,
            ..
        } = self;
        write!(f, "{action} ManifestWork {namespace}/{name}: {source}")
    }
}

/// The source is the cause itself (a `kube::Error`, …), not the `Arc`
/// around it, so that callers can downcast it.
impl std::error::Error for WorldError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

impl WorldError {
    /// `action` on the work `namespace/name` failed with `source`, of
    /// `kind`.
    pub(crate) fn new(
        action: WorldAction,
        namespace: impl Into<String>,
        name: impl Into<String>,
        kind: WorldErrorKind,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> WorldError {
        WorldError {
            action,
            namespace: namespace.into(),
            name: name.into(),
            kind,
            source: Arc::new(source),
        }
    }

    /// A Kubernetes API call for `action` on `namespace/name` that failed,
    /// classified by its status code.
    pub(crate) fn kube(
        action: WorldAction,
        namespace: impl Into<String>,
        name: impl Into<String>,
        source: kube::Error,
    ) -> WorldError {
        let kind = WorldErrorKind::of_kube(&source);
        WorldError::new(action, namespace, name, kind, source)
    }

    /// A work (or, with empty names, the step's template) that could not be
    /// encoded as JSON.
    pub(crate) fn encoding(namespace: String, name: String, err: serde_json::Error) -> WorldError {
        WorldError::new(
            WorldAction::Encoding,
            namespace,
            name,
            WorldErrorKind::Encoding,
            err,
        )
    }

    /// Whether the API server refused an apply with 409 Conflict: another
    /// field manager owns a field the apply would change.
    pub(crate) fn is_conflict(&self) -> bool {
        self.kind == WorldErrorKind::Conflict
    }
}

/// Two errors are equal when they are of one kind, about one work, and
/// say the same (their sources are not comparable otherwise).
impl PartialEq for WorldError {
    fn eq(&self, other: &WorldError) -> bool {
        (self.action, &self.namespace, &self.name, self.kind)
            == (other.action, &other.namespace, &other.name, other.kind)
            && (Arc::ptr_eq(&self.source, &other.source)
                || self.source.to_string() == other.source.to_string())
    }
}

impl Eq for WorldError {}

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
    /// ([`WorldErrorKind::Conflict`]).
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

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::*;

    fn api_error(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Status::failure("refused", reason).with_code(code).boxed())
    }

    #[test]
    fn a_conflict_and_a_forbidden_write_are_told_apart() {
        let cases = [
            (409, "Conflict", WorldErrorKind::Conflict),
            (403, "Forbidden", WorldErrorKind::Forbidden),
            (404, "NotFound", WorldErrorKind::NotFound),
            (422, "Invalid", WorldErrorKind::Invalid),
            (500, "InternalError", WorldErrorKind::Other),
            // A name taken is a 409 too, but not another field manager.
            (409, "AlreadyExists", WorldErrorKind::Other),
        ];
        for (code, reason, want) in cases {
            let error = WorldError::kube(WorldAction::Applying, "c1", "w", api_error(code, reason));
            assert_eq!(error.kind, want, "{code} {reason}");
            assert_eq!(error.is_conflict(), want == WorldErrorKind::Conflict);
            // The cause is kept, not only its text.
            let source = std::error::Error::source(&error).expect("a source");
            assert!(source.downcast_ref::<kube::Error>().is_some());
        }
        let error = WorldError::kube(
            WorldAction::Applying,
            "c1",
            "w",
            api_error(403, "Forbidden"),
        );
        assert!(
            error
                .to_string()
                .starts_with("applying ManifestWork c1/w: ApiError: refused"),
            "{error}"
        );
    }
}
