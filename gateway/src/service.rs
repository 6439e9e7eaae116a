//! The gateway's `RolloutPluginService`: reads the target from the
//! `ocm-rollout-plugin` metadata key and the caller's deadline from
//! `grpc-timeout`, loads the registry snapshot once, and hands the call to
//! the router. Merged answers go back with the `ocm-rollout-mutated-by` and
//! `ocm-rollout-failed-open` metadata (sent as trailers by the server).

use std::sync::Arc;
use std::time::Duration;

use rollout_proto::v1alpha1::rollout_plugin_service_server::RolloutPluginService;
use rollout_proto::v1alpha1::{
    InitializeRequest, InitializeResponse, MutateManifestWorkRequest, MutateManifestWorkResponse,
    RolloutPluginRequest, ValidateCompletionRequest, ValidateResponse,
};
use rollout_proto::{FAILED_OPEN_METADATA_KEY, MUTATED_BY_METADATA_KEY, PLUGIN_METADATA_KEY};
use tokio::time::Instant;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Request, Response, Status};

use crate::error::GatewayError;
use crate::hooks::HookKind;
use crate::registry::{Registry, Snapshot};
use crate::router::CallContext;

/// The caller's hub identity, set on each request by the server in central
/// mode (from the client certificate); absent otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerHub(pub String);

/// Caller metadata passed on to plugins unchanged.
const FORWARDED_KEYS: [&str; 2] = ["traceparent", "tracestate"];

/// The gateway's gRPC service.
#[derive(Debug, Clone)]
pub struct GatewayService {
    registry: Arc<Registry>,
}

/// What the router needs of an incoming call.
struct Incoming {
    snapshot: Arc<Snapshot>,
    name: String,
    hub: Option<String>,
    deadline: Option<Instant>,
    forward: MetadataMap,
}

impl GatewayService {
    pub fn new(registry: Arc<Registry>) -> GatewayService {
        GatewayService { registry }
    }

    fn incoming<T>(&self, request: &Request<T>) -> Result<Incoming, GatewayError> {
        let received = Instant::now();
        let md = request.metadata();
        let name = match md.get(PLUGIN_METADATA_KEY) {
            None => return Err(GatewayError::MissingTarget),
            Some(v) => v
                .to_str()
                .map_err(|_| GatewayError::InvalidTarget("not printable ASCII".into()))?
                .trim()
                .to_string(),
        };
        if name.is_empty() {
            return Err(GatewayError::MissingTarget);
        }
        if name.len() > 253 {
            return Err(GatewayError::InvalidTarget(
                "longer than 253 characters".into(),
            ));
        }
        let deadline = md
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_grpc_timeout)
            .map(|d| received + d);
        let mut forward = MetadataMap::new();
        for key in FORWARDED_KEYS {
            if let Some(v) = md.get(key) {
                forward.insert(key, v.clone());
            }
        }
        let hub = request.extensions().get::<CallerHub>().map(|h| h.0.clone());
        let snapshot = self.registry.load().ok_or(GatewayError::NotReady)?;
        Ok(Incoming {
            snapshot,
            name,
            hub,
            deadline,
            forward,
        })
    }
}

/// Parses a `grpc-timeout` value: up to 8 digits and a unit (H, M, S, m, u, n).
pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    if value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

fn names_value(names: &[String]) -> Option<MetadataValue<tonic::metadata::Ascii>> {
    MetadataValue::try_from(names.join(",")).ok()
}

fn with_failed_open<T>(mut response: Response<T>, failed_open: &[String]) -> Response<T> {
    if !failed_open.is_empty()
        && let Some(v) = names_value(failed_open)
    {
        response.metadata_mut().insert(FAILED_OPEN_METADATA_KEY, v);
    }
    response
}

macro_rules! route {
    ($self:ident, $request:ident, |$ctx:ident, $msg:ident| $body:expr) => {{
        let incoming = $self.incoming(&$request)?;
        let target = incoming
            .snapshot
            .resolve(incoming.hub.as_deref(), &incoming.name)
            .map_err(GatewayError::from)?;
        let $ctx = CallContext {
            target,
            deadline: incoming.deadline,
            forward: &incoming.forward,
        };
        let $msg = $request.into_inner();
        $body
    }};
}

#[tonic::async_trait]
impl RolloutPluginService for GatewayService {
    async fn initialize(
        &self,
        request: Request<InitializeRequest>,
    ) -> Result<Response<InitializeResponse>, Status> {
        route!(self, request, |ctx, msg| {
            let merged = ctx.initialize(msg).await?;
            Ok(with_failed_open(
                Response::new(merged.value),
                &merged.failed_open,
            ))
        })
    }

    async fn begin_rollout(
        &self,
        request: Request<RolloutPluginRequest>,
    ) -> Result<Response<()>, Status> {
        route!(self, request, |ctx, msg| {
            let merged = ctx.ack(HookKind::BeginRollout, msg).await?;
            Ok(with_failed_open(Response::new(()), &merged.failed_open))
        })
    }

    async fn progress_rollout(
        &self,
        request: Request<RolloutPluginRequest>,
    ) -> Result<Response<()>, Status> {
        route!(self, request, |ctx, msg| {
            let merged = ctx.ack(HookKind::ProgressRollout, msg).await?;
            Ok(with_failed_open(Response::new(()), &merged.failed_open))
        })
    }

    async fn validate_rollout_completion(
        &self,
        request: Request<ValidateCompletionRequest>,
    ) -> Result<Response<ValidateResponse>, Status> {
        route!(self, request, |ctx, msg| {
            let merged = ctx.validate(msg).await?;
            Ok(with_failed_open(
                Response::new(merged.value),
                &merged.failed_open,
            ))
        })
    }

    async fn mutate_manifest_work(
        &self,
        request: Request<MutateManifestWorkRequest>,
    ) -> Result<Response<MutateManifestWorkResponse>, Status> {
        route!(self, request, |ctx, msg| {
            match ctx.mutate(msg).await {
                Ok(m) => {
                    let mut response = Response::new(MutateManifestWorkResponse {
                        manifest_work: m.manifest_work,
                    });
                    if let Some(v) = names_value(&m.mutated_by) {
                        response.metadata_mut().insert(MUTATED_BY_METADATA_KEY, v);
                    }
                    Ok(with_failed_open(response, &m.failed_open))
                }
                Err((error, failed_open)) => Err(error.into_status(&failed_open)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse() {
        assert_eq!(parse_grpc_timeout("300m"), Some(Duration::from_millis(300)));
        assert_eq!(parse_grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(
            parse_grpc_timeout("99999999u"),
            Some(Duration::from_micros(99_999_999))
        );
        assert_eq!(parse_grpc_timeout("123456789m"), None);
        assert_eq!(parse_grpc_timeout("m"), None);
        assert_eq!(parse_grpc_timeout("10x"), None);
    }
}
