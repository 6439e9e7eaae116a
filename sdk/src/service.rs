//! [`PluginService`]: the tonic `RolloutPluginService` for any
//! [`RolloutPlugin`].

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use opentelemetry::trace::{Span as _, SpanContext, SpanKind, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use rollout_proto::partial::RolloutFields;
use rollout_proto::v1alpha1::rollout_plugin_service_server::{
    RolloutPluginService, RolloutPluginServiceServer,
};
use rollout_proto::v1alpha1::{
    InitializeRequest, InitializeResponse, MutateManifestWorkRequest, MutateManifestWorkResponse,
    RolloutPluginRequest, ValidateCompletionRequest, ValidateResponse,
};
use rollout_proto::{IDENTITY_FIELDS, SERVICE_NAME};
use rollout_telemetry::Tracer;
use serde_json::Value;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};
use tracing::Instrument;

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
///   `kind`, `metadata.name`, `metadata.namespace` or `spec.executor`
///   (`rollout_proto::IDENTITY_FIELDS`; the gateway would
///   reject it anyway; failing here names the mistake to the author);
/// - sends [`Mutation::Unchanged`] as an empty `manifest_work`;
/// - makes a server span per call, named
///   `ocm.rolloutplugin.v1alpha1.RolloutPluginService/HOOK`, a child of the
///   caller's W3C `traceparent` when the request carries one, with the
///   gateway's attributes (`rpc.system`, `rpc.service`, `rpc.method`, `ocm.rollout.plugin`,
///   `ocm.mwrs.*`, `ocm.placement`, `ocm.cluster`, `rpc.grpc.status_code`);
///   it is exported by the tracer given to [`PluginService::with_tracer`]
///   (none by default). The hook runs inside a `tracing` span `call` whose
///   `trace_id` and `span_id` fields JSON logs carry.
///
/// [`crate::bind`] serves it; use it directly to add the plugin to a tonic
/// server of your own.
pub struct PluginService<P> {
    plugin: Arc<P>,
    tracer: Tracer,
    /// The plugin's name, for the spans' `ocm.rollout.plugin`.
    name: Arc<str>,
}

impl<P> Clone for PluginService<P> {
    fn clone(&self) -> Self {
        Self {
            plugin: self.plugin.clone(),
            tracer: self.tracer.clone(),
            name: self.name.clone(),
        }
    }
}

/// The tracer scope of the SDK's spans.
pub(crate) const TRACER_SCOPE: &str = "rollout-plugin-sdk";

impl<P: RolloutPlugin> PluginService<P> {
    /// Wraps a plugin.
    pub fn new(plugin: P) -> Self {
        Self::from_arc(Arc::new(plugin))
    }

    /// Wraps a shared plugin.
    pub fn from_arc(plugin: Arc<P>) -> Self {
        let name = plugin.info().name.into();
        Self {
            plugin,
            tracer: Tracer::disabled(TRACER_SCOPE),
            name,
        }
    }

    /// Makes the calls' spans with `tracer` (which exports them, or not, as
    /// it was configured).
    pub fn with_tracer(mut self, tracer: Tracer) -> Self {
        self.tracer = tracer;
        self
    }

    /// Runs `call`, the body of `hook`, inside a server span (child of
    /// `parent`) and a `tracing` span carrying its ids; records the outcome
    /// (a validation's verdict too: FAILED makes the span an error).
    async fn traced<T: Answer>(
        &self,
        hook: &'static str,
        parent: Option<SpanContext>,
        rollout: Option<RolloutFields>,
        call: impl Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        let mut attributes = vec![
            KeyValue::new("rpc.system", "grpc"),
            KeyValue::new("rpc.service", SERVICE_NAME),
            KeyValue::new("rpc.method", hook),
            KeyValue::new("ocm.rollout.plugin", self.name.to_string()),
        ];
        if let Some(rollout) = &rollout {
            rollout_telemetry::rollout_attributes(&mut attributes, rollout);
        }
        let cx = match parent {
            Some(parent) => Context::new().with_remote_span_context(parent),
            None => Context::new(),
        };
        let tracer = self.tracer.sdk();
        let mut span = tracer
            .span_builder(format!("{SERVICE_NAME}/{hook}"))
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(tracer, &cx);
        let ids = span.span_context().clone();
        let log_span = tracing::info_span!(
            "call",
            hook,
            trace_id = %ids.trace_id(),
            span_id = %ids.span_id()
        );
        let result = call.instrument(log_span).await;
        match &result {
            Ok(answer) => {
                if let Some(validation) = answer.validation() {
                    rollout_telemetry::outcome::record_validation(
                        &mut span,
                        &[&*self.name],
                        validation,
                    );
                }
                rollout_telemetry::finish_server_span(&mut span, tonic::Code::Ok, "")
            }
            Err(status) => {
                rollout_telemetry::finish_server_span(&mut span, status.code(), status.message())
            }
        }
        result
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

/// The fields a mutation must keep (`rollout_proto::IDENTITY_FIELDS`), as
/// `(field, value)`.
fn identity(work: &ManifestWork) -> [(&'static str, Option<Value>); IDENTITY_FIELDS.len()] {
    IDENTITY_FIELDS.map(|(field, path)| {
        let value = path
            .iter()
            .try_fold(work.as_value(), |v, key| v.get(*key))
            .cloned();
        (field, value)
    })
}

fn rollout_of(rollout: Option<RolloutPluginRequest>) -> Result<RolloutPluginRequest, PluginError> {
    rollout.ok_or_else(|| PluginError::invalid_argument("request has no `rollout`"))
}

/// The caller's trace context, from its W3C `traceparent` (the workspace's
/// one strict parser; a malformed one is ignored: the call starts a trace of
/// its own).
fn parent_of(metadata: &MetadataMap) -> Option<SpanContext> {
    rollout_telemetry::parse_traceparent(metadata.get("traceparent")?.as_bytes())
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
        let parent = parent_of(request.metadata());
        let request = request.into_inner();
        self.traced("Initialize", parent, None, async {
            tracing::debug!(hook = "Initialize", hub = %request.hub_name, controller = %request.controller_version);
            match self.plugin.initialize(request).await {
                Ok(info) => Ok(Response::new(info.into())),
                Err(e) => Err(failed("Initialize", "", e)),
            }
        })
        .await
    }

    async fn begin_rollout(
        &self,
        request: Request<RolloutPluginRequest>,
    ) -> Result<Response<()>, Status> {
        let parent = parent_of(request.metadata());
        let request = request.into_inner();
        let fields = RolloutFields::from(&request);
        self.traced("BeginRollout", parent, Some(fields), async {
            let cluster = request.cluster_name.clone();
            tracing::debug!(hook = "BeginRollout", mwrs = %request.mwrs_name, cluster = %cluster);
            match self.plugin.begin_rollout(request).await {
                Ok(()) => Ok(Response::new(())),
                Err(e) => Err(failed("BeginRollout", &cluster, e)),
            }
        })
        .await
    }

    async fn progress_rollout(
        &self,
        request: Request<RolloutPluginRequest>,
    ) -> Result<Response<()>, Status> {
        let parent = parent_of(request.metadata());
        let request = request.into_inner();
        let fields = RolloutFields::from(&request);
        self.traced("ProgressRollout", parent, Some(fields), async {
            tracing::debug!(hook = "ProgressRollout", mwrs = %request.mwrs_name);
            match self.plugin.progress_rollout(request).await {
                Ok(()) => Ok(Response::new(())),
                Err(e) => Err(failed("ProgressRollout", "", e)),
            }
        })
        .await
    }

    async fn validate_rollout_completion(
        &self,
        request: Request<ValidateCompletionRequest>,
    ) -> Result<Response<ValidateResponse>, Status> {
        const HOOK: &str = "ValidateRolloutCompletion";
        let parent = parent_of(request.metadata());
        let rollout = request.into_inner().rollout;
        let fields = rollout.as_ref().map(RolloutFields::from);
        self.traced(HOOK, parent, fields, async {
            let rollout = rollout_of(rollout).map_err(|e| failed(HOOK, "", e))?;
            let cluster = rollout.cluster_name.clone();
            tracing::debug!(hook = HOOK, mwrs = %rollout.mwrs_name, cluster = %cluster);
            match self.plugin.validate_rollout_completion(rollout).await {
                Ok(validation) => Ok(Response::new(validation.into())),
                Err(e) => Err(failed(HOOK, &cluster, e)),
            }
        })
        .await
    }

    async fn mutate_manifest_work(
        &self,
        request: Request<MutateManifestWorkRequest>,
    ) -> Result<Response<MutateManifestWorkResponse>, Status> {
        const HOOK: &str = "MutateManifestWork";
        let parent = parent_of(request.metadata());
        let MutateManifestWorkRequest {
            rollout,
            manifest_work,
        } = request.into_inner();
        let fields = rollout.as_ref().map(RolloutFields::from);
        self.traced(HOOK, parent, fields, self.mutate(rollout, manifest_work))
            .await
    }
}

/// What an answer says on the plugin's span beyond its code: a
/// validation's verdict.
trait Answer {
    fn validation(&self) -> Option<&ValidateResponse> {
        None
    }
}

impl Answer for Response<ValidateResponse> {
    fn validation(&self) -> Option<&ValidateResponse> {
        Some(self.get_ref())
    }
}

impl Answer for Response<InitializeResponse> {}

impl Answer for Response<()> {}

impl Answer for Response<MutateManifestWorkResponse> {}

impl<P: RolloutPlugin> PluginService<P> {
    /// MutateManifestWork's body: the hook, then the identity check.
    async fn mutate(
        &self,
        rollout: Option<RolloutPluginRequest>,
        manifest_work: Bytes,
    ) -> Result<Response<MutateManifestWorkResponse>, Status> {
        const HOOK: &str = "MutateManifestWork";
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
                            let show =
                                |v: Option<&Value>| v.map_or("nothing".into(), Value::to_string);
                            return Err(PluginError::internal(format!(
                                "the mutation changed `{field}` from {} to {}; a plugin may not",
                                show(was.as_ref()),
                                show(now.as_ref())
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
