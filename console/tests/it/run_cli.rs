//! `rollout-controller run` as a user starts it, outside a pod and without a
//! kubeconfig: one clear line saying what is missing and what to do.

use std::process::Command;

#[test]
fn without_a_kubeconfig_the_error_is_said_once_with_what_to_do() {
    let home = tempfile::tempdir().expect("a home without ~/.kube");
    let out = Command::new(env!("CARGO_BIN_EXE_rollout-controller"))
        .arg("run")
        .env("HOME", home.path())
        .env_remove("KUBECONFIG")
        .env_remove("ROLLOUT_CONTROLLER_KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line:\n{stderr}");
    assert!(lines[0].starts_with("rollout-controller: "), "{stderr}");
    assert!(lines[0].contains("--kubeconfig"), "{stderr}");
    assert_eq!(
        lines[0].matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
}
