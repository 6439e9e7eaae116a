//! `rollout-controller simulate`'s logs, written to a pipe (as under the
//! demo or in a pod), carry no ANSI colour codes.

use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_rollout-controller");

#[test]
fn logs_to_a_pipe_are_plain() {
    let out = Command::new(BIN)
        .args(["simulate", "--clusters", "3"])
        // The runtime's own trace lines: enough to see how a line looks.
        .env("RUST_LOG", "trace")
        .env_remove("NO_COLOR")
        .env_remove("ROLLOUT_CONTROLLER_GATEWAY")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdin(Stdio::null())
        .output()
        .expect("runs rollout-controller");
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("TRACE"),
        "no log line to look at: {stderr:?}"
    );
    assert!(
        !stderr.contains('\u{1b}'),
        "ANSI escape codes in logs written to a pipe: {stderr:?}"
    );
}
