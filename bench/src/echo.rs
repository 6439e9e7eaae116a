//! The echo plugin: a `RolloutPluginService` that does nothing, as fast as
//! tonic allows, so a benchmark measures what sits in front of it.
//!
//! `MutateManifestWork` answers with the request's `manifest_work` (the same
//! `Bytes`, no copy) in [`EchoMode::Echo`], with an empty one ("unchanged")
//! in [`EchoMode::Empty`], or, in [`EchoMode::Annotate`] (for demos), with the
//! work annotated `NAME.rollout-hooks.io/position: "I of N"` from the request's
//! `cluster_index` and `total_cluster_count`, or, in [`EchoMode::Mutate`]
//! (the benchmark's realistic plugin, doing what a mutating plugin such as
//! `traffic-weights` does to the work), with the work parsed into a
//! `serde_json::Value`, changed ([`mutate`]) and serialised again;
//! validation always succeeds;
//! `BeginRollout` and `ProgressRollout` answer `Empty`; `Initialize` gives the
//! plugin's name (`echo` unless set), claims every hook and declares the
//! rollout state it wants ([`StateDetail`], the full list unless set).
//!
//! It counts the rollout requests it receives (every hook but `Initialize`)
//! and their message bytes ([`Received`]): what a rollout sends a plugin.
//!
//! [`serve_all`] serves one plugin on several listeners, e.g. the same port on
//! 127.0.0.1 and on [`loopback_alias`]es, so a client sees as many distinct
//! plugin endpoints (and keeps as many connections) as there are listeners.

use std::future::Future;
use std::net::Ipv4Addr;
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

/// The most [`loopback_alias`]es there are: 127.0.0.2 to 127.255.255.254
/// (127.255.255.255 is the loopback network's broadcast address).
pub const MAX_LOOPBACK_ALIASES: usize = 0x00FF_FFFD;

/// The `index`-th loopback alias of 127.0.0.1, counting from 1: 127.0.0.2,
/// 127.0.0.3, …, 127.0.0.255, 127.0.1.0, … On Linux every address of
/// 127.0.0.0/8 is local, so a server can listen on any of them without
/// configuring an interface. `None` for 0 or beyond
/// [`MAX_LOOPBACK_ALIASES`].
pub fn loopback_alias(index: usize) -> Option<Ipv4Addr> {
    if index == 0 || index > MAX_LOOPBACK_ALIASES {
        return None;
    }
    let index = u32::try_from(index).ok()?;
    Some(Ipv4Addr::from(u32::from(Ipv4Addr::LOCALHOST) + index))
}

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
    /// Parse the work, change it ([`mutate`]: a counter annotation on the
    /// work, an annotation on its first manifest) and serialise it again,
    /// keeping its identity: the work of a real mutating plugin.
    Mutate,
}

/// Annotation on the ManifestWork that [`EchoMode::Mutate`] sets to the
/// number of times the work went through it (its value plus one).
pub const MUTATIONS_ANNOTATION: &str = "bench.rollout-hooks.io/mutations";
/// Annotation on the work's first manifest that [`EchoMode::Mutate`] sets to
/// the plugin's name.
pub const MUTATED_BY_ANNOTATION: &str = "bench.rollout-hooks.io/mutated-by";

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

/// Parses a ManifestWork, which must be a JSON object.
fn parse_work(work: &[u8]) -> Result<serde_json::Value, Status> {
    let work: serde_json::Value = serde_json::from_slice(work)
        .map_err(|e| Status::invalid_argument(format!("ManifestWork is not JSON: {e}")))?;
    if !work.is_object() {
        return Err(Status::invalid_argument(
            "ManifestWork is not a JSON object",
        ));
    }
    Ok(work)
}

/// `metadata.annotations` of a Kubernetes object, created when absent.
/// `what` names the object in the error when it, or its metadata, is not a
/// JSON object.
fn annotations_mut<'a>(
    object: &'a mut serde_json::Value,
    what: &str,
) -> Result<&'a mut serde_json::Map<String, serde_json::Value>, Status> {
    let not_object =
        |field: &str| Status::invalid_argument(format!("{what}{field} is not a JSON object"));
    object
        .as_object_mut()
        .ok_or_else(|| not_object(""))?
        .entry("metadata")
        .or_insert_with(|| serde_json::json!({}))
        .as_object_mut()
        .ok_or_else(|| not_object(".metadata"))?
        .entry("annotations")
        .or_insert_with(|| serde_json::json!({}))
        .as_object_mut()
        .ok_or_else(|| not_object(".metadata.annotations"))
}

fn serialise(work: &serde_json::Value) -> Result<Bytes, Status> {
    serde_json::to_vec(work)
        .map(Bytes::from)
        .map_err(|e| Status::internal(e.to_string()))
}

/// Annotates a ManifestWork with the cluster's position in the rollout.
fn annotate(
    work: &[u8],
    plugin: &str,
    rollout: Option<&RolloutPluginRequest>,
) -> Result<Bytes, Status> {
    let mut work = parse_work(work)?;
    let position = rollout.map_or_else(String::new, |r| {
        format!("{} of {}", r.cluster_index, r.total_cluster_count)
    });
    annotations_mut(&mut work, "ManifestWork")?.insert(
        format!("{plugin}.rollout-hooks.io/position"),
        serde_json::Value::String(position),
    );
    serialise(&work)
}

/// The mutation of [`EchoMode::Mutate`]: parses `work` into a tree, sets
/// [`MUTATIONS_ANNOTATION`] on the work to its previous value plus one (1
/// when absent or not a number) and [`MUTATED_BY_ANNOTATION`] on the first
/// manifest of `spec.workload.manifests` (when there is one) to `plugin`,
/// and serialises the tree again. `apiVersion`, `kind`, `metadata.name` and
/// `metadata.namespace` are left as they are, so the gateway's identity
/// check passes.
///
/// Fails with `INVALID_ARGUMENT` when the work is not a JSON object, or an
/// object on the way to an annotation is something else.
pub fn mutate(work: &[u8], plugin: &str) -> Result<Bytes, Status> {
    let mut work = parse_work(work)?;
    let annotations = annotations_mut(&mut work, "ManifestWork")?;
    let count = annotations
        .get(MUTATIONS_ANNOTATION)
        .and_then(serde_json::Value::as_str)
        .and_then(|count| count.parse::<u64>().ok())
        .unwrap_or(0);
    annotations.insert(
        MUTATIONS_ANNOTATION.to_owned(),
        serde_json::Value::String(count.saturating_add(1).to_string()),
    );
    if let Some(manifest) = work.pointer_mut("/spec/workload/manifests/0") {
        annotations_mut(manifest, "the first manifest")?.insert(
            MUTATED_BY_ANNOTATION.to_owned(),
            serde_json::Value::String(plugin.to_owned()),
        );
    }
    serialise(&work)
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
            EchoMode::Mutate => mutate(&request.into_inner().manifest_work, &self.name)?,
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
    serve_all(vec![listener], plugin, shutdown).await
}

/// Serves the plugin (plaintext HTTP/2) on every one of `listeners`, one
/// server taking the connections of all of them, until `shutdown` completes,
/// then finishes the calls in flight and returns. With no listeners it
/// only waits for `shutdown`.
///
/// Fails when the server cannot run (an accept loop error).
pub async fn serve_all(
    listeners: Vec<TcpListener>,
    plugin: EchoPlugin,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    // `TCP_NODELAY`: answers are small single frames; do not let Nagle hold
    // them back. (Server::tcp_nodelay is ignored with an incoming stream.)
    let incoming = futures::stream::select_all(
        listeners
            .into_iter()
            .map(|listener| TcpIncoming::from(listener).with_nodelay(Some(true))),
    );
    Server::builder()
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .add_service(service(plugin))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use prost::Message as _;
    use rollout_proto::v1alpha1::{ClusterRolloutStatus, RolloutState};

    use super::*;

    fn identity(work: &serde_json::Value) -> [&serde_json::Value; 4] {
        [
            &work["apiVersion"],
            &work["kind"],
            &work["metadata"]["name"],
            &work["metadata"]["namespace"],
        ]
    }

    #[test]
    fn loopback_aliases_count_from_127_0_0_2() {
        assert_eq!(loopback_alias(0), None);
        assert_eq!(loopback_alias(1), Some(Ipv4Addr::new(127, 0, 0, 2)));
        assert_eq!(loopback_alias(99), Some(Ipv4Addr::new(127, 0, 0, 100)));
        assert_eq!(loopback_alias(254), Some(Ipv4Addr::new(127, 0, 0, 255)));
        assert_eq!(loopback_alias(255), Some(Ipv4Addr::new(127, 0, 1, 0)));
        assert_eq!(
            loopback_alias(MAX_LOOPBACK_ALIASES),
            Some(Ipv4Addr::new(127, 255, 255, 254))
        );
        assert_eq!(loopback_alias(MAX_LOOPBACK_ALIASES + 1), None);
    }

    #[test]
    fn mutate_changes_the_work_and_keeps_its_identity() {
        let original = rollout_harness::manifest::manifest_work_json(4096);
        let once = mutate(&original, "mutate").unwrap();
        assert_ne!(once, original);
        let before: serde_json::Value = serde_json::from_slice(&original).unwrap();
        let after: serde_json::Value = serde_json::from_slice(&once).unwrap();
        assert_eq!(identity(&after), identity(&before));
        assert_eq!(after["metadata"]["annotations"][MUTATIONS_ANNOTATION], "1");
        assert_eq!(
            after["spec"]["workload"]["manifests"][0]["metadata"]["annotations"]
                [MUTATED_BY_ANNOTATION],
            "mutate"
        );
        // The rest of the work is untouched: remove what was added and
        // the trees are equal again.
        let mut undone = after.clone();
        undone["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("annotations");
        undone["spec"]["workload"]["manifests"][0]["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(MUTATED_BY_ANNOTATION);
        assert_eq!(undone, before);
        // The counter counts.
        let twice: serde_json::Value =
            serde_json::from_slice(&mutate(&once, "mutate").unwrap()).unwrap();
        assert_eq!(twice["metadata"]["annotations"][MUTATIONS_ANNOTATION], "2");
        // A bare object gets its metadata; no manifests, nothing else to do.
        let bare: serde_json::Value = serde_json::from_slice(&mutate(b"{}", "m").unwrap()).unwrap();
        assert_eq!(
            bare,
            serde_json::json!({"metadata": {"annotations": {MUTATIONS_ANNOTATION: "1"}}})
        );
    }

    #[test]
    fn mutate_refuses_what_is_not_a_work() {
        for (work, culprit) in [
            (&b"not json"[..], "not JSON"),
            (b"[1]", "ManifestWork is not a JSON object"),
            (b"{\"metadata\": 3}", "ManifestWork.metadata is not"),
            (
                b"{\"spec\": {\"workload\": {\"manifests\": [7]}}}",
                "the first manifest is not",
            ),
        ] {
            let status = mutate(work, "m").unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument);
            assert!(status.message().contains(culprit), "{}", status.message());
        }
    }

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
