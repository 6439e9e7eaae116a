//! Helpers for testing a plugin through a real gRPC client against a real
//! server on `127.0.0.1:0`, the way the gateway will call it.
//!
//! ```
//! # use rollout_plugin_sdk::prelude::*;
//! # struct Hello;
//! # impl RolloutPlugin for Hello {
//! #     fn info(&self) -> PluginInfo { PluginInfo::new("hello", "0.1.0") }
//! # }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use rollout_plugin_sdk::testing;
//!
//! let server = testing::spawn(Hello).await?;
//! let mut client = testing::connect(server.local_addr()).await?;
//! let answer = client
//!     .validate_rollout_completion(testing::validate_request(testing::rollout("cluster1", 1, 3)))
//!     .await?
//!     .into_inner();
//! assert_eq!(answer.result(), ValidationResult::Succeeded);
//! server.shutdown().await?;
//! # Ok(())
//! # }
//! ```

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rollout_proto::v1alpha1::rollout_plugin_service_client::RolloutPluginServiceClient;
use rollout_proto::v1alpha1::{
    MutateManifestWorkRequest, RolloutPluginRequest, ValidateCompletionRequest,
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tonic::transport::{Channel, Endpoint};

use crate::error::ServeError;
use crate::plugin::RolloutPlugin;
use crate::server::{DEFAULT_MAX_MESSAGE_BYTES, Running, ServeOptions, bind};

/// Serves `plugin` in plaintext on `127.0.0.1:0` on a task of its own.
pub async fn spawn<P: RolloutPlugin>(plugin: P) -> Result<Running, ServeError> {
    spawn_with(plugin, ServeOptions::default()).await
}

/// Serves `plugin` with `options` on `127.0.0.1:0` on a task of its own.
pub async fn spawn_with<P: RolloutPlugin>(
    plugin: P,
    options: ServeOptions,
) -> Result<Running, ServeError> {
    let addr = SocketAddr::from(([127, 0, 0, 1], 0));
    Ok(bind(plugin, addr, options).await?.spawn())
}

/// A plaintext client of the plugin at `addr`, with the SDK's default
/// message limits.
pub async fn connect(
    addr: SocketAddr,
) -> Result<RolloutPluginServiceClient<Channel>, tonic::transport::Error> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    Ok(RolloutPluginServiceClient::new(channel)
        .max_decoding_message_size(DEFAULT_MAX_MESSAGE_BYTES)
        .max_encoding_message_size(DEFAULT_MAX_MESSAGE_BYTES))
}

/// A per-cluster request for MWRS `default/hello` on placement `placement`:
/// `cluster` is cluster `index` of `total`, desired revision `rev-1`, not
/// aborting.
pub fn rollout(cluster: &str, index: i32, total: i32) -> RolloutPluginRequest {
    RolloutPluginRequest {
        mwrs_name: "hello".into(),
        mwrs_namespace: "default".into(),
        placement_name: "placement".into(),
        cluster_name: cluster.into(),
        total_cluster_count: total,
        cluster_index: index,
        desired_revision: "rev-1".into(),
        ..Default::default()
    }
}

/// `ValidateRolloutCompletion`'s request around `rollout`.
pub fn validate_request(rollout: RolloutPluginRequest) -> ValidateCompletionRequest {
    ValidateCompletionRequest {
        rollout: Some(rollout),
    }
}

/// `MutateManifestWork`'s request around `rollout` and a work's JSON.
pub fn mutate_request(rollout: RolloutPluginRequest, work: &Value) -> MutateManifestWorkRequest {
    MutateManifestWorkRequest {
        rollout: Some(rollout),
        // Serializing a `Value` cannot fail (its keys are strings).
        manifest_work: Bytes::from(serde_json::to_vec(work).unwrap_or_default()),
    }
}

/// A ManifestWork `hello` for namespace `cluster` carrying a Deployment
/// `web`, an Argo Rollout `web` (two canary steps) and a ConfigMap
/// `settings`.
pub fn sample_work(cluster: &str) -> Value {
    json!({
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "ManifestWork",
        "metadata": {"name": "hello", "namespace": cluster},
        "spec": {"workload": {"manifests": [
            {"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": "web", "namespace": "default"},
             "spec": {"replicas": 2}},
            {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
             "metadata": {"name": "web", "namespace": "default"},
             "spec": {"strategy": {"canary": {"steps": [{"setWeight": 20}, {"pause": {}}]}}}},
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "settings", "namespace": "default"},
             "data": {"greeting": "hello"}}
        ]}}
    })
}

/// A plugin binary running as a child process, for end-to-end tests of a
/// plugin's `main` (integration tests find it in `env!("CARGO_BIN_EXE_NAME")`).
/// The process is killed if this value is dropped before
/// [`PluginProcess::terminate`].
#[derive(Debug)]
pub struct PluginProcess {
    child: Child,
    addr: SocketAddr,
    health_addr: Option<SocketAddr>,
    stderr: Arc<Mutex<String>>,
}

/// Why a plugin process did not come up.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// It could not be started, or its output not read.
    #[error("plugin process: {0}")]
    Io(#[from] std::io::Error),
    /// It did not print its listening line in time.
    #[error("plugin process printed no listening line within {0:?}")]
    Timeout(Duration),
    /// It exited, or printed something else first.
    #[error("plugin process did not print `NAME listening grpc=ADDR`: {0:?}")]
    NoListeningLine(String),
}

impl PluginProcess {
    /// Starts `program` with `args` (give it `--listen 127.0.0.1:0`) and
    /// waits up to 30 s for its first stdout line, `NAME listening
    /// grpc=ADDR`, as [`crate::serve`] prints it. Its stderr is collected
    /// (see [`PluginProcess::stderr`]).
    pub async fn start<I, S>(program: impl AsRef<OsStr>, args: I) -> Result<Self, ProcessError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        const WAIT: Duration = Duration::from_secs(30);
        let mut child = Command::new(program)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(pipe) = child.stderr.take() {
            let sink = stderr.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(pipe).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Ok(mut text) = sink.lock() {
                        text.push_str(&line);
                        text.push('\n');
                    }
                }
            });
        }
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| ProcessError::NoListeningLine(String::new()))?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .map_err(|_| ProcessError::Timeout(WAIT))??
            .unwrap_or_default();
        let addr = line
            .split_once(" listening grpc=")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .and_then(|addr| addr.parse().ok())
            .ok_or_else(|| ProcessError::NoListeningLine(line.clone()))?;
        let health_addr = line
            .split_whitespace()
            .find_map(|word| word.strip_prefix("health="))
            .and_then(|addr| addr.parse().ok());
        // Keep draining stdout so the plugin never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Self {
            child,
            addr,
            health_addr,
            stderr,
        })
    }

    /// The address it printed.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The plaintext health port its line printed (`health=ADDR`), if any.
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.health_addr
    }

    /// What it wrote to stderr so far (its logs).
    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Sends SIGTERM (on Unix, through `kill`; elsewhere it kills the
    /// process) and waits for the exit.
    pub async fn terminate(mut self) -> std::io::Result<ExitStatus> {
        #[cfg(unix)]
        if let Some(pid) = self.child.id() {
            let status = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await?;
            if status.success() {
                return self.child.wait().await;
            }
        }
        self.child.kill().await?;
        self.child.wait().await
    }
}
