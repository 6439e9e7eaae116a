//! Text that did not come from the gateway, as the operator reads it: a
//! plugin's message in the text log stays on its log line with its control
//! characters escaped (it cannot forge a line), while the JSON log keeps it
//! exact; `rollout-gateway check` shows a registry's values escaped.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_rollout-gateway");

/// A plugin's error message that forges a whole log line after a CR LF, and
/// drives a terminal (clear screen, an OSC 52 clipboard write, BEL).
const FORGED: &str = "crashed\r\n2026-01-01T00:00:00.000000Z  INFO rollout_gateway: rollout Succeeded \u{1b}[2J\u{1b}]52;c;aGk=\u{7}";

/// Whether `text` holds a character a terminal acts on, or one that
/// reorders what it shows.
fn acts_on_a_terminal(text: &str) -> bool {
    text.chars()
        .any(|c| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'))
}

/// Runs the gateway binary with `--log-format format` over a plugin that
/// fails open with [`FORGED`], makes `calls` calls, drains it, and returns
/// its log lines.
pub(crate) async fn log_lines(format: &str, calls: usize) -> Vec<String> {
    let soft = plugin(Behaviour::new("soft")).await;
    soft.set(|b| b.fail = Some((tonic::Code::Internal, FORGED.into())));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    let config = format!(
        "plugins:\n{}",
        insecure_plugin("soft", &soft, "    failurePolicy: Ignore\n")
    );
    std::fs::write(&path, config).unwrap();
    let mut child = Command::new(BIN)
        .args(["--config", path.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(["--log-format", format])
        .env("RUST_LOG", "warn")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (grpc, _) = listening(&mut child);
    let stderr = child.stderr.take().unwrap();
    let mut client = client(grpc).await;
    for _ in 0..calls {
        client
            .begin_rollout(to("soft", rollout("c1")))
            .await
            .unwrap();
    }
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let lines = BufReader::new(stderr).lines().map(Result::unwrap).collect();
    child.wait().unwrap();
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_message_stays_on_its_text_log_line() {
    let lines = log_lines("text", 1).await;
    let about: Vec<&String> = lines.iter().filter(|l| l.contains("crashed")).collect();
    assert_eq!(about.len(), 1, "{lines:#?}");
    let line = about[0];
    assert!(line.contains("WARN"), "{line}");
    assert!(
        line.contains("crashed\\r\\n2026-01-01T00:00:00.000000Z  INFO rollout_gateway: rollout Succeeded \\x1b[2J\\x1b]52;c;aGk=\\x07"),
        "{line}"
    );
    // No line the plugin forged.
    assert!(
        !lines.iter().any(|l| l.starts_with("2026-01-01T00:00:00")),
        "{lines:#?}"
    );
    for line in &lines {
        assert!(!acts_on_a_terminal(line), "{line:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_message_is_exact_in_the_json_log() {
    let lines = log_lines("json", 1).await;
    let messages: Vec<String> = lines
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter_map(|v| v["message"].as_str().map(str::to_owned))
        .collect();
    assert!(messages.iter().any(|m| m == FORGED), "{lines:#?}");
}

#[test]
fn check_shows_a_registrys_values_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(
        &path,
        "plugins:\n  - name: \"a\\e[2J\\e]52;c;aGk=\\a\\r\\nconfig.yaml: 0 problems\"\n    endpoint: nohost\n    insecure: true\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["check", "--config", path.to_str().unwrap()])
        .env_remove("ROLLOUT_GATEWAY_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("a\\x1b[2J\\x1b]52;c;aGk=\\x07\\r\\nconfig.yaml: 0 problems"),
        "{stdout}"
    );
    let text = stdout.replace('\n', "");
    assert!(!acts_on_a_terminal(&text), "{stdout:?}");
    assert!(
        stdout
            .lines()
            .all(|l| l.starts_with(path.to_str().unwrap())),
        "{stdout}"
    );
}
