//! The binary as a child process of a test.

use std::time::Duration;

/// SIGTERM to `child` (as a kubelet stops it), and its exit status, which
/// must come within 5 s (`what` says what was going on, for the failure).
pub async fn terminate(child: &mut tokio::process::Child, what: &str) -> std::process::ExitStatus {
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .unwrap_or_else(|_| panic!("it exits promptly on SIGTERM{what}"))
        .unwrap()
}
