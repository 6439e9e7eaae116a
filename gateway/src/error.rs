//! The gateway's errors, and the one place they become a `tonic::Status`.

use rollout_policies::merge::MergeError;
use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

use crate::registry::ResolveError;
use crate::transport::pending::PendingExceeded;

/// Why a gateway call failed.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("missing metadata key \"ocm-rollout-plugin\": name the plugin or pipeline to call")]
    MissingTarget,
    #[error("metadata key \"ocm-rollout-plugin\" is not a valid name: {0}")]
    InvalidTarget(String),
    #[error("no plugin registry is loaded yet")]
    NotReady,
    #[error("{0}")]
    Resolve(ResolveErrorDisplay),
    /// One or more members failed (their names and messages inside).
    #[error("{0}")]
    Members(MergeError),
    /// The caller's request is unusable (for example a ManifestWork that is not JSON).
    #[error("{0}")]
    InvalidRequest(String),
    /// The request did not arrive whole in time: by the caller's deadline
    /// (`by_caller`), else by the gateway's receive timeout.
    #[error("{}", receive_timeout_message(*.waited, *.by_caller))]
    ReceiveTimeout {
        waited: std::time::Duration,
        by_caller: bool,
    },
    /// Buffering the request would go over a pending-bytes limit.
    #[error("{0}")]
    PendingBytes(PendingExceeded),
}

fn receive_timeout_message(waited: std::time::Duration, by_caller: bool) -> String {
    let ms = waited.as_millis();
    if by_caller {
        format!("the request had not arrived whole when the caller's deadline passed ({ms} ms)")
    } else {
        format!("the request had not arrived whole after {ms} ms (--request-receive-timeout)")
    }
}

/// [`ResolveError`] with its message.
#[derive(Debug)]
pub struct ResolveErrorDisplay(pub ResolveError);

impl std::fmt::Display for ResolveErrorDisplay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hub = |h: &Option<String>| match h {
            Some(h) => format!(" for hub \"{h}\""),
            None => String::new(),
        };
        match &self.0 {
            ResolveError::NotFound { name, hub: h } => {
                write!(f, "plugin \"{name}\" is not registered{}", hub(h))
            }
            ResolveError::PermissionDenied {
                name,
                plugin,
                hub: h,
            } if name == plugin => {
                write!(f, "plugin \"{name}\" may not be called{}", hub(h))
            }
            ResolveError::PermissionDenied {
                name,
                plugin,
                hub: h,
            } => {
                write!(
                    f,
                    "pipeline \"{name}\" uses plugin \"{plugin}\", which may not be called{}",
                    hub(h)
                )
            }
        }
    }
}

impl From<ResolveError> for GatewayError {
    fn from(e: ResolveError) -> Self {
        GatewayError::Resolve(ResolveErrorDisplay(e))
    }
}

impl From<MergeError> for GatewayError {
    fn from(e: MergeError) -> Self {
        GatewayError::Members(e)
    }
}

impl GatewayError {
    /// The gRPC code of the error (CONTRACT §2).
    pub fn code(&self) -> Code {
        match self {
            GatewayError::MissingTarget
            | GatewayError::InvalidTarget(_)
            | GatewayError::InvalidRequest(_) => Code::InvalidArgument,
            GatewayError::NotReady => Code::Unavailable,
            GatewayError::ReceiveTimeout { .. } => Code::DeadlineExceeded,
            GatewayError::PendingBytes(_) => Code::ResourceExhausted,
            GatewayError::Resolve(ResolveErrorDisplay(ResolveError::NotFound { .. })) => {
                Code::NotFound
            }
            GatewayError::Resolve(ResolveErrorDisplay(ResolveError::PermissionDenied {
                ..
            })) => Code::PermissionDenied,
            GatewayError::Members(m) => m.code(),
        }
    }

    /// A single plugin's failure, as the merge rules would report it.
    pub fn plugin(name: &str, code: Code, message: &str) -> GatewayError {
        GatewayError::Members(MergeError {
            failures: vec![(
                name.to_string(),
                rollout_policies::merge::Failure {
                    code,
                    message: message.to_string(),
                },
            )],
        })
    }

    /// The status sent to the caller; `failed_open` names members skipped under
    /// `failurePolicy: Ignore` before the failure (the trailer).
    pub fn into_status(self, failed_open: &[String]) -> Status {
        let mut status = Status::new(self.code(), self.to_string());
        if !failed_open.is_empty()
            && let Ok(v) = MetadataValue::try_from(failed_open.join(","))
        {
            status
                .metadata_mut()
                .insert(rollout_proto::FAILED_OPEN_METADATA_KEY, v);
        }
        status
    }
}
