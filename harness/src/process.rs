//! The child processes of a benchmark: started with their output captured,
//! waited for until they announce their address, and always stopped (SIGTERM,
//! then SIGKILL) when their guard is dropped, whether the run ends, fails or
//! is interrupted.

#![allow(
    clippy::disallowed_methods,
    reason = "a child process is waited for on the wall clock; nothing here pauses tokio's"
)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::procfs;
use anyhow::{Context as _, bail};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdout, Command};

/// How long a stopped process gets to exit before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// A running child process that is stopped when dropped.
pub struct ChildGuard {
    name: String,
    child: Child,
    log: PathBuf,
}

impl ChildGuard {
    /// Starts `command` with stdout piped (for the address line) and stderr
    /// appended to `log`.
    pub fn spawn(
        name: &str,
        mut command: Command,
        log: &Path,
    ) -> anyhow::Result<(Self, ChildStdout)> {
        let stderr =
            File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            // Belt and braces: should the guard be leaked, tokio still kills.
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot start {name}"))?;
        let stdout = child.stdout.take().context("no stdout pipe")?;
        Ok((
            Self {
                name: name.to_owned(),
                child,
                log: log.to_owned(),
            },
            stdout,
        ))
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> anyhow::Result<u32> {
        self.child
            .id()
            .with_context(|| format!("{} is no longer running", self.name))
    }

    /// Fails, with the end of its log, when the process has exited.
    pub fn ensure_running(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => bail!(
                "{} exited unexpectedly ({status}){}",
                self.name,
                self.log_tail()
            ),
            Err(error) => bail!("cannot check on {}: {error}", self.name),
        }
    }

    /// Stops the process with SIGTERM and waits, without blocking the
    /// runtime (so tasks on it, such as a receiver the process flushes to
    /// while it shuts down, keep running), up to `grace` for it to exit.
    /// True when it exited with status 0 on the signal; false when it
    /// failed, had to be killed, or had exited before.
    pub async fn stop(&mut self, grace: Duration) -> bool {
        let Ok(None) = self.child.try_wait() else {
            return false;
        };
        let Some(pid) = self.child.id() else {
            return false;
        };
        signal(pid, "TERM");
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(Ok(status)) => status.success(),
            Ok(Err(_)) => false,
            Err(_) => {
                eprintln!(
                    "gwbench: {} did not stop within {grace:?}; killing it",
                    self.name
                );
                let _ = self.child.start_kill();
                let _ = tokio::time::timeout(KILL_GRACE, self.child.wait()).await;
                false
            }
        }
    }

    /// The last lines of the process's log, formatted for an error message.
    pub fn log_tail(&self) -> String {
        log_tail(&self.log)
    }

    /// Reads stdout until a line starting with `prefix`, then keeps draining
    /// stdout in the background so the child never blocks on a full pipe.
    pub async fn wait_for_line(
        &mut self,
        stdout: ChildStdout,
        prefix: &str,
        timeout: Duration,
    ) -> anyhow::Result<String> {
        let mut lines = BufReader::new(stdout).lines();
        let deadline = Instant::now() + timeout;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(remaining, lines.next_line()).await {
                Err(_) => bail!(
                    "{} did not print `{prefix} …` within {timeout:?}{}",
                    self.name,
                    self.log_tail()
                ),
                Ok(Err(error)) => bail!("cannot read the output of {}: {error}", self.name),
                Ok(Ok(None)) => {
                    // Give the exit status a moment to be reaped for the message.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    self.ensure_running()?;
                    bail!(
                        "{} closed its stdout before printing `{prefix} …`",
                        self.name
                    );
                }
                Ok(Ok(Some(line))) if line.starts_with(prefix) => {
                    let mut rest = lines.into_inner();
                    tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut rest, &mut tokio::io::sink()).await;
                    });
                    return Ok(line);
                }
                Ok(Ok(Some(_))) => {}
            }
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let Ok(None) = self.child.try_wait() else {
            return;
        };
        let Some(pid) = self.child.id() else {
            return;
        };
        // nginx's workers are children of its master; should the master need
        // a SIGKILL, they would outlive it, so note them now.
        let children = procfs::children(pid).unwrap_or_default();
        signal(pid, "TERM");
        if reap(&mut self.child, STOP_GRACE) {
            return;
        }
        eprintln!(
            "gwbench: {} did not stop within {STOP_GRACE:?}; killing it",
            self.name
        );
        for child in children {
            if procfs::read_stat(child).is_ok_and(|stat| stat.ppid == pid) {
                signal(child, "KILL");
            }
        }
        let _ = self.child.start_kill();
        reap(&mut self.child, KILL_GRACE);
    }
}

/// How long a killed process gets to be reaped.
const KILL_GRACE: Duration = Duration::from_secs(1);

/// Waits up to `within` for `child` to exit and reaps it; false if it still runs.
fn reap(child: &mut Child, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if !matches!(child.try_wait(), Ok(None)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        // Blocking is fine here: this runs while the benchmark winds down.
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `command` to completion and collects its output, like
/// `Command::output`, but a run that is dropped (Ctrl-C) kills the process
/// and reaps it instead of leaving a zombie behind.
pub async fn output(mut command: Command) -> anyhow::Result<std::process::Output> {
    struct Running(Child);
    impl Drop for Running {
        fn drop(&mut self) {
            if let Ok(None) = self.0.try_wait() {
                let _ = self.0.start_kill();
                reap(&mut self.0, KILL_GRACE);
            }
        }
    }

    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut running = Running(command.spawn()?);
    let mut stdout_pipe = running.0.stdout.take().context("no stdout pipe")?;
    let mut stderr_pipe = running.0.stderr.take().context("no stderr pipe")?;
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let (status, _, _) = tokio::try_join!(
        running.0.wait(),
        stdout_pipe.read_to_end(&mut stdout),
        stderr_pipe.read_to_end(&mut stderr),
    )?;
    Ok(std::process::Output {
        status,
        stdout,
        stderr,
    })
}

/// Sends a signal with kill(1) (the workspace forbids `unsafe`, so no libc).
fn signal(pid: u32, name: &str) {
    let _ = std::process::Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The last lines of a log file, as `\n--- last lines of FILE ---\n…`, or
/// nothing when it is empty or missing.
pub fn log_tail(path: &Path) -> String {
    const LINES: usize = 20;
    let Ok(text) = std::fs::read_to_string(path) else {
        return String::new();
    };
    let lines: Vec<&str> = text.lines().collect();
    if lines.is_empty() {
        return String::new();
    }
    let tail = lines[lines.len().saturating_sub(LINES)..].join("\n");
    format!("\n--- last lines of {} ---\n{tail}", path.display())
}

/// Polls `GET http://ADDRESS{path}` until it answers 200.
pub async fn wait_for_http_ok(
    guard: &mut ChildGuard,
    address: &str,
    path: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("no answer");
    while Instant::now() < deadline {
        guard.ensure_running()?;
        match http_status(address, path).await {
            Ok(200) => return Ok(()),
            Ok(status) => last = format!("status {status}"),
            Err(error) => last = error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!(
        "GET http://{address}{path} did not answer 200 within {timeout:?} (last: {last}){}",
        guard.log_tail()
    )
}

/// One HTTP/1.1 GET, returning the status code.
async fn http_status(address: &str, path: &str) -> anyhow::Result<u16> {
    let mut stream = TcpStream::connect(address).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut head = vec![0; 64];
    let read = stream.read(&mut head).await?;
    let line = String::from_utf8_lossy(&head[..read]);
    line.split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .with_context(|| format!("not an HTTP answer: {line:?}"))
}

/// Polls a TCP connect to `address` until it succeeds.
pub async fn wait_for_port(
    guard: &mut ChildGuard,
    address: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        guard.ensure_running()?;
        if TcpStream::connect(address).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!(
        "nothing listens on {address} after {timeout:?}{}",
        guard.log_tail()
    )
}
