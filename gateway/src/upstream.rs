//! One plugin as the gateway reaches it: an HTTP/2 channel (plaintext or TLS
//! with the plugin's own CA bundle), and what the gateway has learned of the
//! hooks it implements.
//!
//! An [`Upstream`] outlives registry reloads for as long as its
//! [`UpstreamKey`] (endpoint and TLS settings) does not change, so the
//! connection, and the knowledge gathered on it, is kept.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use rollout_proto::v1alpha1::rollout_plugin_service_client::RolloutPluginServiceClient;
use rollout_proto::v1alpha1::{Hook, InitializeResponse};
use tokio::time::Instant;
use tonic::metadata::MetadataMap;
use tonic::transport::{
    Certificate, Channel, ClientTlsConfig, Endpoint as TonicEndpoint, Identity,
};
use tonic::{Code, Status};

use crate::config::{Endpoint, Transport};
use crate::hooks::{HookKind, HookRequest, HookResponse};

/// What makes two registry entries the same connection: a plugin whose key did
/// not change across a reload keeps its [`Upstream`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UpstreamKey {
    pub endpoint: Endpoint,
    pub transport: Transport,
    /// The gateway's client certificate and key (PEM), when it presents one.
    pub client_identity: Option<ClientIdentity>,
}

/// A client certificate chain and key, as PEM bytes read from the configured files.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ClientIdentity {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for ClientIdentity {
    // The key is a secret: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ClientIdentity {{ cert: {} bytes, key: <redacted> }}",
            self.cert_pem.len()
        )
    }
}

/// Settings shared by every upstream channel.
#[derive(Debug, Clone)]
pub struct ChannelSettings {
    /// Largest message sent to or accepted from a plugin.
    pub max_message_bytes: usize,
    pub connect_timeout: Duration,
}

impl Default for ChannelSettings {
    fn default() -> Self {
        ChannelSettings {
            max_message_bytes: 16 * 1024 * 1024,
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// Bit set in [`Upstream::hooks`] once an `InitializeResponse` has been seen.
const HOOKS_KNOWN: u8 = 1 << 7;

/// A connection to one plugin.
#[derive(Debug)]
pub struct Upstream {
    key: UpstreamKey,
    client: RolloutPluginServiceClient<Channel>,
    /// `HOOKS_KNOWN` plus one bit per implemented `Hook` (bit = enum value).
    hooks: AtomicU8,
}

/// An upstream could not be set up (bad TLS material).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UpstreamError(String);

impl Upstream {
    /// Sets up a lazily connected channel: nothing is dialled until the first call.
    pub fn new(key: UpstreamKey, settings: &ChannelSettings) -> Result<Upstream, UpstreamError> {
        let scheme = match key.transport {
            Transport::Plaintext => "http",
            Transport::Tls { .. } => "https",
        };
        let uri = format!("{scheme}://{}", key.endpoint);
        let mut endpoint = TonicEndpoint::from_shared(uri.clone())
            .map_err(|e| UpstreamError(format!("invalid endpoint {uri}: {e}")))?
            .connect_timeout(settings.connect_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(10))
            // Large windows: a 64 KiB ManifestWork must not wait for a
            // WINDOW_UPDATE round trip, and 16 MiB ones should stream.
            .initial_stream_window_size(Some(4 * 1024 * 1024))
            .initial_connection_window_size(Some(8 * 1024 * 1024));
        if let Transport::Tls { ca_bundle_pem } = &key.transport {
            // Only the plugin's own CA bundle is trusted, never system roots.
            let mut tls = ClientTlsConfig::new()
                .ca_certificate(Certificate::from_pem(ca_bundle_pem))
                .domain_name(key.endpoint.host.clone());
            if let Some(id) = &key.client_identity {
                tls = tls.identity(Identity::from_pem(&id.cert_pem, &id.key_pem));
            }
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| UpstreamError(format!("TLS settings for {}: {e}", key.endpoint)))?;
        }
        let channel = endpoint.connect_lazy();
        let client = RolloutPluginServiceClient::new(channel)
            .max_decoding_message_size(settings.max_message_bytes)
            .max_encoding_message_size(settings.max_message_bytes);
        Ok(Upstream {
            key,
            client,
            hooks: AtomicU8::new(0),
        })
    }

    pub fn key(&self) -> &UpstreamKey {
        &self.key
    }

    /// Whether the plugin is known to leave `kind` out. Unknown (no
    /// `InitializeResponse` seen yet) means it is called, and an UNIMPLEMENTED
    /// answer skips it then.
    pub fn skips(&self, kind: HookKind) -> bool {
        let Some(hook) = kind.proto_hook() else {
            return false;
        };
        let bits = self.hooks.load(Ordering::Relaxed);
        bits & HOOKS_KNOWN != 0 && bits & (1 << hook as u8) == 0
    }

    /// Records the hooks of the latest `InitializeResponse` seen from the plugin.
    pub fn learn(&self, answer: &InitializeResponse) {
        let mut bits = HOOKS_KNOWN;
        if answer.hooks.is_empty() {
            for h in Hook::ALL {
                bits |= 1 << h as u8;
            }
        } else {
            for h in &answer.hooks {
                if let Ok(h) = Hook::try_from(*h)
                    && h != Hook::Unspecified
                {
                    bits |= 1 << h as u8;
                }
            }
        }
        self.hooks.store(bits, Ordering::Relaxed);
    }

    /// The hooks learned so far, by name; `None` when none was learned.
    pub fn known_hooks(&self) -> Option<Vec<&'static str>> {
        let bits = self.hooks.load(Ordering::Relaxed);
        (bits & HOOKS_KNOWN != 0).then(|| {
            Hook::ALL
                .iter()
                .filter(|h| bits & (1 << **h as u8) != 0)
                .map(|h| match h {
                    Hook::BeginRollout => "BeginRollout",
                    Hook::ProgressRollout => "ProgressRollout",
                    Hook::ValidateRolloutCompletion => "ValidateRolloutCompletion",
                    _ => "MutateManifestWork",
                })
                .collect()
        })
    }

    /// One call to the plugin, bounded by `deadline`, whose remaining time is
    /// sent on as the plugin's `grpc-timeout`. `forward` holds the caller's
    /// metadata to pass on (trace context).
    ///
    /// Errors: the plugin's own status; DEADLINE_EXCEEDED when the deadline
    /// passes first; UNAVAILABLE when the plugin cannot be reached.
    pub async fn call(
        &self,
        request: HookRequest,
        deadline: Instant,
        forward: &MetadataMap,
    ) -> Result<HookResponse, Status> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(Status::deadline_exceeded(
                "deadline exceeded before the call",
            ));
        }
        let mut client = self.client.clone();
        let call = async move {
            match request {
                HookRequest::Initialize(m) => client
                    .initialize(outgoing(m, remaining, forward))
                    .await
                    .map(|r| HookResponse::Initialize(r.into_inner())),
                HookRequest::BeginRollout(m) => client
                    .begin_rollout(outgoing(m, remaining, forward))
                    .await
                    .map(|_| HookResponse::Empty),
                HookRequest::ProgressRollout(m) => client
                    .progress_rollout(outgoing(m, remaining, forward))
                    .await
                    .map(|_| HookResponse::Empty),
                HookRequest::ValidateRolloutCompletion(m) => client
                    .validate_rollout_completion(outgoing(m, remaining, forward))
                    .await
                    .map(|r| HookResponse::ValidateRolloutCompletion(r.into_inner())),
                HookRequest::MutateManifestWork(m) => client
                    .mutate_manifest_work(outgoing(m, remaining, forward))
                    .await
                    .map(|r| HookResponse::MutateManifestWork(r.into_inner())),
            }
        };
        match tokio::time::timeout_at(deadline, call).await {
            Ok(Ok(answer)) => {
                if let HookResponse::Initialize(init) = &answer {
                    self.learn(init);
                }
                Ok(answer)
            }
            Ok(Err(status)) => Err(normalise(status, remaining)),
            Err(_) => Err(Status::deadline_exceeded(format!(
                "no answer within {} ms",
                remaining.as_millis()
            ))),
        }
    }
}

/// Builds the outgoing request: the remaining time as `grpc-timeout`, and the
/// forwarded caller metadata.
fn outgoing<T>(message: T, remaining: Duration, forward: &MetadataMap) -> tonic::Request<T> {
    let mut req = tonic::Request::new(message);
    req.set_timeout(remaining);
    if !forward.is_empty() {
        let md = req.metadata_mut();
        for kv in forward.iter() {
            if let tonic::metadata::KeyAndValueRef::Ascii(k, v) = kv {
                md.insert(k.clone(), v.clone());
            }
        }
    }
    req
}

/// Makes the plugin's answer read well through the gateway: a plugin server
/// that gave up on the forwarded `grpc-timeout` says CANCELLED, which is our
/// deadline passing; a too-large answer is RESOURCE_EXHAUSTED.
fn normalise(status: Status, remaining: Duration) -> Status {
    match status.code() {
        Code::Cancelled if status.message().contains("Timeout expired") => {
            Status::deadline_exceeded(format!("no answer within {} ms", remaining.as_millis()))
        }
        Code::OutOfRange if status.message().contains("message length too large") => {
            Status::resource_exhausted(format!("answer too large: {}", status.message()))
        }
        _ => status,
    }
}
