//! What identifies an upstream connection: the endpoint and the TLS
//! material itself.

use crate::config::Endpoint;

/// What makes two registry entries the same connection: a plugin whose key did
/// not change across a reload keeps its [`Upstream`]. The key holds the TLS
/// material itself, not where it came from: a `caFile` or client certificate
/// file whose content changed makes a new key, and so a new connection.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct UpstreamKey {
    pub(crate) endpoint: Endpoint,
    /// The CA bundle (PEM) the plugin's certificate is verified against;
    /// `None` = plaintext.
    pub(crate) ca_bundle: Option<CaBundle>,
    /// The gateway's client certificate and key (PEM), when it presents one.
    pub(crate) client_identity: Option<ClientIdentity>,
}

/// A CA bundle, PEM bytes, from `caBundle` or read from `caFile`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct CaBundle(pub(crate) Vec<u8>);

impl std::fmt::Debug for CaBundle {
    // Certificate bodies are noise in logs: their size says enough.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CaBundle {{ {} bytes }}", self.0.len())
    }
}

/// A client certificate chain and key, as PEM bytes read from the configured files.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct ClientIdentity {
    pub(crate) cert_pem: Vec<u8>,
    pub(crate) key_pem: Vec<u8>,
}

impl std::fmt::Debug for ClientIdentity {
    // The key is a secret: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ClientIdentity {{ cert: {} bytes, key: <redacted> }}",
            self.cert_pem.len()
        )
    }
}
