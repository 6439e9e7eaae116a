//! The gateway's transport: everything between the bytes on a socket and a
//! gRPC message, on both sides. The bottom layer of the crate: it imports
//! nothing else from it, and its errors are its own typed errors (never a
//! gRPC status, which only the gateway's rescue layer makes).
//!
//! [`server`] is the HTTP/2 accept loop of the gRPC listener, generic over
//! the service it drives ([`accept`] the bounded accept both listeners
//! share, [`admission`] the places of connections still in their
//! handshakes), and [`send`] sends each answer within bounds; [`client`] dials
//! plugins (TCP, TLS, the HTTP/2 handshake, keepalive); [`grpc`] is gRPC's
//! wire format (message framing, status headers, `grpc-timeout`: the parts
//! the plugin checker shares come from the `rollout_wire` crate); [`io`]
//! coalesces an answer's frames into one write; [`pending`] bounds the
//! bytes held for peers; [`reclaim`] returns freed memory to the OS.

pub(crate) mod accept;
pub(crate) mod admission;
pub(crate) mod client;
pub mod grpc;
pub(crate) mod io;
pub mod pending;
pub(crate) mod reclaim;
pub(crate) mod send;
pub(crate) mod server;
