//! What identifies an upstream connection: the endpoint and the TLS
//! material itself.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

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

/// A CA bundle, PEM bytes, from `caBundle` or read from `caFile`. The
/// bytes are shared: every plugin naming one file holds one copy. Their
/// hash is taken once: keys are hashed several times per plugin and per
/// build, and a system bundle is hundreds of KiB (hashing 3.8 MiB for each
/// of 200 plugins took seconds of start-up).
#[derive(Clone)]
pub(crate) struct CaBundle {
    pub(crate) pem: Arc<[u8]>,
    hash: u64,
}

impl CaBundle {
    pub(crate) fn new(pem: Arc<[u8]>) -> CaBundle {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        pem.hash(&mut hasher);
        CaBundle {
            hash: hasher.finish(),
            pem,
        }
    }
}

impl PartialEq for CaBundle {
    // Bundles of one file share their bytes: compared by address first.
    fn eq(&self, other: &CaBundle) -> bool {
        self.hash == other.hash && (Arc::ptr_eq(&self.pem, &other.pem) || self.pem == other.pem)
    }
}

impl Eq for CaBundle {}

impl Hash for CaBundle {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl std::fmt::Debug for CaBundle {
    // Certificate bodies are noise in logs: their size says enough.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CaBundle {{ {} bytes }}", self.pem.len())
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
