//! A hook call as one value: [`HookRequest`] in, [`HookAnswer`] out.
//!
//! [`Hooks`] has one method, so a decorator (metrics, the simulator's
//! record) is written once, not once per hook, and a new hook is one new
//! variant here. [`HookCalls`] gives every [`Hooks`] the typed calls the
//! orchestration makes (`initialize`, `begin_rollout`, …), each taking and
//! returning the hook's own types.

use std::future::Future;

use bytes::Bytes;
use rollout_proto::HookKind;
use rollout_proto::v1alpha1::{InitializeRequest, InitializeResponse, ValidateResponse};

use super::{Call, HookError, Hooks, Mutation, Origin, RolloutRequest};

/// What one hook call carries.
#[derive(Debug, Clone)]
pub enum HookRequest {
    /// `Initialize`.
    Initialize(InitializeRequest),
    /// `BeginRollout`, for one cluster (`cluster_name` set).
    BeginRollout(RolloutRequest),
    /// `ProgressRollout`, once per reconcile of a placement.
    ProgressRollout(RolloutRequest),
    /// `ValidateRolloutCompletion`, for one Validating cluster.
    ValidateRolloutCompletion(RolloutRequest),
    /// `MutateManifestWork`, for one cluster, with the ManifestWork as
    /// JSON.
    MutateManifestWork(RolloutRequest, Bytes),
}

impl HookRequest {
    /// Which hook.
    pub fn kind(&self) -> HookKind {
        match self {
            HookRequest::Initialize(_) => HookKind::Initialize,
            HookRequest::BeginRollout(_) => HookKind::BeginRollout,
            HookRequest::ProgressRollout(_) => HookKind::ProgressRollout,
            HookRequest::ValidateRolloutCompletion(_) => HookKind::ValidateRolloutCompletion,
            HookRequest::MutateManifestWork(..) => HookKind::MutateManifestWork,
        }
    }

    /// The rollout request, for every hook but `Initialize`.
    pub fn rollout(&self) -> Option<&RolloutRequest> {
        match self {
            HookRequest::Initialize(_) => None,
            HookRequest::BeginRollout(r)
            | HookRequest::ProgressRollout(r)
            | HookRequest::ValidateRolloutCompletion(r)
            | HookRequest::MutateManifestWork(r, _) => Some(r),
        }
    }
}

/// What one hook call answered, by hook.
#[derive(Debug, Clone, PartialEq)]
pub enum HookAnswer {
    /// `Initialize`'s answer.
    Initialized(InitializeResponse),
    /// `BeginRollout` or `ProgressRollout`: an empty answer.
    Done,
    /// `ValidateRolloutCompletion`'s verdict.
    Validated(ValidateResponse),
    /// `MutateManifestWork`'s answer.
    Mutated(Mutation),
}

impl HookAnswer {
    fn name(&self) -> &'static str {
        match self {
            HookAnswer::Initialized(_) => "an Initialize answer",
            HookAnswer::Done => "an empty answer",
            HookAnswer::Validated(_) => "a validation verdict",
            HookAnswer::Mutated(_) => "a mutation",
        }
    }
}

/// An implementation that answered a hook with another hook's answer: a
/// failure of the call (fail closed), never read as a success.
fn mismatched(hook: HookKind, answer: &HookAnswer) -> HookError {
    HookError {
        hook,
        code: tonic::Code::Internal,
        message: format!(
            "the controller's hook client answered {hook} with {}",
            answer.name()
        ),
        origin: Origin::Answer,
    }
}

/// The typed hook calls, for every [`Hooks`]: each is one
/// [`Hooks::call`], its answer checked to be the hook's own.
pub trait HookCalls: Hooks {
    /// `Initialize`.
    fn initialize(
        &self,
        call: Call<'_>,
        request: InitializeRequest,
    ) -> impl Future<Output = Result<InitializeResponse, HookError>> + Send {
        async move {
            match self.call(call, HookRequest::Initialize(request)).await? {
                HookAnswer::Initialized(response) => Ok(response),
                other => Err(mismatched(HookKind::Initialize, &other)),
            }
        }
    }

    /// `BeginRollout`, for one cluster.
    fn begin_rollout(
        &self,
        call: Call<'_>,
        request: RolloutRequest,
    ) -> impl Future<Output = Result<(), HookError>> + Send {
        done(self, call, HookRequest::BeginRollout(request))
    }

    /// `ProgressRollout`, once per reconcile of a placement.
    fn progress_rollout(
        &self,
        call: Call<'_>,
        request: RolloutRequest,
    ) -> impl Future<Output = Result<(), HookError>> + Send {
        done(self, call, HookRequest::ProgressRollout(request))
    }

    /// `ValidateRolloutCompletion`, for one Validating cluster.
    fn validate_rollout_completion(
        &self,
        call: Call<'_>,
        request: RolloutRequest,
    ) -> impl Future<Output = Result<ValidateResponse, HookError>> + Send {
        async move {
            let request = HookRequest::ValidateRolloutCompletion(request);
            match self.call(call, request).await? {
                HookAnswer::Validated(response) => Ok(response),
                other => Err(mismatched(HookKind::ValidateRolloutCompletion, &other)),
            }
        }
    }

    /// `MutateManifestWork`, for one cluster, with the ManifestWork as JSON.
    fn mutate_manifest_work(
        &self,
        call: Call<'_>,
        request: RolloutRequest,
        manifest_work: Bytes,
    ) -> impl Future<Output = Result<Mutation, HookError>> + Send {
        async move {
            let request = HookRequest::MutateManifestWork(request, manifest_work);
            match self.call(call, request).await? {
                HookAnswer::Mutated(mutation) => Ok(mutation),
                other => Err(mismatched(HookKind::MutateManifestWork, &other)),
            }
        }
    }
}

impl<H: Hooks + ?Sized> HookCalls for H {}

/// A call whose answer is empty (`BeginRollout`, `ProgressRollout`).
async fn done<H: Hooks + ?Sized>(
    hooks: &H,
    call: Call<'_>,
    request: HookRequest,
) -> Result<(), HookError> {
    let hook = request.kind();
    match hooks.call(call, request).await? {
        HookAnswer::Done => Ok(()),
        other => Err(mismatched(hook, &other)),
    }
}

/// For tests: a [`Hooks`] written as one method per hook. A hook a test
/// does not script fails the test when called.
#[cfg(test)]
pub(crate) trait PerHook: Send + Sync {
    fn initialize(
        &self,
        _: InitializeRequest,
    ) -> impl Future<Output = Result<InitializeResponse, HookError>> + Send {
        async { Ok(InitializeResponse::default()) }
    }

    fn begin_rollout(
        &self,
        _: RolloutRequest,
    ) -> impl Future<Output = Result<(), HookError>> + Send {
        async { unreachable!("BeginRollout is not scripted") }
    }

    fn progress_rollout(
        &self,
        _: RolloutRequest,
    ) -> impl Future<Output = Result<(), HookError>> + Send {
        async { unreachable!("ProgressRollout is not scripted") }
    }

    fn validate_rollout_completion(
        &self,
        _: RolloutRequest,
    ) -> impl Future<Output = Result<ValidateResponse, HookError>> + Send {
        async { unreachable!("ValidateRolloutCompletion is not scripted") }
    }

    fn mutate_manifest_work(
        &self,
        _: RolloutRequest,
        _: Bytes,
    ) -> impl Future<Output = Result<Mutation, HookError>> + Send {
        async { unreachable!("MutateManifestWork is not scripted") }
    }
}

#[cfg(test)]
impl<T: PerHook> Hooks for T {
    async fn call(&self, _: Call<'_>, request: HookRequest) -> Result<HookAnswer, HookError> {
        Ok(match request {
            HookRequest::Initialize(r) => {
                HookAnswer::Initialized(PerHook::initialize(self, r).await?)
            }
            HookRequest::BeginRollout(r) => {
                PerHook::begin_rollout(self, r).await?;
                HookAnswer::Done
            }
            HookRequest::ProgressRollout(r) => {
                PerHook::progress_rollout(self, r).await?;
                HookAnswer::Done
            }
            HookRequest::ValidateRolloutCompletion(r) => {
                HookAnswer::Validated(PerHook::validate_rollout_completion(self, r).await?)
            }
            HookRequest::MutateManifestWork(r, work) => {
                HookAnswer::Mutated(PerHook::mutate_manifest_work(self, r, work).await?)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers every call with one fixed answer.
    struct Answers(HookAnswer);

    impl Hooks for Answers {
        async fn call(&self, _: Call<'_>, _: HookRequest) -> Result<HookAnswer, HookError> {
            Ok(self.0.clone())
        }
    }

    fn call() -> Call<'static> {
        static CONTEXT: std::sync::LazyLock<opentelemetry::Context> =
            std::sync::LazyLock::new(opentelemetry::Context::new);
        Call {
            plugin: "p",
            trace: &CONTEXT,
        }
    }

    /// A verdict given to a mutation call (or any answer of another hook)
    /// is an INTERNAL failure naming both, never the hook's success.
    #[tokio::test]
    async fn another_hooks_answer_is_a_failure_of_the_call() {
        let verdict = Answers(HookAnswer::Validated(ValidateResponse {
            result: 1,
            ..Default::default()
        }));
        let err = verdict
            .mutate_manifest_work(call(), RolloutRequest::default(), Bytes::new())
            .await
            .expect_err("a verdict is no mutation");
        assert_eq!(err.code, tonic::Code::Internal);
        assert_eq!(err.hook, HookKind::MutateManifestWork);
        assert!(err.message.contains("a validation verdict"), "{err}");
        let done = Answers(HookAnswer::Done);
        assert!(done.begin_rollout(call(), Default::default()).await.is_ok());
        assert!(
            done.progress_rollout(call(), Default::default())
                .await
                .is_ok()
        );
        let init = done.initialize(call(), Default::default()).await;
        assert_eq!(init.err().map(|e| e.hook), Some(HookKind::Initialize));
        let verdict = done
            .validate_rollout_completion(call(), Default::default())
            .await;
        assert_eq!(
            verdict.err().map(|e| e.hook),
            Some(HookKind::ValidateRolloutCompletion)
        );
    }
}
