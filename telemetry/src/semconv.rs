//! OpenTelemetry's semantic conventions for RPC spans, as far as the
//! project's spans follow them (docs/observability.md, "Semantic
//! conventions"): the remote side of a client span (`server.address`,
//! `server.port`, `peer.service`), and which gRPC codes make a server span
//! an error.
//!
//! The conventions' gRPC page: a client span is an error for every code but
//! OK; a server span only for the codes that say the server failed
//! (`UNKNOWN`, `DEADLINE_EXCEEDED`, `UNIMPLEMENTED`, `INTERNAL`,
//! `UNAVAILABLE`, `DATA_LOSS`): the others are the caller's to judge, and
//! leave the server span's status unset.

use opentelemetry::KeyValue;

/// The attribute naming the logical remote service of a client span.
pub const PEER_SERVICE: &str = "peer.service";

/// The attribute holding the host a client span called.
pub const SERVER_ADDRESS: &str = "server.address";

/// The attribute holding the port a client span called.
pub const SERVER_PORT: &str = "server.port";

/// Appends the remote side of a client span: `peer.service` (the callee's
/// own `service.name` where it follows the project's defaults), and
/// `server.address` and `server.port` of `address` (`host:port`, or a URL
/// `scheme://host:port/…`; an IPv6 host in brackets). An address without a
/// port adds only `server.address`.
pub fn peer_attributes(attributes: &mut Vec<KeyValue>, peer_service: &str, address: &str) {
    attributes.push(KeyValue::new(PEER_SERVICE, peer_service.to_owned()));
    let (host, port) = host_port(address);
    attributes.push(KeyValue::new(SERVER_ADDRESS, host.to_owned()));
    if let Some(port) = port {
        attributes.push(KeyValue::new(SERVER_PORT, i64::from(port)));
    }
}

/// The host and port of `address`: `host:port`, `[v6]:port` or a URL.
pub fn host_port(address: &str) -> (&str, Option<u16>) {
    let rest = address.split_once("://").map_or(address, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    if let Some(bracketed) = authority.strip_prefix('[')
        && let Some((host, after)) = bracketed.split_once(']')
    {
        let port = after.strip_prefix(':').and_then(|p| p.parse().ok());
        return (host, port);
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => match port.parse() {
            Ok(port) => (host, Some(port)),
            Err(_) => (authority, None),
        },
        _ => (authority, None),
    }
}

/// Whether `code` makes a gRPC server span an error, as the conventions
/// say: only the codes that say the server failed.
pub fn is_server_error(code: tonic::Code) -> bool {
    use tonic::Code;
    matches!(
        code,
        Code::Unknown
            | Code::DeadlineExceeded
            | Code::Unimplemented
            | Code::Internal
            | Code::Unavailable
            | Code::DataLoss
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_and_port_of_an_address_or_a_url() {
        for (address, host, port) in [
            ("127.0.0.1:7001", "127.0.0.1", Some(7001)),
            ("smoke.plugins:10843", "smoke.plugins", Some(10843)),
            ("http://127.0.0.1:10843", "127.0.0.1", Some(10843)),
            ("https://gateway.ocm:443/", "gateway.ocm", Some(443)),
            ("[::1]:9000", "::1", Some(9000)),
            ("http://[fd00::7]:80/x", "fd00::7", Some(80)),
            ("gateway", "gateway", None),
            ("host:notaport", "host:notaport", None),
        ] {
            assert_eq!(host_port(address), (host, port), "{address}");
        }
    }

    #[test]
    fn a_client_span_names_its_peer() {
        let mut attributes = Vec::new();
        peer_attributes(&mut attributes, "rollout-gateway", "http://127.0.0.1:10843");
        let text: Vec<String> = attributes
            .iter()
            .map(|kv| format!("{}={}", kv.key, kv.value))
            .collect();
        assert_eq!(
            text,
            [
                "peer.service=rollout-gateway",
                "server.address=127.0.0.1",
                "server.port=10843"
            ]
        );
    }

    #[test]
    fn only_the_servers_own_failures_make_a_server_span_an_error() {
        use tonic::Code;
        let errors: Vec<Code> = (0..=16)
            .map(Code::from_i32)
            .filter(|c| is_server_error(*c))
            .collect();
        assert_eq!(
            errors,
            [
                Code::Unknown,
                Code::DeadlineExceeded,
                Code::Unimplemented,
                Code::Internal,
                Code::Unavailable,
                Code::DataLoss
            ]
        );
    }
}
