//! The HTTP client of Prometheus's range query API: one HTTP/1.1
//! connection per query (hyper's client connection, over rustls for
//! `https`), bounded in time (`--query-timeout`, the whole exchange) and in
//! size (`--max-response-bytes`, the body read), with an optional bearer
//! token read from its file at each query (so a rotated token is used).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Uri, header};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::QueryError;
use super::answer::{Series, decode};

/// How to reach Prometheus.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// `--prometheus-url`: `http://host:port` or `https://host:port`, with
    /// an optional path prefix (`https://example.com/prometheus`).
    pub url: String,
    /// `--prometheus-ca-file`: the CA bundle an `https` Prometheus's
    /// certificate must chain to (PEM); required for `https`.
    pub ca_file: Option<PathBuf>,
    /// `--prometheus-cert-file` and `--prometheus-key-file`: a client
    /// certificate for mutual TLS (PEM).
    pub identity: Option<(PathBuf, PathBuf)>,
    /// `--prometheus-token-file`: a bearer token, read at each query.
    pub token_file: Option<PathBuf>,
    /// `--query-timeout`: the longest one query may take, connection,
    /// handshake and body included.
    pub timeout: Duration,
    /// `--max-response-bytes`: the largest body read.
    pub max_response_bytes: usize,
}

/// Why the client could not be made from its options.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The URL is not `http(s)://host[:port][/prefix]`.
    #[error("--prometheus-url {url:?}: {why}")]
    Url {
        /// As given.
        url: String,
        /// What is wrong.
        why: String,
    },
    /// `https` without `--prometheus-ca-file`.
    #[error("--prometheus-url is https: --prometheus-ca-file must name the CA bundle to trust")]
    NoCa,
    /// A TLS file could not be read.
    #[error("cannot read {flag} {}: {source}", path.display())]
    Read {
        /// The flag that names it.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The TLS material does not make a configuration.
    #[error("TLS to Prometheus: {0}")]
    Tls(#[source] rollout_wire::ClientTlsError),
}

/// A range query: `query` evaluated every `step` from `start` to `end`
/// (unix seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct RangeQuery {
    /// The PromQL expression, placeholders already replaced.
    pub query: String,
    /// The first step.
    pub start: f64,
    /// The last step at most.
    pub end: f64,
    /// Between two steps.
    pub step: Duration,
}

/// A Prometheus to ask.
#[derive(Clone)]
pub struct Prometheus {
    addr: String,
    authority: String,
    path: String,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
    token_file: Option<PathBuf>,
    timeout: Duration,
    max_response_bytes: usize,
}

impl std::fmt::Debug for Prometheus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prometheus")
            .field("addr", &self.addr)
            .field("path", &self.path)
            .field("tls", &self.tls.is_some())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Prometheus {
    /// A client per `options`, its TLS files read now.
    pub fn new(options: &ClientOptions) -> Result<Self, ClientError> {
        let bad = |why: &str| ClientError::Url {
            url: options.url.clone(),
            why: why.to_owned(),
        };
        let uri: Uri = options.url.parse().map_err(|_| bad("not a URL"))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(bad("the scheme must be http or https")),
        };
        if uri.query().is_some() {
            return Err(bad("a query string has no place here"));
        }
        let host = uri.host().ok_or_else(|| bad("no host"))?;
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let bare_host = host.trim_start_matches('[').trim_end_matches(']');
        let tls = if https {
            let server_name = ServerName::try_from(bare_host.to_owned())
                .map_err(|_| bad("the host is no TLS server name"))?;
            Some((connector(options)?, server_name))
        } else {
            None
        };
        Ok(Self {
            addr: format!("{host}:{port}"),
            authority: uri
                .authority()
                .map_or_else(|| host.to_owned(), |a| a.as_str().to_owned()),
            path: format!("{}/api/v1/query_range", uri.path().trim_end_matches('/')),
            tls,
            token_file: options.token_file.clone(),
            timeout: options.timeout,
            max_response_bytes: options.max_response_bytes,
        })
    }

    /// The query's one series (`None`: no series), within the timeout.
    pub async fn query_range(&self, query: &RangeQuery) -> Result<Option<Series>, QueryError> {
        let asked = tokio::time::timeout(self.timeout, self.exchange(query)).await;
        let (code, body) = asked.map_err(|_| QueryError::Timeout(self.timeout))??;
        decode(code, &body)
    }

    async fn exchange(&self, query: &RangeQuery) -> Result<(u16, Bytes), QueryError> {
        let request = self.request(query).await?;
        let tcp = TcpStream::connect(&self.addr)
            .await
            .map_err(|source| QueryError::Connect {
                addr: self.addr.clone(),
                source,
            })?;
        // One small request, then its answer: no delay for Nagle.
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => self.send(tcp, request).await,
            Some((connector, name)) => {
                let tls = connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(QueryError::Tls)?;
                self.send(tls, request).await
            }
        }
    }

    async fn request(&self, query: &RangeQuery) -> Result<Request<Full<Bytes>>, QueryError> {
        let form = form_urlencoded::Serializer::new(String::new())
            .append_pair("query", &query.query)
            .append_pair("start", &format!("{:.3}", query.start))
            .append_pair("end", &format!("{:.3}", query.end))
            .append_pair("step", &format!("{}", query.step.as_secs_f64()))
            // Prometheus stops the evaluation itself by then.
            .append_pair("timeout", &format!("{}", self.timeout.as_secs_f64()))
            .finish();
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(&self.path)
            .header(header::HOST, &self.authority)
            .header(header::ACCEPT, "application/json")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(
                header::USER_AGENT,
                concat!("prometheus-analysis/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(path) = &self.token_file {
            let token_error = |source| QueryError::Token {
                path: path.display().to_string(),
                source,
            };
            let token = tokio::fs::read_to_string(path).await.map_err(token_error)?;
            let value =
                header::HeaderValue::try_from(format!("Bearer {}", token.trim())).map_err(|e| {
                    token_error(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
                })?;
            builder = builder.header(header::AUTHORIZATION, value);
        }
        builder
            .body(Full::new(Bytes::from(form)))
            .map_err(QueryError::Request)
    }

    /// Sends `request` on a new HTTP/1.1 connection over `io` and reads the
    /// answer, at most `max_response_bytes` of body.
    async fn send<IO>(
        &self,
        io: IO,
        request: Request<Full<Bytes>>,
    ) -> Result<(u16, Bytes), QueryError>
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(QueryError::Http)?;
        let limit = self.max_response_bytes;
        let exchange = async move {
            let response = sender
                .send_request(request)
                .await
                .map_err(QueryError::Http)?;
            let code = response.status().as_u16();
            let body = Limited::new(response.into_body(), limit)
                .collect()
                .await
                .map_err(|e| match e.downcast::<hyper::Error>() {
                    Ok(e) => QueryError::Http(*e),
                    Err(e) if e.is::<LengthLimitError>() => QueryError::TooLarge { limit },
                    Err(e) => QueryError::Malformed(format!("the body could not be read: {e}")),
                })?;
            Ok((code, body.to_bytes()))
        };
        let mut exchange = std::pin::pin!(exchange);
        let mut connection = std::pin::pin!(connection);
        tokio::select! {
            biased;
            answer = &mut exchange => answer,
            ended = &mut connection => match ended {
                // The connection may end (Connection: close) with the body
                // still to be read from hyper's buffers.
                Ok(()) => exchange.await,
                Err(e) => Err(QueryError::Http(e)),
            },
        }
    }
}

/// The TLS connector of an `https` Prometheus: only `--prometheus-ca-file`
/// is trusted (the workspace's one client TLS builder), HTTP/1.1 offered.
fn connector(options: &ClientOptions) -> Result<tokio_rustls::TlsConnector, ClientError> {
    let read = |flag: &'static str, path: &PathBuf| {
        std::fs::read(path).map_err(|source| ClientError::Read {
            flag,
            path: path.clone(),
            source,
        })
    };
    let ca = read(
        "--prometheus-ca-file",
        options.ca_file.as_ref().ok_or(ClientError::NoCa)?,
    )?;
    let identity = match &options.identity {
        None => None,
        Some((cert, key)) => Some((
            read("--prometheus-cert-file", cert)?,
            read("--prometheus-key-file", key)?,
        )),
    };
    let mut config = rollout_wire::client_config(
        &ca,
        identity.as_ref().map(|(c, k)| (c.as_slice(), k.as_slice())),
    )
    .map_err(ClientError::Tls)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}
