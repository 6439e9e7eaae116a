//! The gateway's `RolloutPluginService`, spoken on HTTP/2 streams: it reads
//! the target from the `ocm-rollout-plugin` header and the caller's deadline
//! from `grpc-timeout`, loads the registry snapshot once, decodes the one
//! request message, hands the call to the router, and answers with the
//! message and its trailers (`grpc-status`, `ocm-rollout-mutated-by`,
//! `ocm-rollout-failed-open`) queued together, so the answer leaves in one
//! write and wakes the caller once.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use rollout_proto::v1alpha1::{InitializeRequest, MutateManifestWorkResponse};
use rollout_proto::{FAILED_OPEN_METADATA_KEY, MUTATED_BY_METADATA_KEY, PLUGIN_METADATA_KEY};
use tokio::time::Instant;
use tonic::{Code, Status};
use tracing::Instrument;

use crate::error::GatewayError;
use crate::hooks::{Forwarded, HookKind, MutateStep};
use crate::manifest;
use crate::registry::Registry;
use crate::router::{CallContext, OFF_THREAD_BYTES};
use crate::telemetry::trace::ServerSpan;
use crate::transport::grpc::{self, Payload, ReceiveError};
use crate::transport::health::{self, Health};
use crate::transport::pending::{PendingBudget, Reservation};

/// The caller's hub identity, set on each request by the server in central
/// mode (from the client certificate); absent otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerHub(pub String);

/// What the server knows of the connection a call came on: the calling hub
/// (central mode) and the pools the request's bytes are held against. Handed
/// to [`GatewayService::serve_stream`] with the stream (not as request
/// extensions, which cost a map and a box each per call).
#[derive(Debug, Clone, Default)]
pub struct Caller {
    pub hub: Option<CallerHub>,
    /// `None`: unbounded.
    pub budget: Option<PendingBudget>,
}

/// The path prefix of every method of the service.
const PATH_PREFIX: &str = "/ocm.rolloutplugin.v1alpha1.RolloutPluginService/";

/// The gateway's gRPC service: one [`GatewayService::serve_stream`] per HTTP/2 stream.
#[derive(Debug, Clone)]
pub struct GatewayService {
    registry: Arc<Registry>,
    max_message_bytes: usize,
    receive_timeout: Duration,
    health: Health,
}

/// A call's request head, where it came from and its deadline.
#[derive(Clone, Copy)]
struct Incoming<'a> {
    parts: &'a http::request::Parts,
    caller: &'a Caller,
    deadline: Option<Instant>,
}

/// How a call is answered.
#[derive(Debug)]
enum Reply {
    /// The message, then `grpc-status: 0` and the hook trailers.
    Message(Payload, Vec<(&'static str, String)>),
    /// A trailers-only answer carrying the status (and its metadata).
    Status(Status),
    /// Not gRPC at all.
    Http(StatusCode),
}

impl GatewayService {
    /// The service over `registry` (whose telemetry it reports to), with the
    /// gRPC health service alongside. A request must arrive whole within
    /// `receive_timeout` (or the caller's deadline, if sooner).
    pub fn new(
        registry: Arc<Registry>,
        max_message_bytes: usize,
        receive_timeout: Duration,
        health: Health,
    ) -> GatewayService {
        GatewayService {
            registry,
            max_message_bytes,
            receive_timeout,
            health,
        }
    }

    /// Serves one call on an HTTP/2 stream, to its end. If the caller resets
    /// the stream (it gave up), the work is dropped, which cancels the calls
    /// to plugins.
    pub async fn serve_stream(
        self,
        request: http::Request<h2::RecvStream>,
        mut respond: h2::server::SendResponse<Payload>,
        caller: Caller,
    ) {
        if request.uri().path().starts_with(health::PATH_PREFIX) {
            return self.health.serve_stream(request, respond).await;
        }
        let reply = tokio::select! {
            reply = self.answer(request, &caller) => reply,
            _ = std::future::poll_fn(|cx| respond.poll_reset(cx)) => return,
        };
        if let Err(error) = send(&mut respond, reply) {
            tracing::debug!(%error, "could not send the answer");
        }
    }

    async fn answer(&self, request: http::Request<h2::RecvStream>, caller: &Caller) -> Reply {
        let received = Instant::now();
        let (parts, mut body) = request.into_parts();
        let Some(hook) = parts
            .uri
            .path()
            .strip_prefix(PATH_PREFIX)
            .and_then(HookKind::from_name)
        else {
            return Reply::Status(Status::unimplemented(format!(
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
            return Reply::Http(StatusCode::UNSUPPORTED_MEDIA_TYPE);
        }
        let telemetry = self.registry.telemetry();
        let traceparent = parts.headers.get("traceparent").map(|v| v.as_bytes());
        let mut span = telemetry.tracing.server_span(hook, traceparent);
        let context = span.context();
        // Log lines of this call carry its trace, to go from a log to Jaeger.
        let log_span = tracing::info_span!(
            "call",
            hook = hook.as_str(),
            trace_id = %context.trace_id(),
            span_id = %context.span_id()
        );
        let mut target = None;
        // The caller's deadline covers the whole call, receiving the request
        // included: a request that stops arriving cannot hold the stream (and
        // what it sent so far) past it.
        let deadline = parts
            .headers
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(grpc::parse_timeout)
            .map(|d| received + d);
        let answer = async {
            let data = self.receive(&mut body, caller, received, deadline).await?;
            let incoming = Incoming {
                parts: &parts,
                caller,
                deadline,
            };
            self.route(hook, &incoming, data, &mut span, &mut target)
                .await
        }
        .instrument(log_span)
        .await;
        let reply = match answer {
            Ok((message, trailers)) => Reply::Message(message, trailers),
            Err(status) => Reply::Status(status),
        };
        let (code, message, failed_open) = match &reply {
            Reply::Message(_, trailers) => (
                Code::Ok,
                "",
                trailers
                    .iter()
                    .find(|(k, _)| *k == FAILED_OPEN_METADATA_KEY)
                    .map(|(_, v)| v.as_str()),
            ),
            Reply::Status(status) => (
                status.code(),
                status.message(),
                status
                    .metadata()
                    .get(FAILED_OPEN_METADATA_KEY)
                    .and_then(|v| v.to_str().ok()),
            ),
            Reply::Http(_) => (Code::Unknown, "", None),
        };
        // Only resolved names become label values: a caller cannot grow the
        // metrics with names of its own invention.
        telemetry.metrics.record_call(
            hook,
            target.as_deref().unwrap_or(""),
            code,
            received.elapsed(),
        );
        let failed_open: Vec<&str> = failed_open.map_or_else(Vec::new, |v| v.split(',').collect());
        span.finish(code, message, &failed_open);
        reply
    }

    /// Reads the request message, within the sooner of the caller's deadline
    /// and the receive timeout, holding what is buffered meanwhile against the
    /// connection's and the gateway's pending-bytes pools.
    async fn receive(
        &self,
        body: &mut h2::RecvStream,
        caller: &Caller,
        received: Instant,
        deadline: Option<Instant>,
    ) -> Result<Bytes, Status> {
        let own = received + self.receive_timeout;
        let (until, by_caller) = match deadline {
            Some(d) if d <= own => (d, true),
            _ => (own, false),
        };
        let mut reservation = Reservation::new(caller.budget.clone());
        let collect = grpc::collect_reserved(body, self.max_message_bytes, &mut reservation);
        match tokio::time::timeout_at(until, collect).await {
            Ok(Ok((data, _))) => Ok(data),
            Ok(Err(ReceiveError::Framing(status))) => Err(status),
            Ok(Err(ReceiveError::Held(exceeded))) => {
                tracing::warn!(error = %exceeded, "request refused: too many bytes still arriving");
                Err(GatewayError::PendingBytes(exceeded).into_status(&[]))
            }
            Err(_) => Err(GatewayError::ReceiveTimeout {
                waited: until.saturating_duration_since(received),
                by_caller,
            }
            .into_status(&[])),
        }
    }

    async fn route(
        &self,
        hook: HookKind,
        incoming: &Incoming<'_>,
        data: Bytes,
        span: &mut ServerSpan,
        resolved: &mut Option<String>,
    ) -> Result<(Payload, Vec<(&'static str, String)>), Status> {
        let Incoming {
            parts,
            caller,
            deadline,
        } = *incoming;
        let headers = &parts.headers;
        let name = target_name(headers).map_err(|e| e.into_status(&[]))?;
        span.set_target(&name);
        // Each attempt sends its own span as the plugin's traceparent (the
        // attempt layer); what passes through from the caller is its
        // tracestate, only when well-formed and beside a well-formed
        // traceparent: a plugin never receives a caller's arbitrary bytes.
        let mut forward = HeaderMap::new();
        if let Some(ts) = headers
            .get("traceparent")
            .filter(|v| rollout_telemetry::parse_traceparent(v.as_bytes()).is_some())
            .and_then(|_| headers.get("tracestate"))
            .filter(|v| valid_tracestate(v.as_bytes()))
        {
            forward.insert("tracestate", ts.clone());
        }
        let hub = caller.hub.as_ref().map(|h| h.0.as_str());
        if let Some(hub) = hub {
            span.set_hub(hub);
        }
        let snapshot = self
            .registry
            .load()
            .ok_or_else(|| GatewayError::NotReady.into_status(&[]))?;
        let target = snapshot
            .resolve(hub, &name)
            .map_err(|e| GatewayError::from(e).into_status(&[]))?;
        *resolved = Some(target.name().to_string());
        let ctx = CallContext {
            target,
            deadline,
            forward: Arc::new(forward),
            parent: span.context(),
            hub: hub.map(Arc::from),
        };
        let limit = self.max_message_bytes;
        let failed_open = |names: &[String]| -> Vec<(&'static str, String)> {
            if names.is_empty() {
                Vec::new()
            } else {
                vec![(FAILED_OPEN_METADATA_KEY, names.join(","))]
            }
        };
        let failed = |e: GatewayError| e.into_status(&[]);
        match hook {
            HookKind::Initialize => {
                let merged = ctx
                    .initialize(grpc::decode::<InitializeRequest>(data, limit)?)
                    .await
                    .map_err(failed)?;
                Ok((
                    grpc::encode(&merged.value),
                    failed_open(&merged.failed_open),
                ))
            }
            HookKind::BeginRollout | HookKind::ProgressRollout => {
                let request = Forwarded::rollout_request(grpc::message(data, limit)?)?;
                if let Some(rollout) = &request.rollout {
                    span.set_rollout(rollout);
                }
                let merged = ctx.ack(hook, request).await.map_err(failed)?;
                Ok((grpc::encode(&()), failed_open(&merged.failed_open)))
            }
            HookKind::ValidateRolloutCompletion => {
                let request = Forwarded::validate_request(grpc::message(data, limit)?)?;
                if let Some(rollout) = &request.rollout {
                    span.set_rollout(rollout);
                }
                let merged = ctx.validate(request).await.map_err(failed)?;
                Ok((
                    grpc::encode(&merged.value),
                    failed_open(&merged.failed_open),
                ))
            }
            HookKind::MutateManifestWork => {
                let request = MutateStep::decode(grpc::message(data, limit)?)?;
                if let Some(rollout) = &request.fields {
                    span.set_rollout(rollout);
                }
                // The caller's ManifestWork must be a JSON object before any
                // plugin sees it: a plugin is not blamed for the caller's bytes.
                check_work(&request.manifest_work).await.map_err(|why| {
                    GatewayError::InvalidRequest(format!("the ManifestWork to mutate {why}"))
                        .into_status(&[])
                })?;
                match ctx.mutate(request).await {
                    Ok(m) => {
                        let mut trailers = vec![(MUTATED_BY_METADATA_KEY, m.mutated_by.join(","))];
                        trailers.extend(failed_open(&m.failed_open));
                        // The work goes back without a copy (it is the last field).
                        let answer = grpc::encode_with_tail(
                            &MutateManifestWorkResponse::default(),
                            1,
                            m.manifest_work,
                        );
                        Ok((answer, trailers))
                    }
                    Err((error, failed_open)) => Err(error.into_status(&failed_open)),
                }
            }
        }
    }
}

/// [`manifest::check_object`], on the blocking pool for large works so a
/// syntax pass over megabytes does not stall other calls.
async fn check_work(work: &Bytes) -> Result<(), String> {
    if work.len() < OFF_THREAD_BYTES {
        return manifest::check_object(work);
    }
    let work = work.clone();
    tokio::task::spawn_blocking(move || manifest::check_object(&work))
        .await
        .unwrap_or_else(|e| Err(format!("could not be checked ({e})")))
}

/// A W3C `tracestate`: at most 512 bytes of printable ASCII list members.
pub fn valid_tracestate(v: &[u8]) -> bool {
    v.len() <= 512 && v.iter().all(|b| (0x20..0x7f).contains(b))
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

fn grpc_head() -> http::Response<()> {
    let mut r = http::Response::new(());
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(grpc::CONTENT_TYPE),
    );
    r
}

/// Queues the whole answer on the stream at once: one write, one wakeup of
/// the caller.
fn send(respond: &mut h2::server::SendResponse<Payload>, reply: Reply) -> Result<(), h2::Error> {
    match reply {
        Reply::Message(message, extra) => {
            let mut trailers = HeaderMap::with_capacity(1 + extra.len());
            grpc::put_status(&mut trailers, Code::Ok, "");
            for (k, v) in extra {
                if let Ok(v) = HeaderValue::from_maybe_shared(Bytes::from(v)) {
                    // A name as a constant: no copy of it per call.
                    trailers.insert(http::HeaderName::from_static(k), v);
                }
            }
            let mut stream = respond.send_response(grpc_head(), false)?;
            stream.send_data(message, false)?;
            stream.send_trailers(trailers)
        }
        Reply::Status(status) => {
            let mut head = grpc_head();
            status_headers(head.headers_mut(), &status);
            respond.send_response(head, true).map(drop)
        }
        Reply::Http(code) => {
            let mut head = http::Response::new(());
            *head.status_mut() = code;
            respond.send_response(head, true).map(drop)
        }
    }
}

/// Writes `status` and its metadata into the headers of a trailers-only answer.
pub fn status_headers(headers: &mut HeaderMap, status: &Status) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_well_formed_trace_state_is_passed_on() {
        assert!(valid_tracestate(b"congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"));
        assert!(!valid_tracestate(&[b'a'; 513]));
    }
}
