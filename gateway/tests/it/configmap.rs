//! `--configmap`: a registry read from a ConfigMap through the Kubernetes
//! API. No API server runs here: the kube client talks to a mock service
//! (`tower_test::mock::pair`) that answers the watcher's list and watch
//! requests the way the API server does, a JSON `ConfigMapList` for a list
//! and newline-delimited watch events, streamed, for a watch.

use crate::common;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::eventually;
use futures::StreamExt;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use rollout_gateway::configmap::{self, ConfigMapRef};
use rollout_gateway::registry::{Registry, ReloadCounts, SourceInfo, Target};
use rollout_gateway::upstream::ChannelSettings;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tower_test::mock;

type MockBody = BoxBody<Bytes, Infallible>;
type ApiHandle = mock::Handle<Request<kube::client::Body>, Response<MockBody>>;
type ApiRequest = Request<kube::client::Body>;
type Reply = mock::SendResponse<Response<MockBody>>;

const NAMESPACE: &str = "hub-a";
const NAME: &str = "work-controller-config";
const PATH: &str = "/api/v1/namespaces/hub-a/configmaps";
const SELECTOR: &str = "fieldSelector=metadata.name%3Dwork-controller-config";

/// How long any one test may take, so a watcher that never asks the mock
/// (or a mock that never answers) fails the test instead of hanging it.
const BOUND: Duration = Duration::from_secs(30);

fn registry_text(plugin: &str) -> String {
    format!("plugins:\n  - name: {plugin}\n    endpoint: 127.0.0.1:1\n    insecure: true\n")
}

fn cm_ref() -> ConfigMapRef {
    format!("{NAMESPACE}/{NAME}").parse().unwrap()
}

fn new_registry() -> Arc<Registry> {
    Arc::new(Registry::new(
        vec![SourceInfo {
            label: cm_ref().source_label(),
        }],
        ChannelSettings::default(),
    ))
}

/// A ConfigMap as the API server serialises it; `None` = no `config.yaml` key.
fn config_map(resource_version: &str, text: Option<&str>) -> Value {
    let mut cm = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": NAME,
            "namespace": NAMESPACE,
            "resourceVersion": resource_version,
            "uid": "6f1c2a9e-0000-4000-8000-000000000001",
        },
    });
    if let Some(text) = text {
        cm["data"] = json!({ "config.yaml": text });
    }
    cm
}

fn list(resource_version: &str, items: Vec<Value>) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMapList",
        "metadata": { "resourceVersion": resource_version },
        "items": items,
    })
}

fn watch_event(kind: &str, object: Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({ "type": kind, "object": object })).unwrap();
    line.push(b'\n');
    Bytes::from(line)
}

fn json_response(status: StatusCode, body: &Value) -> Response<MockBody> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap())).boxed())
        .unwrap()
}

/// A watch response whose events the test sends one at a time; the stream
/// stays open until the sender is dropped, as a real watch does until its
/// timeout.
fn streaming_response() -> (mpsc::UnboundedSender<Bytes>, Response<MockBody>) {
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    let body = StreamBody::new(
        UnboundedReceiverStream::new(rx).map(|b| Ok::<_, Infallible>(Frame::data(b))),
    );
    let response = Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(BodyExt::boxed(body))
        .unwrap();
    (tx, response)
}

fn forbidden() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "message": "configmaps \"work-controller-config\" is forbidden: User \"system:serviceaccount:gw:gw\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"hub-a\"",
        "reason": "Forbidden",
        "details": { "name": NAME, "kind": "configmaps" },
        "code": 403,
    })
}

/// The watcher's next request, which must be a list (`watch = false`) or a
/// watch of exactly the one ConfigMap.
async fn next_request(api: &mut ApiHandle, watch: bool) -> (ApiRequest, Reply) {
    let (request, reply) = api.next_request().await.expect("the watcher asks the API");
    assert_eq!(request.method(), http::Method::GET);
    assert_eq!(request.uri().path(), PATH, "{}", request.uri());
    let query = request.uri().query().unwrap_or_default();
    assert!(
        query.split('&').any(|p| p == SELECTOR),
        "field selector missing: {query}"
    );
    assert_eq!(
        query.split('&').any(|p| p == "watch=true"),
        watch,
        "expected a {}: {query}",
        if watch { "watch" } else { "list" }
    );
    (request, reply)
}

fn generation(registry: &Registry) -> u64 {
    registry.load().map_or(0, |s| s.generation)
}

fn resolves(registry: &Registry, name: &str) -> bool {
    registry
        .load()
        .is_some_and(|s| matches!(s.resolve(None, name), Ok(Target::Plugin(_))))
}

/// Runs a test body within [`BOUND`].
async fn bounded(body: impl Future<Output = ()>) {
    tokio::time::timeout(BOUND, body)
        .await
        .expect("the test finished in time");
}

#[tokio::test]
async fn configmap_changes_reload_the_registry() {
    bounded(async {
        let (service, mut api) = mock::pair::<ApiRequest, Response<MockBody>>();
        let client = kube::Client::new(service, "default");
        let registry = new_registry();
        let loads = Arc::new(AtomicUsize::new(0));
        let counted = loads.clone();
        let task = configmap::spawn(client, registry.clone(), cm_ref(), move || {
            counted.fetch_add(1, Ordering::SeqCst);
        });

        // The initial list finds the ConfigMap: the registry loads.
        let (_, reply) = next_request(&mut api, false).await;
        let v1 = registry_text("alpha");
        reply.send_response(json_response(
            StatusCode::OK,
            &list("100", vec![config_map("100", Some(&v1))]),
        ));

        // Then the watch, from the list's resource version.
        let (request, reply) = next_request(&mut api, true).await;
        let query = request.uri().query().unwrap_or_default().to_string();
        assert!(
            query.split('&').any(|p| p == "resourceVersion=100"),
            "{query}"
        );
        // The list has been applied before the watch starts.
        assert_eq!(generation(&registry), 1);
        assert!(resolves(&registry, "alpha"));
        let (events, response) = streaming_response();
        reply.send_response(response);

        // MODIFIED with a changed registry: generation 2.
        let v2 = format!("{v1}{}", registry_text("beta").trim_start_matches("plugins:\n"));
        events
            .send(watch_event("MODIFIED", config_map("101", Some(&v2))))
            .unwrap();
        eventually("generation 2", || generation(&registry) == 2).await;
        assert!(resolves(&registry, "alpha") && resolves(&registry, "beta"));
        assert!(registry.last_error().is_none());

        // MODIFIED with an invalid registry: the snapshot stays, the error
        // names the source and the problem.
        let before = registry.load().unwrap();
        events
            .send(watch_event(
                "MODIFIED",
                config_map(
                    "102",
                    Some("plugins:\n  - name: gamma\n    endpoint: 127.0.0.1:1\n    insecure: maybe\n"),
                ),
            ))
            .unwrap();
        eventually("the bad change is recorded", || {
            registry.last_error().is_some()
        })
        .await;
        let error = registry.last_error().unwrap();
        assert!(
            error.starts_with("configmap hub-a/work-controller-config: "),
            "{error}"
        );
        // The YAML error is located by line and column (the file's text is
        // not echoed: it may hold a CA bundle).
        assert!(error.contains("line 4 column 15"), "{error}");
        assert!(Arc::ptr_eq(&before, &registry.load().unwrap()));
        assert!(!resolves(&registry, "gamma"));

        // DELETED: recorded, the snapshot stays.
        events
            .send(watch_event("DELETED", config_map("103", Some(&v2))))
            .unwrap();
        eventually("the deletion is recorded", || {
            registry
                .last_error()
                .is_some_and(|e| e.contains("was deleted"))
        })
        .await;
        assert_eq!(
            registry.last_error().as_deref(),
            Some("configmap hub-a/work-controller-config: was deleted")
        );
        assert!(Arc::ptr_eq(&before, &registry.load().unwrap()));
        assert!(registry.is_ready());
        assert_eq!(loads.load(Ordering::SeqCst), 2);

        task.abort();
    })
    .await;
}

#[tokio::test]
async fn a_configmap_created_later_is_picked_up() {
    bounded(async {
        let (service, mut api) = mock::pair::<ApiRequest, Response<MockBody>>();
        let client = kube::Client::new(service, "default");
        let registry = new_registry();
        let task = configmap::spawn(client, registry.clone(), cm_ref(), || {});

        let (_, reply) = next_request(&mut api, false).await;
        reply.send_response(json_response(StatusCode::OK, &list("7", vec![])));
        let (_, reply) = next_request(&mut api, true).await;
        assert_eq!(
            registry.last_error().as_deref(),
            Some("configmap hub-a/work-controller-config: not found")
        );
        assert!(!registry.is_ready());

        let (events, response) = streaming_response();
        reply.send_response(response);
        // Created without the key first, then with it.
        events
            .send(watch_event("ADDED", config_map("8", None)))
            .unwrap();
        eventually("the missing key is recorded", || {
            registry.last_error().as_deref()
                == Some("configmap hub-a/work-controller-config: has no key config.yaml")
        })
        .await;
        events
            .send(watch_event(
                "MODIFIED",
                config_map("9", Some(&registry_text("alpha"))),
            ))
            .unwrap();
        eventually("generation 1", || generation(&registry) == 1).await;
        assert!(resolves(&registry, "alpha"));
        assert!(registry.last_error().is_none());

        task.abort();
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn api_errors_are_recorded_and_the_watch_retries() {
    // Paused time: the backoff between attempts passes at once.
    bounded(async {
        let (service, mut api) = mock::pair::<ApiRequest, Response<MockBody>>();
        let client = kube::Client::new(service, "default");
        let registry = new_registry();
        let task = configmap::spawn(client, registry.clone(), cm_ref(), || {});

        // No RBAC for the list.
        let (_, reply) = next_request(&mut api, false).await;
        reply.send_response(json_response(StatusCode::FORBIDDEN, &forbidden()));
        let (_, reply) = next_request(&mut api, false).await;
        let error = registry.last_error().expect("recorded");
        assert!(
            error.starts_with(
                "configmap hub-a/work-controller-config: cannot watch: list failed: \
                 configmaps \"work-controller-config\" is forbidden: "
            ),
            "{error}"
        );
        assert!(error.ends_with("(403 Forbidden)"), "{error}");
        assert_eq!(
            registry.reload_counts(),
            ReloadCounts {
                success: 0,
                failure: 1
            }
        );

        // The same error again is not recorded again.
        reply.send_response(json_response(StatusCode::FORBIDDEN, &forbidden()));
        let (_, reply) = next_request(&mut api, false).await;
        assert_eq!(
            registry.reload_counts(),
            ReloadCounts {
                success: 0,
                failure: 1
            }
        );

        // The API server unreachable: a new error, recorded.
        reply.send_error(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "connection refused",
        ));
        let (_, reply) = next_request(&mut api, false).await;
        assert_eq!(
            registry.last_error().as_deref(),
            Some(
                "configmap hub-a/work-controller-config: cannot watch: list failed: \
                 ServiceError: connection refused"
            )
        );
        assert_eq!(
            registry.reload_counts(),
            ReloadCounts {
                success: 0,
                failure: 2
            }
        );

        // The API answers again: the registry loads and the error clears.
        reply.send_response(json_response(
            StatusCode::OK,
            &list("5", vec![config_map("5", Some(&registry_text("alpha")))]),
        ));
        let (_, _watch) = next_request(&mut api, true).await;
        assert_eq!(generation(&registry), 1);
        assert!(registry.last_error().is_none());
        assert!(resolves(&registry, "alpha"));

        task.abort();
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn an_expired_watch_lists_again_without_reloading() {
    bounded(async {
        let (service, mut api) = mock::pair::<ApiRequest, Response<MockBody>>();
        let client = kube::Client::new(service, "default");
        let registry = new_registry();
        let text = registry_text("alpha");
        let task = configmap::spawn(client, registry.clone(), cm_ref(), || {});

        let (_, reply) = next_request(&mut api, false).await;
        reply.send_response(json_response(
            StatusCode::OK,
            &list("10", vec![config_map("10", Some(&text))]),
        ));
        let (_, reply) = next_request(&mut api, true).await;
        let (events, response) = streaming_response();
        reply.send_response(response);
        // The resource version is too old: the API server ends the watch
        // with 410 Gone, the routine signal to list again.
        events
            .send(watch_event(
                "ERROR",
                json!({
                    "apiVersion": "v1",
                    "kind": "Status",
                    "metadata": {},
                    "status": "Failure",
                    "message": "too old resource version: 10 (50)",
                    "reason": "Expired",
                    "code": 410,
                }),
            ))
            .unwrap();
        let (_, reply) = next_request(&mut api, false).await;
        reply.send_response(json_response(
            StatusCode::OK,
            &list("50", vec![config_map("10", Some(&text))]),
        ));
        let (_, _watch) = next_request(&mut api, true).await;
        assert_eq!(generation(&registry), 1, "same text: no new snapshot");
        assert!(registry.last_error().is_none());
        assert_eq!(
            registry.reload_counts(),
            ReloadCounts {
                success: 1,
                failure: 0
            }
        );

        task.abort();
    })
    .await;
}
