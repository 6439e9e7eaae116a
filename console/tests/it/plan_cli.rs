//! `rollout-controller plan` as a user runs it: the built binary, a file or
//! standard input, JSON on stdout, exit status 2 and a reason on stderr for
//! input it cannot use.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_rollout-controller");

/// The input example of docs/plugin-api.md §5.
const CONTRACT_EXAMPLE: &str = r#"{"strategy": {"type": "Progressive", "progressive": {"maxConcurrency": 2, "maxFailures": 1, "progressDeadline": "90s"}},
 "groups": [{"index": 0, "name": "canary", "clusters": ["c1", "c2"]}, {"index": 1, "name": "", "clusters": ["c3"]}],
 "existing": [{"clusterName": "c1", "status": "Succeeded", "lastTransitionTime": "2022-01-01T00:00:00Z", "groupIndex": 0, "groupName": "canary"}],
 "now": "2022-01-01T00:02:00Z"}"#;

/// Writes `content` to a fresh file under the target directory.
fn input_file(name: &str, content: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plan_cli");
    std::fs::create_dir_all(&dir).expect("create temp dir");
    let path = dir.join(name);
    std::fs::write(&path, content).expect("write input");
    path
}

fn plan(path: &str) -> Output {
    Command::new(BIN)
        .args(["plan", "--input", path])
        .output()
        .expect("run rollout-controller")
}

fn stdout_json(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "exit {:?}, stderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("stdout is JSON")
}

#[test]
fn contract_example() {
    let path = input_file("contract.json", CONTRACT_EXAMPLE);
    let output = plan(path.to_str().expect("utf-8 path"));
    // c1 succeeded with no soak; maxConcurrency 2 over 3 clusters: the next
    // two by name, each with the group the placement gives it.
    assert_eq!(
        stdout_json(&output),
        json!({
            "clustersToRollout": [
                {"clusterName": "c2", "status": "ToApply", "groupIndex": 0, "groupName": "canary",
                 "lastTransitionTime": null, "recheckTime": null},
                {"clusterName": "c3", "status": "ToApply", "groupIndex": 1, "groupName": "",
                 "lastTransitionTime": null, "recheckTime": null}
            ],
            "clustersTimeOut": [],
            "clustersRemoved": [],
            "maxFailureBreach": false,
            "recheckAfterSeconds": null
        })
    );
    assert!(output.stderr.is_empty());
}

/// The JSON block after `marker` in docs/plugin-api.md.
fn doc_block(marker: &str) -> String {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/plugin-api.md"
    ))
    .expect("docs/plugin-api.md");
    let (_, after) = doc.split_once(marker).expect("the marker");
    let (_, block) = after.split_once("```json\n").expect("a JSON block");
    let (block, _) = block.split_once("```").expect("its end");
    block.to_owned()
}

/// The doc's example input gives the doc's answer: the page cannot drift
/// from the engine.
#[test]
fn the_docs_example_gives_the_docs_answer() {
    let input = doc_block("<!-- plan:input");
    assert_eq!(
        serde_json::from_str::<Value>(&input).expect("the input is JSON"),
        serde_json::from_str::<Value>(CONTRACT_EXAMPLE).expect("JSON"),
        "the doc's input is the example tested above"
    );
    let path = input_file("doc-example.json", &input);
    let output = plan(path.to_str().expect("utf-8 path"));
    let want: Value =
        serde_json::from_str(&doc_block("<!-- plan:output")).expect("the answer is JSON");
    assert_eq!(stdout_json(&output), want);
}

#[test]
fn reference_case_from_stdin() {
    let input = r#"{"strategy": {"type": "Progressive", "progressive": {"maxConcurrency": 2, "maxFailures": 1, "progressDeadline": "90s"}},
      "groups": [{"index": 0, "name": "group1", "clusters": ["c1", "c2", "c3"]}, {"index": 1, "clusters": ["c4", "c5", "c6"]}],
      "existing": [
        {"clusterName": "c1", "status": "Succeeded", "lastTransitionTime": "2021-12-31T23:59:00Z"},
        {"clusterName": "c2", "status": "Failed", "lastTransitionTime": "2021-12-31T23:58:00Z"},
        {"clusterName": "c3", "status": "Progressing", "lastTransitionTime": "2021-12-31T23:59:00Z"},
        {"clusterName": "old", "status": "Progressing", "groupIndex": 4, "groupName": "gone"}],
      "now": "2022-01-01T00:00:00Z"}"#;
    let mut child = Command::new(BIN)
        .args(["plan", "--input", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rollout-controller");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    let output = child.wait_with_output().expect("wait");
    assert_eq!(
        stdout_json(&output),
        json!({
            "clustersToRollout": [
                {"clusterName": "c3", "status": "Progressing", "groupIndex": 0, "groupName": "",
                 "lastTransitionTime": "2021-12-31T23:59:00Z", "recheckTime": "2022-01-01T00:00:30Z"},
                {"clusterName": "c4", "status": "ToApply", "groupIndex": 1, "groupName": "",
                 "lastTransitionTime": null, "recheckTime": null}
            ],
            "clustersTimeOut": [
                {"clusterName": "c2", "status": "TimeOut", "groupIndex": 0, "groupName": "",
                 "lastTransitionTime": "2021-12-31T23:58:00Z", "recheckTime": "2021-12-31T23:59:30Z"}
            ],
            "clustersRemoved": [
                {"clusterName": "old", "status": "Progressing", "groupIndex": 4, "groupName": "gone",
                 "lastTransitionTime": null, "recheckTime": null}
            ],
            "maxFailureBreach": false,
            "recheckAfterSeconds": 30
        })
    );
}

#[test]
fn invalid_strategy_exits_2_with_the_reason() {
    let path = input_file(
        "invalid-strategy.json",
        r#"{"strategy": {"type": "Progressive", "progressive": {"progressDeadline": "2d", "maxConcurrency": "abc"}},
            "groups": [], "existing": [], "now": "2022-01-01T00:00:00Z"}"#,
    );
    let output = plan(path.to_str().expect("utf-8 path"));
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(r#"progressive.progressDeadline: invalid progressDeadline "2d""#),
        "{stderr}"
    );
    assert!(
        stderr.contains(r#"progressive.maxConcurrency: invalid value "abc""#),
        "{stderr}"
    );

    let path = input_file("unknown-type.json", r#"{"strategy": {"type": "Canary"}}"#);
    let output = plan(path.to_str().expect("utf-8 path"));
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(r#"unknown rollout strategy type "Canary""#),
        "{stderr}"
    );
}

#[test]
fn bad_json_exits_2_naming_file_and_location() {
    let path = input_file(
        "bad.json",
        "{\n  \"groups\": [\n    {\"index\": \"zero\"}\n  ]\n}\n",
    );
    let path = path.to_str().expect("utf-8 path");
    let output = plan(path);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&format!("{path}:3:")), "{stderr}");
    assert!(stderr.contains("invalid type"), "{stderr}");
}

#[test]
fn unreadable_file_exits_2_naming_it() {
    let output = plan("/nonexistent/plan-input.json");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot read /nonexistent/plan-input.json"),
        "{stderr}"
    );
}
