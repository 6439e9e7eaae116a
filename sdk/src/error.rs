//! The SDK's errors: [`PluginError`] for hooks, [`ServeError`] for serving.
//!
//! `impl From<PluginError> for tonic::Status` is the one place where a
//! hook's error becomes a gRPC status.

use std::fmt::Display;
use std::net::SocketAddr;
use std::path::PathBuf;

use tonic::{Code, Status};

use crate::work::WorkError;

/// Why a hook failed. Each variant becomes the gRPC code it names; the
/// gateway passes the code on to the controller and prefixes the message
/// with `plugin "NAME": `.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The ManifestWork in the request is malformed, or a patch did not fit
    /// it: `INVALID_ARGUMENT`.
    #[error(transparent)]
    Work(#[from] WorkError),
    /// The request makes no sense to the plugin: `INVALID_ARGUMENT`.
    #[error("{0}")]
    InvalidArgument(String),
    /// The plugin cannot act in the current state of the world:
    /// `FAILED_PRECONDITION`.
    #[error("{0}")]
    FailedPrecondition(String),
    /// A dependency is down for now, try again: `UNAVAILABLE` (the code the
    /// gateway retries by default).
    #[error("{0}")]
    Unavailable(String),
    /// A bug or an unexpected failure in the plugin: `INTERNAL`.
    #[error("{0}")]
    Internal(String),
    /// Any other status, passed through as it is.
    #[error("{}: {}", .0.code(), .0.message())]
    Status(Status),
}

impl PluginError {
    /// [`PluginError::InvalidArgument`] with this message.
    pub fn invalid_argument(message: impl Display) -> Self {
        Self::InvalidArgument(message.to_string())
    }

    /// [`PluginError::FailedPrecondition`] with this message.
    pub fn failed_precondition(message: impl Display) -> Self {
        Self::FailedPrecondition(message.to_string())
    }

    /// [`PluginError::Unavailable`] with this message.
    pub fn unavailable(message: impl Display) -> Self {
        Self::Unavailable(message.to_string())
    }

    /// [`PluginError::Internal`] with this message.
    pub fn internal(message: impl Display) -> Self {
        Self::Internal(message.to_string())
    }

    /// The gRPC code this error answers with.
    pub fn code(&self) -> Code {
        match self {
            Self::Work(_) | Self::InvalidArgument(_) => Code::InvalidArgument,
            Self::FailedPrecondition(_) => Code::FailedPrecondition,
            Self::Unavailable(_) => Code::Unavailable,
            Self::Internal(_) => Code::Internal,
            Self::Status(status) => status.code(),
        }
    }
}

impl From<Status> for PluginError {
    fn from(status: Status) -> Self {
        Self::Status(status)
    }
}

impl From<PluginError> for Status {
    fn from(error: PluginError) -> Self {
        match error {
            PluginError::Status(status) => status,
            other => Status::new(other.code(), other.to_string()),
        }
    }
}

/// Why a plugin server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listening address could not be bound (taken, not local, …).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A TLS file could not be read.
    #[error("cannot read {what} {}: {source}", path.display())]
    ReadTls {
        /// `certificate`, `key` or `client CA`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// TLS flags that do not make a configuration (a key without a
    /// certificate, …).
    #[error("invalid TLS flags: {0}")]
    TlsFlags(&'static str),
    /// The certificate, key or client CA was rejected (not PEM, key does not
    /// match, …).
    #[error("invalid TLS configuration: {0}")]
    Tls(#[source] crate::tls::TlsConfigError),
    /// A signal handler could not be installed.
    #[error("cannot install a handler for {signal}: {source}")]
    Signal {
        /// `SIGTERM` or `SIGINT`.
        signal: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The reflection service could not be built from the API's
    /// descriptors (a build of the SDK with a broken descriptor set).
    #[error("gRPC reflection: {0}")]
    Reflection(#[source] tonic_reflection::server::Error),
    /// The server failed while serving.
    #[error("gRPC server failed: {0}")]
    Serve(#[source] tonic::transport::Error),
    /// The serving task ended abnormally (panicked or was cancelled).
    #[error("plugin server task ended abnormally: {0}")]
    Task(#[source] tokio::task::JoinError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_answers_its_code_and_message() {
        let table = [
            (
                PluginError::from(WorkError::Empty),
                Code::InvalidArgument,
                "ManifestWork is empty",
            ),
            (
                PluginError::invalid_argument("bad"),
                Code::InvalidArgument,
                "bad",
            ),
            (
                PluginError::failed_precondition("not yet"),
                Code::FailedPrecondition,
                "not yet",
            ),
            (PluginError::unavailable("down"), Code::Unavailable, "down"),
            (PluginError::internal("bug"), Code::Internal, "bug"),
            (
                PluginError::from(Status::permission_denied("no")),
                Code::PermissionDenied,
                "no",
            ),
        ];
        for (error, code, message) in table {
            assert_eq!(error.code(), code);
            let status = Status::from(error);
            assert_eq!(status.code(), code);
            assert_eq!(status.message(), message);
        }
    }
}
