//! Text logs written to a pipe, as in every pod, carry no ANSI colour codes.
//!
//! The subscriber is global to a process, so the logging half runs in a
//! child: this test binary started again with only `child_logs_through_init`
//! selected, its stderr a pipe.

use std::process::Command;

use rollout_telemetry::logs::{self, LogFormat};

/// Set in the child's environment; without it the child test does nothing.
const CHILD: &str = "ROLLOUT_TELEMETRY_LOG_COLOUR_CHILD";

#[test]
fn child_logs_through_init() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    logs::init(LogFormat::Text);
    let span = tracing::info_span!("call", hook = "BeginRollout");
    let _entered = span.enter();
    tracing::warn!(plugin = "smoke-test", "plugin failed");
}

#[test]
fn text_logs_to_a_pipe_are_plain() {
    let exe = std::env::current_exe().expect("the test binary");
    let out = Command::new(exe)
        .args([
            "--exact",
            "child_logs_through_init",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("RUST_LOG", "info")
        // Colour is off here because stderr is a pipe, not because of NO_COLOR.
        .env_remove("NO_COLOR")
        .output()
        .expect("run the child");
    assert!(out.status.success(), "child failed: {out:?}");
    let stderr = String::from_utf8(out.stderr).expect("utf-8");
    let line = stderr
        .lines()
        .find(|l| l.contains("plugin failed"))
        .unwrap_or_else(|| panic!("the child's log line, in {stderr:?}"));
    assert!(
        !line.contains('\u{1b}'),
        "ANSI escape codes in a log written to a pipe: {line:?}"
    );
    assert!(line.contains("WARN"), "{line:?}");
    assert!(line.contains("plugin=\"smoke-test\""), "{line:?}");
}
