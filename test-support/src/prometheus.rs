//! A real Prometheus server for tests, from Debian's `prometheus` package
//! (`test-support/prometheus/debian.py` unpacks it into
//! `~/.cache/rollout-hooks/prometheus`, once): started on 127.0.0.1 with a
//! tiny scrape interval, scraping the targets a test serves, its storage in
//! a temporary directory, killed when dropped.
//!
//! [`binary_for_tests`] finds it: `$ROLLOUT_HOOKS_PROMETHEUS`, `prometheus`
//! on `PATH`, the cache, or else the fetch script. Without one the test is
//! skipped (said on stderr), unless `ROLLOUT_HOOKS_E2E=1`, where that is a
//! failure.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

/// The environment variable naming the `prometheus` binary to use.
pub const PROMETHEUS_VAR: &str = "ROLLOUT_HOOKS_PROMETHEUS";

/// `name` (`prometheus` or `promtool`) on `PATH` or in the cache, without
/// fetching anything.
pub fn cached(name: &str) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let binary = cache_dir()?.join("deb/usr/bin").join(name);
        binary.is_file().then_some(binary)
    })
}

/// Where debian.py unpacks the package: `$PROMETHEUS_CACHE`, else
/// `$XDG_CACHE_HOME` or `~/.cache`, then `rollout-hooks/prometheus`.
fn cache_dir() -> Option<PathBuf> {
    if let Some(explicit) = std::env::var_os("PROMETHEUS_CACHE") {
        return Some(PathBuf::from(explicit));
    }
    let xdg = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from);
    xdg.or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|c| c.join("rollout-hooks/prometheus"))
}

/// The `prometheus` binary: `$ROLLOUT_HOOKS_PROMETHEUS`, [`cached`], or
/// what `test-support/prometheus/fetch` unpacks. `Err` says why there is
/// none.
pub fn find_or_fetch() -> Result<PathBuf, String> {
    if let Some(named) = std::env::var_os(PROMETHEUS_VAR).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(named));
    }
    if let Some(found) = cached("prometheus") {
        return Ok(found);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("prometheus/fetch");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg("prometheus")
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if out.status.success() && !path.is_empty() {
        Ok(PathBuf::from(path))
    } else {
        Err(format!("{} found no prometheus", script.display()))
    }
}

/// [`find_or_fetch`] for a test: `None` (the test skips, said on stderr)
/// when there is none, a panic instead under `ROLLOUT_HOOKS_E2E=1`.
pub fn binary_for_tests() -> Option<PathBuf> {
    match find_or_fetch() {
        Ok(path) => Some(path),
        Err(why) => {
            assert_ne!(
                std::env::var("ROLLOUT_HOOKS_E2E").as_deref(),
                Ok("1"),
                "no Prometheus: {why}"
            );
            eprintln!("no Prometheus ({why}; {PROMETHEUS_VAR} may name one): skipped");
            None
        }
    }
}

/// A Prometheus process on 127.0.0.1, killed when dropped.
#[derive(Debug)]
pub struct Server {
    child: Option<Child>,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Starts `binary` scraping `targets` (`/metrics` over HTTP) every
    /// `interval`, and waits until it is ready (at most 30 s).
    pub async fn start(
        binary: &Path,
        targets: &[SocketAddr],
        interval: Duration,
    ) -> std::io::Result<Self> {
        let dir = tempfile::tempdir()?;
        let list: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let ms = interval.as_millis();
        let config = format!(
            "global:\n  scrape_interval: {ms}ms\n  scrape_timeout: {ms}ms\n  evaluation_interval: {ms}ms\n\
             scrape_configs:\n  - job_name: test\n    static_configs:\n      - targets: [{}]\n",
            list.join(", ")
        );
        let config_file = dir.path().join("prometheus.yml");
        std::fs::write(&config_file, config)?;
        let addr = free_port()?;
        let log = std::fs::File::create(dir.path().join("prometheus.log"))?;
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?;
        let server = Self {
            child: Some(child),
            addr,
            _dir: dir,
        };
        server.wait_ready(Duration::from_secs(30)).await?;
        Ok(server)
    }

    /// Its HTTP address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What it logged (warnings and errors).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// Kills it and waits for the exit: its port refuses from then on.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Waits until an instant query of `up` has `targets` series, every
    /// target scraped once (at most `within`).
    pub async fn wait_scraped(&self, targets: usize, within: Duration) -> std::io::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok((200, body)) = get(self.addr, "/api/v1/query?query=up").await
                && body.matches("\"__name__\":\"up\"").count() >= targets
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "Prometheus scraped fewer than {targets} targets within {within:?}: {}",
                    self.log()
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_ready(&self, within: Duration) -> std::io::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok((200, _)) = get(self.addr, "/-/ready").await {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "Prometheus not ready within {within:?}: {}",
                    self.log()
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A port free a moment ago on 127.0.0.1.
fn free_port() -> std::io::Result<SocketAddr> {
    std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()
}

/// A plain HTTP/1.1 GET of `path`: (status, body).
async fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let text = String::from_utf8_lossy(&answer);
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}
