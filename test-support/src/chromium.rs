//! A real headless Chromium (Debian's package) for the browser tests,
//! driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`:
//! JSON messages ended by NUL on file descriptors 3 and 4, no websocket),
//! one page per browser.
//!
//! [`binary_for_tests`] finds it: `$ROLLOUT_HOOKS_CHROMIUM`
//! (`ROLLOUT_HOOKS_CHROMIUM=$(bash test-support/chromium/find)` installs
//! Debian's package when missing), else `chromium` on `PATH`. Without one
//! the test is skipped (said on stderr), unless `ROLLOUT_HOOKS_E2E=1`,
//! where that is a failure.
//!
//! A failure here is the test's failure report: the methods panic, naming
//! what Chromium answered.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The environment variable naming the Chromium binary to use.
pub const CHROMIUM_VAR: &str = "ROLLOUT_HOOKS_CHROMIUM";

/// `$ROLLOUT_HOOKS_CHROMIUM` when it names a file, else `chromium` on
/// `PATH`: `None` (the test skips, said on stderr) when there is none, a
/// panic instead under `ROLLOUT_HOOKS_E2E=1`.
pub fn binary_for_tests() -> Option<PathBuf> {
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

/// A headless Chromium and one page of it, over the DevTools pipe. Killed
/// when dropped; [`Browser::close`] ends it cleanly.
#[derive(Debug)]
pub struct Browser {
    child: Child,
    to: ChildStdin,
    from: BufReader<ChildStdout>,
    next_id: u64,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts `chromium` headless with a window of `width`×`height` and a
    /// profile of its own, and attaches to a blank page.
    pub async fn launch(chromium: &Path, width: u32, height: u32) -> Browser {
        let profile = tempfile::tempdir().expect("a profile directory");
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
                // start; the pages are the tests' own.
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--hide-scrollbars",
            ])
            .arg(format!("--window-size={width},{height}"))
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("Chromium starts");
        let mut browser = Browser {
            to: child.stdin.take().expect("the command pipe"),
            from: BufReader::new(child.stdout.take().expect("the answer pipe")),
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
        browser.session = attached["sessionId"]
            .as_str()
            .expect("a session id")
            .to_owned();
        browser
    }

    /// Sends `method` (to the page once attached) and returns its result;
    /// events in between are skipped.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if !self.session.is_empty() {
            message["sessionId"] = json!(self.session);
        }
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        self.to.write_all(&bytes).await.expect("writes to Chromium");
        self.to.flush().await.expect("writes to Chromium");
        let answer = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                let mut raw = Vec::new();
                let read = self
                    .from
                    .read_until(0, &mut raw)
                    .await
                    .expect("reads from Chromium");
                assert!(read > 0, "Chromium closed the pipe");
                raw.pop();
                let answer: Value = serde_json::from_slice(&raw).expect("JSON from Chromium");
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

    /// Opens `url` in the page.
    pub async fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url})).await;
    }

    /// The value of `expression` evaluated in the page.
    pub async fn eval(&mut self, expression: &str) -> Value {
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

    /// Evaluates `expression` until it is true, for up to `limit`; panics
    /// with the page's text when it never is.
    pub async fn wait_for(&mut self, what: &str, expression: &str, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline {
            if self.eval(expression).await == json!(true) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let text = self.eval("document.body.innerText").await;
        panic!("{what}: never true: {expression}\nthe page:\n{text}");
    }

    /// The page as a PNG.
    pub async fn screenshot(&mut self) -> Vec<u8> {
        let shot = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("a screenshot"))
            .expect("base64 from Chromium")
    }

    /// Closes the browser and waits (up to 5 s) for it to exit.
    pub async fn close(mut self) {
        self.session.clear();
        let _ = self.call("Browser.close", json!({})).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }
}
