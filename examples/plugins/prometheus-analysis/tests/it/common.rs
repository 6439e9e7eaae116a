//! The harness: an HTTP/1.1 server written on the wire (the fake
//! Prometheus, the exporter a real Prometheus scrapes), a proxy that holds
//! each connection back, the plugin and its requests.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use prometheus_analysis::Analysis;
use prometheus_analysis::config::{Defaults, Layer};
use prometheus_analysis::prometheus::{ClientOptions, Prometheus};
use rollout_plugin_sdk::Validation;
use rollout_plugin_sdk::proto::{
    ClusterRolloutStatus, RolloutPluginRequest, RolloutState, RolloutStatus, ValidationResult,
};
use rollout_plugin_sdk::testing;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A request as the server read it.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// A form field of the body, decoded.
    pub fn form(&self, key: &str) -> Option<String> {
        form_urlencoded::parse(self.body.as_bytes())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
    }
}

/// What the server answers.
#[derive(Debug, Clone)]
pub struct Reply {
    pub code: u16,
    pub body: Vec<u8>,
    /// Held back this long before answering.
    pub delay: Duration,
}

impl Reply {
    pub fn json(code: u16, body: impl Into<String>) -> Self {
        Self {
            code,
            body: body.into().into_bytes(),
            delay: Duration::ZERO,
        }
    }
}

pub type Handler = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

/// An HTTP/1.1 server on 127.0.0.1:0 answering every request with
/// `handler`, keeping what it saw.
pub struct FakeHttp {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeHttp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeHttp {
    pub async fn start(handler: Handler) -> Self {
        Self::start_with(handler, None).await
    }

    /// With `tls`, over TLS with that server configuration.
    pub async fn start_with(handler: Handler, tls: Option<Arc<rustls::ServerConfig>>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (handler, kept, tls) = (handler.clone(), kept.clone(), tls.clone());
                tokio::spawn(async move {
                    match tls {
                        None => answer(tcp, &handler, &kept, None).await,
                        Some(config) => {
                            let acceptor = tokio_rustls::TlsAcceptor::from(config);
                            if let Ok(stream) = acceptor.accept(tcp).await {
                                let client_cert = stream.get_ref().1.peer_certificates().is_some();
                                answer(stream, &handler, &kept, Some(client_cert)).await;
                            }
                        }
                    }
                });
            }
        });
        Self { addr, seen, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Reads one request from `stream`, answers it, closes.
async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    handler: &Handler,
    kept: &Mutex<Vec<Seen>>,
    client_cert: Option<bool>,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.lines();
    let mut first = lines.next().unwrap_or_default().split_whitespace();
    let (method, path) = (
        first.next().unwrap_or_default(),
        first.next().unwrap_or_default(),
    );
    let mut headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    if let Some(has) = client_cert {
        headers.push(("x-client-certificate".into(), has.to_string()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let seen = Seen {
        method: method.to_owned(),
        path: path.to_owned(),
        headers,
        body: String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned(),
    };
    let reply = handler(&seen);
    kept.lock().unwrap().push(seen);
    tokio::time::sleep(reply.delay).await;
    let head = format!(
        "HTTP/1.1 {} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reply.code,
        reply.body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(&reply.body).await;
    let _ = stream.shutdown().await;
}

/// A `/metrics` endpoint whose text the test sets, for a real Prometheus
/// to scrape.
pub struct Exporter {
    pub http: FakeHttp,
    text: Arc<Mutex<String>>,
}

impl Exporter {
    pub async fn start(text: &str) -> Self {
        let shared = Arc::new(Mutex::new(text.to_owned()));
        let served = shared.clone();
        let http = FakeHttp::start(Arc::new(move |_| Reply {
            code: 200,
            body: served.lock().unwrap().clone().into_bytes(),
            delay: Duration::ZERO,
        }))
        .await;
        Self { http, text: shared }
    }

    pub fn set(&self, text: &str) {
        *self.text.lock().unwrap() = text.to_owned();
    }
}

/// A TCP proxy to `upstream` that holds each new connection for `delay`
/// (changeable) before passing it on.
pub struct SlowProxy {
    pub addr: SocketAddr,
    pub delay: Arc<Mutex<Duration>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SlowProxy {
    pub async fn start(upstream: SocketAddr, delay: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let delay = Arc::new(Mutex::new(delay));
        let held = delay.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let wait = *held.lock().unwrap();
                tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    if let Ok(mut server) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        Self { addr, delay, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Client options for `url` with a short timeout.
pub fn options(url: &str, timeout: Duration) -> ClientOptions {
    ClientOptions {
        url: url.to_owned(),
        ca_file: None,
        identity: None,
        token_file: None,
        timeout,
        max_response_bytes: 1 << 20,
    }
}

/// The plugin asking `url`, with the flags' defaults and no file.
pub fn plugin(url: &str, timeout: Duration) -> Analysis {
    plugin_with(options(url, timeout))
}

pub fn plugin_with(options: ClientOptions) -> Analysis {
    Analysis::new(
        Defaults::default(),
        Layer::default(),
        Prometheus::new(&options).unwrap(),
    )
}

/// A validation request for `cluster`, updated (Validating) at `since`,
/// with this `plugin_config_json`.
pub fn request(cluster: &str, since: SystemTime, config: &str) -> RolloutPluginRequest {
    let at = since.duration_since(SystemTime::UNIX_EPOCH).unwrap();
    RolloutPluginRequest {
        plugin_config_json: config.into(),
        rollout_status: Some(RolloutState {
            progressing: vec![ClusterRolloutStatus {
                cluster_name: cluster.into(),
                rollout_status: RolloutStatus::Validating.into(),
                manifest_revision_name: "rev-1".into(),
                last_transition_time: Some(prost_types::Timestamp {
                    seconds: i64::try_from(at.as_secs()).unwrap(),
                    nanos: i32::try_from(at.subsec_nanos()).unwrap(),
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..testing::rollout(cluster, 1, 1)
    }
}

/// A pluginConfig with one check of `query`, `op` and `threshold`, one
/// sample a second, three needed within 10 s, and `deadline`.
pub fn one_check(query: &str, op: &str, threshold: f64, deadline: &str) -> String {
    serde_json::json!({"prometheus": {
        "deadline": deadline,
        "checks": [{"name": "check", "query": query, "comparison": op, "threshold": threshold,
                    "window": "10s", "interval": "1s", "minSamples": 3}]
    }})
    .to_string()
}

/// Asks `plugin` about `request` every 300 ms until the answer is not
/// INPROGRESS (at most `within`); every answer on the way must not be
/// SUCCEEDED unless it is the last.
pub async fn settle(
    plugin: &Analysis,
    request: &RolloutPluginRequest,
    within: Duration,
) -> (Validation, Vec<Validation>) {
    let deadline = std::time::Instant::now() + within;
    let mut seen = Vec::new();
    loop {
        let v = plugin
            .validate_at(request, SystemTime::now())
            .await
            .unwrap();
        if v.result != ValidationResult::Inprogress {
            return (v, seen);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still INPROGRESS after {within:?}: {}",
            v.message
        );
        seen.push(v);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
