//! The load generator behind `hookbench`: many concurrent unary calls of
//! one `RolloutPluginService` hook against one target, with per-request
//! latency.
//!
//! The generator is meant to cost as little as possible next to the system
//! under test, which usually shares the machine with it:
//!
//! - the request message is built once; each call clones it, which for the
//!   ManifestWork is a reference-count bump of its `Bytes`;
//! - each connection is a bare hyper HTTP/2 client connection under the
//!   generated tonic client, without the `Buffer` task and reconnect logic of
//!   `tonic::transport::Channel`. A connection the server closes is not
//!   re-opened: its remaining calls fail and are counted as errors;
//! - latencies are kept as raw nanosecond samples per worker and only sorted
//!   once, at the end.

#![allow(
    clippy::disallowed_methods,
    reason = "latency is measured on the wall clock, against real servers; nothing here pauses tokio's"
)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rollout_proto::HookKind;
use rollout_proto::PLUGIN_METADATA_KEY;
use rollout_proto::v1alpha1::rollout_plugin_service_client::RolloutPluginServiceClient;
use rollout_proto::v1alpha1::{
    ClusterRolloutStatus, InitializeRequest, MutateManifestWorkRequest, RolloutPluginRequest,
    RolloutState, RolloutStatus, ValidateCompletionRequest,
};
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tonic::metadata::{AsciiMetadataValue, MetadataValue};

use crate::manifest::{WORK_NAMESPACE, manifest_work_json};
use crate::stats::{LatencySummary, round_to_tenth};

/// Largest gRPC message the generator sends or accepts.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;
/// HTTP/2 receive windows: large enough that a 4 MiB answer streams without
/// waiting for WINDOW_UPDATEs.
const STREAM_WINDOW: u32 = 4 << 20;
const CONNECTION_WINDOW: u32 = 16 << 20;
/// How long past its `grpc-timeout` a call may take before the generator
/// gives up on it itself (the server is expected to answer DEADLINE_EXCEEDED
/// first).
const CLIENT_GRACE: Duration = Duration::from_secs(1);
/// Distinct error messages kept for the report.
const ERROR_SAMPLES: usize = 5;

pub mod hook_flag;

/// When the measured phase ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Start no new call after this long.
    After(Duration),
    /// Make exactly this many calls.
    Requests(u64),
}

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// `http://HOST:PORT` of the plugin, gateway or proxy.
    pub target: String,
    /// The hook to call.
    pub hook: HookKind,
    /// Calls in flight at any time.
    pub concurrency: usize,
    /// Separate HTTP/2 connections; calls are spread over them round-robin.
    pub connections: usize,
    /// Size of the ManifestWork JSON sent to `MutateManifestWork`.
    pub work_bytes: usize,
    /// Value of the `ocm-rollout-plugin` metadata key, if any (needed by the gateway).
    pub plugin: Option<String>,
    /// When the measured phase ends.
    pub stop: Stop,
    /// Unmeasured calls made first, to open streams, fill caches and let
    /// the target's pools warm up.
    pub warmup: Duration,
    /// `grpc-timeout` of every call.
    pub timeout: Duration,
    /// Also record the latency of calls that fail (to measure how fast a
    /// target fails, e.g. with an open circuit); by default only successful
    /// calls count.
    pub latency_of_errors: bool,
}

/// The outcome of a run; this is `hookbench --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The target URL.
    pub target: String,
    /// The hook called.
    #[serde(with = "hook_flag")]
    pub hook: HookKind,
    /// Calls in flight.
    pub concurrency: usize,
    /// HTTP/2 connections.
    pub connections: usize,
    /// ManifestWork size in bytes (mutate only, else as configured).
    pub work_bytes: usize,
    /// Calls completed in the measured phase, errors included.
    pub requests: u64,
    /// Calls among `requests` that failed.
    pub errors: u64,
    /// Calls completed during the warm-up (not measured).
    #[serde(default)]
    pub warmup_requests: u64,
    /// Length of the measured phase, until the last call answered.
    pub duration_seconds: f64,
    /// `requests / duration_seconds`.
    pub throughput_rps: f64,
    /// Latency of the successful calls of the measured phase.
    pub latency_micros: LatencySummary,
    /// The first few distinct error messages.
    pub error_samples: Vec<String>,
}

/// A run that could not start.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The target is not an `http://HOST:PORT` URL.
    #[error("invalid target {target:?}: {reason}")]
    InvalidTarget {
        /// The target as given.
        target: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The TCP connection failed.
    #[error("cannot connect to {address}: {source}")]
    Connect {
        /// `HOST:PORT`.
        address: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// The HTTP/2 handshake failed.
    #[error("HTTP/2 handshake with {address} failed: {source}")]
    Handshake {
        /// `HOST:PORT`.
        address: String,
        /// The protocol error.
        source: hyper::Error,
    },
    /// The plugin name cannot be sent as a metadata value.
    #[error("plugin name {0:?} is not a valid gRPC metadata value")]
    InvalidPlugin(String),
    /// A count that must be positive is zero.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
}

/// Runs the warm-up, then the measured phase, and reports on the latter.
///
/// Fails only when the run cannot start (bad target, no connection); failed
/// calls are counted in the report.
pub async fn run(config: &LoadConfig) -> Result<Report, LoadError> {
    if config.concurrency == 0 {
        return Err(LoadError::Zero("concurrency"));
    }
    if config.connections == 0 {
        return Err(LoadError::Zero("connections"));
    }
    let target = Target::parse(&config.target)?;
    let mut clients = Vec::with_capacity(config.connections);
    for _ in 0..config.connections {
        clients.push(target.connect().await?);
    }
    let pool = Arc::new(Pool {
        clients,
        next: AtomicUsize::new(0),
    });
    let call = Arc::new(Call::new(config)?);

    let mut warmup_requests = 0;
    if !config.warmup.is_zero() {
        let warmup = phase(
            &pool,
            &call,
            config.concurrency,
            Stop::After(config.warmup),
            Record::Nothing,
        )
        .await;
        warmup_requests = warmup.requests;
    }

    let started = Instant::now();
    let measured = phase(
        &pool,
        &call,
        config.concurrency,
        config.stop,
        Record::Latencies {
            of_errors: config.latency_of_errors,
        },
    )
    .await;
    let elapsed = started.elapsed().as_secs_f64();

    let throughput = if elapsed > 0.0 {
        measured.requests as f64 / elapsed
    } else {
        0.0
    };
    Ok(Report {
        target: config.target.clone(),
        hook: config.hook,
        concurrency: config.concurrency,
        connections: config.connections,
        work_bytes: config.work_bytes,
        requests: measured.requests,
        errors: measured.errors,
        warmup_requests,
        duration_seconds: (elapsed * 1e6).round() / 1e6,
        throughput_rps: round_to_tenth(throughput),
        latency_micros: LatencySummary::from_nanos(measured.latencies),
        error_samples: measured.error_samples,
    })
}

/// The tonic client over one bare HTTP/2 connection.
type Client = RolloutPluginServiceClient<H2Connection>;

/// The parsed target.
struct Target {
    origin: http::Uri,
    address: String,
}

impl Target {
    fn parse(target: &str) -> Result<Self, LoadError> {
        let invalid = |reason| LoadError::InvalidTarget {
            target: target.to_owned(),
            reason,
        };
        let uri: http::Uri = target.parse().map_err(|_| invalid("not a URL"))?;
        if uri.scheme_str() != Some("http") {
            return Err(invalid(
                "only plaintext http://HOST:PORT targets are supported",
            ));
        }
        let authority = uri.authority().ok_or_else(|| invalid("no HOST:PORT"))?;
        let address = format!(
            "{}:{}",
            authority.host(),
            authority.port_u16().unwrap_or(80)
        );
        let origin = http::Uri::builder()
            .scheme("http")
            .authority(authority.as_str())
            .path_and_query("/")
            .build()
            .map_err(|_| invalid("not a URL"))?;
        Ok(Self { origin, address })
    }

    /// Opens one HTTP/2 (h2c, prior knowledge) connection.
    async fn connect(&self) -> Result<Client, LoadError> {
        let tcp = TcpStream::connect(&self.address)
            .await
            .map_err(|source| LoadError::Connect {
                address: self.address.clone(),
                source,
            })?;
        // Small unary calls: send each frame at once rather than wait for
        // Nagle's algorithm.
        tcp.set_nodelay(true).map_err(|source| LoadError::Connect {
            address: self.address.clone(),
            source,
        })?;
        let (send, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .handshake(TokioIo::new(tcp))
            .await
            .map_err(|source| LoadError::Handshake {
                address: self.address.clone(),
                source,
            })?;
        // Connection errors surface on the calls in flight; nothing to do here.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(
            RolloutPluginServiceClient::with_origin(H2Connection { send }, self.origin.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        )
    }
}

/// One hyper HTTP/2 connection as a tower service, the transport of the
/// tonic client.
#[derive(Clone)]
struct H2Connection {
    send: SendRequest<tonic::body::Body>,
}

impl tower::Service<http::Request<tonic::body::Body>> for H2Connection {
    type Response = http::Response<Incoming>;
    type Error = hyper::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.send.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.send.send_request(request))
    }
}

/// The connections, handed out round-robin per call.
struct Pool {
    clients: Vec<Client>,
    next: AtomicUsize,
}

impl Pool {
    fn pick(&self) -> Client {
        let index = self.next.fetch_add(1, Ordering::Relaxed) % self.clients.len();
        self.clients[index].clone()
    }
}

/// The pre-built request of a run.
struct Call {
    message: Message,
    plugin: Option<AsciiMetadataValue>,
    timeout: Duration,
}

enum Message {
    Initialize(InitializeRequest),
    Begin(RolloutPluginRequest),
    Progress(RolloutPluginRequest),
    Validate(ValidateCompletionRequest),
    Mutate(MutateManifestWorkRequest),
}

impl Call {
    fn new(config: &LoadConfig) -> Result<Self, LoadError> {
        let plugin = config
            .plugin
            .as_deref()
            .map(|name| {
                MetadataValue::try_from(name).map_err(|_| LoadError::InvalidPlugin(name.to_owned()))
            })
            .transpose()?;
        let message = match config.hook {
            HookKind::Initialize => Message::Initialize(InitializeRequest {
                controller_version: "hookbench".to_owned(),
                hub_name: "bench-hub".to_owned(),
            }),
            HookKind::BeginRollout => Message::Begin(rollout_request()),
            HookKind::ProgressRollout => Message::Progress(rollout_request()),
            HookKind::ValidateRolloutCompletion => Message::Validate(ValidateCompletionRequest {
                rollout: Some(rollout_request()),
            }),
            HookKind::MutateManifestWork => Message::Mutate(MutateManifestWorkRequest {
                rollout: Some(rollout_request()),
                manifest_work: Bytes::from(manifest_work_json(config.work_bytes)),
            }),
        };
        Ok(Self {
            message,
            plugin,
            timeout: config.timeout,
        })
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(plugin) = &self.plugin {
            request
                .metadata_mut()
                .insert(PLUGIN_METADATA_KEY, plugin.clone());
        }
        request.set_timeout(self.timeout);
        request
    }

    /// Makes one call; the answer itself is dropped.
    async fn send(&self, client: &mut Client) -> Result<(), tonic::Status> {
        let answer = async {
            match &self.message {
                Message::Initialize(m) => {
                    client.initialize(self.request(m.clone())).await.map(drop)
                }
                Message::Begin(m) => client
                    .begin_rollout(self.request(m.clone()))
                    .await
                    .map(drop),
                Message::Progress(m) => client
                    .progress_rollout(self.request(m.clone()))
                    .await
                    .map(drop),
                Message::Validate(m) => client
                    .validate_rollout_completion(self.request(m.clone()))
                    .await
                    .map(drop),
                Message::Mutate(m) => client
                    .mutate_manifest_work(self.request(m.clone()))
                    .await
                    .map(drop),
            }
        };
        match tokio::time::timeout(self.timeout + CLIENT_GRACE, answer).await {
            Ok(result) => result,
            Err(_) => Err(tonic::Status::deadline_exceeded(
                "no answer within the timeout (gave up client-side)",
            )),
        }
    }
}

/// The per-cluster request of a rollout in progress: cluster 2 of 10, one
/// cluster already done.
fn rollout_request() -> RolloutPluginRequest {
    let done = ClusterRolloutStatus {
        cluster_name: "cluster-000".to_owned(),
        rollout_status: RolloutStatus::Succeeded as i32,
        manifest_revision_name: "bench-app-7".to_owned(),
        last_transition_time: Some(prost_types::Timestamp {
            seconds: 1_700_000_000,
            nanos: 0,
        }),
        group_index: 0,
        group_name: "canary".to_owned(),
    };
    RolloutPluginRequest {
        mwrs_name: "bench-mwrs".to_owned(),
        mwrs_namespace: "default".to_owned(),
        placement_name: "bench-placement".to_owned(),
        cluster_name: WORK_NAMESPACE.to_owned(),
        total_cluster_count: 10,
        rollout_status: Some(RolloutState {
            completed: vec![done],
            ..RolloutState::default()
        }),
        desired_revision: "bench-app-7".to_owned(),
        aborting: false,
        cluster_index: 2,
        ..Default::default()
    }
}

/// What the workers of one phase saw.
#[derive(Default)]
struct PhaseOutcome {
    requests: u64,
    errors: u64,
    latencies: Vec<u64>,
    error_samples: Vec<String>,
}

impl PhaseOutcome {
    fn record_error(&mut self, message: String) {
        self.errors += 1;
        if self.error_samples.len() < ERROR_SAMPLES && !self.error_samples.contains(&message) {
            self.error_samples.push(message);
        }
    }

    fn merge(&mut self, other: PhaseOutcome) {
        self.requests += other.requests;
        self.errors += other.errors;
        self.latencies.extend(other.latencies);
        for message in other.error_samples {
            if self.error_samples.len() < ERROR_SAMPLES && !self.error_samples.contains(&message) {
                self.error_samples.push(message);
            }
        }
    }
}

/// Which latencies a phase keeps.
#[derive(Debug, Clone, Copy)]
enum Record {
    /// None (the warm-up).
    Nothing,
    /// Those of successful calls, and of failed ones too when `of_errors`.
    Latencies { of_errors: bool },
}

/// Runs `concurrency` workers, each making one call after another, until
/// `stop`; latencies are kept as `record` says.
async fn phase(
    pool: &Arc<Pool>,
    call: &Arc<Call>,
    concurrency: usize,
    stop: Stop,
    record: Record,
) -> PhaseOutcome {
    let started = Instant::now();
    let issued = Arc::new(AtomicU64::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (pool, call, issued) = (Arc::clone(pool), Arc::clone(call), Arc::clone(&issued));
        workers.spawn(async move {
            let mut outcome = PhaseOutcome::default();
            loop {
                let go_on = match stop {
                    Stop::After(duration) => started.elapsed() < duration,
                    Stop::Requests(limit) => issued.fetch_add(1, Ordering::Relaxed) < limit,
                };
                if !go_on {
                    break;
                }
                let mut client = pool.pick();
                let begun = Instant::now();
                let result = call.send(&mut client).await;
                let latency = begun.elapsed();
                outcome.requests += 1;
                let keep = match (record, &result) {
                    (Record::Nothing, _) => false,
                    (Record::Latencies { .. }, Ok(())) => true,
                    (Record::Latencies { of_errors }, Err(_)) => of_errors,
                };
                if keep {
                    outcome
                        .latencies
                        .push(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX));
                }
                if let Err(status) = result {
                    outcome.record_error(describe(&status));
                }
            }
            outcome
        });
    }
    let mut total = PhaseOutcome::default();
    while let Some(joined) = workers.join_next().await {
        match joined {
            Ok(outcome) => total.merge(outcome),
            // A worker does not panic; should one, say so in the report.
            Err(error) => total.record_error(format!("worker failed: {error}")),
        }
    }
    total
}

/// `Code: message (cause)`, short enough to group errors by.
fn describe(status: &tonic::Status) -> String {
    use std::error::Error as _;
    let mut text = format!("{:?}: {}", status.code(), status.message());
    let mut source = status.source();
    while let Some(cause) = source {
        text.push_str(&format!(" ({cause})"));
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let target = Target::parse("http://127.0.0.1:10843").expect("valid");
        assert_eq!(target.address, "127.0.0.1:10843");
        assert_eq!(target.origin.to_string(), "http://127.0.0.1:10843/");
        assert_eq!(
            Target::parse("http://localhost").expect("valid").address,
            "localhost:80"
        );
        assert!(Target::parse("https://127.0.0.1:1").is_err());
        assert!(Target::parse("127.0.0.1:1").is_err());
        assert!(Target::parse("not a url").is_err());
    }

    #[test]
    fn error_samples_are_distinct_and_few() {
        let mut outcome = PhaseOutcome::default();
        for i in 0..20 {
            outcome.record_error(format!("error {}", i % 7));
        }
        assert_eq!(outcome.errors, 20);
        assert_eq!(outcome.error_samples.len(), ERROR_SAMPLES);
        assert_eq!(outcome.error_samples[0], "error 0");
    }
}
