//! A real Jaeger v2 (`cmd/jaeger`, built from the version pinned in
//! `test-support/jaeger/go.mod` by `test-support/jaeger/build`) on loopback:
//! Badger storage in memory, OTLP/gRPC and OTLP/HTTP receivers, its query API and
//! UI, from a config file written here. And a reader of that query API (the
//! HTTP API Jaeger's UI uses).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use rollout_harness::process::{ChildGuard, wait_for_http_ok};
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::Command;

/// The variable naming the built `jaeger` binary.
pub const JAEGER_VAR: &str = "ROLLOUT_HOOKS_JAEGER";

/// The `jaeger` binary `ROLLOUT_HOOKS_JAEGER` names, if set.
pub fn binary_from_env() -> Option<PathBuf> {
    std::env::var_os(JAEGER_VAR).map(PathBuf::from)
}

/// A running Jaeger, stopped when dropped.
pub struct Jaeger {
    _guard: ChildGuard,
    /// OTLP/gRPC, `http://127.0.0.1:PORT`.
    pub otlp_grpc: String,
    /// The query API and UI, `127.0.0.1:PORT`.
    pub query: String,
}

impl std::fmt::Debug for Jaeger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jaeger")
            .field("otlp_grpc", &self.otlp_grpc)
            .field("query", &self.query)
            .finish_non_exhaustive()
    }
}

/// A free port on 127.0.0.1 (bound, then released for Jaeger to take).
fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("cannot bind 127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Jaeger's config: OTLP receivers into one store held in memory, its
/// query API and UI on `query`, no metrics endpoint of its own; `ui_assets`
/// serves a built Jaeger UI from a directory (the Go module has none).
///
/// The store is Badger's ephemeral (in-memory) one rather than Jaeger's
/// `memory` store: in this Jaeger version the `memory` store reads the
/// `error` filter of the query API (a string, `error=true`, as the UI
/// sends it) as a boolean false, so `error=true` finds no span at all;
/// Badger's index has the `error` tag as the query API means it.
fn config(grpc: u16, http: u16, query: u16, ui_assets: Option<&Path>) -> String {
    let assets = ui_assets
        .map(|dir| format!("    ui:\n      assets_path: {}\n", dir.display()))
        .unwrap_or_default();
    format!(
        "service:\n  extensions: [jaeger_storage, jaeger_query]\n  pipelines:\n    traces:\n\
         \x20     receivers: [otlp]\n      processors: [batch]\n      exporters: [jaeger_storage_exporter]\n\
         \x20 telemetry:\n    metrics:\n      level: none\n    logs:\n      level: warn\n\
         extensions:\n  jaeger_query:\n    storage:\n      traces: memstore\n{assets}\
         \x20   http:\n      endpoint: 127.0.0.1:{query}\n    grpc:\n      endpoint: 127.0.0.1:{}\n\
         \x20 jaeger_storage:\n    backends:\n      memstore:\n        badger:\n          ephemeral: true\n\
         \x20         ttl:\n            spans: 2h\n\
         receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpoint: 127.0.0.1:{grpc}\n\
         \x20     http:\n        endpoint: 127.0.0.1:{http}\n\
         processors:\n  batch:\nexporters:\n  jaeger_storage_exporter:\n    trace_storage: memstore\n",
        free_port().unwrap_or(0),
    )
}

impl Jaeger {
    /// Starts `binary` with its config in `dir/jaeger.yaml` (its log in
    /// `dir/jaeger.log`) and waits until its query API answers.
    pub async fn start(
        binary: &Path,
        dir: &Path,
        ui_assets: Option<&Path>,
    ) -> anyhow::Result<Jaeger> {
        let (grpc, http, query) = (free_port()?, free_port()?, free_port()?);
        let path = dir.join("jaeger.yaml");
        std::fs::write(&path, config(grpc, http, query, ui_assets))
            .with_context(|| format!("cannot write {}", path.display()))?;
        let mut command = Command::new(binary);
        command.arg("--config").arg(&path);
        let (mut guard, _stdout) = ChildGuard::spawn("jaeger", command, &dir.join("jaeger.log"))?;
        let query = format!("127.0.0.1:{query}");
        wait_for_http_ok(&mut guard, &query, "/api/services", Duration::from_secs(30)).await?;
        rollout_harness::process::wait_for_port(
            &mut guard,
            &format!("127.0.0.1:{grpc}"),
            Duration::from_secs(10),
        )
        .await?;
        Ok(Jaeger {
            _guard: guard,
            otlp_grpc: format!("http://127.0.0.1:{grpc}"),
            query,
        })
    }

    /// The UI's address.
    pub fn ui(&self) -> String {
        format!("http://{}", self.query)
    }

    /// The UI's page of trace `id`.
    pub fn trace_link(&self, id: &str) -> String {
        format!("http://{}/trace/{id}", self.query)
    }

    /// `GET path_and_query` of the query API, its `data` as JSON.
    pub async fn get(&self, path_and_query: &str) -> anyhow::Result<Value> {
        let body = http_get(&self.query, path_and_query).await?;
        let value: Value = serde_json::from_slice(&body)
            .with_context(|| format!("GET {path_and_query}: not JSON"))?;
        if !value["errors"].is_null() {
            bail!("GET {path_and_query}: {}", value["errors"]);
        }
        Ok(value["data"].clone())
    }

    /// The traces `/api/traces` finds for `service` with `tags` (a JSON
    /// object) and `extra` query parameters (`&minDuration=…`).
    pub async fn search(
        &self,
        service: &str,
        tags: &str,
        extra: &str,
    ) -> anyhow::Result<Vec<Value>> {
        let query = format!(
            "/api/traces?service={}&tags={}&limit=10000&lookback=1h{extra}",
            encode(service),
            encode(tags)
        );
        Ok(self
            .get(&query)
            .await?
            .as_array()
            .cloned()
            .unwrap_or_default())
    }
}

/// Percent-encodes what a query parameter may not hold as it is.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// One HTTP/1.0 GET (no chunked answer, the connection closed after it):
/// the body of a 200.
pub async fn http_get(address: &str, path: &str) -> anyhow::Result<Vec<u8>> {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .with_context(|| format!("cannot connect to {address}"))?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("no end of headers")?;
    let head = String::from_utf8_lossy(&answer[..split]);
    if head.split_whitespace().nth(1) != Some("200") {
        bail!(
            "GET {path}: {head} {}",
            String::from_utf8_lossy(&answer[split..])
        );
    }
    Ok(answer[split + 4..].to_vec())
}
