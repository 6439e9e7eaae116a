//! TLS for the plugin server, done by the SDK rather than by tonic so that
//! certificates can change under a running server: a rustls configuration
//! built from PEM ([`server_config`]); a [`Reloading`] holder that, for
//! options read from files, rebuilds it when a file's contents change
//! (checked at each new connection, so a rotated certificate is served from
//! the next handshake on, with no watcher); and the accept loop ([`incoming`]) that
//! runs each handshake on a task of its own, bounded in time, so a slow
//! client cannot hold up the others.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A TLS setting that rustls rejects (no certificate in the PEM, a key that
/// does not match, a CA that is not one), with what was wrong.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsConfigError(String);

/// The server configuration for a certificate chain, its key and, for
/// mutual TLS, the client CA bundle, all PEM; HTTP/2 only.
pub(crate) fn server_config(
    cert_pem: &[u8],
    key_pem: &[u8],
    client_ca_pem: Option<&[u8]>,
) -> Result<Arc<ServerConfig>, TlsConfigError> {
    let err = |what: &str, e: &dyn std::fmt::Display| TlsConfigError(format!("{what}: {e}"));
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err("certificate", &e))?;
    if certs.is_empty() {
        return Err(TlsConfigError(
            "certificate: no certificate in the PEM".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| err("key", &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| err("protocol versions", &e))?;
    let builder = match client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(ca) {
                let cert = cert.map_err(|e| err("client CA", &e))?;
                roots.add(cert).map_err(|e| err("client CA", &e))?;
            }
            if roots.is_empty() {
                return Err(TlsConfigError(
                    "client CA: no certificate in the PEM".into(),
                ));
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| err("client CA", &e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| err("certificate and key", &e))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// The files TLS options were read from (`TlsOptions::from_files`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

/// The files' contents, `None` for one that cannot be read.
type Contents = Vec<Option<Vec<u8>>>;

impl TlsFiles {
    /// The files' contents now (following symlinks, so the kubelet's swap of
    /// a mounted Secret's `..data` link counts). Contents rather than
    /// modification times: a rewrite within one clock tick, or one that
    /// keeps the length, still counts, and a few kilobytes read per new
    /// connection cost little next to its handshake.
    fn read(&self) -> Contents {
        let mut paths = vec![&self.cert, &self.key];
        paths.extend(self.client_ca.as_ref());
        paths.into_iter().map(|p| std::fs::read(p).ok()).collect()
    }

    /// The configuration `contents` (of [`TlsFiles::read`]) make.
    fn load(&self, contents: &Contents) -> Result<Arc<ServerConfig>, TlsConfigError> {
        let unreadable = |path: &PathBuf| TlsConfigError(format!("cannot read {}", path.display()));
        let cert = contents[0]
            .as_deref()
            .ok_or_else(|| unreadable(&self.cert))?;
        let key = contents[1]
            .as_deref()
            .ok_or_else(|| unreadable(&self.key))?;
        let ca = match &self.client_ca {
            None => None,
            Some(path) => Some(
                contents
                    .get(2)
                    .and_then(|c| c.as_deref())
                    .ok_or_else(|| unreadable(path))?,
            ),
        };
        server_config(cert, key, ca)
    }
}

/// The configuration new connections get, rebuilt from the files when they
/// change. A change that does not make a valid configuration (a key written
/// before its certificate, say) is logged and the last good configuration
/// kept, until the files change again.
#[derive(Debug)]
pub(crate) struct Reloading {
    files: Option<TlsFiles>,
    state: Mutex<(Contents, Arc<ServerConfig>)>,
}

impl Reloading {
    /// Starts with `config`; reloads from `files` when given.
    pub(crate) fn new(config: Arc<ServerConfig>, files: Option<TlsFiles>) -> Reloading {
        let contents = files.as_ref().map(TlsFiles::read).unwrap_or_default();
        Reloading {
            files,
            state: Mutex::new((contents, config)),
        }
    }

    /// The configuration for the next handshake.
    pub(crate) fn current(&self) -> Arc<ServerConfig> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(files) = &self.files else {
            return state.1.clone();
        };
        let contents = files.read();
        if contents != state.0 {
            let loaded = files.load(&contents);
            state.0 = contents;
            match loaded {
                Ok(config) => {
                    tracing::info!(cert = %files.cert.display(), "TLS files changed: reloaded");
                    state.1 = config;
                }
                Err(error) => {
                    tracing::warn!(cert = %files.cert.display(), %error, "TLS files changed but do not make a valid configuration; keeping the last good one");
                }
            }
        }
        state.1.clone()
    }
}

/// A TLS connection, as tonic serves it.
pub(crate) struct TlsConn(tokio_rustls::server::TlsStream<TcpStream>);

impl tonic::transport::server::Connected for TlsConn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.0.get_ref().0.connect_info()
    }
}

impl tokio::io::AsyncRead for TlsConn {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for TlsConn {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

/// Accepts on `listener` and completes each TLS handshake (with the
/// configuration current at accept time) on a task of its own, at most
/// [`HANDSHAKE_TIMEOUT`]; the connections that made it come out of the
/// stream. The loop ends when the stream is dropped (the server stopped).
pub(crate) fn incoming(
    listener: TcpListener,
    tls: Arc<Reloading>,
) -> ReceiverStream<std::io::Result<TlsConn>> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = tx.closed() => return,
            };
            let tcp = match accepted {
                Ok((tcp, _)) => tcp,
                Err(error) => {
                    // Out of file descriptors and the like: back off a little
                    // rather than spin.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            // No Nagle (see Bound::serve_with_shutdown).
            let _ = tcp.set_nodelay(true);
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.current());
            let tx = tx.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(Ok(TlsConn(stream))).await;
                    }
                    Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
                    Err(_) => tracing::debug!("TLS handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}
