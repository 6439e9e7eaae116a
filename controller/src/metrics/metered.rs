//! [`Metered`]: any [`Hooks`] with each call counted and timed in
//! [`ControllerMetrics`].

use std::sync::Arc;
use tokio::time::Instant;

use super::ControllerMetrics;
use crate::hooks::{Call, HookAnswer, HookError, HookRequest, Hooks};

/// `inner`'s hook calls, each recorded (hook, target, gRPC code, duration)
/// when it ends. A call dropped before it ends is not recorded.
#[derive(Debug, Clone)]
pub struct Metered<H> {
    inner: H,
    metrics: Arc<ControllerMetrics>,
}

impl<H> Metered<H> {
    /// `inner`, counted in `metrics`.
    pub fn new(inner: H, metrics: Arc<ControllerMetrics>) -> Metered<H> {
        Metered { inner, metrics }
    }
}

impl<H: Hooks> Hooks for Metered<H> {
    async fn call(&self, call: Call<'_>, request: HookRequest) -> Result<HookAnswer, HookError> {
        let hook = request.kind();
        let start = Instant::now();
        let result = self.inner.call(call, request).await;
        self.metrics
            .record_hook(hook, call.plugin, result.as_ref().err(), start.elapsed());
        result
    }
}
