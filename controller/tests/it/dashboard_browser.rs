//! The dashboard in a real browser: headless Chromium (Debian's), driven
//! over the DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON
//! messages ended by NUL on file descriptors 3 and 4, no websocket), on the
//! page served from the fake hub. The page shows the rollout (each
//! cluster and its status); it follows a change on the hub without a
//! reload; markup a plugin wrote (`<img onerror>`, `<script>`) is shown as
//! text and makes no element.
//!
//! Needs Chromium: `ROLLOUT_HOOKS_CHROMIUM=$(bash test-support/chromium/find)`
//! (installs Debian's package when missing), or `chromium` on PATH.
//! Skipped without either, unless `ROLLOUT_HOOKS_E2E=1` (then it fails).
//! With `ROLLOUT_HOOKS_DASHBOARD_SCREENSHOT=FILE` it also saves the page as
//! a PNG.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::common::fake_hub::*;
use crate::dashboard::Served;

const CHROMIUM_VAR: &str = "ROLLOUT_HOOKS_CHROMIUM";

fn chromium() -> Option<PathBuf> {
    let named = std::env::var_os(CHROMIUM_VAR).map(PathBuf::from);
    let on_path = || {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("chromium"))
                .find(|p| p.is_file())
        })
    };
    let found = named.filter(|p| p.is_file()).or_else(on_path);
    if found.is_none() {
        assert_ne!(
            std::env::var("ROLLOUT_HOOKS_E2E").as_deref(),
            Ok("1"),
            "{CHROMIUM_VAR} names no Chromium and none is on PATH"
        );
        eprintln!(
            "no Chromium ({CHROMIUM_VAR}=$(bash test-support/chromium/find) installs Debian's): skipped"
        );
    }
    found
}

/// A headless Chromium and one page of it, over the DevTools pipe.
struct Browser {
    child: Child,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
    next_id: u64,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn launch(chromium: &std::path::Path) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        // The pipe is fds 3 (commands in) and 4 (answers out): the shell
        // moves this process's pipes there.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 </dev/null >/dev/null"#)
            .arg(chromium)
            .args([
                "--headless",
                "--remote-debugging-pipe",
                // Tests run as root, where Chromium's sandbox will not
                // start; the page is the test's own.
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--hide-scrollbars",
                "--window-size=1280,860",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("Chromium starts");
        let mut browser = Browser {
            to: child.stdin.take().unwrap(),
            from: BufReader::new(child.stdout.take().unwrap()),
            child,
            next_id: 0,
            session: String::new(),
            _profile: profile,
        };
        let target = browser
            .call("Target.createTarget", json!({"url": "about:blank"}))
            .await;
        let attached = browser
            .call(
                "Target.attachToTarget",
                json!({"targetId": target["targetId"], "flatten": true}),
            )
            .await;
        browser.session = attached["sessionId"].as_str().unwrap().to_owned();
        browser
    }

    /// Sends `method` (to the page once attached) and returns its result;
    /// events in between are skipped.
    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if !self.session.is_empty() {
            message["sessionId"] = json!(self.session);
        }
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        self.to.write_all(&bytes).await.unwrap();
        self.to.flush().await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                let mut raw = Vec::new();
                let read = self.from.read_until(0, &mut raw).await.unwrap();
                assert!(read > 0, "Chromium closed the pipe");
                raw.pop();
                let answer: Value = serde_json::from_slice(&raw).unwrap();
                if answer["id"] == id {
                    return answer;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no answer to {method}"));
        assert!(answer["error"].is_null(), "{method}: {answer}");
        answer["result"].clone()
    }

    async fn eval(&mut self, expression: &str) -> Value {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true}),
            )
            .await;
        assert!(
            result["exceptionDetails"].is_null(),
            "{expression}: {result}"
        );
        result["result"]["value"].clone()
    }

    /// Evaluates `expression` until it is true, for up to 10 s.
    async fn wait_for(&mut self, what: &str, expression: &str) {
        for _ in 0..100 {
            if self.eval(expression).await == json!(true) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let text = self.eval("document.body.innerText").await;
        panic!("{what}: never true: {expression}\nthe page:\n{text}");
    }

    async fn screenshot(&mut self) -> Vec<u8> {
        let shot = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap()
    }

    async fn close(mut self) {
        self.session.clear();
        let _ = self.call("Browser.close", json!({})).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }
}

/// A plugin's message full of markup.
const MARKUP: &str =
    r#"<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script><b>bold</b> & done"#;

/// Each cluster tile's name and status, as `[[name, status], …]`.
const TILES: &str = r#"JSON.stringify([...document.querySelectorAll('.tile[data-cluster]')]
    .map(t => [t.dataset.cluster, t.dataset.status]))"#;

#[tokio::test]
async fn the_page_shows_the_rollout_follows_the_hub_and_shows_markup_as_text() {
    let Some(chromium) = chromium() else { return };
    let mut objects = mid_validation();
    objects[1].1["status"]["placements"][0]["clusters"][0]["message"] = json!(MARKUP);
    let served = Served::start(objects, None, 4).await;
    let mut browser = Browser::launch(&chromium).await;
    let url = format!("http://{}/", served.addr);
    browser.call("Page.navigate", json!({"url": url})).await;
    // The first set is chosen; its clusters are drawn with their statuses.
    browser
        .wait_for(
            "the clusters are drawn",
            "document.querySelectorAll('.tile[data-cluster]').length === 4",
        )
        .await;
    let tiles: Value = serde_json::from_str(browser.eval(TILES).await.as_str().unwrap()).unwrap();
    assert_eq!(
        tiles,
        json!([
            ["cluster-001", "Succeeded"],
            ["cluster-002", "Validating"],
            ["cluster-003", "ToApply"],
            ["cluster-004", "ToApply"]
        ])
    );
    assert_eq!(browser.eval("location.hash").await, "#/default/hello");
    assert_eq!(
        browser
            .eval("document.getElementById('phase').textContent")
            .await,
        "Progressing"
    );
    let waiting = browser
        .eval("document.getElementById('waiting').textContent")
        .await;
    assert!(
        waiting
            .as_str()
            .unwrap()
            .contains("validating cluster-002: smoke-test says INPROGRESS"),
        "{waiting}"
    );
    // The markup is text: shown as written, no element made, nothing run.
    let cell = "document.querySelector('#messages tr[data-cluster=\"cluster-002\"] td.message').textContent";
    assert_eq!(browser.eval(cell).await, MARKUP);
    assert_eq!(
        browser
            .eval("document.querySelectorAll('img, b, #rollout script').length")
            .await,
        0
    );
    assert_eq!(browser.eval("document.scripts.length").await, 1);
    assert_eq!(browser.eval("typeof window.__pwned").await, "undefined");
    let text = browser.eval("document.body.innerText").await;
    assert!(
        text.as_str().unwrap().contains("<img src=x onerror="),
        "{text}"
    );
    if let Some(path) = std::env::var_os("ROLLOUT_HOOKS_DASHBOARD_SCREENSHOT") {
        std::fs::write(path, browser.screenshot().await).unwrap();
    }
    // The hub changes: the plugin said FAILED, the controller aborted.
    browser.eval("window.__same_page = true").await;
    served.fake.wait_for_watches(5).await;
    let aborted = aborted();
    served.fake.change(CARRIERS, aborted[1].1.clone());
    served.fake.change(MWRS, aborted[0].1.clone());
    browser
        .wait_for(
            "the abort is drawn",
            "document.getElementById('phase').textContent === 'RollingBack'",
        )
        .await;
    assert_eq!(browser.eval("window.__same_page").await, true, "no reload");
    let waiting = browser
        .eval("document.getElementById('waiting').textContent")
        .await;
    assert!(
        waiting
            .as_str()
            .unwrap()
            .contains("rolling back 2 clusters to revision r1"),
        "{waiting}"
    );
    let list = browser
        .eval("document.querySelector('[data-rollout=\"default/hello\"] .phase').textContent")
        .await;
    assert_eq!(list, "RollingBack");
    browser.close().await;
    served.stop().await;
}
