//! The parsers of the registry's leaves: durations, status codes,
//! endpoints, host names, CA bundles, and the nearest known field to a
//! misspelled key.

use base64::Engine as _;
use rollout_proto::duration::{self, DurationError, Rules};
use schemars::JsonSchema;
use std::time::Duration;
use tonic::Code;

use super::Endpoint;

/// The path of `name` inside the block at `at` (the file's top: `name`).
pub(super) fn field(at: &str, name: &str) -> String {
    if at.is_empty() {
        name.to_string()
    } else {
        format!("{at}.{name}")
    }
}

/// Parses a registry duration: Go's syntax (`500ms`, `10s`, `2m`, `1h30m`,
/// `1.5s`; units ns, us (µs), ms, s, m, h; a bare `0`), with no sign and at
/// most 10^9 s, blanks around it ignored ([`Rules::Registry`]).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    duration::parse_duration(text, Rules::Registry)
}

/// Formats a duration the way the config spells it (`500ms`, `10s`, `2m`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(60_000) && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// Parses a gRPC status code name (`UNAVAILABLE`, case-insensitive) or number.
pub fn parse_code(text: &str) -> Option<Code> {
    if let Ok(n) = text.parse::<i32>() {
        return (0..=16).contains(&n).then(|| Code::from_i32(n));
    }
    rollout_wire::code_from_name(text)
}

/// `host:port`, `[v6]:port`. No scheme: the transport comes from
/// `caCertificate` / `insecure`.
pub fn parse_endpoint(text: &str) -> Result<Endpoint, EndpointError> {
    if text.contains("://") {
        return Err(EndpointError::Scheme);
    }
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (h, p) = rest
            .split_once("]:")
            .ok_or(EndpointError::NotBracketedPort)?;
        if h.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(EndpointError::Ipv6(h.to_string()));
        }
        (h, p)
    } else {
        let (h, p) = text.rsplit_once(':').ok_or(EndpointError::NotHostPort)?;
        if h.contains(':') {
            return Err(EndpointError::UnbracketedIpv6);
        }
        check_host_name(h)?;
        (h, p)
    };
    let port: u16 = port.parse().map_err(|_| EndpointError::Port)?;
    if port == 0 {
        return Err(EndpointError::PortZero);
    }
    Ok(Endpoint {
        host: host.to_string(),
        port,
    })
}

/// Why an `endpoint` is not `host:port`; each reads after the endpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("must be host:port without a scheme (TLS is chosen by caCertificate or insecure)")]
    Scheme,
    #[error("is not [ipv6]:port")]
    NotBracketedPort,
    #[error("has an invalid IPv6 address {0:?}")]
    Ipv6(String),
    #[error("is not host:port")]
    NotHostPort,
    #[error("has an IPv6 address without brackets: write [address]:port")]
    UnbracketedIpv6,
    #[error("has an invalid port")]
    Port,
    #[error("has port 0")]
    PortZero,
    #[error("has no host")]
    NoHost,
    #[error(
        "has an invalid host {host:?}: {c:?} is not allowed (letters, digits, '-', '_' and '.')"
    )]
    HostCharacter { host: String, c: char },
    #[error("has a host of {0} characters (at most 253)")]
    HostLength(usize),
    #[error("has an invalid host {0:?}: an empty label")]
    EmptyLabel(String),
    #[error("has an invalid host: the label {0:?} is over 63 characters")]
    LabelLength(String),
    #[error("has an invalid host {host:?}: the label {label:?} starts or ends with '-'")]
    LabelDash { host: String, label: String },
    #[error(
        "has an invalid host {0:?}: neither an IPv4 address nor a DNS name (whose last label is not a number)"
    )]
    NumericName(String),
}

/// A DNS name or an IPv4 address, as a connection's authority and a TLS
/// server name both accept it: labels of ASCII letters, digits, `-` and `_`,
/// separated by single dots (one trailing dot allowed), at most 63 characters
/// a label and 253 in all.
pub(super) fn check_host_name(host: &str) -> Result<(), EndpointError> {
    if host.is_empty() {
        return Err(EndpointError::NoHost);
    }
    if let Some(c) = host
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(EndpointError::HostCharacter {
            host: host.to_string(),
            c,
        });
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    if name.len() > 253 {
        return Err(EndpointError::HostLength(host.len()));
    }
    let mut last = name;
    for label in name.split('.') {
        if label.is_empty() {
            return Err(EndpointError::EmptyLabel(host.to_string()));
        }
        if label.len() > 63 {
            return Err(EndpointError::LabelLength(label.to_string()));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(EndpointError::LabelDash {
                host: host.to_string(),
                label: label.to_string(),
            });
        }
        last = label;
    }
    // A name ending in a number is read as an IPv4 address, or not at all.
    if last.bytes().all(|b| b.is_ascii_digit()) && host.parse::<std::net::Ipv4Addr>().is_err() {
        return Err(EndpointError::NumericName(host.to_string()));
    }
    Ok(())
}

/// The fields `T` takes, read from its JSON schema: the type itself is the
/// one list of its fields.
pub(super) fn known_fields<T: JsonSchema>() -> Vec<String> {
    let schema = schemars::schema_for!(T);
    schema
        .get("properties")
        .and_then(serde_json::Value::as_object)
        .map(|fields| fields.keys().cloned().collect())
        .unwrap_or_default()
}

/// The field of `known` that `key` most likely misspells, if one is near
/// enough (the measure clap suggests flags by).
pub(super) fn nearest_field<'a>(key: &str, known: &'a [String]) -> Option<&'a str> {
    let key = key.to_ascii_lowercase();
    known
        .iter()
        .map(|field| {
            let score = strsim::jaro(&key, &field.to_ascii_lowercase());
            (score, field.as_str())
        })
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, field)| field)
}

/// Decodes the design's `caBundle` (base64 of a PEM bundle) and checks that it
/// holds at least one certificate.
pub(super) fn decode_ca_bundle(b64: &str) -> Result<Vec<u8>, CaBundleError> {
    if b64.trim().is_empty() {
        return Err(CaBundleError::Missing);
    }
    let cleaned: String = b64.chars().filter(|c| !c.is_whitespace()).collect();
    let pem = base64::engine::general_purpose::STANDARD
        .decode(cleaned.as_bytes())
        .map_err(CaBundleError::Base64)?;
    if !holds_pem_certificate(&pem) {
        return Err(CaBundleError::NoCertificate);
    }
    Ok(pem)
}

/// Why a `caBundle` is unusable.
#[derive(Debug, thiserror::Error)]
pub(super) enum CaBundleError {
    #[error("is required")]
    Missing,
    #[error("{}", base64_problem(.0))]
    Base64(#[source] base64::DecodeError),
    #[error("does not decode to a PEM bundle holding a CERTIFICATE")]
    NoCertificate,
}

/// What is wrong with a `caBundle` that does not decode, in its user's terms.
pub(super) fn base64_problem(error: &base64::DecodeError) -> String {
    use base64::DecodeError as E;
    let what = match error {
        E::InvalidByte(offset, byte) => format!(
            "has {:?} at character {}, which base64 does not use",
            char::from(*byte),
            offset + 1
        ),
        E::InvalidLength(length) => {
            format!(
                "is {length} characters long after removing whitespace, which is not a whole base64 text"
            )
        }
        E::InvalidLastSymbol(offset, byte) => format!(
            "ends with {:?} at character {}, which cannot end a base64 text",
            char::from(*byte),
            offset + 1
        ),
        E::InvalidPadding => "has misplaced `=` padding".to_owned(),
    };
    format!(
        "is not base64: it {what}; set it to the output of `base64 -w0 ca.crt`, or name the PEM file with caFile"
    )
}

/// Whether `pem` is text holding at least one PEM `CERTIFICATE` block: the
/// check `caBundle`, `caFile` and `clientCertificate.certFile` all pass.
pub(crate) fn holds_pem_certificate(pem: &[u8]) -> bool {
    std::str::from_utf8(pem).is_ok_and(|text| text.contains("-----BEGIN CERTIFICATE-----"))
}

/// DNS-1123 subdomain: lowercase alphanumerics, `-` and `.`, at most 253
/// characters, starting and ending with an alphanumeric.
pub fn check_dns_subdomain(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("is empty");
    }
    if name.len() > 253 {
        return Err("is longer than 253 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    {
        return Err("may hold only lowercase letters, digits, '-' and '.'");
    }
    let first = name.as_bytes()[0];
    let last = name.as_bytes()[name.len() - 1];
    if !first.is_ascii_alphanumeric() || !last.is_ascii_alphanumeric() {
        return Err("must start and end with a letter or digit");
    }
    Ok(())
}
