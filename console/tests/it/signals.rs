//! `rollout-controller run` stops promptly on SIGTERM and SIGINT while the
//! API server cannot be reached (a closed port, and a port that accepts
//! connections and never answers), with and without leader election and
//! plugin registration, and when signalled at once or after it has been
//! retrying for a while.

#![cfg(unix)]

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rollout-controller");

/// How long a stop may take: the grace period (3 s), the trace flush
/// bound, and slack for a loaded machine.
const PROMPT: Duration = Duration::from_secs(8);

fn kubeconfig(dir: &std::path::Path, server: SocketAddr) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: hub\n\
         clusters:\n- name: hub\n  cluster:\n    server: http://{server}\n\
         contexts:\n- name: hub\n  context:\n    cluster: hub\n    user: hub\n\
         users:\n- name: hub\n  user:\n    token: t\n"
    );
    std::fs::write(&path, text).expect("kubeconfig written");
    path
}

/// A port nothing listens on.
fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    addr
}

/// A port that accepts connections and never answers; kept open for the
/// test's life by the returned listener (its accepted sockets are held).
fn silent_port() -> (SocketAddr, mpsc::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    listener.set_nonblocking(true).expect("nonblocking");
    let (done, finished) = mpsc::channel::<()>();
    thread::spawn(move || {
        let mut held = Vec::new();
        while finished.try_recv().is_err() {
            match listener.accept() {
                Ok((socket, _)) if held.len() < 256 => held.push(socket),
                Ok(_) => {}
                Err(_) => thread::sleep(Duration::from_millis(20)),
            }
        }
    });
    (addr, done)
}

/// Starts `run` against `server`, waits until it says it runs, waits
/// `after`, sends `signal`; returns the exit code and how long the stop
/// took.
fn stop_with(server: SocketAddr, extra: &[&str], after: Duration, signal: &str) -> (i32, Duration) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = kubeconfig(dir.path(), server);
    let mut child = Command::new(BIN)
        .arg("run")
        .arg("--kubeconfig")
        .arg(&config)
        .args(["--gateway", "http://127.0.0.1:9"])
        .args(extra)
        .env("RUST_LOG", "info")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    let stderr = child.stderr.take().expect("stderr");
    let (running, started) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("rollout-controller running") {
                let _ = running.send(());
            }
        }
    });
    if started.recv_timeout(Duration::from_secs(30)).is_err() {
        let _ = child.kill();
        panic!("{extra:?}: never said it was running");
    }
    thread::sleep(after);
    let sent = Instant::now();
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {signal}");
    loop {
        if let Some(exit) = child.try_wait().expect("wait") {
            let code = exit
                .code()
                .unwrap_or_else(|| panic!("{extra:?}: killed by a signal: {exit}"));
            return (code, sent.elapsed());
        }
        if sent.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("{extra:?} after {signal}: still running after 30 s");
        }
        thread::sleep(Duration::from_millis(50));
    }
}

fn assert_prompt(server: SocketAddr, what: &str) {
    let modes: [&[&str]; 3] = [
        &[],
        &[
            "--leader-elect",
            "--leader-election-namespace",
            "ns",
            "--leader-election-identity",
            "a",
        ],
        &["--register-plugins"],
    ];
    let mut runs = Vec::new();
    for extra in modes {
        for (after, signal) in [(Duration::ZERO, "-TERM"), (Duration::from_secs(4), "-INT")] {
            runs.push(thread::spawn(move || {
                (
                    extra,
                    after,
                    signal,
                    stop_with(server, extra, after, signal),
                )
            }));
        }
    }
    for run in runs {
        let (extra, after, signal, (code, took)) = run.join().expect("run");
        assert_eq!(
            code, 0,
            "{what} {extra:?} {signal} after {after:?}: exit code"
        );
        assert!(
            took < PROMPT,
            "{what} {extra:?} {signal} after {after:?}: stopped after {took:?}"
        );
    }
}

#[test]
fn stops_promptly_when_the_api_server_port_is_closed() {
    assert_prompt(closed_port(), "closed port");
}

#[test]
fn stops_promptly_when_the_api_server_never_answers() {
    let (addr, done) = silent_port();
    assert_prompt(addr, "silent port");
    let _ = done.send(());
}
