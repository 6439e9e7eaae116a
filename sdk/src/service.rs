//! [`PluginService`]: the tonic `RolloutPluginService` for any
//! [`RolloutPlugin`].

use std::sync::Arc;

use bytes::Bytes;
use rollout_proto::v1alpha1::rollout_plugin_service_server::{
    RolloutPluginService, RolloutPluginServiceServer,
};
use rollout_proto::v1alpha1::{
    InitializeRequest, InitializeResponse, MutateManifestWorkRequest, MutateManifestWorkResponse,
    RolloutPluginRequest, ValidateCompletionRequest, ValidateResponse,
};
use tonic::{Request, Response, Status};

use crate::error::PluginError;
use crate::plugin::{Mutation, RolloutPlugin};
use crate::work::ManifestWork;

/// Serves a [`RolloutPlugin`] as `ocm.rolloutplugin.v1alpha1.RolloutPluginService`.
///
/// Beyond calling the hook, it:
/// - answers `INVALID_ARGUMENT` when a `ValidateRolloutCompletion` or
///   `MutateManifestWork` request has no `rollout`, or when the
///   `manifest_work` is not a ManifestWork ([`ManifestWork::from_slice`]);
/// - answers `INTERNAL` when a mutation changes the work's `apiVersion`,
///   `kind`, `metadata.name` or `metadata.namespace` (the gateway would
///   reject it anyway; failing here names the mistake to the author);
/// - sends [`Mutation::Unchanged`] as an empty `manifest_work`.
///
/// [`crate::bind`] serves it; use it directly to add the plugin to a tonic
/// server of your own.
pub struct PluginService<P> {
    plugin: Arc<P>,
}

impl<P> Clone for PluginService<P> {
    fn clone(&self) -> Self {
        Self {
            plugin: self.plugin.clone(),
        }
    }
}

impl<P: RolloutPlugin> PluginService<P> {
    /// Wraps a plugin.
    pub fn new(plugin: P) -> Self {
        Self::from_arc(Arc::new(plugin))
    }

    /// Wraps a shared plugin.
    pub fn from_arc(plugin: Arc<P>) -> Self {
        Self { plugin }
    }

    /// The tonic service, with no message size limit set (tonic's default
    /// decoding limit is 4 MiB).
    pub fn into_server(self) -> RolloutPluginServiceServer<Self> {
        RolloutPluginServiceServer::new(self)
    }
}

impl<P> std::fmt::Debug for PluginService<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginService").finish_non_exhaustive()
    }
}

/// The fields a mutation must keep, as `(field, value)`.
fn identity(work: &ManifestWork) -> [(&'static str, Option<String>); 4] {
    let own = |s: Option<&str>| s.map(str::to_string);
    [
        ("apiVersion", own(work.api_version())),
        ("kind", own(work.kind())),
        ("metadata.name", own(work.name())),
        ("metadata.namespace", own(work.namespace())),
    ]
}

fn rollout_of(rollout: Option<RolloutPluginRequest>) -> Result<RolloutPluginRequest, PluginError> {
    rollout.ok_or_else(|| PluginError::invalid_argument("request has no `rollout`"))
}

/// Logs a failed hook and turns it into its status.
fn failed(hook: &'static str, cluster: &str, error: PluginError) -> Status {
    tracing::warn!(hook, cluster, code = ?error.code(), error = %error, "hook failed");
    Status::from(error)
}

#[tonic::async_trait]
impl<P: RolloutPlugin> RolloutPluginService for PluginService<P> {
    async fn initialize(
        &self,
        request: Request<InitializeRequest>,
    ) -> Result<Response<InitializeResponse>, Status> {
        let request = request.into_inner();
        tracing::debug!(hook = "Initialize", hub = %request.hub_name, controller = %request.controller_version);
        match self.plugin.initialize(request).await {
            Ok(info) => Ok(Response::new(info.into())),
            Err(e) => Err(failed("Initialize", "", e)),
        }
    }

    async fn begin_rollout(
        &self,
        request: Request<RolloutPluginRequest>,
    ) -> Result<Response<()>, Status> {
        let request = request.into_inner();
        let cluster = request.cluster_name.clone();
        tracing::debug!(hook = "BeginRollout", mwrs = %request.mwrs_name, cluster = %cluster);
        match self.plugin.begin_rollout(request).await {
            Ok(()) => Ok(Response::new(())),
            Err(e) => Err(failed("BeginRollout", &cluster, e)),
        }
    }

    async fn progress_rollout(
        &self,
        request: Request<RolloutPluginRequest>,
    ) -> Result<Response<()>, Status> {
        let request = request.into_inner();
        tracing::debug!(hook = "ProgressRollout", mwrs = %request.mwrs_name);
        match self.plugin.progress_rollout(request).await {
            Ok(()) => Ok(Response::new(())),
            Err(e) => Err(failed("ProgressRollout", "", e)),
        }
    }

    async fn validate_rollout_completion(
        &self,
        request: Request<ValidateCompletionRequest>,
    ) -> Result<Response<ValidateResponse>, Status> {
        const HOOK: &str = "ValidateRolloutCompletion";
        let rollout = rollout_of(request.into_inner().rollout).map_err(|e| failed(HOOK, "", e))?;
        let cluster = rollout.cluster_name.clone();
        tracing::debug!(hook = HOOK, mwrs = %rollout.mwrs_name, cluster = %cluster);
        match self.plugin.validate_rollout_completion(rollout).await {
            Ok(validation) => Ok(Response::new(validation.into())),
            Err(e) => Err(failed(HOOK, &cluster, e)),
        }
    }

    async fn mutate_manifest_work(
        &self,
        request: Request<MutateManifestWorkRequest>,
    ) -> Result<Response<MutateManifestWorkResponse>, Status> {
        const HOOK: &str = "MutateManifestWork";
        let MutateManifestWorkRequest {
            rollout,
            manifest_work,
        } = request.into_inner();
        let rollout = rollout_of(rollout).map_err(|e| failed(HOOK, "", e))?;
        let cluster = rollout.cluster_name.clone();
        tracing::debug!(hook = HOOK, mwrs = %rollout.mwrs_name, cluster = %cluster, aborting = rollout.aborting);
        let mutate = async {
            let work = ManifestWork::from_slice(&manifest_work)?;
            let before = identity(&work);
            match self.plugin.mutate_manifest_work(rollout, work).await? {
                Mutation::Unchanged => Ok(Bytes::new()),
                Mutation::Changed(out) => {
                    for ((field, was), (_, now)) in before.iter().zip(identity(&out)) {
                        if *was != now {
                            return Err(PluginError::internal(format!(
                                "the mutation changed `{field}` from {was:?} to {now:?}; a plugin may not"
                            )));
                        }
                    }
                    Ok(out.to_bytes()?)
                }
            }
        };
        match mutate.await {
            Ok(manifest_work) => Ok(Response::new(MutateManifestWorkResponse { manifest_work })),
            Err(e) => Err(failed(HOOK, &cluster, e)),
        }
    }
}
