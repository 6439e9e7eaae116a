//! The TLS client configurations of the plugins, made once per material.
//!
//! A CA bundle is parsed into a root store, and a client certificate and
//! key into a signer, once however many plugins name them: 200 plugins
//! naming one 3.8 MiB `caFile` parsed it 200 times and held 200 root
//! stores (1.8 GiB, 7 s of start-up CPU). Every upstream of the same
//! material shares one [`rustls::ClientConfig`]; the cache holds it weakly,
//! so a configuration no plugin uses any more is freed with its last
//! upstream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use rollout_policies::lock;

use super::key::{CaBundle, ClientIdentity};

/// What a TLS client configuration is made of.
type Material = (CaBundle, Option<ClientIdentity>);

/// See the module doc.
#[derive(Debug, Default)]
pub(crate) struct TlsConfigs {
    made: Mutex<HashMap<Material, Weak<rustls::ClientConfig>>>,
}

impl TlsConfigs {
    /// The configuration trusting `ca` alone and presenting `identity`:
    /// the one already made of the same bytes, else a new one.
    pub(crate) fn get(
        &self,
        ca: &CaBundle,
        identity: Option<&ClientIdentity>,
    ) -> Result<Arc<rustls::ClientConfig>, rollout_wire::ClientTlsError> {
        let material = (ca.clone(), identity.cloned());
        let mut made = lock(&self.made);
        if let Some(config) = made.get(&material).and_then(Weak::upgrade) {
            return Ok(config);
        }
        let config = Arc::new(rollout_wire::client_config(
            &ca.pem,
            identity.map(|id| (id.cert_pem.as_slice(), id.key_pem.as_slice())),
        )?);
        made.retain(|_, config| config.strong_count() > 0);
        made.insert(material, Arc::downgrade(&config));
        Ok(config)
    }

    /// Configurations alive now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.made)
            .values()
            .filter(|c| c.strong_count() > 0)
            .count()
    }
}
