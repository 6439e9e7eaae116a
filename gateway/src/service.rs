//! The gateway's `RolloutPluginService`, spoken at the HTTP/2 level: it reads
//! the target from the `ocm-rollout-plugin` header and the caller's deadline
//! from `grpc-timeout`, loads the registry snapshot once, decodes the one
//! request message, hands the call to the router, and answers with the
//! message and its trailers (`grpc-status`, `ocm-rollout-mutated-by`,
//! `ocm-rollout-failed-open`) ready together, so the answer leaves in one
//! write.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use http_body::Body;
use rollout_proto::v1alpha1::{
    InitializeRequest, MutateManifestWorkRequest, MutateManifestWorkResponse, RolloutPluginRequest,
    ValidateCompletionRequest,
};
use rollout_proto::{FAILED_OPEN_METADATA_KEY, MUTATED_BY_METADATA_KEY, PLUGIN_METADATA_KEY};
use tokio::time::Instant;
use tonic::{Code, Status};

use crate::error::GatewayError;
use crate::grpc::{self, UnaryBody};
use crate::hooks::HookKind;
use crate::registry::Registry;
use crate::router::CallContext;

/// The caller's hub identity, set on each request by the server in central
/// mode (from the client certificate); absent otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerHub(pub String);

/// Caller headers passed on to plugins unchanged.
const FORWARDED_KEYS: [&str; 2] = ["traceparent", "tracestate"];

/// The gateway's gRPC service, as a tower service over HTTP requests.
#[derive(Debug, Clone)]
pub struct GatewayService {
    registry: Arc<Registry>,
    max_message_bytes: usize,
}

/// What a call answers: a message and the trailers to add, or a status.
type Answer = Result<(Bytes, Vec<(&'static str, String)>), Status>;

impl GatewayService {
    pub fn new(registry: Arc<Registry>, max_message_bytes: usize) -> GatewayService {
        GatewayService {
            registry,
            max_message_bytes,
        }
    }

    async fn handle<B>(self, request: http::Request<B>) -> http::Response<UnaryBody>
    where
        B: Body<Data = Bytes>,
        B::Error: std::fmt::Display,
    {
        let received = Instant::now();
        let (parts, body) = request.into_parts();
        let Some(hook) = parts
            .uri
            .path()
            .strip_prefix("/ocm.rolloutplugin.v1alpha1.RolloutPluginService/")
            .and_then(hook_of)
        else {
            return status_response(&Status::unimplemented(format!(
                "unknown method {}",
                parts.uri.path()
            )));
        };
        let is_grpc = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(grpc::CONTENT_TYPE));
        if !is_grpc {
            let mut r = http::Response::new(UnaryBody::default());
            *r.status_mut() = StatusCode::UNSUPPORTED_MEDIA_TYPE;
            return r;
        }
        let answer = async {
            let (data, _) = grpc::collect(body, self.max_message_bytes).await?;
            self.route(hook, &parts, received, data).await
        };
        match answer.await {
            Ok((message, trailers)) => message_response(message, trailers),
            Err(status) => status_response(&status),
        }
    }

    async fn route(
        &self,
        hook: HookKind,
        parts: &http::request::Parts,
        received: Instant,
        data: Bytes,
    ) -> Answer {
        let headers = &parts.headers;
        let name = target_name(headers)?;
        let deadline = headers
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(grpc::parse_timeout)
            .map(|d| received + d);
        let mut forward = HeaderMap::new();
        for key in FORWARDED_KEYS {
            if let Some(v) = headers.get(key) {
                forward.insert(key, v.clone());
            }
        }
        let hub = parts.extensions.get::<CallerHub>().map(|h| h.0.as_str());
        let snapshot = self.registry.load().ok_or(GatewayError::NotReady)?;
        let target = snapshot.resolve(hub, &name).map_err(GatewayError::from)?;
        let ctx = CallContext {
            target,
            deadline,
            forward: &forward,
        };
        let limit = self.max_message_bytes;
        let failed_open = |names: &[String]| {
            names_trailer(FAILED_OPEN_METADATA_KEY, names)
                .into_iter()
                .collect::<Vec<_>>()
        };
        match hook {
            HookKind::Initialize => {
                let merged = ctx
                    .initialize(grpc::decode::<InitializeRequest>(data, limit)?)
                    .await?;
                Ok((
                    grpc::encode(&merged.value),
                    failed_open(&merged.failed_open),
                ))
            }
            HookKind::BeginRollout | HookKind::ProgressRollout => {
                let merged = ctx
                    .ack(hook, grpc::decode::<RolloutPluginRequest>(data, limit)?)
                    .await?;
                Ok((grpc::encode(&()), failed_open(&merged.failed_open)))
            }
            HookKind::ValidateRolloutCompletion => {
                let merged = ctx
                    .validate(grpc::decode::<ValidateCompletionRequest>(data, limit)?)
                    .await?;
                Ok((
                    grpc::encode(&merged.value),
                    failed_open(&merged.failed_open),
                ))
            }
            HookKind::MutateManifestWork => {
                match ctx
                    .mutate(grpc::decode::<MutateManifestWorkRequest>(data, limit)?)
                    .await
                {
                    Ok(m) => {
                        let mut trailers = vec![(MUTATED_BY_METADATA_KEY, m.mutated_by.join(","))];
                        trailers.extend(failed_open(&m.failed_open));
                        let answer = MutateManifestWorkResponse {
                            manifest_work: m.manifest_work,
                        };
                        Ok((grpc::encode(&answer), trailers))
                    }
                    Err((error, failed_open)) => Err(error.into_status(&failed_open)),
                }
            }
        }
    }
}

impl From<GatewayError> for Status {
    fn from(e: GatewayError) -> Status {
        e.into_status(&[])
    }
}

fn hook_of(method: &str) -> Option<HookKind> {
    Some(match method {
        "Initialize" => HookKind::Initialize,
        "BeginRollout" => HookKind::BeginRollout,
        "ProgressRollout" => HookKind::ProgressRollout,
        "ValidateRolloutCompletion" => HookKind::ValidateRolloutCompletion,
        "MutateManifestWork" => HookKind::MutateManifestWork,
        _ => return None,
    })
}

fn target_name(headers: &HeaderMap) -> Result<String, GatewayError> {
    let value = headers
        .get(PLUGIN_METADATA_KEY)
        .ok_or(GatewayError::MissingTarget)?;
    let name = value
        .to_str()
        .map_err(|_| GatewayError::InvalidTarget("not printable ASCII".into()))?
        .trim();
    if name.is_empty() {
        return Err(GatewayError::MissingTarget);
    }
    if name.len() > 253 {
        return Err(GatewayError::InvalidTarget(
            "longer than 253 characters".into(),
        ));
    }
    Ok(name.to_string())
}

fn names_trailer(key: &'static str, names: &[String]) -> Option<(&'static str, String)> {
    (!names.is_empty()).then(|| (key, names.join(",")))
}

fn grpc_headers() -> http::Response<UnaryBody> {
    let mut r = http::Response::new(UnaryBody::default());
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(grpc::CONTENT_TYPE),
    );
    r
}

/// A successful answer: the message, then `grpc-status: 0` and the hook
/// trailers.
fn message_response(
    message: Bytes,
    extra: Vec<(&'static str, String)>,
) -> http::Response<UnaryBody> {
    let mut trailers = HeaderMap::with_capacity(1 + extra.len());
    grpc::put_status(&mut trailers, Code::Ok, "");
    for (k, v) in extra {
        if let Ok(v) = HeaderValue::from_str(&v) {
            trailers.insert(k, v);
        }
    }
    let mut r = grpc_headers();
    *r.body_mut() = UnaryBody::new(Some(message), Some(trailers));
    r
}

/// A trailers-only answer carrying `status` (and its metadata).
pub fn status_response(status: &Status) -> http::Response<UnaryBody> {
    let mut r = grpc_headers();
    let headers = r.headers_mut();
    grpc::put_status(headers, status.code(), status.message());
    for kv in status.metadata().iter() {
        if let tonic::metadata::KeyAndValueRef::Ascii(k, v) = kv
            && let (Ok(k), Ok(v)) = (
                http::HeaderName::from_bytes(k.as_str().as_bytes()),
                HeaderValue::from_bytes(v.as_encoded_bytes()),
            )
        {
            headers.insert(k, v);
        }
    }
    r
}

impl<B> tower::Service<http::Request<B>> for GatewayService
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: std::fmt::Display,
{
    type Response = http::Response<UnaryBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.handle(request).await) })
    }
}
