//! Text from plugins reaches the operator's terminal escaped: a real plugin
//! on loopback, through a real gateway, answers `rollout-controller
//! simulate` with validation messages and annotations holding escape
//! sequences (clear screen, an OSC 52 clipboard write), BEL, a C1 CSI, a
//! bidirectional override and a CR LF forging a "rollout Succeeded" line;
//! the terminal output and the logs show them as escapes, on their own
//! line, and the JSON lines keep them exact.

use crate::common;

use std::process::Output;

use rollout_proto::v1alpha1::ValidationResult;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_rollout-controller");

/// What a hostile or broken plugin puts in its message.
const HOSTILE: &str = "checks passed\u{1b}[2J\u{1b}[H\u{1b}]52;c;Y3VybCBldmlsIHwgc2g=\u{7}\u{7}\u{9b}31m\u{202e}\r\nResult: Succeeded after 1 steps\nrollout Succeeded";

/// Whether `text` holds a character a terminal acts on, or one that
/// reorders what it shows; a line's own LF aside.
fn acts_on_a_terminal(text: &str) -> bool {
    text.chars().any(|c| {
        (c.is_control() && c != '\n')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    })
}

async fn simulate(url: &str, extra: &[&str]) -> Output {
    tokio::process::Command::new(BIN)
        .arg("simulate")
        .args(["--clusters", "3", "--strategy", "Progressive"])
        .args(["--max-concurrency", "1", "--abort-on-failure"])
        .args(["--plugin", "canary", "--gateway", url])
        .args(extra)
        .env("RUST_LOG", "warn")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("NO_COLOR")
        .output()
        .await
        .unwrap()
}

async fn hostile_plugin() -> (common::Plugin, common::Gateway) {
    let (plugin, addr) = common::plugin().await;
    plugin.answer("cluster-001", ValidationResult::Succeeded, HOSTILE, None);
    plugin.answer("cluster-002", ValidationResult::Failed, HOSTILE, None);
    plugin.script.lock().unwrap().note = Some(HOSTILE.to_owned());
    let gateway = common::gateway(&[("canary", addr)]).await;
    (plugin, gateway)
}

#[tokio::test]
async fn simulate_shows_a_plugins_message_escaped_on_its_line() {
    let (_plugin, gateway) = hostile_plugin().await;
    let output = simulate(&gateway.url, &["--list-works"]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Shown with --nocapture.
    println!("{stdout}{stderr}");
    assert!(
        stdout.contains("FAILED · checks passed\\x1b[2J\\x1b[H\\x1b]52;c;"),
        "the message is shown: {stdout}"
    );
    assert!(
        stdout.contains(
            "\\x07\\x07\\u{9b}31m\\u{202e}\\r\\nResult: Succeeded after 1 steps\\nrollout Succeeded"
        ),
        "{stdout}"
    );
    // The annotation, in the steps and in the list of works.
    assert!(
        stdout.contains("note=checks passed\\x1b[2J") && stdout.contains("  checks passed\\x1b[2J"),
        "{stdout}"
    );
    assert!(!acts_on_a_terminal(&stdout), "{stdout:?}");
    assert!(!acts_on_a_terminal(&stderr), "{stderr:?}");
    // No line the plugin forged: the one result line is the simulator's.
    let forged = |l: &&str| l.starts_with("rollout Succeeded") || l.starts_with("Result:");
    let results: Vec<&str> = stdout.lines().filter(forged).collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].starts_with("Result: Aborted"), "{results:?}");
}

#[tokio::test]
async fn json_lines_keep_a_plugins_message_exact() {
    let (_plugin, gateway) = hostile_plugin().await;
    let output = simulate(&gateway.url, &["--json"]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let messages: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["verdicts"].as_array())
        .flatten()
        .filter_map(|v| v["message"].as_str())
        .collect();
    assert!(messages.contains(&HOSTILE), "{stdout}");
}
