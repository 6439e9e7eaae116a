//! A unary gRPC client over raw HTTP/2 (the `h2` crate), plaintext or TLS.
//!
//! The checker does not use tonic's channel on purpose: tonic's client ends a
//! call at its `grpc-timeout` on its own, which would hide a plugin that
//! ignores its deadline, and it cannot send a message with fields the proto
//! does not have. Here the deadline is only sent; the checker measures when
//! the plugin ends the call, and waits at most a bound of its own.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use h2::client::SendRequest;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tonic::Code;

use crate::rules::{Ended, Observed};

/// The largest answer the checker reads (the SDK's own default limit).
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// How to reach the plugin over TLS: its CA, and a client identity for
/// mutual TLS.
#[derive(Debug, Clone, Default)]
pub struct TlsFiles {
    /// The CA bundle (PEM) that signed the plugin's certificate.
    pub ca_file: Option<PathBuf>,
    /// A client certificate chain (PEM), for a plugin that requires one.
    pub cert_file: Option<PathBuf>,
    /// Its private key (PEM).
    pub key_file: Option<PathBuf>,
}

impl TlsFiles {
    /// Whether any TLS file is given (else the checker speaks plaintext).
    pub fn is_tls(&self) -> bool {
        self.ca_file.is_some() || self.cert_file.is_some()
    }
}

/// Why the checker could not reach a plugin.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("{0} is not HOST:PORT")]
    Target(String),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Tls(String),
    #[error("cannot connect to {target}: {source}")]
    Connect {
        target: String,
        source: std::io::Error,
    },
    #[error("HTTP/2 handshake with {target} failed: {source}")]
    Handshake { target: String, source: h2::Error },
    /// The first call's stream failed: something listens, but it does not
    /// speak gRPC over HTTP/2 (as when speaking plaintext to a TLS port).
    #[error(
        "no gRPC over HTTP/2 at {target} (plaintext to a TLS port, or TLS to a plaintext one?): {why}"
    )]
    NotGrpc { target: String, why: String },
}

/// One HTTP/2 connection to a plugin.
#[derive(Debug, Clone)]
pub struct Connection {
    send: SendRequest<Bytes>,
    origin: String,
}

impl Connection {
    /// Connects to `target` (`HOST:PORT`), with TLS when `tls` names files.
    pub async fn open(target: &str, tls: &TlsFiles) -> Result<Connection, ConnectError> {
        let (host, _port) = target
            .rsplit_once(':')
            .filter(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
            .ok_or_else(|| ConnectError::Target(target.to_string()))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let tcp = TcpStream::connect(target)
            .await
            .map_err(|source| ConnectError::Connect {
                target: target.to_string(),
                source,
            })?;
        // Small unary calls: no Nagle delay in the measured times.
        let _ = tcp.set_nodelay(true);
        let handshake_err = |source| ConnectError::Handshake {
            target: target.to_string(),
            source,
        };
        let (send, scheme) = if tls.is_tls() {
            let config = client_config(tls)?;
            let name = ServerName::try_from(host)
                .map_err(|e| ConnectError::Tls(format!("server name of {target}: {e}")))?;
            let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(name, tcp)
                .await
                .map_err(|e| ConnectError::Tls(format!("TLS handshake with {target}: {e}")))?;
            let (send, conn) = h2::client::handshake(stream).await.map_err(handshake_err)?;
            tokio::spawn(conn);
            (send, "https")
        } else {
            let (send, conn) = h2::client::handshake(tcp).await.map_err(handshake_err)?;
            tokio::spawn(conn);
            (send, "http")
        };
        Ok(Connection {
            send,
            origin: format!("{scheme}://{target}"),
        })
    }

    /// Calls `path` (`/package.Service/Method`) with one encoded message,
    /// sending `deadline` as `grpc-timeout` when given, and waits at most
    /// `bound` for the call to end.
    pub async fn unary(
        &self,
        path: &str,
        message: Bytes,
        deadline: Option<Duration>,
        bound: Duration,
    ) -> Observed {
        let start = Instant::now();
        let ended = tokio::time::timeout(bound, self.call(path, message, deadline))
            .await
            .unwrap_or(Ended::Abandoned);
        Observed {
            ended,
            elapsed: start.elapsed(),
        }
    }

    async fn call(&self, path: &str, message: Bytes, deadline: Option<Duration>) -> Ended {
        match self.try_call(path, message, deadline).await {
            Ok(ended) => ended,
            Err(e) => Ended::Transport(e.to_string()),
        }
    }

    async fn try_call(
        &self,
        path: &str,
        message: Bytes,
        deadline: Option<Duration>,
    ) -> Result<Ended, h2::Error> {
        let mut request = http::Request::builder()
            .method("POST")
            .uri(format!("{}{path}", self.origin))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header(
                "user-agent",
                concat!("rollout-plugin-check/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(deadline) = deadline {
            // Milliseconds, rounded up, at most 8 digits (the gRPC spec).
            let ms = deadline.as_nanos().div_ceil(1_000_000).clamp(1, 99_999_999);
            request = request.header("grpc-timeout", format!("{ms}m"));
        }
        let Ok(request) = request.body(()) else {
            return Ok(Ended::Broken(format!("{path} is not a request path")));
        };
        let mut frame = BytesMut::with_capacity(5 + message.len());
        frame.put_u8(0);
        frame.put_u32(u32::try_from(message.len()).unwrap_or(u32::MAX));
        frame.put_slice(&message);

        let mut send = self.send.clone().ready().await?;
        let (response, mut stream) = send.send_request(request, false)?;
        stream.send_data(frame.freeze(), true)?;
        let response = response.await?;
        let (head, mut body) = response.into_parts();
        if head.status != http::StatusCode::OK {
            return Ok(Ended::Broken(format!("HTTP status {}", head.status)));
        }
        // A trailers-only answer carries grpc-status in the headers.
        if let Some(ended) = status_of(&head.headers) {
            return Ok(ended);
        }
        let mut data = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            let _ = body.flow_control().release_capacity(chunk.len());
            if data.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Ok(Ended::Broken(format!(
                    "the answer is over {MAX_ANSWER_BYTES} bytes"
                )));
            }
            data.extend_from_slice(&chunk);
        }
        let trailers = body.trailers().await?.unwrap_or_default();
        match status_of(&trailers) {
            Some(Ended::Answer(_)) => Ok(first_message(data.freeze())),
            Some(ended) => Ok(ended),
            None => Ok(Ended::Broken("the answer has no grpc-status".into())),
        }
    }
}

/// `grpc-status` (and `grpc-message`) of a header block: `Answer` (empty)
/// for OK, `None` when absent.
fn status_of(headers: &http::HeaderMap) -> Option<Ended> {
    let code = headers
        .get("grpc-status")?
        .to_str()
        .ok()?
        .parse::<i32>()
        .ok()?;
    let code = Code::from_i32(code);
    if code == Code::Ok {
        return Some(Ended::Answer(Bytes::new()));
    }
    let message = headers
        .get("grpc-message")
        .and_then(|m| m.to_str().ok())
        .map(percent_decode)
        .unwrap_or_default();
    Some(Ended::Status { code, message })
}

/// The one message of a unary answer's length-prefixed body.
fn first_message(mut data: Bytes) -> Ended {
    if data.len() < 5 {
        return Ended::Broken("an OK answer without a message".into());
    }
    let compressed = data.get_u8();
    let len = data.get_u32() as usize;
    if compressed != 0 {
        return Ended::Broken("a compressed answer (the checker asked for none)".into());
    }
    if data.len() < len {
        return Ended::Broken("a truncated answer".into());
    }
    Ended::Answer(data.split_to(len))
}

/// `grpc-message` is percent-encoded (the gRPC spec).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn read(path: &PathBuf) -> Result<Vec<u8>, ConnectError> {
    std::fs::read(path).map_err(|source| ConnectError::Read {
        path: path.clone(),
        source,
    })
}

/// A client TLS configuration trusting `--ca-file` (or, without it, no
/// one), presenting `--cert-file` when given, speaking HTTP/2.
fn client_config(tls: &TlsFiles) -> Result<rustls::ClientConfig, ConnectError> {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = &tls.ca_file {
        for cert in CertificateDer::pem_slice_iter(&read(ca)?) {
            let cert = cert.map_err(|e| ConnectError::Tls(format!("{}: {e}", ca.display())))?;
            roots
                .add(cert)
                .map_err(|e| ConnectError::Tls(format!("{}: {e}", ca.display())))?;
        }
        if roots.is_empty() {
            return Err(ConnectError::Tls(format!(
                "{} holds no certificate",
                ca.display()
            )));
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| ConnectError::Tls(e.to_string()))?
    .with_root_certificates(roots);
    let mut config = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            let certs = CertificateDer::pem_slice_iter(&read(cert)?)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ConnectError::Tls(format!("{}: {e}", cert.display())))?;
            let key = PrivateKeyDer::from_pem_slice(&read(key)?)
                .map_err(|e| ConnectError::Tls(format!("{}: {e}", key.display())))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| ConnectError::Tls(format!("client certificate: {e}")))?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_message_is_percent_decoded() {
        assert_eq!(percent_decode("a%20b%"), "a b%");
        assert_eq!(percent_decode("%E2%9C%93 ok"), "✓ ok");
    }

    #[test]
    fn an_answer_body_is_one_length_prefixed_message() {
        let body = Bytes::from_static(&[0, 0, 0, 0, 2, 8, 1, 99]);
        assert_eq!(
            first_message(body),
            Ended::Answer(Bytes::from_static(&[8, 1]))
        );
        assert!(matches!(
            first_message(Bytes::from_static(&[0, 0, 0, 0, 9, 1])),
            Ended::Broken(_)
        ));
        assert!(matches!(
            first_message(Bytes::from_static(&[1, 0, 0, 0, 0])),
            Ended::Broken(_)
        ));
    }
}
