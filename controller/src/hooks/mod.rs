//! The rollout plugin hooks as the orchestration sees them: the [`Hooks`]
//! trait (one call: a [`HookRequest`] in, a [`HookAnswer`] out; the typed calls of
//! [`HookCalls`]), its typed answers and errors, and a per-hook call counter.
//!
//! [`GatewayHooks`] implements it over gRPC to the rollout gateway (one
//! lazily connected channel, the `ocm-rollout-plugin` metadata key, a
//! deadline and W3C trace context on every call). Tests and the simulator may
//! implement the trait themselves; the orchestration
//! ([`crate::orchestrate`]) only knows the trait.

mod call;
mod gateway;
mod request;
mod tls;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use rollout_proto::v1alpha1::{InitializeResponse, RolloutStateDetail};
use serde::Serialize;
use thiserror::Error;

pub use gateway::{
    DEFAULT_GATEWAY_URL, GatewayError, GatewayHooks, GatewayOptions, GatewayTls, GatewayTlsError,
    GatewayTlsFiles, check_gateway_url,
};

#[cfg(test)]
pub(crate) use call::PerHook;
pub use call::{HookAnswer, HookCalls, HookRequest};
pub use request::{RolloutRequest, encode_state};
pub use rollout_proto::HookKind;
pub(crate) use rollout_proto::code_name;
pub use tls::TlsFailure;

/// Whether a plugin answered `Initialize`, for the `PluginLoaded` condition
/// and its Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PluginState {
    /// The plugin (or pipeline).
    pub(crate) name: String,
    /// `Ok`, or how its `Initialize` failed.
    pub(crate) result: Result<(), HookError>,
}

impl PluginState {
    /// The PluginLoaded False message of a failed `Initialize`; `None` when
    /// the plugin is loaded.
    pub(crate) fn failure_message(&self) -> Option<String> {
        let error = self.result.as_ref().err()?;
        Some(crate::api::conditions::plugin_failed_message(
            &self.name,
            &error.load_failure_detail(),
        ))
    }
}

/// A hook call that did not succeed: the gRPC code and message, as the
/// gateway (or the transport) answered.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{hook} failed: {}: {message}", code_name(*.code))]
pub struct HookError {
    /// The call.
    pub hook: HookKind,
    /// The gRPC status code.
    pub code: tonic::Code,
    /// The status message.
    pub message: String,
    /// Whether the gateway answered, or the call never got an answer.
    pub origin: Origin,
}

/// Where a failed hook call's status comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// An answer: the gateway's own status, a plugin's passed through, or
    /// one the controller made of an answer it cannot use.
    Answer,
    /// No answer: the client made the status because the connection could
    /// not be made or broke (the gateway cannot be reached).
    Transport,
    /// No answer either: a connection was made, but its TLS handshake
    /// failed (the message starts with [`TlsFailure::explanation`]).
    Tls(TlsFailure),
}

impl Origin {
    /// Whether the gateway answered: the status is one it sent.
    pub fn answered(self) -> bool {
        self == Origin::Answer
    }
}

impl HookError {
    /// The PluginLoaded message detail of a failed `Initialize`: the
    /// design's "unavailable plugin server endpoint" for `UNAVAILABLE` (with
    /// the gateway's reason), else the code and message.
    pub(crate) fn load_failure_detail(&self) -> String {
        use crate::api::conditions::UNAVAILABLE_ENDPOINT;
        match (self.code, self.message.is_empty()) {
            (tonic::Code::Unavailable, true) => UNAVAILABLE_ENDPOINT.to_owned(),
            (tonic::Code::Unavailable, false) => {
                format!("{UNAVAILABLE_ENDPOINT} ({})", self.message)
            }
            (code, _) => format!("{}: {}", code_name(code), self.message),
        }
    }

    /// An error of `hook` from a gRPC status. A status that carries a
    /// source error was made by the client from a transport failure; one
    /// read from the gateway's headers or trailers has none.
    ///
    /// The client's own deadline passing without an answer (tonic's
    /// `TimeoutExpired`, which tonic reports as `CANCELLED`) is
    /// `DEADLINE_EXCEEDED`: the deadline passed, and nothing was cancelled.
    pub(crate) fn from_status(hook: HookKind, status: &tonic::Status) -> HookError {
        use std::error::Error as _;
        let mut source = status.source();
        let mut timed_out = false;
        while let Some(error) = source {
            timed_out |= error.is::<tonic::TimeoutExpired>();
            source = error.source();
        }
        let tls = status.source().and_then(TlsFailure::of);
        let (code, message) = if timed_out {
            (
                tonic::Code::DeadlineExceeded,
                "the call's deadline passed without an answer from the gateway".to_owned(),
            )
        } else if let Some(failure) = tls {
            (
                status.code(),
                format!("{}: {}", failure.explanation(), status.message()),
            )
        } else {
            (status.code(), status.message().to_owned())
        };
        let origin = match (tls, status.source()) {
            (Some(failure), _) => Origin::Tls(failure),
            (None, Some(_)) => Origin::Transport,
            (None, None) => Origin::Answer,
        };
        HookError {
            hook,
            code,
            message,
            origin,
        }
    }

    /// Whether calling again with the same input gives the same error.
    pub fn persistence(&self) -> Persistence {
        Persistence::of(self.code)
    }
}

/// Whether a failed hook call can succeed when retried unchanged: the one
/// classification of gRPC codes the retry policy uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// The plugin refused the input or is not able to handle it
    /// (`INVALID_ARGUMENT`, `FAILED_PRECONDITION`, `PERMISSION_DENIED`,
    /// `UNAUTHENTICATED`, `NOT_FOUND`, `UNIMPLEMENTED`, `OUT_OF_RANGE`,
    /// `ALREADY_EXISTS`): only a change of the ManifestWorkReplicaSet, its
    /// rollout settings or the plugin helps, so it is retried with a
    /// growing backoff.
    Permanent,
    /// The call may succeed later (`UNAVAILABLE`, `DEADLINE_EXCEEDED`,
    /// `RESOURCE_EXHAUSTED`, `ABORTED`, `CANCELLED`, `INTERNAL`,
    /// `UNKNOWN`, `DATA_LOSS`): retried after the error requeue.
    Transient,
}

impl Persistence {
    /// The class of gRPC `code`.
    pub(crate) fn of(code: tonic::Code) -> Persistence {
        use tonic::Code;
        match code {
            Code::InvalidArgument
            | Code::FailedPrecondition
            | Code::PermissionDenied
            | Code::Unauthenticated
            | Code::NotFound
            | Code::Unimplemented
            | Code::OutOfRange
            | Code::AlreadyExists => Persistence::Permanent,
            Code::Ok
            | Code::Cancelled
            | Code::Unknown
            | Code::DeadlineExceeded
            | Code::ResourceExhausted
            | Code::Aborted
            | Code::Internal
            | Code::Unavailable
            | Code::DataLoss => Persistence::Transient,
        }
    }
}

/// How much rollout state a target (plugin or pipeline) asked for in its
/// `InitializeResponse.state_detail`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StateDetail {
    /// Every cluster's status in `rollout_status`, and the counts: what a
    /// plugin that declares nothing (or FULL) gets.
    #[default]
    Full,
    /// The counts only: `rollout_status` is left out.
    Counts,
}

impl StateDetail {
    /// What `response` declares; an unknown value is read as FULL (sending
    /// more than asked is safe, less is not).
    pub fn of(response: &InitializeResponse) -> StateDetail {
        match RolloutStateDetail::try_from(response.state_detail) {
            Ok(RolloutStateDetail::Counts) => StateDetail::Counts,
            _ => StateDetail::Full,
        }
    }
}

/// What `MutateManifestWork` answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mutation {
    /// The mutated ManifestWork as JSON; `None` when the answer was empty
    /// ("unchanged").
    pub work: Option<Bytes>,
    /// The `ocm-rollout-mutated-by` trailer: the plugins that changed the
    /// object, in order.
    pub mutated_by: Vec<String>,
    /// The `ocm-rollout-failed-open` trailer: plugins that failed and were
    /// skipped under `failurePolicy: Ignore`.
    pub failed_open: Vec<String>,
}

/// Who a hook call is for and where it sits in the trace.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The plugin or pipeline (`rolloutStrategy.plugin`), sent as the
    /// `ocm-rollout-plugin` metadata key.
    pub plugin: &'a str,
    /// The context whose span the call's span descends from (the reconcile
    /// span).
    pub trace: &'a opentelemetry::Context,
}

/// The plugin API as the orchestration calls it: one method, one hook call
/// ([`HookRequest`] in, [`HookAnswer`] out, of the same hook). The typed
/// calls (`initialize`, `begin_rollout`, …) are [`HookCalls`], which every
/// implementation has. Implementations count their calls
/// ([`HookCounters`]). The orchestration calls several at once (each
/// cluster's calls in order), so implementations must bear concurrent
/// calls. A decorator (metrics, the simulator's record) wraps another
/// `Hooks` and forwards this one method.
pub trait Hooks: Send + Sync {
    /// One call of `request`'s hook; its answer must be that hook's, which
    /// [`HookCalls`] checks.
    fn call(
        &self,
        call: Call<'_>,
        request: HookRequest,
    ) -> impl Future<Output = Result<HookAnswer, HookError>> + Send;
}

/// How many calls of each hook were made, answered or not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HookCounts {
    /// `Initialize` calls (not part of the simulator's `hookCalls`).
    #[serde(skip)]
    pub initialize: u64,
    /// `BeginRollout` calls.
    #[serde(rename = "BeginRollout")]
    pub begin_rollout: u64,
    /// `ProgressRollout` calls.
    #[serde(rename = "ProgressRollout")]
    pub progress_rollout: u64,
    /// `ValidateRolloutCompletion` calls.
    #[serde(rename = "ValidateRolloutCompletion")]
    pub validate_rollout_completion: u64,
    /// `MutateManifestWork` calls.
    #[serde(rename = "MutateManifestWork")]
    pub mutate_manifest_work: u64,
}

impl HookCounts {
    /// The count of `hook`.
    pub fn get(&self, hook: HookKind) -> u64 {
        match hook {
            HookKind::Initialize => self.initialize,
            HookKind::BeginRollout => self.begin_rollout,
            HookKind::ProgressRollout => self.progress_rollout,
            HookKind::ValidateRolloutCompletion => self.validate_rollout_completion,
            HookKind::MutateManifestWork => self.mutate_manifest_work,
        }
    }
}

/// Thread-safe per-hook call counters.
#[derive(Debug, Default)]
pub struct HookCounters {
    counts: [AtomicU64; 5],
}

impl HookCounters {
    fn slot(hook: HookKind) -> usize {
        match hook {
            HookKind::Initialize => 0,
            HookKind::BeginRollout => 1,
            HookKind::ProgressRollout => 2,
            HookKind::ValidateRolloutCompletion => 3,
            HookKind::MutateManifestWork => 4,
        }
    }

    /// Counts one call of `hook`.
    pub fn record(&self, hook: HookKind) {
        self.counts[Self::slot(hook)].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn snapshot(&self) -> HookCounts {
        let get = |hook| self.counts[Self::slot(hook)].load(Ordering::Relaxed);
        HookCounts {
            initialize: get(HookKind::Initialize),
            begin_rollout: get(HookKind::BeginRollout),
            progress_rollout: get(HookKind::ProgressRollout),
            validate_rollout_completion: get(HookKind::ValidateRolloutCompletion),
            mutate_manifest_work: get(HookKind::MutateManifestWork),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn counters_count_each_hook_apart() {
        let counters = HookCounters::default();
        for hook in [
            HookKind::Initialize,
            HookKind::BeginRollout,
            HookKind::BeginRollout,
            HookKind::ProgressRollout,
            HookKind::ValidateRolloutCompletion,
            HookKind::ValidateRolloutCompletion,
            HookKind::ValidateRolloutCompletion,
            HookKind::MutateManifestWork,
        ] {
            counters.record(hook);
        }
        let counts = counters.snapshot();
        assert_eq!(counts.get(HookKind::Initialize), 1);
        assert_eq!(counts.get(HookKind::ValidateRolloutCompletion), 3);
        // The simulator's `hookCalls` object: the four rollout hooks.
        assert_eq!(
            serde_json::to_value(counts).expect("serializes"),
            json!({"BeginRollout": 2, "ProgressRollout": 1,
                   "ValidateRolloutCompletion": 3, "MutateManifestWork": 1})
        );
    }

    #[test]
    fn state_detail_defaults_to_full() {
        let declared = |detail: i32| {
            StateDetail::of(&InitializeResponse {
                state_detail: detail,
                ..InitializeResponse::default()
            })
        };
        assert_eq!(
            declared(RolloutStateDetail::Unspecified as i32),
            StateDetail::Full
        );
        assert_eq!(declared(RolloutStateDetail::Full as i32), StateDetail::Full);
        assert_eq!(
            declared(RolloutStateDetail::Counts as i32),
            StateDetail::Counts
        );
        assert_eq!(declared(99), StateDetail::Full);
    }

    /// A status the gateway sent is an answer whatever its text; one the
    /// client made of a transport failure is not.
    #[test]
    fn an_error_says_whether_the_gateway_answered() {
        let answered = tonic::Status::unavailable("tcp connect error");
        let err = HookError::from_status(HookKind::Initialize, &answered);
        assert_eq!(err.origin, Origin::Answer);
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let made = tonic::Status::from_error(Box::new(refused));
        let err = HookError::from_status(HookKind::Initialize, &made);
        assert_eq!(err.origin, Origin::Transport);
    }

    #[test]
    fn errors_name_the_hook_code_and_message() {
        let status = tonic::Status::unavailable("plugin \"canary\": connection refused");
        let err = HookError::from_status(HookKind::BeginRollout, &status);
        assert_eq!(
            err.to_string(),
            "BeginRollout failed: UNAVAILABLE: plugin \"canary\": connection refused"
        );
        assert_eq!(
            code_name(tonic::Code::DeadlineExceeded),
            "DEADLINE_EXCEEDED"
        );
    }
}
