//! The echo plugin: a `RolloutPluginService` that does nothing, as fast as
//! tonic allows, so a benchmark measures what sits in front of it.
//!
//! `MutateManifestWork` answers with the request's `manifest_work` (the same
//! `Bytes`, no copy) in [`EchoMode::Echo`], with an empty one ("unchanged")
//! in [`EchoMode::Empty`], or, in [`EchoMode::Annotate`] (for demos), with the
//! work annotated `NAME.rollout-hooks.io/position: "I of N"` from the request's
//! `cluster_index` and `total_cluster_count`; validation always succeeds;
//! `BeginRollout` and `ProgressRollout` answer `Empty`; `Initialize` gives the
//! plugin's name (`echo` unless set), claims every hook and declares the
//! rollout state it wants ([`StateDetail`], the full list unless set).
//!
//! It counts the rollout requests it receives (every hook but `Initialize`)
//! and their message bytes ([`Received`]): what a rollout sends a plugin.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use rollout_proto::v1alpha1::rollout_plugin_service_server::{
    RolloutPluginService, RolloutPluginServiceServer,
};
use rollout_proto::v1alpha1::{
    InitializeRequest, InitializeResponse, MutateManifestWorkRequest, MutateManifestWorkResponse,
    RolloutPluginRequest, RolloutStateDetail, ValidateCompletionRequest, ValidateResponse,
    ValidationResult,
};
use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

/// Largest gRPC message the plugin accepts or sends.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;
/// The name the plugin gives in `InitializeResponse`.
pub const PLUGIN_NAME: &str = "echo";

/// HTTP/2 receive windows, large enough that a 4 MiB ManifestWork streams in
/// without waiting for WINDOW_UPDATEs.
const STREAM_WINDOW: u32 = 4 << 20;
const CONNECTION_WINDOW: u32 = 16 << 20;

/// How `MutateManifestWork` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum EchoMode {
    /// Send the ManifestWork back as received.
    #[default]
    Echo,
    /// Send an empty ManifestWork, meaning "unchanged".
    Empty,
    /// Add an annotation with the cluster's position in the rollout.
    Annotate,
}

/// The rollout state the plugin declares in `InitializeResponse.state_detail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum StateDetail {
    /// `ROLLOUT_STATE_DETAIL_FULL`: every cluster's status in each request.
    #[default]
    Full,
    /// `ROLLOUT_STATE_DETAIL_COUNTS`: the counts only.
    Counts,
    /// The field left unset, as by a plugin written before it existed (the
    /// gateway then sends the full list).
    Unset,
}

impl From<StateDetail> for i32 {
    fn from(detail: StateDetail) -> i32 {
        match detail {
            StateDetail::Full => RolloutStateDetail::Full.into(),
            StateDetail::Counts => RolloutStateDetail::Counts.into(),
            StateDetail::Unset => RolloutStateDetail::Unspecified.into(),
        }
    }
}

/// The rollout requests received so far (every hook but `Initialize`) and
/// their message bytes (the encoded request, without gRPC or HTTP/2 framing).
#[derive(Debug, Default)]
pub struct Received {
    requests: AtomicU64,
    bytes: AtomicU64,
}

impl Received {
    /// Requests received.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Their message bytes, summed.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    fn add(&self, message: &impl prost::Message) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes
            .fetch_add(message.encoded_len() as u64, Ordering::Relaxed);
    }
}

/// The plugin.
#[derive(Debug, Clone)]
pub struct EchoPlugin {
    mode: EchoMode,
    name: Arc<str>,
    state_detail: StateDetail,
    received: Arc<Received>,
}

impl EchoPlugin {
    /// A plugin named `echo` answering mutations in `mode`.
    pub fn new(mode: EchoMode) -> Self {
        Self::named(PLUGIN_NAME, mode)
    }

    /// A plugin with its own name (for Initialize and its annotation).
    pub fn named(name: &str, mode: EchoMode) -> Self {
        Self {
            mode,
            name: name.into(),
            state_detail: StateDetail::default(),
            received: Arc::default(),
        }
    }

    /// Declares `detail` in `Initialize`.
    pub fn with_state_detail(mut self, detail: StateDetail) -> Self {
        self.state_detail = detail;
        self
    }

    /// The counters of what it received, shared with the serving plugin.
    pub fn received(&self) -> Arc<Received> {
        self.received.clone()
    }
}

/// Annotates a ManifestWork with the cluster's position in the rollout.
fn annotate(
    work: &[u8],
    plugin: &str,
    rollout: Option<&RolloutPluginRequest>,
) -> Result<Bytes, Status> {
    let mut work: serde_json::Value = serde_json::from_slice(work)
        .map_err(|e| Status::invalid_argument(format!("ManifestWork is not JSON: {e}")))?;
    let position = rollout.map_or_else(String::new, |r| {
        format!("{} of {}", r.cluster_index, r.total_cluster_count)
    });
    let annotations = work
        .as_object_mut()
        .ok_or_else(|| Status::invalid_argument("ManifestWork is not a JSON object"))?
        .entry("metadata")
        .or_insert_with(|| serde_json::json!({}))
        .as_object_mut()
        .ok_or_else(|| Status::invalid_argument("metadata is not an object"))?
        .entry("annotations")
        .or_insert_with(|| serde_json::json!({}));
    if let Some(map) = annotations.as_object_mut() {
        map.insert(
            format!("{plugin}.rollout-hooks.io/position"),
            serde_json::Value::String(position),
        );
    }
    serde_json::to_vec(&work)
        .map(Bytes::from)
        .map_err(|e| Status::internal(e.to_string()))
}

#[tonic::async_trait]
impl RolloutPluginService for EchoPlugin {
    async fn initialize(
        &self,
        _request: Request<InitializeRequest>,
    ) -> Result<Response<InitializeResponse>, Status> {
        Ok(Response::new(InitializeResponse {
            name: self.name.to_string(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            hooks: Vec::new(),
            state_detail: self.state_detail.into(),
        }))
    }

    async fn begin_rollout(
        &self,
        request: Request<RolloutPluginRequest>,
    ) -> Result<Response<()>, Status> {
        self.received.add(request.get_ref());
        Ok(Response::new(()))
    }

    async fn progress_rollout(
        &self,
        request: Request<RolloutPluginRequest>,
    ) -> Result<Response<()>, Status> {
        self.received.add(request.get_ref());
        Ok(Response::new(()))
    }

    async fn validate_rollout_completion(
        &self,
        request: Request<ValidateCompletionRequest>,
    ) -> Result<Response<ValidateResponse>, Status> {
        self.received.add(request.get_ref());
        Ok(Response::new(ValidateResponse {
            result: ValidationResult::Succeeded as i32,
            message: String::new(),
            recheck_after: None,
        }))
    }

    async fn mutate_manifest_work(
        &self,
        request: Request<MutateManifestWorkRequest>,
    ) -> Result<Response<MutateManifestWorkResponse>, Status> {
        self.received.add(request.get_ref());
        let manifest_work = match self.mode {
            EchoMode::Echo => request.into_inner().manifest_work,
            EchoMode::Empty => Bytes::new(),
            EchoMode::Annotate => {
                let request = request.into_inner();
                annotate(&request.manifest_work, &self.name, request.rollout.as_ref())?
            }
        };
        Ok(Response::new(MutateManifestWorkResponse { manifest_work }))
    }
}

/// The plugin as a tonic service, with the 64 MiB message limits.
pub fn service(plugin: EchoPlugin) -> RolloutPluginServiceServer<EchoPlugin> {
    RolloutPluginServiceServer::new(plugin)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

/// Serves the plugin (plaintext HTTP/2) on `listener` until `shutdown`
/// completes, then finishes the calls in flight and returns.
///
/// Fails when the server cannot run (an accept loop error).
pub async fn serve(
    listener: TcpListener,
    plugin: EchoPlugin,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    // `TCP_NODELAY`: answers are small single frames; do not let Nagle hold
    // them back. (Server::tcp_nodelay is ignored with an incoming stream.)
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    Server::builder()
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .add_service(service(plugin))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use prost::Message as _;
    use rollout_proto::v1alpha1::{ClusterRolloutStatus, RolloutState};

    use super::*;

    #[tokio::test]
    async fn declares_its_state_detail_and_counts_what_it_receives() {
        for (detail, want) in [
            (StateDetail::Full, RolloutStateDetail::Full),
            (StateDetail::Counts, RolloutStateDetail::Counts),
            (StateDetail::Unset, RolloutStateDetail::Unspecified),
        ] {
            let plugin = EchoPlugin::new(EchoMode::Empty).with_state_detail(detail);
            let init = plugin
                .initialize(Request::new(InitializeRequest::default()))
                .await
                .unwrap()
                .into_inner();
            assert_eq!(init.state_detail(), want);
        }

        let plugin = EchoPlugin::new(EchoMode::Empty);
        let received = plugin.received();
        let request = RolloutPluginRequest {
            cluster_name: "c2".into(),
            rollout_status: Some(RolloutState {
                completed: vec![ClusterRolloutStatus {
                    cluster_name: "c1".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let mutate = MutateManifestWorkRequest {
            rollout: Some(request.clone()),
            manifest_work: Bytes::from_static(b"{}"),
        };
        plugin
            .begin_rollout(Request::new(request.clone()))
            .await
            .unwrap();
        plugin
            .mutate_manifest_work(Request::new(mutate.clone()))
            .await
            .unwrap();
        // Initialize is not a rollout request.
        plugin
            .initialize(Request::new(InitializeRequest::default()))
            .await
            .unwrap();
        assert_eq!(received.requests(), 2);
        assert_eq!(
            received.bytes(),
            (request.encode_to_vec().len() + mutate.encode_to_vec().len()) as u64
        );
    }
}
