//! `rollout-gateway check` as a process: valid files exit 0 and print
//! nothing; invalid ones exit 64 listing every problem, one per line, each
//! naming its file and field; nothing is started either way.

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_rollout-gateway");

fn check(files: &[&Path]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("check");
    for f in files {
        cmd.args(["--config", f.to_str().unwrap()]);
    }
    // Only the files named here.
    cmd.env_remove("ROLLOUT_GATEWAY_CONFIG").output().unwrap()
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn valid_files_exit_0_and_print_no_problem() {
    let dir = tempfile::tempdir().unwrap();
    let shared = write(
        dir.path(),
        "shared.yaml",
        "plugins:\n  - name: smoke\n    endpoint: 127.0.0.1:1\n    insecure: true\n",
    );
    let hub = write(
        dir.path(),
        "hub-a.yaml",
        "hub: hub-a\nplugins:\n  - name: own\n    endpoint: 127.0.0.1:2\n    insecure: true\n\
         pipelines:\n  - name: both\n    plugins: [own, smoke]\n",
    );
    let out = check(&[&shared, &hub]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn the_files_may_come_from_the_environment_variable() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(dir.path(), "bad.yaml", "plugins:\n  - name: a\n");
    let out = Command::new(BIN)
        .arg("check")
        .env("ROLLOUT_GATEWAY_CONFIG", &bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("bad.yaml: plugins[0] (a).endpoint"),
        "{stdout}"
    );
}

#[test]
fn several_problems_exit_64_listing_every_one_by_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    // Three problems in one file.
    let first = write(
        dir.path(),
        "first.yaml",
        "plugins:\n  - name: a\n    endpoint: nohost\n    insecure: true\n\
         \x20 - name: b\n    endpoint: h:1\n    timeout: soon\n    colour: blue\n",
    );
    // A pipeline naming a plugin no file defines: found only by planning
    // the files together.
    let second = write(
        dir.path(),
        "second.yaml",
        "hub: hub-b\npipelines:\n  - name: p\n    plugins: [missing]\n",
    );
    let absent = dir.path().join("absent.yaml");
    let out = check(&[&first, &second, &absent]);
    assert_eq!(out.status.code(), Some(64));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let first = first.display().to_string();
    let second = second.display().to_string();
    let absent = absent.display().to_string();
    let expect = [
        (first.as_str(), "plugins[0] (a).endpoint"),
        (first.as_str(), "plugins[1] (b).caCertificate"),
        (first.as_str(), "plugins[1] (b).timeout"),
        (first.as_str(), "plugins[1] (b).colour"),
        (second.as_str(), "pipelines[0] (p).plugins[0]"),
        (absent.as_str(), "cannot read"),
    ];
    for (file, field) in expect {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("{file}: ")) && l.contains(field)),
            "no line for {file} {field} in:\n{stdout}"
        );
    }
    assert_eq!(lines.len(), expect.len(), "one line per problem:\n{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("6 problems"), "{stderr}");
}

#[test]
fn a_ca_file_is_read_and_an_unusable_one_is_a_problem_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let ca = rollout_plugin_sdk::test_certs::TestCa::new("plugin-ca").unwrap();
    let good = write(dir.path(), "ca.crt", &ca.pem());
    let empty = write(dir.path(), "empty.crt", "no certificate here\n");
    let missing = dir.path().join("missing.crt");
    let entry = |name: &str, port: u16, file: &Path| {
        format!(
            "  - name: {name}\n    endpoint: 127.0.0.1:{port}\n    caCertificate:\n      caFile: {}\n",
            file.display()
        )
    };
    let valid = write(
        dir.path(),
        "valid.yaml",
        &format!("plugins:\n{}", entry("good", 1, &good)),
    );
    let out = check(&[&valid]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let config = write(
        dir.path(),
        "config.yaml",
        &format!(
            "plugins:\n{}{}{}  - name: both\n    endpoint: 127.0.0.1:4\n    caCertificate: {{}}\n",
            entry("good", 1, &good),
            entry("empty", 2, &empty),
            entry("missing", 3, &missing),
        ),
    );
    let out = check(&[&config]);
    assert_eq!(out.status.code(), Some(64));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let label = config.display();
    assert!(
        stdout.contains(&format!(
            "{label}: plugins[3] (both).caCertificate: set exactly one of caBundle and caFile"
        )),
        "{stdout}"
    );
    // With the syntax right, the files themselves.
    let config = write(
        dir.path(),
        "config.yaml",
        &format!(
            "plugins:\n{}{}{}",
            entry("good", 1, &good),
            entry("empty", 2, &empty),
            entry("missing", 3, &missing),
        ),
    );
    let out = check(&[&config]);
    assert_eq!(out.status.code(), Some(64));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "{label}: plugins[1] (empty).caCertificate.caFile: {} holds no PEM CERTIFICATE",
            empty.display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "{label}: plugins[2] (missing).caCertificate.caFile: cannot read {}",
            missing.display()
        )),
        "{stdout}"
    );
    assert!(!stdout.contains("(good)"), "{stdout}");
}

/// A missing certificate file is one problem, naming the file: the pipeline
/// naming its plugin, or the plugins of a file whose client certificate is
/// missing, add no follow-on problem.
#[test]
fn a_missing_certificate_file_is_one_problem_without_follow_ons() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.crt");
    let config = write(
        dir.path(),
        "config.yaml",
        &format!(
            "plugins:\n  - name: a\n    endpoint: 127.0.0.1:1\n    caCertificate:\n      caFile: {}\n\
             pipelines:\n  - name: p\n    plugins: [a]\n",
            missing.display()
        ),
    );
    let identity = write(
        dir.path(),
        "identity.yaml",
        &format!(
            "hub: hub-a\nclientCertificate:\n  certFile: {0}\n  keyFile: {0}\n\
             plugins:\n  - name: b\n    endpoint: 127.0.0.1:2\n    insecure: true\n\
             pipelines:\n  - name: q\n    plugins: [b]\n",
            missing.display()
        ),
    );
    let out = check(&[&config, &identity]);
    assert_eq!(out.status.code(), Some(64));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "only the files:\n{stdout}");
    assert!(
        lines[0].contains("caCertificate.caFile: cannot read") && lines[0].contains("missing.crt"),
        "{stdout}"
    );
    assert!(
        lines[1].contains("clientCertificate: certFile: cannot read"),
        "{stdout}"
    );
}

/// `--skip-files` checks everything but the certificate files, which need
/// not exist: a registry passes in CI without them, and its other problems
/// (a clash naming the file that defines the name first) are still found.
#[test]
fn skip_files_checks_everything_but_the_certificate_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.crt");
    let tls = format!(
        "plugins:\n  - name: a\n    endpoint: 127.0.0.1:1\n    caCertificate:\n      caFile: {0}\n\
         pipelines:\n  - name: p\n    plugins: [a]\n",
        missing.display()
    );
    let first = write(dir.path(), "first.yaml", &tls);
    let skip = |files: &[&Path]| {
        let mut cmd = Command::new(BIN);
        cmd.args(["check", "--skip-files"]);
        for f in files {
            cmd.args(["--config", f.to_str().unwrap()]);
        }
        cmd.env_remove("ROLLOUT_GATEWAY_CONFIG").output().unwrap()
    };
    let out = skip(&[&first]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(check(&[&first]).status.code(), Some(64), "without the flag");
    let second = write(
        dir.path(),
        "second.yaml",
        "plugins:\n  - name: a\n    endpoint: 127.0.0.1:2\n    insecure: true\n",
    );
    let out = skip(&[&first, &second]);
    assert_eq!(out.status.code(), Some(64));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "{}: plugins[0] (a): \"a\" is already defined by {} for the same hub",
            second.display(),
            first.display()
        )),
        "{stdout}"
    );
}

#[test]
fn an_unknown_default_is_a_problem_with_a_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "typo.yaml",
        "defaults:\n  timout: 5s\nplugins:\n  - name: a\n    endpoint: 127.0.0.1:1\n    insecure: true\n",
    );
    let out = check(&[&file]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(64), "{stdout}");
    assert!(
        stdout.contains("typo.yaml: defaults.timout: unknown field; did you mean `timeout`?"),
        "{stdout}"
    );
}
