//! The generated CRDs: `rollout-controller crd` as a user runs it, and the
//! check CI relies on that the YAML committed under `deploy/crds` is what the
//! current code generates.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use rollout_controller::api;

const BIN: &str = env!("CARGO_BIN_EXE_rollout-controller");

const REGENERATE: &str = "run `cargo run -p rollout-console -- crd --out deploy/crds` to regenerate them, and commit the result";

fn committed_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("deploy")
        .join("crds")
}

/// The problems of `dir` against the generated files: files that differ,
/// are missing, or are not generated any more.
fn differences(dir: &Path) -> Vec<String> {
    let files = api::crd_files().expect("CRDs encode");
    let mut problems = Vec::new();
    for file in &files {
        match std::fs::read_to_string(dir.join(&file.name)) {
            Ok(text) if text == file.contents => {}
            Ok(_) => problems.push(format!("{} is out of date", file.name)),
            Err(err) => problems.push(format!("{} cannot be read: {err}", file.name)),
        }
    }
    let generated: BTreeSet<&str> = files.iter().map(|f| f.name.as_str()).collect();
    for sub in ["", api::crd::OCM_DIR, api::crd::DESIGN_DIR] {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let name = if sub.is_empty() {
                name
            } else {
                format!("{sub}/{name}")
            };
            if name.ends_with(".yaml") && !generated.contains(name.as_str()) {
                problems.push(format!("{name} is not generated (delete it)"));
            }
        }
    }
    problems
}

/// The `kind` of each document of a `crd` stream.
fn kinds(stream: &str) -> Vec<&str> {
    stream
        .split("\n---\n")
        .skip(1)
        .filter_map(|doc| doc.lines().find_map(|line| line.strip_prefix("    kind: ")))
        .collect()
}

const KINDS: [&str; 6] = [
    "ManifestWorkReplicaSet",
    "ManifestWork",
    "Placement",
    "PlacementDecision",
    "ClusterManager",
    "ManifestWorkReplicaSetRollout",
];

#[test]
fn committed_crds_are_current() {
    let dir = committed_dir();
    let problems = differences(&dir);
    assert!(
        problems.is_empty(),
        "the CRDs in {} do not match the code:\n  {}\n{REGENERATE}",
        dir.display(),
        problems.join("\n  ")
    );
}

#[test]
fn crd_prints_every_crd_as_one_yaml_stream() {
    let output = Command::new(BIN).arg("crd").output().expect("runs");
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).expect("UTF-8");
    assert_eq!(
        stdout,
        api::crds_yaml(api::CrdShape::Design).expect("CRDs encode")
    );
    assert_eq!(kinds(&stdout), KINDS);
    assert!(
        stdout.contains("\n                        plugin:\n"),
        "the design's fields"
    );
}

#[test]
fn crd_without_additions_prints_ocm_kinds_without_the_designs_fields() {
    let output = Command::new(BIN)
        .args(["crd", "--without-additions"])
        .output()
        .expect("runs");
    assert!(output.status.success(), "{output:?}");
    // The former name prints the same, with a deprecation warning.
    let former = Command::new(BIN)
        .args(["crd", "--ocm-shaped"])
        .output()
        .expect("runs");
    assert_eq!(former.stdout, output.stdout);
    let warning = String::from_utf8_lossy(&former.stderr);
    assert!(
        warning.contains("deprecated") && warning.contains("--without-additions"),
        "{warning}"
    );
    let stdout = String::from_utf8(output.stdout).expect("UTF-8");
    assert_eq!(
        stdout,
        api::crds_yaml(api::CrdShape::Ocm).expect("CRDs encode")
    );
    assert_eq!(kinds(&stdout), KINDS);
    let mwrs = stdout.split("\n---\n").nth(1).expect("the MWRS CRD");
    for addition in [
        "plugin:",
        "pluginConfig:",
        "abortOnFailure:",
        "currentRevision:",
        "revisionHistoryLimit:",
    ] {
        assert!(
            !mwrs.contains(addition),
            "{addition} in the OCM-shaped MWRS CRD"
        );
    }
    // The carrier keeps them.
    let carrier = stdout.split("\n---\n").nth(6).expect("the carrier CRD");
    for addition in [
        "plugin:",
        "pluginConfig:",
        "abortOnFailure:",
        "currentRevision:",
        "revisionHistoryLimit:",
    ] {
        assert!(
            carrier.contains(addition),
            "{addition} not in the carrier CRD"
        );
    }
}

#[test]
fn crd_out_writes_the_files_into_a_new_directory() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("crd_out")
        .join("nested");
    let _ = std::fs::remove_dir_all(&dir);
    let output = Command::new(BIN)
        .args(["crd", "--out"])
        .arg(&dir)
        .output()
        .expect("runs");
    assert!(output.status.success(), "{output:?}");
    assert!(output.stdout.is_empty(), "{output:?}");
    assert_eq!(differences(&dir), Vec::<String>::new());
}
