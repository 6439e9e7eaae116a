//! `rollout-controller dashboard` against the fake hub
//! ([`fake_hub`]), over real HTTP on 127.0.0.1: the list and a
//! set's view as JSON (the view `get -o json` prints), the page and its
//! assets, the security headers on every answer, a foreign host name
//! refused, the event stream sending the view and then each change on the
//! hub, the bound on event streams, one namespace or all, a clean stop
//! with streams open; and the real binary: a non-loopback address refused,
//! served until SIGTERM.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use crate::fake_hub::*;
use rollout_console::dashboard::{self, Limits};
use rollout_console::view::{build, hub};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A dashboard served in-process from a fake hub.
pub struct Served {
    pub fake: FakeHub,
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    serving: JoinHandle<Result<(), dashboard::DashboardError>>,
}

impl Served {
    /// The dashboard of `namespace` (`None`: all) over `objects`.
    pub async fn start(
        objects: Vec<(&'static str, Value)>,
        namespace: Option<&str>,
        clients: usize,
    ) -> Served {
        let fake = FakeHub::start(objects);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let client = fake.client.clone();
        let namespace = namespace.map(str::to_owned);
        let limits = Limits {
            clients,
            any_host: false,
        };
        let serving = tokio::spawn(async move {
            dashboard::serve(&client, namespace, listener, limits, async {
                let _ = stopped.await;
            })
            .await
        });
        Served {
            fake,
            addr,
            stop: Some(stop),
            serving,
        }
    }

    /// Stops it; fails unless it stops within 5 s.
    pub async fn stop(mut self) {
        self.stop.take().unwrap().send(()).unwrap();
        let result = tokio::time::timeout(Duration::from_secs(5), self.serving)
            .await
            .expect("the dashboard stops when asked")
            .unwrap();
        assert!(result.is_ok(), "{result:?}");
    }
}

/// An answer: status, headers (names in lower case), body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// `GET path` naming `host`, the whole answer.
pub async fn get_as(addr: SocketAddr, path: &str, host: &str) -> Answer {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut raw))
        .await
        .expect("answered")
        .unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(n, v)| (n.to_ascii_lowercase(), v.to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

pub async fn get(addr: SocketAddr, path: &str) -> Answer {
    get_as(addr, path, &addr.to_string()).await
}

/// An open event stream.
pub struct Events {
    lines: tokio::io::Lines<BufReader<TcpStream>>,
    pub status: u16,
}

impl Events {
    /// Opens `path` (HTTP/1.0: the body is the stream itself, unchunked).
    pub async fn open(addr: SocketAddr, path: &str) -> Events {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request =
            format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut lines = BufReader::new(stream).lines();
        let status_line = lines.next_line().await.unwrap().unwrap();
        let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.is_empty() {
                break;
            }
        }
        Events { lines, status }
    }

    /// The next `fleet` event's data, or `None` when the stream ends.
    pub async fn next(&mut self) -> Option<Value> {
        let read = async {
            let mut fleet = false;
            while let Some(line) = self.lines.next_line().await.ok()? {
                if line == "event: fleet" {
                    fleet = true;
                } else if let (true, Some(data)) = (fleet, line.strip_prefix("data: ")) {
                    return Some(serde_json::from_str(data).unwrap());
                }
            }
            None
        };
        tokio::time::timeout(Duration::from_secs(10), read)
            .await
            .expect("an event or the end within 10 s")
    }

    /// Reads events until one satisfies `want`.
    pub async fn until(&mut self, what: &str, want: impl Fn(&Value) -> bool) -> Value {
        loop {
            match self.next().await {
                Some(frame) if want(&frame) => return frame,
                Some(_) => {}
                None => panic!("the stream ended before {what}"),
            }
        }
    }
}

/// Cluster `name` of the first placement of `view`.
pub fn cluster<'v>(view: &'v Value, name: &str) -> &'v Value {
    view["placements"][0]["groups"][0]["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in {view}"))
}

fn without_time(mut view: Value) -> Value {
    view.as_object_mut().unwrap().remove("now");
    view
}

/// The mid-rollout's objects, and a set team-b/web.
fn two_namespaces() -> Vec<(&'static str, Value)> {
    let mut objects = mid_rollout();
    let mut other = mwrs(rolling());
    other["metadata"]["namespace"] = json!("team-b");
    other["metadata"]["name"] = json!("web");
    objects.push((MWRS, other));
    objects
}

#[tokio::test]
async fn the_list_and_a_view_are_json_and_the_view_is_the_one_get_prints() {
    let served = Served::start(mid_validation(), None, 4).await;
    let list = get(served.addr, "/api/rollouts").await;
    assert_eq!(list.status, 200, "{list:?}");
    assert_eq!(list.header("content-type"), Some("application/json"));
    let list = list.json();
    assert_eq!(list["trouble"], Value::Null);
    let row = &list["rollouts"][0];
    assert_eq!(
        (row["namespace"].as_str(), row["name"].as_str()),
        (Some(NS), Some(NAME))
    );
    assert_eq!(row["phase"], "Progressing");
    assert_eq!(row["clusters"], 4);
    assert_eq!(row["counts"]["validating"], 1);
    let view = get(served.addr, "/api/rollouts/default/hello").await;
    assert_eq!(view.status, 200, "{view:?}");
    let target = hub::Target {
        namespace: NS.into(),
        name: NAME.into(),
        server: String::new(),
        request_timeout: hub::DEFAULT_REQUEST_TIMEOUT,
    };
    let snapshot = hub::first_snapshot(&served.fake.client, &target)
        .await
        .unwrap();
    let printed = serde_json::to_value(build(&snapshot, jiff::Timestamp::now())).unwrap();
    let shown = view.json();
    // The same model; the countdowns may have moved by a second.
    assert_eq!(shown["placements"], printed["placements"]);
    assert_eq!(without_time(shown.clone())["phase"], printed["phase"]);
    assert_eq!(cluster(&shown, "cluster-002")["message"], "smoke test 3/5");
    let missing = get(served.addr, "/api/rollouts/default/nope").await;
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.json()["error"],
        "no ManifestWorkReplicaSet default/nope"
    );
    served.stop().await;
}

#[tokio::test]
async fn every_answer_carries_the_security_headers_and_the_page_needs_nothing_from_elsewhere() {
    let served = Served::start(mid_rollout(), None, 4).await;
    for (path, status, content_type) in [
        ("/", 200, "text/html; charset=utf-8"),
        ("/dashboard.js", 200, "text/javascript; charset=utf-8"),
        ("/dashboard.css", 200, "text/css; charset=utf-8"),
        ("/api/rollouts", 200, "application/json"),
        ("/api/rollouts/default/nope", 404, "application/json"),
    ] {
        let answer = get(served.addr, path).await;
        assert_eq!(answer.status, status, "{path}: {answer:?}");
        assert_eq!(answer.header("content-type"), Some(content_type), "{path}");
        let csp = answer.header("content-security-policy").unwrap_or_default();
        for directive in [
            "default-src 'none'",
            "script-src 'self'",
            "connect-src 'self'",
            "frame-ancestors 'none'",
            "require-trusted-types-for 'script'",
        ] {
            assert!(csp.contains(directive), "{path}: {csp}");
        }
        assert_eq!(
            answer.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
        assert_eq!(answer.header("x-frame-options"), Some("DENY"), "{path}");
        assert_eq!(answer.header("cache-control"), Some("no-store"), "{path}");
    }
    let unknown = get(served.addr, "/nope").await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.header("x-content-type-options"), Some("nosniff"));
    let page = get(served.addr, "/").await.body;
    assert!(
        !page.contains("http:") && !page.contains("https:") && !page.contains("//cdn"),
        "{page}"
    );
    assert!(
        page.contains(r#"<script src="/dashboard.js" defer></script>"#),
        "{page}"
    );
    // No markup is ever made from a string.
    let script = get(served.addr, "/dashboard.js").await.body;
    for sink in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
    ] {
        assert!(!script.contains(sink), "{sink} in dashboard.js");
    }
    served.stop().await;
}

#[tokio::test]
async fn a_request_naming_another_host_is_refused() {
    let served = Served::start(mid_rollout(), None, 4).await;
    let port = served.addr.port();
    for host in [
        format!("evil.example:{port}"),
        "10.0.0.1".to_owned(),
        String::new(),
    ] {
        let answer = get_as(served.addr, "/api/rollouts", &host).await;
        assert_eq!(answer.status, 421, "{host:?}: {answer:?}");
        assert!(!answer.body.contains(NAME), "{answer:?}");
        assert_eq!(answer.header("x-content-type-options"), Some("nosniff"));
    }
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
    ] {
        let answer = get_as(served.addr, "/api/rollouts", &host).await;
        assert_eq!(answer.status, 200, "{host:?}: {answer:?}");
    }
    served.stop().await;
}

#[tokio::test]
async fn the_event_stream_sends_the_view_then_each_change_and_ends_on_stop() {
    let served = Served::start(mid_validation(), None, 4).await;
    let mut events = Events::open(served.addr, "/api/events/default/hello").await;
    assert_eq!(events.status, 200);
    let first = events.next().await.expect("the fleet now");
    assert_eq!(first["rollouts"][0]["name"], NAME);
    assert_eq!(first["view"]["phase"], "Progressing");
    assert_eq!(
        cluster(&first["view"], "cluster-002")["status"],
        "Validating"
    );
    // Every watch is open: sets, carriers, works, decisions, Events.
    served.fake.wait_for_watches(5).await;
    // The plugin said FAILED; the controller aborted.
    let aborted = aborted();
    served.fake.change(CARRIERS, aborted[1].1.clone());
    served.fake.change(MWRS, aborted[0].1.clone());
    let frame = events
        .until("the abort", |f| f["view"]["phase"] == "RollingBack")
        .await;
    assert_eq!(frame["view"]["desiredRevision"], "r1");
    assert_eq!(frame["rollouts"][0]["phase"], "RollingBack");
    // The API server stops serving watches: said at once.
    served.fake.break_watches();
    let frame = events
        .until("the trouble", |f| f["trouble"].is_string())
        .await;
    assert!(
        frame["trouble"]
            .as_str()
            .unwrap()
            .starts_with("the watch is interrupted ("),
        "{frame}"
    );
    // The list's own stream; and a stream of a set that does not exist.
    let mut all = Events::open(served.addr, "/api/events").await;
    assert_eq!(all.next().await.unwrap()["view"], Value::Null);
    let mut none = Events::open(served.addr, "/api/events/default/nope").await;
    assert_eq!(none.next().await.unwrap()["view"], Value::Null);
    served.stop().await;
    assert!(events.next().await.is_none(), "the stream ends on stop");
}

#[tokio::test]
async fn event_streams_are_bounded_and_a_closed_one_frees_its_slot() {
    let served = Served::start(mid_rollout(), None, 2).await;
    let mut one = Events::open(served.addr, "/api/events").await;
    let mut two = Events::open(served.addr, "/api/events/default/hello").await;
    assert!(one.next().await.is_some() && two.next().await.is_some());
    let three = Events::open(served.addr, "/api/events").await;
    assert_eq!(three.status, 503);
    // The rest of the dashboard still answers.
    assert_eq!(get(served.addr, "/api/rollouts").await.status, 200);
    drop(two);
    let mut again = None;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut reopened = Events::open(served.addr, "/api/events").await;
        if reopened.status == 200 {
            assert!(reopened.next().await.is_some());
            again = Some(reopened);
            break;
        }
    }
    assert!(again.is_some(), "a closed stream's slot is freed");
    served.stop().await;
}

#[tokio::test]
async fn every_namespace_by_default_and_one_with_a_namespace() {
    let served = Served::start(two_namespaces(), None, 4).await;
    let list = get(served.addr, "/api/rollouts").await.json();
    let names: Vec<String> = list["rollouts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}/{}",
                r["namespace"].as_str().unwrap(),
                r["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(names, ["default/hello", "team-b/web"]);
    let requests = served.fake.requests.lock().unwrap().clone();
    assert!(
        requests.iter().any(|r| r.starts_with(
            "GET /apis/work.open-cluster-management.io/v1alpha1/manifestworkreplicasets?"
        )),
        "{requests:#?}"
    );
    // Read-only: nothing but GETs.
    assert!(
        requests.iter().all(|r| r.starts_with("GET ")),
        "{requests:#?}"
    );
    served.stop().await;
    let served = Served::start(two_namespaces(), Some("team-b"), 4).await;
    let list = get(served.addr, "/api/rollouts").await.json();
    assert_eq!(list["rollouts"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list["rollouts"][0]["name"], "web");
    served.stop().await;
}

// ---------------------------------------------------------------------------
// The real binary.

#[tokio::test]
async fn a_listen_address_beyond_loopback_is_refused_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let port = common::closed_port().await;
    let config = kubeconfig(dir.path(), &format!("http://{port}"));
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_rollout-controller"))
        .args(["dashboard", "--listen", "0.0.0.0:0", "--kubeconfig"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--listen 0.0.0.0:0 is not a loopback address"),
        "{stderr}"
    );
    assert!(stderr.contains("--allow-remote"), "{stderr}");
    // Allowed, it goes on to read the hub (unreachable here).
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_rollout-controller"))
        .args([
            "dashboard",
            "--listen",
            "0.0.0.0:0",
            "--allow-remote",
            "--kubeconfig",
        ])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot reach the Kubernetes API server"),
        "{stderr}"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn the_binary_serves_the_page_until_sigterm() {
    let addr = http_hub(mid_validation()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), &format!("http://{addr}"));
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_rollout-controller"))
        .args(["dashboard", "--listen", "127.0.0.1:0", "--kubeconfig"])
        .arg(&config)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("it says where it serves")
        .unwrap()
        .unwrap();
    let url = line
        .strip_prefix("rollout-controller dashboard: serving http://")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("{line}"));
    let served: SocketAddr = url.parse().unwrap();
    assert!(served.ip().is_loopback());
    let page = get(served, "/").await;
    assert_eq!(page.status, 200);
    let view = get(served, "/api/rollouts/default/hello").await.json();
    assert_eq!(cluster(&view, "cluster-002")["status"], "Validating");
    let mut events = Events::open(served, "/api/events/default/hello").await;
    assert!(events.next().await.is_some());
    let status = crate::child::terminate(&mut child, ", a page open").await;
    assert_eq!(status.code(), Some(0));
}
