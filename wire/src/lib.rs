//! gRPC's wire format over HTTP/2, as the rollout gateway and the plugin
//! checker both speak it, so that they read a plugin's answer by the same
//! rules. A leaf: it imports no crate of the project, its errors are its own
//! typed errors, and a status a peer sent is data ([`GrpcStatus`]), never a
//! `tonic::Status`.
//!
//! - [`frame`]: the 5-byte message prefix (compression flag, length within
//!   a limit), a unary body as exactly one message, and a body read from an
//!   HTTP/2 stream within the limit ([`collect`], [`collect_held`]).
//! - [`status`]: `grpc-status` and its percent-encoded `grpc-message`, the
//!   gRPC header names, and the code an HTTP answer without a status stands
//!   for.
//! - [`code`]: the code-name table, both ways.
//! - [`timeout`]: `grpc-timeout`, both ways.
//! - [`tls`]: the client TLS configuration for calling plugins.

pub mod code;
pub mod frame;
pub mod status;
pub mod timeout;
pub mod tls;

pub use code::{code_from_name, code_name};
pub use frame::{
    FrameError, PREFIX_LEN, ReceiveError, collect, collect_held, frame_len, message, message_len,
    prefix,
};
pub use status::{
    CONTENT_TYPE, GRPC_ACCEPT_ENCODING, GRPC_ENCODING, GRPC_MESSAGE, GRPC_STATUS, GRPC_TIMEOUT,
    GrpcStatus, code_for_http, percent_decode, percent_encode, put_status, status_from_headers,
};
pub use timeout::{encode_timeout, parse_timeout};
pub use tls::{ClientTlsError, TlsPart, client_config};
