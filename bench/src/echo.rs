//! The echo plugin: a `RolloutPluginService` that does nothing, as fast as
//! tonic allows, so a benchmark measures what sits in front of it.
//!
//! `MutateManifestWork` answers with the request's `manifest_work` (the same
//! `Bytes`, no copy) in [`EchoMode::Echo`], or with an empty one ("unchanged")
//! in [`EchoMode::Empty`]; validation always succeeds; `BeginRollout` and
//! `ProgressRollout` answer `Empty`; `Initialize` names the plugin `echo` and
//! claims every hook.

use std::future::Future;

use bytes::Bytes;
use rollout_proto::v1alpha1::rollout_plugin_service_server::{
    RolloutPluginService, RolloutPluginServiceServer,
};
use rollout_proto::v1alpha1::{
    InitializeRequest, InitializeResponse, MutateManifestWorkRequest, MutateManifestWorkResponse,
    RolloutPluginRequest, ValidateCompletionRequest, ValidateResponse, ValidationResult,
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
}

/// The plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct EchoPlugin {
    mode: EchoMode,
}

impl EchoPlugin {
    /// A plugin answering mutations in `mode`.
    pub fn new(mode: EchoMode) -> Self {
        Self { mode }
    }
}

#[tonic::async_trait]
impl RolloutPluginService for EchoPlugin {
    async fn initialize(
        &self,
        _request: Request<InitializeRequest>,
    ) -> Result<Response<InitializeResponse>, Status> {
        Ok(Response::new(InitializeResponse {
            name: PLUGIN_NAME.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            hooks: Vec::new(),
        }))
    }

    async fn begin_rollout(
        &self,
        _request: Request<RolloutPluginRequest>,
    ) -> Result<Response<()>, Status> {
        Ok(Response::new(()))
    }

    async fn progress_rollout(
        &self,
        _request: Request<RolloutPluginRequest>,
    ) -> Result<Response<()>, Status> {
        Ok(Response::new(()))
    }

    async fn validate_rollout_completion(
        &self,
        _request: Request<ValidateCompletionRequest>,
    ) -> Result<Response<ValidateResponse>, Status> {
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
        let manifest_work = match self.mode {
            EchoMode::Echo => request.into_inner().manifest_work,
            EchoMode::Empty => Bytes::new(),
        };
        Ok(Response::new(MutateManifestWorkResponse { manifest_work }))
    }
}

/// The plugin as a tonic service, with the 64 MiB message limits.
pub fn service(mode: EchoMode) -> RolloutPluginServiceServer<EchoPlugin> {
    RolloutPluginServiceServer::new(EchoPlugin::new(mode))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

/// Serves the plugin (plaintext HTTP/2) on `listener` until `shutdown`
/// completes, then finishes the calls in flight and returns.
///
/// Fails when the server cannot run (an accept loop error).
pub async fn serve(
    listener: TcpListener,
    mode: EchoMode,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    // `TCP_NODELAY`: answers are small single frames; do not let Nagle hold
    // them back. (Server::tcp_nodelay is ignored with an incoming stream.)
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    Server::builder()
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .add_service(service(mode))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
