//! TLS of the gateway's own gRPC listener (central mode).
//!
//! `--tls-cert`/`--tls-key` serve TLS; `--client-ca` requires every client to
//! present a certificate signed by that CA, and the calling hub is that
//! certificate's first DNS subject-alternative name, else its common name.
//! The files are read again every few seconds: a rotated certificate, key or
//! CA takes effect for new connections without a restart; a bad rotation is
//! logged and the previous configuration kept.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::files::{self, FileLimits, Stamp};
use crate::hub::Hub;
use crate::transport::server::Handshake;

/// The files the listener's TLS comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by this CA.
    pub client_ca: Option<PathBuf>,
}

/// The listener's TLS could not be set up; the message names the file.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(String);

/// The listener's current TLS configuration, swapped when its files change.
#[derive(Debug)]
pub(crate) struct ServerTls {
    files: ServerTlsFiles,
    limits: FileLimits,
    current: ArcSwap<ServerConfig>,
    /// The bytes the current configuration was built from.
    loaded: Mutex<Vec<u8>>,
    /// The files' stamps when last read: unchanged files are not read again.
    stamps: Mutex<Vec<Option<Stamp>>>,
}

impl ServerTls {
    /// Reads the files (bounded by `limits`, off the worker thread) and
    /// builds the configuration.
    pub(crate) async fn load(
        files: ServerTlsFiles,
        limits: FileLimits,
    ) -> Result<ServerTls, TlsError> {
        let bytes = read_all(&files, limits).await?;
        let config = build(&files, &bytes)?;
        Ok(ServerTls {
            files,
            limits,
            current: ArcSwap::from_pointee(config),
            loaded: Mutex::new(bytes.concat()),
            stamps: Mutex::new(Vec::new()),
        })
    }

    /// An acceptor with the current configuration (taken per connection, so
    /// a reload applies to the next handshake).
    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current.load_full())
    }

    pub(crate) fn requires_client_certificate(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// Reads the files again; if they changed and are valid, the new
    /// configuration takes effect. Returns whether it changed.
    pub(crate) async fn reload(&self) -> Result<bool, TlsError> {
        if !self.may_have_changed().await {
            return Ok(false);
        }
        let bytes = read_all(&self.files, self.limits).await?;
        let joined = bytes.concat();
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if *loaded == joined {
            return Ok(false);
        }
        let config = build(&self.files, &bytes)?;
        self.current.store(Arc::new(config));
        *loaded = joined;
        Ok(true)
    }
}

impl ServerTls {
    /// Whether a file's metadata changed since the last look (or cannot be
    /// read: the read then says why).
    async fn may_have_changed(&self) -> bool {
        let paths = self.paths();
        let mut now = Vec::with_capacity(paths.len());
        for path in paths {
            now.push(files::stamp(path, self.limits).await.ok());
        }
        let mut stamps = self.stamps.lock().unwrap_or_else(|e| e.into_inner());
        let changed = now.iter().any(Option::is_none) || *stamps != now;
        *stamps = now;
        changed
    }

    fn paths(&self) -> Vec<&Path> {
        let mut paths = vec![self.files.cert.as_path(), self.files.key.as_path()];
        paths.extend(self.files.client_ca.as_deref());
        paths
    }
}

async fn read_all(files: &ServerTlsFiles, limits: FileLimits) -> Result<Vec<Vec<u8>>, TlsError> {
    let mut out = vec![
        read(&files.cert, "--tls-cert", limits).await?,
        read(&files.key, "--tls-key", limits).await?,
    ];
    if let Some(ca) = &files.client_ca {
        out.push(read(ca, "--client-ca", limits).await?);
    }
    Ok(out)
}

/// One of the listener's files, bounded; the error names its flag and path.
async fn read(path: &Path, flag: &str, limits: FileLimits) -> Result<Vec<u8>, TlsError> {
    match files::read(path, limits, None).await {
        Ok(read) => Ok(read.map(|(bytes, _)| bytes).unwrap_or_default()),
        Err(e) => Err(TlsError(format!("{flag} {e}"))),
    }
}

fn build(files: &ServerTlsFiles, bytes: &[Vec<u8>]) -> Result<ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = CertificateDer::pem_slice_iter(&bytes[0])
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError(format!("--tls-cert {}: {e}", files.cert.display())))?;
    if certs.is_empty() {
        return Err(TlsError(format!(
            "--tls-cert {}: no certificate in it",
            files.cert.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_slice(&bytes[1])
        .map_err(|e| TlsError(format!("--tls-key {}: {e}", files.key.display())))?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(e.to_string()))?;
    let builder = match (&files.client_ca, bytes.get(2)) {
        (Some(path), Some(pem)) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert =
                    cert.map_err(|e| TlsError(format!("--client-ca {}: {e}", path.display())))?;
                roots
                    .add(cert)
                    .map_err(|e| TlsError(format!("--client-ca {}: {e}", path.display())))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError(format!("--client-ca {}: {e}", path.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError(format!("--tls-cert/--tls-key: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

impl Handshake for ServerTls {
    fn acceptor(&self) -> TlsAcceptor {
        ServerTls::acceptor(self)
    }

    /// The calling hub. A verified certificate that names no hub can call
    /// only shared plugins without `hubs:`.
    fn identify(&self, certificates: Option<&[CertificateDer<'static>]>) -> Option<Hub> {
        if !self.requires_client_certificate() {
            return None;
        }
        certificates.and_then(|c| c.first()).and_then(hub_of)
    }
}

/// The hub a client certificate names: its first DNS subject-alternative
/// name, else its subject's common name; normalised as a DNS name is
/// compared ([`Hub::normalised`]).
pub fn hub_of(cert: &CertificateDer<'_>) -> Option<Hub> {
    let parsed = webpki::EndEntityCert::try_from(cert).ok()?;
    let name = match parsed.valid_dns_names().next() {
        Some(name) => name.to_string(),
        None => common_name(parsed.subject())?,
    };
    Hub::normalised(&name)
}

/// The common name (OID 2.5.4.3) in a DER-encoded X.501 name, if any.
fn common_name(subject: &[u8]) -> Option<String> {
    const CN_OID: [u8; 5] = [0x06, 0x03, 0x55, 0x04, 0x03];
    let at = subject.windows(CN_OID.len()).position(|w| w == CN_OID)? + CN_OID.len();
    let (&tag, rest) = subject.get(at..)?.split_first()?;
    // UTF8String, PrintableString, IA5String, T61String.
    if !matches!(tag, 0x0c | 0x13 | 0x16 | 0x14) {
        return None;
    }
    let (&len, rest) = rest.split_first()?;
    if len >= 0x80 {
        return None; // a hub name is never that long
    }
    let value = rest.get(..len as usize)?;
    std::str::from_utf8(value).ok().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rollout_plugin_sdk::test_certs::rcgen;

    fn cert(sans: &[&str], cn: Option<&str>) -> CertificateDer<'static> {
        let mut params =
            rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .expect("params");
        // rcgen puts a default common name in; start from an empty subject.
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, cn);
        }
        let key = rcgen::KeyPair::generate().expect("key");
        params.self_signed(&key).expect("cert").der().clone()
    }

    #[test]
    fn the_hub_is_the_first_dns_san_else_the_cn() {
        assert_eq!(
            hub_of(&cert(&["hub-a", "other"], Some("ignored")))
                .as_ref()
                .map(Hub::as_str),
            Some("hub-a")
        );
        assert_eq!(
            hub_of(&cert(&[], Some("hub-b"))).as_ref().map(Hub::as_str),
            Some("hub-b")
        );
        assert_eq!(hub_of(&cert(&[], None)), None);
    }

    #[test]
    fn a_hub_name_is_compared_as_dns_compares_it() {
        assert_eq!(
            hub_of(&cert(&["HUB-A"], None)).as_ref().map(Hub::as_str),
            Some("hub-a")
        );
        assert_eq!(
            hub_of(&cert(&["hub-a."], None)).as_ref().map(Hub::as_str),
            Some("hub-a")
        );
        assert_eq!(
            hub_of(&cert(&[], Some("Hub-B."))).as_ref().map(Hub::as_str),
            Some("hub-b")
        );
        assert_eq!(hub_of(&cert(&[], Some("."))), None);
    }
}
