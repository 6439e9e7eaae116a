//! `rollout-controller get` against the fake hub ([`fake_hub`]:
//! the mock-service pattern, objects stored as a real hub stores them,
//! watches held open until the test changes an object). A rollout mid-way, mid-validation and aborted; not found;
//! an unreachable API server and the kubectl plugin name through the real
//! binary.

use crate::common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::fake_hub::*;
use rollout_console::view::hub::{self, GetError, Output, Target};
use rollout_console::view::{build, render};
use serde_json::{Value, json};
use tokio::sync::oneshot;

fn target() -> Target {
    Target {
        namespace: NS.into(),
        name: NAME.into(),
        server: "https://hub.example:6443".into(),
        request_timeout: hub::DEFAULT_REQUEST_TIMEOUT,
    }
}

async fn text_of(objects: Vec<(&'static str, Value)>) -> (String, Vec<String>) {
    let fake = FakeHub::start(objects);
    let snapshot = hub::first_snapshot(&fake.client, &target())
        .await
        .expect("the view is read");
    let text = render(&build(&snapshot, now()));
    // Shown with --nocapture: the text the docs quote.
    println!("{text}");
    let requests = fake.requests.lock().unwrap().clone();
    (text, requests)
}

fn assert_has(text: &str, wants: &[&str]) {
    for want in wants {
        assert!(text.contains(want), "{want:?} missing from\n{text}");
    }
}

// ---------------------------------------------------------------------------
// Tests.

#[tokio::test]
async fn mid_rollout_shows_each_cluster_and_what_the_controller_waits_for() {
    let (text, requests) = text_of(mid_rollout()).await;
    assert_has(
        &text,
        &[
            "Status:     ◌ Progressing",
            "Message:    Rolling out revision r2: 1 of 4 clusters updated.",
            "Revisions:  update r2 · current r1",
            "plugin    smoke-test",
            "waiting for cluster-002 to finish progressing (deadline in 9m0s)",
            "2 clusters to apply, as the strategy allows: cluster-003 … cluster-004",
            "cluster-001  ✔ Succeeded",
            "cluster-002  ◌ Progressing  r2 (update)",
            "cluster-003  · ToApply      r1 (current)",
        ],
    );
    assert!(!text.contains("cluster-009"), "{text}");
    // The works by the owner label, across namespaces.
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with(&format!("GET {WORKS}?"))
                && r.contains("manifestworkreplicaset%3Ddefault.hello")),
        "{requests:#?}"
    );
}

#[tokio::test]
async fn mid_validation_shows_the_plugins_message() {
    let (text, _) = text_of(mid_validation()).await;
    assert_has(
        &text,
        &[
            "validating cluster-002: smoke-test says INPROGRESS: smoke test 3/5",
            "cluster-002  ◷ Validating",
            "smoke test 3/5",
        ],
    );
}

#[tokio::test]
async fn an_abort_shows_the_rollback_and_its_event() {
    let (text, _) = text_of(aborted()).await;
    assert_has(
        &text,
        &[
            "Status:     ↺ RollingBack",
            "aborted at 11:59:00Z (1m0s ago): rolling back 2 clusters to revision r1",
            "rolling back 2 clusters to revision r1",
            "2 clusters to roll back, as the strategy allows: cluster-001 … cluster-002",
            "Aborted:    2025-03-01T11:59:00Z",
            "Warning  AbortStarted",
            "cluster-002 Failed (error rate 7% > 1%)",
        ],
    );
}

#[tokio::test]
async fn json_output_is_the_view_model() {
    let fake = FakeHub::start(aborted());
    let snapshot = hub::first_snapshot(&fake.client, &target()).await.unwrap();
    let mut out = Vec::new();
    hub::write_frame(
        &mut out,
        &build(&snapshot, jiff::Timestamp::now()),
        Output::Json,
        true,
    )
    .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    let view: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(view["phase"], "RollingBack");
    assert_eq!(view["desiredRevision"], "r1");
    assert_eq!(view["placements"][0]["plugin"], "smoke-test");
}

#[tokio::test]
async fn a_missing_mwrs_is_named_with_its_namespace() {
    let fake = FakeHub::start(vec![(DECISIONS, decision())]);
    let err = hub::first_snapshot(&fake.client, &target())
        .await
        .unwrap_err();
    assert!(matches!(err, GetError::NotFound { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("ManifestWorkReplicaSet \"hello\" not found in namespace \"default\""),
        "{text}"
    );
}

/// A writer whose bytes the test reads while the view is drawn.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Shared {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    async fn wait_for(&self, want: &str) {
        for _ in 0..100 {
            if self.text().contains(want) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{want:?} never drawn:\n{}", self.text());
    }
}

#[tokio::test]
async fn watch_redraws_when_the_rollout_changes_and_stops_on_request() {
    let fake = FakeHub::start(mid_validation());
    let out = Shared::default();
    let (stop, stopped) = oneshot::channel::<()>();
    let client = fake.client.clone();
    let mut writer = out.clone();
    let watching = tokio::spawn(async move {
        hub::watch(&client, &target(), Output::Appended, &mut writer, async {
            let _ = stopped.await;
        })
        .await
    });
    out.wait_for("smoke-test says INPROGRESS: smoke test 3/5")
        .await;
    // Let every watch open before the change.
    for _ in 0..100 {
        let requests = fake.requests.lock().unwrap().clone();
        if requests.iter().filter(|r| r.contains("watch=true")).count() >= 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The plugin said FAILED; the controller aborted.
    let aborted = aborted();
    fake.change(CARRIERS, aborted[1].1.clone());
    fake.change(MWRS, aborted[0].1.clone());
    out.wait_for("rolling back 2 clusters to revision r1").await;
    let text = out.text();
    assert!(text.contains("────────"), "frames are separated:\n{text}");
    assert!(!text.contains('\x1b'), "no terminal codes into a pipe");
    // The API server stops serving watches: said at once, nothing changed.
    fake.break_watches();
    out.wait_for("! the watch is interrupted (").await;
    stop.send(()).unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), watching)
        .await
        .expect("the watch stops when asked")
        .unwrap();
    assert!(result.is_ok(), "{result:?}");
}

// ---------------------------------------------------------------------------
// The real binary.

#[tokio::test]
async fn an_unreachable_api_server_fails_at_once_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let port = common::closed_port().await;
    let config = kubeconfig(dir.path(), &format!("http://{port}"));
    let started = std::time::Instant::now();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_rollout-controller"))
        .args(["get", NAME, "--watch", "--kubeconfig"])
        .arg(&config)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot reach the Kubernetes API server at http://{port}/"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("Connection refused"), "{stderr}");
}

#[cfg(unix)]
#[tokio::test]
async fn a_symlink_named_kubectl_mwrs_is_a_kubectl_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("kubectl-mwrs");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_rollout-controller"), &link).unwrap();
    let help = std::process::Command::new(&link)
        .args(["get", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("Usage: kubectl mwrs get [OPTIONS] <NAME>"),
        "{text}"
    );
    // As kubectl runs it: the arguments after `kubectl mwrs`, and the
    // namespace of the kubeconfig's context by default.
    let port = common::closed_port().await;
    let config = kubeconfig(dir.path(), &format!("http://{port}"));
    let run = std::process::Command::new(&link)
        .args(["get", NAME])
        .env("KUBECONFIG", &config)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("cannot reach the Kubernetes API server"),
        "{stderr}"
    );
    let plain = std::process::Command::new(env!("CARGO_BIN_EXE_rollout-controller"))
        .args(["get", "--help"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&plain.stdout).contains("Usage: rollout-controller get"),
        "the plain binary keeps its name"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn get_watch_draws_then_exits_0_on_sigterm() {
    use tokio::io::AsyncBufReadExt;

    let mut objects = mid_validation();
    // Lists see every collection, events included.
    objects.push((EVENTS, aborted().pop().unwrap().1));
    let addr = http_hub(objects).await;
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), &format!("http://{addr}"));
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_rollout-controller"))
        .args(["get", NAME, "-n", NS, "--watch", "--kubeconfig"])
        .arg(&config)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let drawn = tokio::time::timeout(Duration::from_secs(10), async {
        let mut text = String::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            text.push_str(&line);
            text.push('\n');
            if line.contains("smoke-test says INPROGRESS: smoke test 3/5") {
                return text;
            }
        }
        panic!("stdout closed before the view:\n{text}");
    })
    .await
    .expect("the first frame is drawn");
    assert!(drawn.contains("Name:       hello"), "{drawn}");
    // Let the watches start, then stop it as a kubelet or Ctrl-C would.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = crate::child::terminate(&mut child, "").await;
    assert_eq!(status.code(), Some(0));
}

#[tokio::test]
async fn an_api_server_that_never_answers_fails_after_the_request_timeout() {
    // Accepts connections, answers nothing.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), &format!("http://{addr}"));
    let started = std::time::Instant::now();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_rollout-controller"))
        .args(["get", NAME, "--request-timeout", "1s", "--kubeconfig"])
        .arg(&config)
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "the Kubernetes API server at http://{addr}/ did not answer within 1s"
        )),
        "{stderr}"
    );
}

#[tokio::test]
async fn events_the_reader_may_not_list_are_left_out_and_works_are_not() {
    let fake = FakeHub::start_forbidding(aborted(), vec![EVENTS]);
    let snapshot = hub::first_snapshot(&fake.client, &target()).await.unwrap();
    let text = render(&build(&snapshot, now()));
    assert!(
        text.contains("rolling back 2 clusters to revision r1"),
        "{text}"
    );
    assert!(!text.contains("Events:"), "{text}");
    let fake = FakeHub::start_forbidding(aborted(), vec![WORKS]);
    let err = hub::first_snapshot(&fake.client, &target())
        .await
        .unwrap_err();
    assert!(matches!(err, GetError::Api { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with("reading the ManifestWorks: "),
        "{err}"
    );
}

/// Text others wrote into the objects the view reads, as a plugin, another
/// controller or a work agent could: escape sequences (clear screen, cursor
/// home, an OSC 52 clipboard write), BEL, a C1 CSI, a bidirectional
/// override, and a CR LF forging a line of the view's own.
const HOSTILE: &str = "\u{1b}[2J\u{1b}[H\u{1b}]52;c;Y3VybCBldmlsIHwgc2g=\u{7}\u{7}\u{9b}31m\u{202e}\r\nStatus:     ✔ Healthy";

/// Whether `text` holds a character a terminal acts on, or one that
/// reorders what it shows; a line's own LF aside.
fn acts_on_a_terminal(text: &str) -> bool {
    text.chars().any(|c| {
        (c.is_control() && c != '\n')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    })
}

#[tokio::test]
async fn text_others_wrote_is_shown_escaped_on_its_own_line() {
    let mut objects = aborted();
    let mut status = objects[1].1["status"].clone();
    status["placements"][0]["clusters"][1]["message"] = json!(HOSTILE);
    objects[1] = (CARRIERS, carrier(status));
    let mut conditions = vec![condition("Progressing", "False", "RolloutAborted", HOSTILE)];
    conditions.push(condition("PluginLoaded", "True", HOSTILE, "ok"));
    objects[0] = (MWRS, mwrs(conditions));
    let mut agent = work("cluster-002", "r2", "False");
    agent["status"]["conditions"][1]["message"] = json!(HOSTILE);
    objects[3] = (WORKS, agent);
    let event = objects.last_mut().unwrap();
    event.1["note"] = json!(HOSTILE);
    let (text, _) = text_of(objects).await;
    assert!(!acts_on_a_terminal(&text), "{text:?}");
    assert_has(
        &text,
        &[
            "\\x1b[2J\\x1b[H\\x1b]52;c;Y3VybCBldmlsIHwgc2g=\\x07\\x07\\u{9b}31m\\u{202e}\\r\\nStatus:     ✔ Healthy",
            "Warning  AbortStarted",
        ],
    );
    // The only Status line is the view's own.
    let statuses: Vec<&str> = text.lines().filter(|l| l.starts_with("Status:")).collect();
    assert_eq!(statuses, ["Status:     ↺ RollingBack"], "{text}");
}
