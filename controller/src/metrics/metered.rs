//! [`Metered`]: any [`Hooks`] with each call counted and timed in
//! [`ControllerMetrics`].

use std::future::Future;
use std::sync::Arc;
use tokio::time::Instant;

use bytes::Bytes;
use rollout_proto::HookKind;
use rollout_proto::v1alpha1::{InitializeRequest, InitializeResponse, ValidateResponse};

use super::ControllerMetrics;
use crate::hooks::{Call, HookError, Hooks, Mutation, RolloutRequest};

/// `inner`'s hook calls, each recorded (hook, target, gRPC code, duration)
/// when it ends. A call dropped before it ends is not recorded.
#[derive(Debug, Clone)]
pub(crate) struct Metered<H> {
    inner: H,
    metrics: Arc<ControllerMetrics>,
}

impl<H> Metered<H> {
    /// `inner`, counted in `metrics`.
    pub(crate) fn new(inner: H, metrics: Arc<ControllerMetrics>) -> Metered<H> {
        Metered { inner, metrics }
    }

    async fn timed<T>(
        &self,
        hook: HookKind,
        call: Call<'_>,
        future: impl Future<Output = Result<T, HookError>>,
    ) -> Result<T, HookError> {
        let start = Instant::now();
        let result = future.await;
        self.metrics
            .record_hook(hook, call.plugin, result.as_ref().err(), start.elapsed());
        result
    }
}

impl<H: Hooks> Hooks for Metered<H> {
    async fn initialize(
        &self,
        call: Call<'_>,
        request: InitializeRequest,
    ) -> Result<InitializeResponse, HookError> {
        self.timed(
            HookKind::Initialize,
            call,
            self.inner.initialize(call, request),
        )
        .await
    }

    async fn begin_rollout(
        &self,
        call: Call<'_>,
        request: RolloutRequest,
    ) -> Result<(), HookError> {
        self.timed(
            HookKind::BeginRollout,
            call,
            self.inner.begin_rollout(call, request),
        )
        .await
    }

    async fn progress_rollout(
        &self,
        call: Call<'_>,
        request: RolloutRequest,
    ) -> Result<(), HookError> {
        self.timed(
            HookKind::ProgressRollout,
            call,
            self.inner.progress_rollout(call, request),
        )
        .await
    }

    async fn validate_rollout_completion(
        &self,
        call: Call<'_>,
        request: RolloutRequest,
    ) -> Result<ValidateResponse, HookError> {
        self.timed(
            HookKind::ValidateRolloutCompletion,
            call,
            self.inner.validate_rollout_completion(call, request),
        )
        .await
    }

    async fn mutate_manifest_work(
        &self,
        call: Call<'_>,
        request: RolloutRequest,
        manifest_work: Bytes,
    ) -> Result<Mutation, HookError> {
        self.timed(
            HookKind::MutateManifestWork,
            call,
            self.inner
                .mutate_manifest_work(call, request, manifest_work),
        )
        .await
    }
}
