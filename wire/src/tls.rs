//! The TLS configuration of a client that calls plugins: it trusts only the
//! CA bundle it is given (never the system's roots), may present a client
//! certificate for mutual TLS, and offers HTTP/2 alone.

use std::sync::Arc;

use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Why a client TLS configuration could not be built; each names the part
/// of the material that is wrong.
#[derive(Debug, thiserror::Error)]
pub enum ClientTlsError {
    #[error("CA bundle: {0}")]
    CaPem(#[source] pem::Error),
    #[error("CA bundle: {0}")]
    CaCertificate(#[source] rustls::Error),
    #[error("CA bundle holds no certificate")]
    NoCaCertificate,
    #[error("client certificate chain: {0}")]
    CertificatePem(#[source] pem::Error),
    #[error("client key: {0}")]
    KeyPem(#[source] pem::Error),
    #[error("client certificate: {0}")]
    ClientAuth(#[source] rustls::Error),
    #[error("protocol versions: {0}")]
    Versions(#[source] rustls::Error),
}

impl ClientTlsError {
    /// Which input the error is about, to name the file it came from.
    pub fn part(&self) -> TlsPart {
        match self {
            ClientTlsError::CaPem(_)
            | ClientTlsError::CaCertificate(_)
            | ClientTlsError::NoCaCertificate => TlsPart::CaBundle,
            ClientTlsError::CertificatePem(_) => TlsPart::Certificate,
            ClientTlsError::KeyPem(_) => TlsPart::Key,
            ClientTlsError::ClientAuth(_) | ClientTlsError::Versions(_) => TlsPart::Pair,
        }
    }
}

/// The inputs of [`client_config`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsPart {
    CaBundle,
    Certificate,
    Key,
    /// The certificate and key together, or the configuration as a whole.
    Pair,
}

/// A client configuration trusting only the certificates of `ca_bundle_pem`
/// (at least one), presenting `identity` (a certificate chain and its key,
/// PEM) when given, with ALPN `h2`.
pub fn client_config(
    ca_bundle_pem: &[u8],
    identity: Option<(&[u8], &[u8])>,
) -> Result<rustls::ClientConfig, ClientTlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_bundle_pem) {
        let cert = cert.map_err(ClientTlsError::CaPem)?;
        roots.add(cert).map_err(ClientTlsError::CaCertificate)?;
    }
    if roots.is_empty() {
        return Err(ClientTlsError::NoCaCertificate);
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(ClientTlsError::Versions)?
    .with_root_certificates(roots);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert_pem, key_pem)) => {
            let certs = CertificateDer::pem_slice_iter(cert_pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(ClientTlsError::CertificatePem)?;
            let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(ClientTlsError::KeyPem)?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(ClientTlsError::ClientAuth)?
        }
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(name: &str) -> (String, String) {
        let made = rcgen::generate_simple_self_signed(vec![name.to_string()]).expect("rcgen");
        (made.cert.pem(), made.signing_key.serialize_pem())
    }

    #[test]
    fn a_config_trusts_its_bundle_and_speaks_h2() {
        let (ca, _) = self_signed("ca");
        let config = client_config(ca.as_bytes(), None).expect("config");
        assert_eq!(config.alpn_protocols, [b"h2".to_vec()]);
        let (cert, key) = self_signed("hub-a");
        client_config(ca.as_bytes(), Some((cert.as_bytes(), key.as_bytes()))).expect("mTLS");
    }

    #[test]
    fn each_error_names_the_part_that_is_wrong() {
        let (ca, _) = self_signed("ca");
        let (cert, key) = self_signed("hub-a");
        let (_, other_key) = self_signed("hub-b");
        let part = |ca: &str, identity: Option<(&str, &str)>| {
            client_config(
                ca.as_bytes(),
                identity.map(|(c, k)| (c.as_bytes(), k.as_bytes())),
            )
            .map(|_| ())
            .map_err(|e| (e.part(), e.to_string()))
        };
        let no_ca = part("not PEM", None).expect_err("no CA");
        assert_eq!(no_ca.0, TlsPart::CaBundle);
        assert_eq!(no_ca.1, "CA bundle holds no certificate");
        assert_eq!(
            part(&ca, Some((&cert, "no key"))).expect_err("key").0,
            TlsPart::Key
        );
        assert_eq!(
            part(&ca, Some((&cert, &other_key))).expect_err("pair").0,
            TlsPart::Pair
        );
        part(&ca, Some((&cert, &key))).expect("matching pair");
    }
}
