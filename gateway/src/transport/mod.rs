//! The gateway's transport: everything between the bytes on a socket and a
//! decoded gRPC call, on both sides.
//!
//! [`server`] is the HTTP/2 accept loop of the gRPC listener ([`accept`] the
//! bounded accept both listeners share); [`client`]
//! dials plugins (TCP, TLS, the HTTP/2 handshake, keepalive); [`grpc`] is
//! gRPC's wire format (message framing, status headers, `grpc-timeout`);
//! [`io`] coalesces an answer's frames into one write; [`health`] carries
//! the standard gRPC health service over the gateway's own HTTP/2 streams.

pub mod accept;
pub mod client;
pub mod grpc;
pub mod health;
pub mod io;
pub mod pending;
pub mod reclaim;
pub mod server;
