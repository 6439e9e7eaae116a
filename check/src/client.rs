//! A unary gRPC client over raw HTTP/2 (the `h2` crate), plaintext or TLS.
//!
//! The checker does not use tonic's channel on purpose: tonic's client ends a
//! call at its `grpc-timeout` on its own, which would hide a plugin that
//! ignores its deadline, and it cannot send a message with fields the proto
//! does not have. Here the deadline is only sent; the checker measures when
//! the plugin ends the call, and waits at most a bound of its own. What is
//! on the wire — framing, status, `grpc-timeout`, the TLS configuration — is
//! `rollout_wire`'s, as in the gateway, so an answer the gateway would refuse
//! is one the checker calls broken.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use h2::client::SendRequest;
use rollout_wire::{ClientTlsError, FrameError, ReceiveError, TlsPart};
use rustls_pki_types::ServerName;
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
    pub(crate) fn is_tls(&self) -> bool {
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
    #[error("{}: {source}", file.display())]
    TlsConfig {
        file: PathBuf,
        source: ClientTlsError,
    },
    #[error("TLS needs the plugin's CA bundle (--ca-file)")]
    NoCaFile,
    #[error("{target} is not a valid TLS server name: {source}")]
    ServerName {
        target: String,
        source: rustls_pki_types::InvalidDnsNameError,
    },
    #[error("TLS handshake with {target} failed: {source}")]
    TlsHandshake {
        target: String,
        source: std::io::Error,
    },
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
pub(crate) struct Connection {
    send: SendRequest<Bytes>,
    origin: String,
}

impl Connection {
    /// Connects to `target` (`HOST:PORT`), with TLS when `tls` names files.
    pub(crate) async fn open(target: &str, tls: &TlsFiles) -> Result<Connection, ConnectError> {
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
            let name = ServerName::try_from(host).map_err(|source| ConnectError::ServerName {
                target: target.to_string(),
                source,
            })?;
            let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(name, tcp)
                .await
                .map_err(|source| ConnectError::TlsHandshake {
                    target: target.to_string(),
                    source,
                })?;
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
    pub(crate) async fn unary(
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
            .header(http::header::CONTENT_TYPE, rollout_wire::CONTENT_TYPE)
            .header(http::header::TE, "trailers")
            .header(
                http::header::USER_AGENT,
                concat!("rollout-plugin-check/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(deadline) = deadline {
            // Sent as the gateway sends it.
            request = request.header(
                rollout_wire::GRPC_TIMEOUT,
                rollout_wire::encode_timeout(deadline),
            );
        }
        let Ok(request) = request.body(()) else {
            return Ok(Ended::Broken(format!("{path} is not a request path")));
        };
        let mut frame = BytesMut::with_capacity(rollout_wire::PREFIX_LEN + message.len());
        frame.put_slice(&rollout_wire::prefix(message.len()));
        frame.put_slice(&message);

        let mut send = self.send.clone().ready().await?;
        let (response, mut stream) = send.send_request(request, false)?;
        stream.send_data(frame.freeze(), true)?;
        let response = response.await?;
        let (head, mut body) = response.into_parts();
        if head.status != http::StatusCode::OK {
            return Ok(Ended::Broken(format!("HTTP status {}", head.status)));
        }
        if let Err(e) = rollout_wire::check_answer_headers(&head.headers) {
            return Ok(Ended::Broken(e.to_string()));
        }
        // A trailers-only answer carries grpc-status in the headers, and
        // ends with them: a status there followed by more is read from the
        // headers by some clients and from what follows by others.
        if let Some(ended) = status_of(&head.headers) {
            if !body.is_end_stream() {
                return Ok(Ended::Broken(
                    "grpc-status in the headers of an answer that goes on".into(),
                ));
            }
            return Ok(ended);
        }
        let (data, trailers) = match rollout_wire::collect(&mut body, MAX_ANSWER_BYTES).await {
            Ok(collected) => collected,
            Err(ReceiveError::Frame(e)) => return Ok(Ended::Broken(e.to_string())),
            Err(ReceiveError::Stream { source, .. }) => return Err(source),
        };
        match status_of(&trailers.unwrap_or_default()) {
            Some(Ended::Answer(_)) => Ok(answer(data)),
            Some(ended) => Ok(ended),
            None => Ok(Ended::Broken("the answer has no grpc-status".into())),
        }
    }
}

/// `grpc-status` (and `grpc-message`) of a header block: `Answer` (empty)
/// for OK, `None` when absent, `Broken` when gRPC clients could read it
/// differently (as the gateway refuses it).
fn status_of(headers: &http::HeaderMap) -> Option<Ended> {
    let status = match rollout_wire::status_from_headers(headers) {
        Ok(status) => status?,
        Err(e) => return Some(Ended::Broken(e.to_string())),
    };
    Some(if status.code == Code::Ok {
        Ended::Answer(Bytes::new())
    } else {
        Ended::Status {
            code: status.code,
            message: status.message,
        }
    })
}

/// The one message of an OK answer's body, read as the gateway reads it.
fn answer(data: Bytes) -> Ended {
    match rollout_wire::message(data, MAX_ANSWER_BYTES) {
        Ok(message) => Ended::Answer(message),
        Err(FrameError::TruncatedPrefix) => Ended::Broken("an OK answer without a message".into()),
        Err(FrameError::Compressed) => {
            Ended::Broken("a compressed answer (the checker asked for none)".into())
        }
        Err(e) => Ended::Broken(e.to_string()),
    }
}

fn read(path: &PathBuf) -> Result<Vec<u8>, ConnectError> {
    std::fs::read(path).map_err(|source| ConnectError::Read {
        path: path.clone(),
        source,
    })
}

/// The client TLS configuration for `tls`'s files; an error names the
/// file it is about.
fn client_config(tls: &TlsFiles) -> Result<rustls::ClientConfig, ConnectError> {
    let ca_file = tls.ca_file.as_ref().ok_or(ConnectError::NoCaFile)?;
    let ca = read(ca_file)?;
    let identity = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
        _ => None,
    };
    let identity_pem = identity.as_ref().map(|(c, k)| (c.as_slice(), k.as_slice()));
    rollout_wire::client_config(&ca, identity_pem).map_err(|source| {
        let file = match (source.part(), &tls.cert_file, &tls.key_file) {
            (TlsPart::Certificate | TlsPart::Pair, Some(cert), _) => cert,
            (TlsPart::Key, _, Some(key)) => key,
            _ => ca_file,
        };
        ConnectError::TlsConfig {
            file: file.clone(),
            source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_body_is_exactly_one_length_prefixed_message() {
        let body = Bytes::from_static(&[0, 0, 0, 0, 2, 8, 1]);
        assert_eq!(answer(body), Ended::Answer(Bytes::from_static(&[8, 1])));
        // Bytes past the message are a second message, which the gateway
        // refuses too.
        for broken in [
            &[0, 0, 0, 0, 2, 8, 1, 99][..],
            &[0, 0, 0, 0, 9, 1],
            &[1, 0, 0, 0, 0],
            &[],
        ] {
            assert!(
                matches!(answer(Bytes::from_static(broken)), Ended::Broken(_)),
                "{broken:?}"
            );
        }
    }

    #[test]
    fn an_ok_status_is_an_answer_and_others_keep_their_message() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(status_of(&headers), None);
        rollout_wire::put_status(&mut headers, Code::Unavailable, "down 100%");
        assert_eq!(
            status_of(&headers),
            Some(Ended::Status {
                code: Code::Unavailable,
                message: "down 100%".into()
            })
        );
        rollout_wire::put_status(&mut headers, Code::Ok, "");
        assert_eq!(status_of(&headers), Some(Ended::Answer(Bytes::new())));
    }
}
