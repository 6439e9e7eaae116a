//! Certificates made on the spot, for tests of TLS and mutual TLS (feature
//! `test-certs`): a certificate authority and the server and client
//! certificates it signs, as PEM, with rcgen.
//!
//! ```
//! use rollout_plugin_sdk::test_certs::TestCa;
//! let ca = TestCa::new("plugins-ca")?;
//! let server = ca.server()?; // for localhost and 127.0.0.1
//! let client = ca.leaf("hub-a")?; // DNS SAN hub-a
//! assert!(server.cert.contains("BEGIN CERTIFICATE") && client.key.contains("PRIVATE KEY"));
//! # Ok::<(), rcgen::Error>(())
//! ```

use std::net::{IpAddr, Ipv4Addr};

pub use rcgen;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType};

/// A self-signed certificate authority.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

/// A certificate and its private key, as PEM.
#[derive(Debug, Clone)]
pub struct TestCert {
    pub cert: String,
    pub key: String,
}

impl TestCa {
    /// A new CA whose common name is `name`.
    pub fn new(name: &str) -> Result<TestCa, rcgen::Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        Ok(TestCa {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate()?)?,
        })
    }

    /// The CA certificate (the bundle a peer trusts), PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for `localhost` and `127.0.0.1`.
    pub fn server(&self) -> Result<TestCert, rcgen::Error> {
        let mut params = CertificateParams::new(vec!["localhost".to_string()])?;
        params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        self.sign(params)
    }

    /// A certificate whose one DNS SAN is `name` (a client identity, such as
    /// a hub in the gateway's central mode, or a server host name).
    pub fn leaf(&self, name: &str) -> Result<TestCert, rcgen::Error> {
        self.sign(CertificateParams::new(vec![name.to_string()])?)
    }

    /// Signs a certificate made of `params` (for validity dates, other
    /// names, ...) with a new key.
    pub fn sign(&self, params: CertificateParams) -> Result<TestCert, rcgen::Error> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(TestCert {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}
