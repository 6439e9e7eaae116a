//! The gateway's errors.
//!
//! Two levels: [`CallError`] is why one call to one plugin failed, made by the
//! layers of its stack and its connection, each kind its own variant;
//! [`GatewayError`] is why a gateway call failed. Each kind's gRPC code is
//! decided here, once: [`CallError::code`], and [`GatewayError::code`] for
//! the gateway's own refusals (a failed member's code is its
//! [`CallError::code`], or the plugin's own status passed through as data).
//! The server stack's Rescue layer (`service/rescue.rs`) is the one place a
//! failure becomes a gRPC status, from the [`CallFailure`] any layer below
//! returned. Nothing reads an error's message to decide what it is.

use std::borrow::Cow;
use std::time::Duration;

use rollout_policies::breaker::{CallOutcome, Rejected, is_failure};
use rollout_policies::layer::{PolicyError, circuit_message};
use rollout_policies::merge::{Failure, MergeError};
use tonic::{Code, Status};

use crate::config::Endpoint;
use crate::hub::Hub;
pub use crate::transport::client::DialError;
pub use crate::transport::grpc::OverLimit;
use crate::transport::grpc::{FrameError, ReceiveError};
use crate::transport::pending::PendingExceeded;

/// Why a name could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("plugin \"{name}\" is not registered{}", for_hub(hub))]
    NotFound { name: String, hub: Option<Hub> },
    /// The caller's hub may not call `plugin` (the target or a member of it).
    #[error("{}", denied_message(name, plugin, hub))]
    PermissionDenied {
        name: String,
        plugin: String,
        hub: Option<Hub>,
    },
}

/// ` for hub "HUB"`, when the caller's hub is known.
fn for_hub(hub: &Option<Hub>) -> String {
    match hub {
        Some(h) => format!(" for hub \"{h}\""),
        None => String::new(),
    }
}

/// [`ResolveError::PermissionDenied`]'s message: the plugin named, or the
/// pipeline and its member.
fn denied_message(name: &str, plugin: &str, hub: &Option<Hub>) -> String {
    if name == plugin {
        format!("plugin \"{name}\" may not be called{}", for_hub(hub))
    } else {
        format!(
            "pipeline \"{name}\" uses plugin \"{plugin}\", which may not be called{}",
            for_hub(hub)
        )
    }
}

/// Whose deadline bounded a call to a plugin: the sooner of the caller's
/// (`grpc-timeout`) and the plugin's own `timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadlineOwner {
    /// The caller's deadline came first: its passing says nothing of the
    /// plugin's health.
    Caller,
    /// The plugin's own `timeout` came first: the plugin took longer than its
    /// registry entry allows, which counts against it.
    Plugin,
}

/// Why one call to one plugin failed.
///
/// What each kind means for the plugin's circuit breaker and for retries is
/// [`PolicyError`]'s implementation below; the gRPC code it carries to the
/// caller is [`CallError::code`].
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The plugin's own non-OK status (a trailers-only answer or the
    /// trailers), or the HTTP status its server answered with. Only this kind
    /// with UNIMPLEMENTED means "the plugin does not implement this hook".
    #[error("{}", .0.message())]
    Plugin(Status),
    /// Refused by the plugin's open circuit; the plugin was not called.
    #[error("{}", circuit_message(plugin, *rejected))]
    CircuitOpen { plugin: String, rejected: Rejected },
    /// Refused by the plugin's concurrency bound; the plugin was not called.
    #[error("too many calls in flight (limit {max})")]
    Overloaded { max: usize },
    /// The deadline had passed before the plugin was called.
    #[error("deadline exceeded before the call")]
    DeadlineBeforeCall,
    /// The time given passed: no answer came in time, or the plugin said
    /// DEADLINE_EXCEEDED or CANCELLED (it gave up on the `grpc-timeout` it
    /// was sent). `owner` says whose deadline it was.
    #[error("{message}")]
    Expired {
        owner: DeadlineOwner,
        message: String,
    },
    /// The plugin could not be reached, or the connection failed during the
    /// call (refused, TLS verification, reset…).
    #[error("{0}")]
    Unreachable(#[source] Unreachable),
    /// The plugin's answer could not be read: a message the gateway cannot
    /// decode (bad compression flag, unknown `grpc-encoding`, bad protobuf,
    /// several messages on a unary call, OK without a message, no status).
    #[error("undecodable answer: {0}")]
    Undecodable(String),
    /// The plugin's answer decodes but breaks the contract: another
    /// message type than the hook's, or a ManifestWork that may not be
    /// applied (renamed, moved, its executor changed…). The plugin's fault.
    #[error("{0}")]
    BadAnswer(String),
    /// The gateway could not finish checking an answer (its checking task
    /// failed). Fails the call closed; not the plugin's fault.
    #[error("{0}")]
    Unchecked(String),
    /// The plugin's answer is over the gateway's message limit.
    #[error("answer too large: {0}")]
    TooLarge(#[source] OverLimit),
    /// The plugin's answer is over the message limit, and the request was
    /// already within [`CALLER_HEADROOM_BYTES`] of it: the caller's own
    /// message left the plugin no room (a work near the limit that a plugin
    /// annotates). The caller's fault: never counted against the plugin.
    #[error(
        "answer too large: {0}; the request itself was within {CALLER_HEADROOM_BYTES} bytes of the message limit (--max-message-bytes): send a smaller one"
    )]
    CallerTooLarge(#[source] OverLimit),
    /// Holding the plugin's answer for the caller would go over a
    /// pending-bytes pool (the caller's connection's or the gateway's): the
    /// calls of the caller hold too many bytes already. Not the plugin's
    /// fault: never counted against it, never retried.
    #[error("{0}")]
    PendingBytes(PendingExceeded),
    /// The plugin is not loaded: its Initialize answered, and the answer
    /// says the server is no rollout plugin (UNIMPLEMENTED, or a declaration
    /// naming a value that is not a hook). Never a skip.
    #[error("not loaded: {0}")]
    NotAPlugin(String),
}

/// Why a plugin could not be reached, or its connection failed during a
/// call; each names the plugin's endpoint.
#[derive(Debug, thiserror::Error)]
pub enum Unreachable {
    /// The dial failed: TCP, TLS or the HTTP/2 handshake.
    #[error(transparent)]
    Dial(#[from] DialError),
    /// No connection within the plugin's connect timeout.
    #[error("connecting to {endpoint} timed out")]
    DialTimeout { endpoint: Endpoint },
    /// The plugin's last connections each ended without it answering a
    /// stream, and the wait before the next dial outlasts the call's
    /// deadline.
    #[error(
        "{endpoint} ended {in_a_row} connection(s) in a row without answering a stream; the next dial waits {} ms",
        .wait.as_millis()
    )]
    NotAnswering {
        endpoint: Endpoint,
        in_a_row: u32,
        wait: Duration,
    },
    /// The plugin reset the stream with REFUSED_STREAM each time it was
    /// sent, at most `max_resends` times again, each from its retry budget.
    #[error(
        "{endpoint} refused the stream (REFUSED_STREAM) {times} times; not sent again (at most {max_resends} times, each from the retry budget)"
    )]
    StreamRefused {
        endpoint: Endpoint,
        times: u32,
        max_resends: u32,
        #[source]
        source: h2::Error,
    },
    /// The plugin went away without processing the stream each time it was
    /// sent (its connections' GOAWAY), as often as a stream is sent again,
    /// or while it answered nothing on its last connections.
    #[error("request to {endpoint} refused {times} times: {source}")]
    Unprocessed {
        endpoint: Endpoint,
        times: u32,
        #[source]
        source: h2::Error,
    },
    /// The stream failed once the request was sent.
    #[error("request to {endpoint} failed: {source}")]
    Request {
        endpoint: Endpoint,
        #[source]
        source: h2::Error,
    },
    /// The stream failed while the answer arrived.
    #[error("reading the {part} from {endpoint}: {source}")]
    Reading {
        endpoint: Endpoint,
        part: &'static str,
        #[source]
        source: h2::Error,
    },
}

impl CallError {
    /// The gRPC code the caller sees for this failure: the one place it is
    /// decided.
    pub fn code(&self) -> Code {
        match self {
            CallError::Plugin(status) => status.code(),
            CallError::CircuitOpen { .. } | CallError::Unreachable(_) => Code::Unavailable,
            CallError::Overloaded { .. }
            | CallError::TooLarge(_)
            | CallError::CallerTooLarge(_)
            | CallError::PendingBytes(_) => Code::ResourceExhausted,
            CallError::DeadlineBeforeCall | CallError::Expired { .. } => Code::DeadlineExceeded,
            CallError::Undecodable(_) | CallError::BadAnswer(_) | CallError::Unchecked(_) => {
                Code::Internal
            }
            CallError::NotAPlugin(_) => Code::FailedPrecondition,
        }
    }

    /// Whether this is the plugin's own answer that it does not implement the
    /// hook (and so is skipped, not failed).
    pub(crate) fn is_unimplemented(&self) -> bool {
        matches!(self, CallError::Plugin(status) if status.code() == Code::Unimplemented)
    }

    /// Whether the plugin's open circuit refused the call.
    pub(crate) fn is_circuit_open(&self) -> bool {
        matches!(self, CallError::CircuitOpen { .. })
    }

    /// The failure of one member, as the merge rules take it. The message is
    /// not cut here: the Rescue layer cuts the whole once, so the
    /// `[N bytes cut]` count is the bytes the caller did not get. (A
    /// plugin's own message is at most its header block, 64 KiB.)
    pub(crate) fn failure(&self) -> Failure {
        Failure {
            code: self.code(),
            message: self.to_string(),
        }
    }
}

/// Which failures count against a plugin (its circuit breaker) and which may
/// be retried. A failure counts when the plugin failed within the time the
/// gateway gave it under its own timeout: its own failing statuses
/// (UNAVAILABLE, INTERNAL, UNKNOWN, DEADLINE_EXCEEDED — see
/// [`is_failure`]), its own timeout passing, an answer the gateway cannot read
/// or that is too large, a connection that fails. The caller's deadline
/// passing, a deadline already passed before the call, and the gateway's own
/// refusals say nothing of the plugin and do not count.
impl PolicyError for CallError {
    fn circuit_open(plugin: &str, rejected: Rejected) -> Self {
        CallError::CircuitOpen {
            plugin: plugin.to_string(),
            rejected,
        }
    }

    fn overloaded(max: usize) -> Self {
        CallError::Overloaded { max }
    }

    fn retry_code(&self) -> Option<Code> {
        match self {
            CallError::CircuitOpen { .. }
            | CallError::Overloaded { .. }
            | CallError::DeadlineBeforeCall
            | CallError::CallerTooLarge(_)
            | CallError::PendingBytes(_) => None,
            other => Some(other.code()),
        }
    }

    fn deadline_before_call(&self) -> bool {
        matches!(self, CallError::DeadlineBeforeCall)
    }

    fn outcome(&self) -> CallOutcome {
        match self {
            CallError::Plugin(status) if is_failure(status.code()) => CallOutcome::Failure,
            CallError::Plugin(_) => CallOutcome::Neutral,
            CallError::Expired {
                owner: DeadlineOwner::Plugin,
                ..
            }
            | CallError::Unreachable(_)
            | CallError::Undecodable(_)
            | CallError::BadAnswer(_)
            | CallError::TooLarge(_)
            | CallError::NotAPlugin(_) => CallOutcome::Failure,
            CallError::Expired {
                owner: DeadlineOwner::Caller,
                ..
            }
            | CallError::CircuitOpen { .. }
            | CallError::Overloaded { .. }
            | CallError::DeadlineBeforeCall
            | CallError::CallerTooLarge(_)
            | CallError::Unchecked(_)
            | CallError::PendingBytes(_) => CallOutcome::Neutral,
        }
    }
}

/// How much a plugin's answer may add to its request: an answer over the
/// message limit for a request within this much of it is the caller's fault.
pub(crate) const CALLER_HEADROOM_BYTES: usize = 64 * 1024;

/// The most bytes of a message the gateway forwards: gRPC clients refuse
/// metadata over 16 KiB, and a status message travels as percent-encoded
/// `grpc-message` (up to three bytes per byte), so a longer message would cost
/// the caller the status itself.
pub(crate) const MAX_MESSAGE_BYTES: usize = 4 * 1024;

/// `message`, cut to at most [`MAX_MESSAGE_BYTES`] on a character boundary
/// and marked as cut (`… [N bytes cut]`), the mark included in the bound.
pub(crate) fn bounded(message: &str) -> Cow<'_, str> {
    rollout_wire::cut_to(message, MAX_MESSAGE_BYTES)
}

/// Why a gateway call failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GatewayError {
    #[error("missing metadata key \"ocm-rollout-plugin\": name the plugin or pipeline to call")]
    MissingTarget,
    #[error("metadata key \"ocm-rollout-plugin\" is not a valid name: {0}")]
    InvalidTarget(String),
    #[error("no plugin registry is loaded yet")]
    NotReady,
    #[error(transparent)]
    Resolve(#[from] ResolveError),
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
    /// Holding the request's bytes, or a plugin's answer to it, would go
    /// over a pending-bytes limit.
    #[error("{0}")]
    PendingBytes(PendingExceeded),
    /// The request's message is malformed, too large or undecodable, or its
    /// stream failed while it arrived.
    #[error("{0}")]
    Request(FrameError),
    #[error("the request stream failed: {0}")]
    RequestStream(h2::Error),
    /// A request header is malformed or repeated.
    #[error("metadata key \"{name}\" {why}")]
    Header {
        name: &'static str,
        why: &'static str,
    },
    #[error("unknown method {0}")]
    UnknownMethod(String),
}

impl From<ReceiveError> for GatewayError {
    fn from(e: ReceiveError) -> Self {
        match e {
            ReceiveError::Frame(e) => GatewayError::Request(e),
            ReceiveError::Stream { source, .. } => GatewayError::RequestStream(source),
            ReceiveError::Held(e) => GatewayError::PendingBytes(e),
        }
    }
}

impl From<FrameError> for GatewayError {
    fn from(e: FrameError) -> Self {
        GatewayError::Request(e)
    }
}

fn receive_timeout_message(waited: std::time::Duration, by_caller: bool) -> String {
    let ms = waited.as_millis();
    if by_caller {
        format!("the request had not arrived whole when the caller's deadline passed ({ms} ms)")
    } else {
        format!("the request had not arrived whole after {ms} ms (--request-receive-timeout)")
    }
}

impl From<MergeError> for GatewayError {
    fn from(e: MergeError) -> Self {
        GatewayError::Members(e)
    }
}

impl GatewayError {
    /// The gRPC code of the error (docs/plugin-api.md §2).
    pub(crate) fn code(&self) -> Code {
        match self {
            GatewayError::MissingTarget
            | GatewayError::InvalidTarget(_)
            | GatewayError::InvalidRequest(_)
            | GatewayError::Header { .. } => Code::InvalidArgument,
            GatewayError::UnknownMethod(_) => Code::Unimplemented,
            // The caller's own bytes: never a failure of the gateway's.
            GatewayError::Request(e) => match e {
                FrameError::TooLarge { .. } => Code::ResourceExhausted,
                FrameError::Compressed | FrameError::SeveralMessages => Code::Unimplemented,
                FrameError::TruncatedPrefix
                | FrameError::InvalidFlag(_)
                | FrameError::LengthMismatch { .. }
                | FrameError::Decode(_) => Code::InvalidArgument,
            },
            GatewayError::RequestStream(_) => Code::Cancelled,
            GatewayError::NotReady => Code::Unavailable,
            GatewayError::ReceiveTimeout { .. } => Code::DeadlineExceeded,
            GatewayError::PendingBytes(_) => Code::ResourceExhausted,
            GatewayError::Resolve(ResolveError::NotFound { .. }) => Code::NotFound,
            GatewayError::Resolve(ResolveError::PermissionDenied { .. }) => Code::PermissionDenied,
            GatewayError::Members(m) => m.code(),
        }
    }

    /// A single plugin's failure, as the merge rules would report it.
    pub(crate) fn plugin(name: &str, failure: Failure) -> GatewayError {
        GatewayError::Members(MergeError {
            failures: vec![(name.to_string(), failure)],
        })
    }
}

/// A gateway call that failed, and the members that had failed open
/// before it (`ocm-rollout-failed-open`).
#[derive(Debug)]
pub(crate) struct CallFailure {
    pub(crate) error: GatewayError,
    pub(crate) failed_open: Vec<String>,
}

impl From<GatewayError> for CallFailure {
    fn from(error: GatewayError) -> Self {
        CallFailure {
            error,
            failed_open: Vec::new(),
        }
    }
}

impl From<ReceiveError> for CallFailure {
    fn from(e: ReceiveError) -> Self {
        GatewayError::from(e).into()
    }
}

impl From<FrameError> for CallFailure {
    fn from(e: FrameError) -> Self {
        GatewayError::from(e).into()
    }
}

impl CallFailure {
    /// The gRPC code the caller gets.
    pub(crate) fn code(&self) -> Code {
        self.error.code()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_on_a_character_boundary_and_marked() {
        assert_eq!(bounded("short"), "short");
        let exact = "x".repeat(MAX_MESSAGE_BYTES);
        assert_eq!(bounded(&exact), exact.as_str());
        // Three-byte characters: the cut must not split one.
        let long = "€".repeat(20_000);
        let cut = bounded(&long);
        assert!(cut.len() <= MAX_MESSAGE_BYTES, "{}", cut.len());
        assert!(cut.ends_with(" bytes cut]"), "{cut}");
        let kept = cut.split('…').next().unwrap_or_default();
        assert!(kept.chars().all(|c| c == '€'));
        assert_eq!(
            cut.as_ref(),
            format!("{kept}… [{} bytes cut]", long.len() - kept.len())
        );
    }

    #[test]
    fn only_the_plugins_own_failures_count_against_it() {
        let expired = |owner| CallError::Expired {
            owner,
            message: "no answer within 200 ms".into(),
        };
        let cases = [
            (expired(DeadlineOwner::Caller), CallOutcome::Neutral),
            (expired(DeadlineOwner::Plugin), CallOutcome::Failure),
            (CallError::DeadlineBeforeCall, CallOutcome::Neutral),
            (CallError::Overloaded { max: 1 }, CallOutcome::Neutral),
            (CallError::Unreachable(refused()), CallOutcome::Failure),
            (
                CallError::Undecodable("flag 1".into()),
                CallOutcome::Failure,
            ),
            (CallError::TooLarge(big()), CallOutcome::Failure),
            (CallError::CallerTooLarge(big()), CallOutcome::Neutral),
            (
                CallError::NotAPlugin("UNIMPLEMENTED".into()),
                CallOutcome::Failure,
            ),
            (CallError::PendingBytes(exceeded()), CallOutcome::Neutral),
            (CallError::BadAnswer("renamed".into()), CallOutcome::Failure),
            (
                CallError::Unchecked("panicked".into()),
                CallOutcome::Neutral,
            ),
            (
                CallError::Plugin(Status::unavailable("down")),
                CallOutcome::Failure,
            ),
            (
                CallError::Plugin(Status::failed_precondition("no")),
                CallOutcome::Neutral,
            ),
        ];
        for (error, outcome) in cases {
            assert_eq!(error.outcome(), outcome, "{error:?}");
        }
        assert!(CallError::Plugin(Status::unimplemented("no")).is_unimplemented());
        // The gateway's own UNIMPLEMENTED-looking failures are not a skip.
        assert!(!CallError::Undecodable("compressed".into()).is_unimplemented());
        assert_eq!(CallError::DeadlineBeforeCall.retry_code(), None);
        // The caller's calls holding too much is never retried.
        assert_eq!(CallError::PendingBytes(exceeded()).retry_code(), None);
        assert_eq!(
            CallError::PendingBytes(exceeded()).code(),
            Code::ResourceExhausted
        );
        // An answer that breaks the contract, or one the gateway could not
        // check, fails the call closed.
        assert_eq!(
            CallError::BadAnswer("renamed".into()).code(),
            Code::Internal
        );
        assert_eq!(
            CallError::Unchecked("panicked".into()).code(),
            Code::Internal
        );
    }

    fn refused() -> Unreachable {
        Unreachable::Dial(DialError::Connect {
            endpoint: "127.0.0.1:1".into(),
            source: std::io::ErrorKind::ConnectionRefused.into(),
        })
    }

    fn big() -> OverLimit {
        OverLimit::Declared {
            len: 2_000,
            limit: 1_000,
        }
    }

    /// The causes the gateway holds typed still say, on the wire, what
    /// failed and where.
    #[test]
    fn typed_causes_keep_their_messages_and_sources() {
        use std::error::Error as _;
        let unreachable = CallError::Unreachable(refused());
        assert_eq!(
            unreachable.to_string(),
            "cannot connect to 127.0.0.1:1: connection refused"
        );
        assert_eq!(unreachable.code(), Code::Unavailable);
        assert!(
            unreachable.source().is_some_and(|s| s.is::<Unreachable>()),
            "{unreachable:?}"
        );
        let too_large = CallError::TooLarge(big());
        assert_eq!(
            too_large.to_string(),
            "answer too large: message of 2000 bytes is larger than the limit of 1000 bytes"
        );
        assert!(too_large.source().is_some_and(|s| s.is::<OverLimit>()));
        let callers = CallError::CallerTooLarge(OverLimit::Inflated { limit: 1_000 });
        assert!(
            callers.to_string().starts_with(
                "answer too large: message larger than the limit of 1000 bytes once decompressed; the request itself"
            ),
            "{callers}"
        );
        assert_eq!(callers.code(), Code::ResourceExhausted);
        let not_answering = Unreachable::NotAnswering {
            endpoint: Endpoint {
                host: "::1".into(),
                port: 9,
            },
            in_a_row: 2,
            wait: Duration::from_millis(200),
        };
        assert_eq!(
            not_answering.to_string(),
            "[::1]:9 ended 2 connection(s) in a row without answering a stream; the next dial waits 200 ms"
        );
    }

    fn exceeded() -> PendingExceeded {
        PendingExceeded {
            scope: crate::transport::pending::Scope::Connection,
            limit: 10,
            used: 8,
            wanted: 4,
        }
    }
}
