//! Each layer of the server's stack at its own level, over a mock of the
//! layer below it (`tower_test`): what it passes on, what it answers
//! itself, and with which status. The whole stack is tested through the
//! process in `tests/it`; Rescue's own tests are in `rescue.rs`.

use std::convert::Infallible;
use std::time::Duration;

use http::{HeaderMap, StatusCode};
use prost::Message as _;
use rollout_proto::v1alpha1::{MutateManifestWorkRequest, RolloutPluginRequest};
use tonic::Code;
use tower::{Layer as _, ServiceExt as _};
use tower_test::mock;

use super::route::Route;
use super::*;
use crate::error::{GatewayError, ResolveError};
use crate::fanout::tests::{Fakes, REGISTRY, WORK, answering, labelled};
use crate::hub::Hub;
use crate::registry::SourceInfo;
use crate::telemetry::Metrics;
use crate::transport::grpc;
use crate::transport::pending::{CallBytes, PendingBudget, Pool, Scope};
use crate::upstream::ChannelSettings;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// tower_test's mock as the layer below. The layers call the service below
/// without `poll_ready` (every service of the stack is always ready), so
/// each call goes through `oneshot` on a clone of the mock.
struct Below<Req, Resp, E> {
    mock: mock::Mock<Req, Resp>,
    error: fn(BoxError) -> E,
}

impl<Req, Resp, E> Clone for Below<Req, Resp, E> {
    fn clone(&self) -> Self {
        Below {
            mock: self.mock.clone(),
            error: self.error,
        }
    }
}

impl<Req, Resp, E> Service<Req> for Below<Req, Resp, E>
where
    Req: Send + 'static,
    Resp: Send + 'static,
    E: 'static,
{
    type Response = Resp;
    type Error = E;
    type Future = BoxFuture<'static, Result<Resp, E>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), E>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let mock = self.mock.clone();
        let error = self.error;
        Box::pin(async move { mock.oneshot(request).await.map_err(error) })
    }
}

fn failure(e: BoxError) -> CallFailure {
    GatewayError::InvalidRequest(format!("the mock below failed: {e}")).into()
}

fn never(e: BoxError) -> Infallible {
    panic!("the mock below failed: {e}")
}

/// A mock below answering `Received`, and its handle.
fn below<Req, Resp, E>(error: fn(BoxError) -> E) -> (Below<Req, Resp, E>, mock::Handle<Req, Resp>) {
    let (mock, handle) = mock::pair();
    (Below { mock, error }, handle)
}

fn peer(identity: Option<&str>) -> Arc<Peer> {
    Arc::new(Peer {
        addr: ([127, 0, 0, 1], 1).into(),
        identity: identity.map(Hub::new),
        budget: PendingBudget {
            connection: Arc::new(Pool::new(1 << 20, Scope::Connection)),
            gateway: Arc::new(Pool::new(1 << 20, Scope::Gateway)),
        },
    })
}

fn head(path: &str, headers: &[(&'static str, &str)]) -> http::request::Parts {
    let mut request = http::Request::builder()
        .method("POST")
        .uri(format!("http://gateway{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(()).expect("a request").into_parts().0
}

/// A call whose message arrived whole, as Receive hands it down.
fn received(path: &str, headers: &[(&'static str, &str)], message: Bytes) -> Received {
    Received {
        head: head(path, headers),
        message,
        began: Instant::now(),
        deadline: None,
        peer: peer(None),
    }
}

fn hook_path(hook: HookKind) -> String {
    format!("{PATH_PREFIX}{}", hook.as_str())
}

/// `message` behind gRPC's 5-byte prefix.
fn frame(message: &[u8]) -> Bytes {
    let mut framed = vec![0];
    framed.extend(u32::try_from(message.len()).expect("small").to_be_bytes());
    framed.extend(message);
    Bytes::from(framed)
}

fn status(headers: &HeaderMap) -> Option<&str> {
    headers.get(grpc::GRPC_STATUS).and_then(|v| v.to_str().ok())
}

/// The value of the one series of `name` whose labels include `labels`.
fn series(metrics: &Metrics, name: &str, labels: &[&str]) -> Option<f64> {
    let text = metrics.encode();
    text.lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|label| l.contains(label)))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The call of a mock below once the layer above has answered: none, when
/// the layer answered the call itself.
async fn nothing_passed<Req, Resp>(mut handle: mock::Handle<Req, Resp>, layer: impl Sized) {
    drop(layer);
    assert!(
        handle.next_request().await.is_none(),
        "the layer passed a call on that it should have answered itself"
    );
}

// Dispatch: by path.

#[tokio::test]
async fn dispatch_sends_each_path_to_its_service() {
    let (plugins, mut handle) = below::<Received, Answer, _>(failure);
    let mut dispatch = Dispatch {
        health: health::HealthService::new(Health::new().await),
        plugins,
    };

    let path = hook_path(HookKind::BeginRollout);
    let answering = tokio::spawn(dispatch.call(received(&path, &[], frame(b""))));
    let (passed, respond) = handle.next_request().await.expect("passed on");
    assert_eq!(passed.head.uri.path(), path);
    respond.send_response(Answer::Http(StatusCode::IM_A_TEAPOT));
    let answer = answering
        .await
        .expect("joined")
        .expect("the plugins' answer");
    assert!(
        matches!(answer, Answer::Http(StatusCode::IM_A_TEAPOT)),
        "{answer:?}"
    );

    // Health: answered by the health service (NOT_SERVING: no registry).
    let check = received("/grpc.health.v1.Health/Check", &[], frame(b""));
    let answer = dispatch.call(check).await.expect("health answers");
    let Answer::Message { message, trailers } = answer else {
        panic!("not a message: {answer:?}");
    };
    assert_eq!(status(&trailers), Some("0"));
    let message: Vec<u8> = message.into_iter().collect();
    // HealthCheckResponse { status: NOT_SERVING (2) }, framed.
    assert_eq!(message, [0, 0, 0, 0, 2, 0x08, 0x02]);

    let other = tokio::time::timeout(
        Duration::from_secs(5),
        dispatch.call(received("/other.Service/Method", &[], frame(b""))),
    )
    .await
    .expect("answered by Dispatch itself")
    .expect_err("an unknown service");
    assert_eq!(other.code(), Code::Unimplemented);
    assert!(other.error.to_string().contains("/other.Service/Method"));
    nothing_passed(handle, dispatch).await;
}

// Receive: limits and deadline, on a real HTTP/2 stream.

/// A call on a real HTTP/2 stream over an in-memory pipe, with `body` sent
/// (and the stream ended after it when `end`). The second value keeps the
/// client's side and the connection going; dropping it resets the stream.
async fn h2_call(
    headers: &[(&'static str, &str)],
    body: Bytes,
    end: bool,
) -> (Call, Box<dyn std::any::Any + Send>) {
    let (client_io, server_io) = tokio::io::duplex(1 << 20);
    let mut request = http::Request::builder().method("POST").uri(format!(
        "http://gateway{}",
        hook_path(HookKind::BeginRollout)
    ));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(()).expect("a request");
    let client = tokio::spawn(async move {
        let (send, connection) = h2::client::handshake(client_io).await.expect("handshake");
        let connection = tokio::spawn(async move { connection.await.ok() });
        let mut send = send.ready().await.expect("ready");
        let (response, mut stream) = send.send_request(request, false).expect("sent");
        stream.send_data(body, end).expect("data");
        (send, stream, response, connection)
    });
    let mut server = h2::server::handshake(server_io).await.expect("handshake");
    let (request, respond) = server.accept().await.expect("a stream").expect("accepted");
    let serving = tokio::spawn(async move { while let Some(Ok(_)) = server.accept().await {} });
    let client = client.await.expect("the client");
    let (head, body) = request.into_parts();
    let peer = peer(None);
    let held = CallBytes::new(peer.budget.clone());
    let call = Call {
        head,
        body,
        peer,
        held,
    };
    (call, Box::new((client, respond, serving)))
}

const GRPC: (&str, &str) = ("content-type", "application/grpc");

/// Receive over a mock, the mock's handle, and the metrics it counts in.
type ReceiveOverMock = (
    receive::Receive<Below<Received, Answer, CallFailure>>,
    mock::Handle<Received, Answer>,
    Arc<Metrics>,
);

fn receive_layer(receive_timeout: Duration) -> ReceiveOverMock {
    let metrics = Arc::new(Metrics::new());
    let limits = ReceiveLimits {
        max_message_bytes: 1024,
        receive_timeout,
    };
    let (inner, handle) = below(failure);
    let layer = receive::ReceiveLayer::new(limits, metrics.clone()).layer(inner);
    (layer, handle, metrics)
}

#[tokio::test]
async fn receive_passes_the_whole_message_on_with_the_callers_deadline() {
    let (mut receive, mut handle, metrics) = receive_layer(Duration::from_secs(30));
    let message = frame(b"a message");
    let (call, _client) = h2_call(&[GRPC, ("grpc-timeout", "5S")], message.clone(), true).await;
    let answering = tokio::spawn(receive.call(call));
    let (passed, respond) = handle.next_request().await.expect("passed on");
    assert_eq!(passed.message, message);
    assert_eq!(
        passed.deadline.map(|d| d - passed.began),
        Some(Duration::from_secs(5))
    );
    respond.send_response(Answer::Http(StatusCode::IM_A_TEAPOT));
    let answer = answering.await.expect("joined").expect("the answer below");
    assert!(
        matches!(answer, Answer::Http(StatusCode::IM_A_TEAPOT)),
        "{answer:?}"
    );
    assert_eq!(series(&metrics, "rollout_gateway_calls_refused", &[]), None);
}

/// What Receive refuses is answered there, counted by reason, and never
/// reaches the layer below.
/// A call Receive refuses: what it is, its headers, its body (and whether
/// the stream ends after it), the answer (an HTTP status or a gRPC code),
/// and the reason it is counted under.
type Refusal = (
    &'static str,
    Vec<(&'static str, &'static str)>,
    Bytes,
    bool,
    Result<StatusCode, Code>,
    &'static str,
);

#[tokio::test(start_paused = true)]
async fn receive_refuses_what_it_cannot_receive() {
    let rows: Vec<Refusal> = vec![
        (
            "not gRPC: HTTP 415",
            vec![("content-type", "application/json")],
            Bytes::from_static(b"{}"),
            true,
            Ok(StatusCode::UNSUPPORTED_MEDIA_TYPE),
            "not_grpc",
        ),
        (
            "a malformed grpc-timeout",
            vec![GRPC, ("grpc-timeout", "soon")],
            frame(b""),
            true,
            Err(Code::InvalidArgument),
            "header",
        ),
        (
            "a message over the limit, refused on its prefix",
            vec![GRPC],
            Bytes::from_static(&[0, 0, 0, 16, 0]),
            false,
            Err(Code::ResourceExhausted),
            "too_large",
        ),
        (
            "a message that stops arriving: the receive timeout",
            vec![GRPC],
            Bytes::from_static(&[0, 0, 0, 0, 9, 1]),
            false,
            Err(Code::DeadlineExceeded),
            "receive_timeout",
        ),
        (
            "a message that stops arriving: the caller's sooner deadline",
            vec![GRPC, ("grpc-timeout", "200m")],
            Bytes::from_static(&[0, 0, 0, 0, 9, 1]),
            false,
            Err(Code::DeadlineExceeded),
            "deadline",
        ),
    ];
    for (name, headers, body, end, want, reason) in rows {
        let (mut receive, handle, metrics) = receive_layer(Duration::from_secs(1));
        let (call, _client) = h2_call(&headers, body, end).await;
        let began = Instant::now();
        let answer = receive.call(call).await;
        match (answer, want) {
            (Ok(Answer::Http(got)), Ok(want)) => assert_eq!(got, want, "{name}"),
            (Err(failure), Err(want)) => {
                assert_eq!(failure.code(), want, "{name}: {}", failure.error)
            }
            (other, _) => panic!("{name}: {other:?}"),
        }
        if name.contains("caller's") {
            assert_eq!(began.elapsed(), Duration::from_millis(200), "{name}");
        } else if name.contains("receive timeout") {
            assert_eq!(began.elapsed(), Duration::from_secs(1), "{name}");
        }
        let label = format!("reason=\"{reason}\"");
        assert_eq!(
            series(&metrics, "rollout_gateway_calls_refused", &[&label]),
            Some(1.0),
            "{name}: counted as {reason}\n{}",
            metrics.encode()
        );
        nothing_passed(handle, receive).await;
    }
}

// Observe: a span and the call's metrics, whatever the answer.

fn registry(text: Option<&str>) -> Arc<Registry> {
    let registry = Registry::new(
        vec![SourceInfo {
            label: "file0".into(),
        }],
        ChannelSettings::default(),
    );
    if let Some(text) = text {
        registry.apply("file0", text).expect("a valid registry");
    }
    Arc::new(registry)
}

#[tokio::test]
async fn observe_counts_every_hook_call_by_resolved_target_and_code() {
    let registry = registry(None);
    let metrics = registry.telemetry().metrics.clone();
    let (inner, mut handle) = below::<HookCall, Traced, _>(never);
    let mut observe = observe::ObserveLayer::new(registry.clone()).layer(inner);

    // A hook call: passed on as its hook, its answer passed back up.
    let path = hook_path(HookKind::ValidateRolloutCompletion);
    let answering = tokio::spawn(observe.call(received(&path, &[], frame(b""))));
    let (passed, respond) = handle.next_request().await.expect("passed on");
    assert_eq!(passed.hook, HookKind::ValidateRolloutCompletion);
    let mut trailers = HeaderMap::new();
    grpc::put_status(&mut trailers, Code::Ok, "");
    respond.send_response(Traced {
        outcome: Ok(Answered {
            message: grpc::raw(frame(b"")),
            trailers,
        }),
        span: passed.span,
        target: Some("a".into()),
    });
    let answer = answering.await.expect("joined").expect("OK");
    assert!(matches!(answer, Answer::Message { .. }), "{answer:?}");
    let ok = [
        "hook=\"ValidateRolloutCompletion\"",
        "target=\"a\"",
        "code=\"OK\"",
    ];
    assert_eq!(
        series(&metrics, "rollout_gateway_calls_total", &ok),
        Some(1.0)
    );

    // A failure from below: counted with its code, no target it did not
    // resolve, and passed up for Rescue to answer.
    let path = hook_path(HookKind::BeginRollout);
    let answering = tokio::spawn(observe.call(received(&path, &[], frame(b""))));
    let (passed, respond) = handle.next_request().await.expect("passed on");
    let not_found = ResolveError::NotFound {
        name: "ghost".into(),
        hub: None,
    };
    respond.send_response(Traced {
        outcome: Err(GatewayError::from(not_found).into()),
        span: passed.span,
        target: None,
    });
    let failed = answering.await.expect("joined").expect_err("NOT_FOUND");
    assert_eq!(failed.code(), Code::NotFound);
    let not_found = ["hook=\"BeginRollout\"", "target=\"\"", "code=\"NOT_FOUND\""];
    assert_eq!(
        series(&metrics, "rollout_gateway_calls_total", &not_found),
        Some(1.0)
    );

    // A method of the plugin service that is no hook: answered here.
    let unknown = observe
        .call(received(&format!("{PATH_PREFIX}Rollback"), &[], frame(b"")))
        .await
        .expect_err("no such hook");
    assert_eq!(unknown.code(), Code::Unimplemented);
    nothing_passed(handle, observe).await;
}

// Resolve: the target name for the caller's hub, in one snapshot.

const TARGETS: &str = "plugins:\n  - name: a\n    endpoint: 127.0.0.1:7001\n    insecure: true\n  - name: b\n    endpoint: 127.0.0.1:7002\n    insecure: true\n    hubs: [hub-b]\n";

fn hook_call(registry: &Registry, target: Option<&str>, hub: Option<&str>) -> HookCall {
    let hook = HookKind::BeginRollout;
    let headers: Vec<(&'static str, &str)> = target
        .map(|t| (rollout_proto::PLUGIN_METADATA_KEY, t))
        .into_iter()
        .collect();
    let mut call = received(&hook_path(hook), &headers, frame(b""));
    call.peer = peer(hub);
    HookCall {
        hook,
        call,
        span: registry.telemetry().tracing.server_span(hook, None),
    }
}

/// What it is, the registry file (`None`: none loaded), the target header,
/// the caller's hub, and the target passed on or the code answered.
type ResolveRow = (
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    Option<&'static str>,
    Result<&'static str, Code>,
);

#[tokio::test]
async fn resolve_passes_on_what_the_caller_may_call_and_answers_the_rest() {
    let rows: Vec<ResolveRow> = vec![
        (
            "no registry loaded yet",
            None,
            Some("a"),
            None,
            Err(Code::Unavailable),
        ),
        (
            "no target header",
            Some(TARGETS),
            None,
            None,
            Err(Code::InvalidArgument),
        ),
        (
            "an empty target",
            Some(TARGETS),
            Some("  "),
            None,
            Err(Code::InvalidArgument),
        ),
        (
            "an unknown name",
            Some(TARGETS),
            Some("ghost"),
            None,
            Err(Code::NotFound),
        ),
        (
            "a plugin only hub-b may call, without a hub",
            Some(TARGETS),
            Some("b"),
            None,
            Err(Code::PermissionDenied),
        ),
        ("a shared plugin", Some(TARGETS), Some("a"), None, Ok("a")),
        (
            "hub-b's plugin, from hub-b",
            Some(TARGETS),
            Some("b"),
            Some("hub-b"),
            Ok("b"),
        ),
    ];
    for (name, text, target, hub, want) in rows {
        let registry = registry(text);
        let (inner, mut handle) = below::<Routed, Traced, _>(never);
        let mut resolve = resolve::ResolveLayer::new(registry.clone()).layer(inner);
        let answering = tokio::spawn(resolve.call(hook_call(&registry, target, hub)));
        match want {
            Ok(resolved) => {
                let (passed, respond) = handle.next_request().await.expect("passed on");
                assert_eq!(passed.target.name(), resolved, "{name}");
                let mut trailers = HeaderMap::new();
                trailers.insert("x-answered-by", resolved.parse().expect("value"));
                respond.send_response(Traced {
                    outcome: Ok(Answered {
                        message: grpc::raw(frame(b"")),
                        trailers,
                    }),
                    span: passed.call.span,
                    target: Some(resolved.into()),
                });
                let Ok(traced) = answering.await.expect("joined");
                assert_eq!(traced.target.as_deref(), Some(resolved), "{name}");
                let answered = traced.outcome.expect("passed up");
                assert_eq!(
                    answered
                        .trailers
                        .get("x-answered-by")
                        .and_then(|v| v.to_str().ok()),
                    Some(resolved),
                    "{name}"
                );
            }
            Err(code) => {
                let Ok(traced) = answering.await.expect("joined");
                let failed = traced.outcome.expect_err(name);
                assert_eq!(failed.code(), code, "{name}: {}", failed.error);
                assert_eq!(traced.target, None, "{name}: no target resolved");
                nothing_passed(handle, resolve).await;
            }
        }
    }
}

// Route: the caller's request checked and decoded, the plugins called.

fn routed(registry: &Registry, hook: HookKind, message: Bytes, target: Target) -> Routed {
    Routed {
        call: HookCall {
            hook,
            call: received(&hook_path(hook), &[], message),
            span: registry.telemetry().tracing.server_span(hook, None),
        },
        target,
    }
}

fn mutate_request(work: &str) -> Bytes {
    frame(
        &MutateManifestWorkRequest {
            rollout: Some(RolloutPluginRequest::default()),
            manifest_work: work.as_bytes().to_vec().into(),
        }
        .encode_to_vec(),
    )
}

#[tokio::test]
async fn route_answers_with_the_merged_answer_and_its_trailers() {
    let registry = registry(None);
    let fakes = Fakes::new(
        REGISTRY,
        answering(|name, _| {
            let work = match name {
                "a" => labelled(&["a"]),
                _ => labelled(&["a", "c"]),
            };
            Ok(crate::hooks::HookResponse::MutateManifestWork(
                rollout_proto::v1alpha1::MutateManifestWorkResponse {
                    manifest_work: work.into_bytes().into(),
                },
            ))
        }),
    );
    let target = fakes.pipeline("p", &["a", "c"]);
    let request = routed(
        &registry,
        HookKind::MutateManifestWork,
        mutate_request(WORK),
        target,
    );
    let Ok(traced) = Route::new(1 << 20).call(request).await;
    assert_eq!(traced.target.as_deref(), Some("p"));
    let Answered { trailers, .. } = traced.outcome.expect("OK");
    assert_eq!(status(&trailers), Some("0"));
    assert_eq!(
        trailers
            .get(rollout_proto::MUTATED_BY_METADATA_KEY)
            .and_then(|v| v.to_str().ok()),
        Some("a,c")
    );
}

/// What is wrong with the caller's own request is answered before any
/// plugin is called (none is blamed for the caller's bytes); a plugin's
/// status passes through as data.
#[tokio::test]
async fn route_refuses_the_callers_bad_requests_before_any_plugin() {
    let registry = registry(None);
    let denied = || {
        answering(|_, _| {
            Err(crate::error::CallError::Plugin(
                tonic::Status::permission_denied("not for you"),
            ))
        })
    };
    let rows: Vec<(&str, HookKind, Bytes, usize, Code, bool)> = vec![
        (
            "a work that is no JSON object",
            HookKind::MutateManifestWork,
            mutate_request("[1]"),
            1 << 20,
            Code::InvalidArgument,
            false,
        ),
        (
            "a compressed message",
            HookKind::BeginRollout,
            Bytes::from_static(&[1, 0, 0, 0, 0]),
            1 << 20,
            Code::Unimplemented,
            false,
        ),
        (
            "a message over the limit",
            HookKind::MutateManifestWork,
            mutate_request(WORK),
            16,
            Code::ResourceExhausted,
            false,
        ),
        (
            "a message that is no request",
            HookKind::BeginRollout,
            frame(&[0xff, 0xff]),
            1 << 20,
            Code::InvalidArgument,
            false,
        ),
        (
            "the plugin's own status",
            HookKind::BeginRollout,
            frame(&RolloutPluginRequest::default().encode_to_vec()),
            1 << 20,
            Code::PermissionDenied,
            true,
        ),
    ];
    for (name, hook, message, limit, code, called) in rows {
        let fakes = Fakes::new(REGISTRY, denied());
        let request = routed(&registry, hook, message, fakes.plugin("a"));
        let Ok(traced) = Route::new(limit).call(request).await;
        let failed = traced.outcome.expect_err(name);
        assert_eq!(failed.code(), code, "{name}: {}", failed.error);
        assert_eq!(
            !fakes.seen.lock().expect("lock").is_empty(),
            called,
            "{name}: a plugin called"
        );
    }
}
