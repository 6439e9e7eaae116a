//! [`GatewayHooks`]: the [`Hooks`] over gRPC to the rollout gateway.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rollout_proto::partial::RolloutFields;
use rollout_proto::v1alpha1::{InitializeResponse, MutateManifestWorkResponse, ValidateResponse};
use rollout_proto::{
    FAILED_OPEN_METADATA_KEY, MUTATED_BY_METADATA_KEY, PLUGIN_METADATA_KEY, SERVICE_NAME,
};
use thiserror::Error;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::request::{MutateWire, RolloutRequest, ValidateWire};
use super::{
    Call, HookAnswer, HookCounters, HookCounts, HookError, HookKind, HookRequest, Hooks, Mutation,
};
use crate::telemetry::Tracing;

/// `--gateway` when not given: the gateway's default listen address.
pub const DEFAULT_GATEWAY_URL: &str = "http://127.0.0.1:10843";

/// The deadline of each call when not configured: the contract's limit.
pub(crate) const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest message sent or accepted, as the gateway's default.
const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// How the gateway is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayOptions {
    /// The gateway's gRPC address, such as `http://127.0.0.1:10843`
    /// (plaintext h2c) or `https://rollout-gateway.ns:10843` (TLS, with
    /// [`GatewayOptions::tls`]).
    pub url: String,
    /// The deadline of each call, sent as `grpc-timeout`; at most 30 s
    /// (longer values are cut to 30 s).
    pub timeout: Duration,
    /// TLS towards a central gateway.
    pub tls: Option<GatewayTls>,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        GatewayOptions {
            url: DEFAULT_GATEWAY_URL.into(),
            timeout: DEFAULT_HOOK_TIMEOUT,
            tls: None,
        }
    }
}

/// TLS towards the gateway (central mode, docs/security.md).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GatewayTls {
    /// The CA bundle (PEM) that signed the gateway's certificate.
    pub ca_pem: Option<Vec<u8>>,
    /// The client certificate and key (PEM) presented to the gateway; the
    /// certificate's first DNS SAN (else its CN) names the hub.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// The name to verify in the gateway's certificate, when not the URL's
    /// host.
    pub domain: Option<String>,
}

impl GatewayOptions {
    /// The options for the gateway at `url`, with the TLS settings read
    /// from `files` (see [`GatewayTls::read`]).
    pub fn read(
        url: String,
        timeout: Duration,
        files: &GatewayTlsFiles,
    ) -> Result<GatewayOptions, GatewayTlsError> {
        let tls = GatewayTls::read(&url, files)?;
        Ok(GatewayOptions { url, timeout, tls })
    }
}

/// Where [`GatewayTls`] comes from: the files the command line names
/// (`--gateway-ca`, `--client-cert` with `--client-key`,
/// `--gateway-server-name`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GatewayTlsFiles {
    /// The CA bundle (PEM) that signed the gateway's certificate.
    pub ca: Option<PathBuf>,
    /// The client certificate and its key (PEM).
    pub identity: Option<(PathBuf, PathBuf)>,
    /// The name to verify in the gateway's certificate, when not the URL's
    /// host.
    pub server_name: Option<String>,
}

/// The TLS settings towards the gateway cannot be used.
#[derive(Debug, Error)]
pub enum GatewayTlsError {
    /// A CA or a client certificate for a plaintext gateway.
    #[error("--gateway-ca and --client-cert need an https:// --gateway")]
    NotHttps,
    /// A file could not be read.
    #[error("reading {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl GatewayTls {
    /// The TLS settings towards the gateway at `url`, reading `files`: none
    /// for an `http://` gateway without a CA or a client certificate, the
    /// files' contents for an `https://` one. A CA or a client certificate
    /// for an `http://` gateway is an error rather than plaintext, since it
    /// says TLS was meant.
    pub(crate) fn read(
        url: &str,
        files: &GatewayTlsFiles,
    ) -> Result<Option<GatewayTls>, GatewayTlsError> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|source| GatewayTlsError::Read {
                path: path.clone(),
                source,
            })
        };
        let https = url.starts_with("https://");
        if !https && files.ca.is_none() && files.identity.is_none() {
            return Ok(None);
        }
        if !https {
            return Err(GatewayTlsError::NotHttps);
        }
        let identity = match &files.identity {
            Some((cert, key)) => Some((read(cert)?, read(key)?)),
            None => None,
        };
        Ok(Some(GatewayTls {
            ca_pem: files.ca.as_ref().map(read).transpose()?,
            identity,
            domain: files.server_name.clone(),
        }))
    }
}

/// The gateway address is unusable.
#[derive(Debug, Error)]
#[error("invalid gateway URL {url:?}: {problem}")]
pub struct GatewayError {
    url: String,
    #[source]
    problem: UrlProblem,
}

/// What is wrong with a gateway address.
#[derive(Debug, Error)]
pub(crate) enum UrlProblem {
    /// `HOST:PORT` without `http://` or `https://`.
    #[error(
        "it has no scheme; write http://{0} for a plaintext gateway or https://{0} for a TLS one"
    )]
    NoScheme(String),
    /// A scheme other than `http` and `https`.
    #[error(
        "the scheme {scheme:?} is neither http (plaintext) nor https (TLS); write \
         http://{rest} or https://{rest}"
    )]
    Scheme {
        /// The scheme given.
        scheme: String,
        /// The address after it.
        rest: String,
    },
    /// The client refused the address or its TLS settings.
    #[error(transparent)]
    Transport(#[from] tonic::transport::Error),
}

/// `url` if it is a gateway address the client can use: `http://HOST:PORT`
/// (plaintext h2c) or `https://HOST:PORT` (TLS). A bare `HOST:PORT` is
/// refused with the right form in the message, since without a scheme every
/// call would fail later with only "transport error".
pub fn check_gateway_url(url: &str) -> Result<(), GatewayError> {
    let invalid = |problem: UrlProblem| GatewayError {
        url: url.to_owned(),
        problem,
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(invalid(UrlProblem::NoScheme(url.to_owned())));
    };
    if scheme != "http" && scheme != "https" {
        return Err(invalid(UrlProblem::Scheme {
            scheme: scheme.to_owned(),
            rest: rest.to_owned(),
        }));
    }
    Endpoint::from_shared(url.to_owned()).map_err(|e| invalid(e.into()))?;
    Ok(())
}

/// The rollout gateway's client: one channel, connected on first use and
/// again whenever it breaks; every call names its plugin in the
/// `ocm-rollout-plugin` metadata key, carries a `grpc-timeout` and the
/// `traceparent` of its own client span, and is counted. Cheap to clone
/// (clones share the channel and the counters).
#[derive(Debug, Clone)]
pub struct GatewayHooks {
    client: tonic::client::Grpc<Channel>,
    /// The gateway's address, for the hook spans' `server.address` and
    /// `server.port`.
    url: Arc<str>,
    timeout: Duration,
    telemetry: Tracing,
    counters: Arc<HookCounters>,
}

impl GatewayHooks {
    /// A client of the gateway at `options.url`. Does not connect: the
    /// first call does. Must be called inside a Tokio runtime. Fails only on
    /// a malformed URL.
    pub fn new(options: &GatewayOptions, telemetry: Tracing) -> Result<GatewayHooks, GatewayError> {
        let timeout = options.timeout.min(DEFAULT_HOOK_TIMEOUT);
        let invalid = |e: tonic::transport::Error| GatewayError {
            url: options.url.clone(),
            problem: e.into(),
        };
        check_gateway_url(&options.url)?;
        let mut endpoint = Endpoint::from_shared(options.url.clone()).map_err(invalid)?;
        if let Some(tls) = &options.tls {
            let mut config = ClientTlsConfig::new();
            if let Some(ca) = &tls.ca_pem {
                config = config.ca_certificate(Certificate::from_pem(ca));
            }
            if let Some((cert, key)) = &tls.identity {
                config = config.identity(Identity::from_pem(cert, key));
            }
            if let Some(domain) = &tls.domain {
                config = config.domain_name(domain.clone());
            }
            endpoint = endpoint.tls_config(config).map_err(invalid)?;
        }
        // The gateway enforces the deadline itself and answers
        // DEADLINE_EXCEEDED; the channel also ends a call whose
        // `grpc-timeout` passed without an answer (a gateway that hangs),
        // which `HookError::from_status` reads as DEADLINE_EXCEEDED.
        let endpoint = endpoint
            .connect_timeout(Duration::from_secs(5))
            .timeout(timeout + Duration::from_secs(1))
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_while_idle(true);
        // The generic client rather than the generated one: the requests are
        // `RolloutRequest`s, whose shared state the generated types would
        // have to copy.
        let client = tonic::client::Grpc::new(endpoint.connect_lazy())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(GatewayHooks {
            client,
            url: Arc::from(options.url.as_str()),
            timeout,
            telemetry,
            counters: Arc::new(HookCounters::default()),
        })
    }

    /// The calls made so far, per hook.
    pub fn counts(&self) -> HookCounts {
        self.counters.snapshot()
    }

    /// The deadline of each call.
    #[cfg(test)]
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// A request for `call` carrying `message`, the plugin key, the deadline
    /// and the trace context of `span`.
    fn request<T>(
        &self,
        call: Call<'_>,
        message: T,
        traceparent: &str,
    ) -> Result<tonic::Request<T>, tonic::Status> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(self.timeout);
        let metadata = request.metadata_mut();
        let plugin = MetadataValue::try_from(call.plugin).map_err(|_| {
            tonic::Status::invalid_argument(format!(
                "plugin name {:?} is not a valid metadata value",
                call.plugin
            ))
        })?;
        metadata.insert(PLUGIN_METADATA_KEY, plugin);
        if let Ok(value) = MetadataValue::try_from(traceparent) {
            metadata.insert("traceparent", value);
        }
        Ok(request)
    }

    /// Makes one call: counts it, wraps it in a client span (with the
    /// members that failed open and a validation's verdict), sends it, and
    /// turns a failure into a [`HookError`].
    async fn exchange<Req, Resp>(
        &self,
        hook: HookKind,
        call: Call<'_>,
        rollout: Option<&RolloutFields>,
        message: Req,
    ) -> Result<tonic::Response<Resp>, HookError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + MaybeVerdict + 'static,
    {
        self.counters.record(hook);
        let mut span = self
            .telemetry
            .hook_span(call.trace, hook, call.plugin, &self.url, rollout);
        let result = match self.request(call, message, &span.traceparent()) {
            Ok(request) => self.send::<_, Resp>(hook, request).await,
            Err(status) => Err(status),
        };
        match result {
            Ok(response) => {
                let failed_open = trailer_list(response.metadata(), FAILED_OPEN_METADATA_KEY);
                span.set_failed_open(&failed_open);
                if let Some(answer) = response.get_ref().validation() {
                    span.set_validation(call.plugin, answer);
                }
                span.finish(tonic::Code::Ok, "");
                Ok(response)
            }
            Err(status) => {
                span.finish(status.code(), status.message());
                tracing::debug!(
                    hook = hook.as_str(),
                    plugin = call.plugin,
                    code = super::code_name(status.code()),
                    message = status.message(),
                    "hook call failed"
                );
                Err(HookError::from_status(hook, &status))
            }
        }
    }

    /// Sends one unary call of `hook` on the shared channel.
    async fn send<Req, Resp>(
        &self,
        hook: HookKind,
        mut request: tonic::Request<Req>,
    ) -> Result<tonic::Response<Resp>, tonic::Status>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let mut client = self.client.clone();
        client.ready().await.map_err(|e| {
            tonic::Status::unavailable(format!("the gateway connection is not ready: {e}"))
        })?;
        let path = format!("/{SERVICE_NAME}/{}", hook.as_str());
        let path = http::uri::PathAndQuery::try_from(path)
            .map_err(|e| tonic::Status::internal(format!("method path: {e}")))?;
        request
            .extensions_mut()
            .insert(tonic::GrpcMethod::new(SERVICE_NAME, hook.as_str()));
        let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
        client.unary(request, path, codec).await
    }
}

/// What a hook's answer says on its span beyond the code: a validation's
/// verdict.
trait MaybeVerdict {
    /// The validation answer, for ValidateRolloutCompletion.
    fn validation(&self) -> Option<&ValidateResponse> {
        None
    }
}

impl MaybeVerdict for ValidateResponse {
    fn validation(&self) -> Option<&ValidateResponse> {
        Some(self)
    }
}

impl MaybeVerdict for InitializeResponse {}

impl MaybeVerdict for MutateManifestWorkResponse {}

impl MaybeVerdict for () {}

/// A comma-separated trailer as a list (absent or empty: none).
fn trailer_list(metadata: &MetadataMap, key: &str) -> Vec<String> {
    metadata
        .get(key)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

impl Hooks for GatewayHooks {
    async fn call(&self, call: Call<'_>, request: HookRequest) -> Result<HookAnswer, HookError> {
        match request {
            HookRequest::Initialize(request) => {
                let response = self
                    .exchange(HookKind::Initialize, call, None, request)
                    .await?;
                Ok(HookAnswer::Initialized(response.into_inner()))
            }
            HookRequest::BeginRollout(request) => {
                self.empty(HookKind::BeginRollout, call, request).await
            }
            HookRequest::ProgressRollout(request) => {
                self.empty(HookKind::ProgressRollout, call, request).await
            }
            HookRequest::ValidateRolloutCompletion(request) => {
                let rollout = request.fields();
                let message = ValidateWire {
                    rollout: Some(request),
                };
                let hook = HookKind::ValidateRolloutCompletion;
                let response = self.exchange(hook, call, Some(&rollout), message).await?;
                Ok(HookAnswer::Validated(response.into_inner()))
            }
            HookRequest::MutateManifestWork(request, manifest_work) => {
                self.mutate(call, request, manifest_work).await
            }
        }
    }
}

impl GatewayHooks {
    /// `BeginRollout` or `ProgressRollout`: the request as it is, an empty
    /// answer.
    async fn empty(
        &self,
        hook: HookKind,
        call: Call<'_>,
        request: RolloutRequest,
    ) -> Result<HookAnswer, HookError> {
        let rollout = request.fields();
        self.exchange::<_, ()>(hook, call, Some(&rollout), request)
            .await?;
        Ok(HookAnswer::Done)
    }

    /// `MutateManifestWork`: the work beside the request, the answer's work
    /// and its `mutated-by` and `failed-open` trailers.
    async fn mutate(
        &self,
        call: Call<'_>,
        request: RolloutRequest,
        manifest_work: Bytes,
    ) -> Result<HookAnswer, HookError> {
        let rollout = request.fields();
        let message = MutateWire {
            rollout: Some(request),
            manifest_work,
        };
        let response = self
            .exchange::<_, MutateManifestWorkResponse>(
                HookKind::MutateManifestWork,
                call,
                Some(&rollout),
                message,
            )
            .await?;
        let mutated_by = trailer_list(response.metadata(), MUTATED_BY_METADATA_KEY);
        let failed_open = trailer_list(response.metadata(), FAILED_OPEN_METADATA_KEY);
        let work = response.into_inner().manifest_work;
        Ok(HookAnswer::Mutated(Mutation {
            work: (!work.is_empty()).then_some(work),
            mutated_by,
            failed_open,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gateway_url_needs_http_or_https() {
        for good in ["http://127.0.0.1:10843", "https://gateway.ns:10843"] {
            assert!(check_gateway_url(good).is_ok(), "{good}");
        }
        let bare = check_gateway_url("127.0.0.1:10843")
            .expect_err("refused")
            .to_string();
        assert!(
            bare.contains("http://127.0.0.1:10843") && bare.contains("https://127.0.0.1:10843"),
            "{bare}"
        );
        let other = check_gateway_url("grpc://127.0.0.1:10843")
            .expect_err("refused")
            .to_string();
        assert!(other.contains("http://127.0.0.1:10843"), "{other}");
    }

    #[test]
    fn trailers_split_on_commas() {
        let mut md = MetadataMap::new();
        md.insert(
            MUTATED_BY_METADATA_KEY,
            MetadataValue::from_static("a, b,,c"),
        );
        assert_eq!(trailer_list(&md, MUTATED_BY_METADATA_KEY), ["a", "b", "c"]);
        assert!(trailer_list(&md, FAILED_OPEN_METADATA_KEY).is_empty());
    }

    #[tokio::test]
    async fn the_deadline_is_at_most_30_seconds() {
        let options = GatewayOptions {
            url: "http://127.0.0.1:1".into(),
            timeout: Duration::from_secs(120),
            tls: None,
        };
        let hooks = GatewayHooks::new(&options, Tracing::disabled()).expect("valid URL");
        assert_eq!(hooks.timeout(), Duration::from_secs(30));
        let bad = GatewayOptions {
            url: "not a url".into(),
            ..GatewayOptions::default()
        };
        let err = GatewayHooks::new(&bad, Tracing::disabled()).expect_err("invalid");
        assert!(err.to_string().contains("not a url"), "{err}");
    }
}
