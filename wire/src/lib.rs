//! gRPC's wire format over HTTP/2, as the rollout gateway and the plugin
//! checker both speak it, so that they read a plugin's answer by the same
//! rules. A leaf: it imports no crate of the project, its errors are its own
//! typed errors, and a status a peer sent is data ([`GrpcStatus`]), never a
//! `tonic::Status`.
//!
//! # Entry points
//!
//! The modules are private; everything a caller uses is re-exported here:
//!
//! - framing: [`prefix`] writes the 5-byte message prefix, [`frame_len`]
//!   and [`message_len`] read one within a limit, [`message`] takes a unary
//!   body as exactly one message, and [`collect`] and [`collect_held`] read
//!   a body from an HTTP/2 stream within the limit; failures are
//!   [`FrameError`] and [`ReceiveError`];
//! - status: [`status_from_headers`] reads `grpc-status` and its
//!   percent-encoded `grpc-message` into a [`GrpcStatus`] and
//!   [`check_answer_headers`] an answer's `content-type` and
//!   `grpc-encoding`, each refusing ([`AnswerError`]) what gRPC
//!   implementations could read differently ([`single`]: a header sent
//!   once); [`put_status`]
//!   writes them ([`percent_encode`], [`percent_decode`]), the header names
//!   ([`GRPC_STATUS`] and the others), and [`code_for_http`], the code an
//!   HTTP answer without a status stands for;
//! - codes: [`code_name`] and [`code_from_name`], the code-name table both
//!   ways;
//! - deadlines: [`encode_timeout`] and [`parse_timeout`] for
//!   `grpc-timeout`;
//! - TLS: [`client_config`], the client configuration for calling plugins
//!   ([`ClientTlsError`] names the [`TlsPart`] that could not be used);
//! - showing a peer's text: [`escaped`], the one escaping of control and
//!   reordering characters used wherever the gateway, the controller and
//!   the checkers print text that did not come from the project (plugin
//!   messages, statuses, conditions, Event notes, registry values, text
//!   log fields), and [`cut_to`], the one cut of a long text to a bound,
//!   marked with the bytes it left out.

#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
    )
)]
// A `pub` item must be reachable from the crate root; anything else is
// `pub(crate)`.
#![warn(unreachable_pub)]

mod code;
mod escape;
mod frame;
mod status;
mod timeout;
mod tls;

pub use code::{code_from_name, code_name};
pub use escape::{cut_to, escaped};
pub use frame::{
    FrameError, PREFIX_LEN, ReceiveError, collect, collect_held, frame_len, message, message_len,
    prefix,
};
pub use status::{
    AnswerError, CONTENT_TYPE, GRPC_ACCEPT_ENCODING, GRPC_ENCODING, GRPC_MESSAGE, GRPC_STATUS,
    GRPC_TIMEOUT, GrpcStatus, check_answer_headers, code_for_http, percent_decode, percent_encode,
    put_status, single, status_from_headers,
};
pub use timeout::{encode_timeout, parse_timeout};
pub use tls::{ClientTlsError, TlsPart, client_config};
