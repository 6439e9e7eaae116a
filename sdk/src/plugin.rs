//! The [`RolloutPlugin`] trait a plugin implements, and the values its hooks
//! answer with.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rollout_proto::v1alpha1::{
    Hook, InitializeRequest, InitializeResponse, RolloutPluginRequest, RolloutStateDetail,
    ValidateResponse, ValidationResult,
};

use crate::error::PluginError;
use crate::work::ManifestWork;

/// What a plugin answers to `Initialize`: its name, its version, the hooks
/// it implements and how much of the rollout state it wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginInfo {
    /// The plugin's name (by convention the name it is registered under).
    pub name: String,
    /// The plugin's version.
    pub version: String,
    /// The hooks it implements. Empty means all: the gateway then calls every
    /// hook, and the ones the plugin does not override answer neutrally.
    pub hooks: Vec<Hook>,
    /// How much rollout state its requests carry: `Full` (the default) sends
    /// every cluster's status in `rollout_status`; `Counts` leaves that list
    /// out and sends only `counts` (clusters per status). A plugin that reads
    /// only its own cluster, its position (`cluster_index` of
    /// `total_cluster_count`) or the counts should declare `Counts`: a request
    /// late in a rollout of 10,000 clusters is then a few hundred bytes
    /// instead of half a megabyte.
    pub state_detail: RolloutStateDetail,
}

impl PluginInfo {
    /// A plugin implementing every hook (until [`PluginInfo::hooks`] says
    /// otherwise).
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            hooks: Vec::new(),
            state_detail: RolloutStateDetail::Full,
        }
    }

    /// Declares the hooks the plugin implements. The gateway does not call
    /// the others at all, which saves a round trip per rollout step.
    pub fn hooks(mut self, hooks: impl IntoIterator<Item = Hook>) -> Self {
        self.hooks = hooks.into_iter().collect();
        self
    }

    /// Declares how much rollout state the plugin wants (see
    /// [`PluginInfo::state_detail`]); `Unspecified` means `Full`.
    pub fn state_detail(mut self, detail: RolloutStateDetail) -> Self {
        self.state_detail = match detail {
            RolloutStateDetail::Unspecified => RolloutStateDetail::Full,
            other => other,
        };
        self
    }

    /// Whether the plugin's requests carry `rollout_status`, every cluster's
    /// status (anything but a `Counts` declaration).
    pub fn wants_full_state(&self) -> bool {
        self.state_detail != RolloutStateDetail::Counts
    }

    /// Whether the plugin declares `hook` (an empty list declares all).
    pub fn implements(&self, hook: Hook) -> bool {
        self.hooks.is_empty() || self.hooks.contains(&hook)
    }
}

impl From<PluginInfo> for InitializeResponse {
    fn from(info: PluginInfo) -> Self {
        InitializeResponse {
            name: info.name,
            version: info.version,
            hooks: info.hooks.into_iter().map(i32::from).collect(),
            state_detail: info.state_detail.into(),
        }
    }
}

/// The answer of `ValidateRolloutCompletion` for one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validation {
    /// SUCCEEDED, FAILED or INPROGRESS.
    pub result: ValidationResult,
    /// Shown to users (the gateway joins the messages of a pipeline).
    pub message: String,
    /// When to ask again, for INPROGRESS (a hint to the controller).
    pub recheck_after: Option<Duration>,
}

impl Validation {
    /// The cluster passed: the rollout may go on.
    pub fn succeeded() -> Self {
        Self::new(ValidationResult::Succeeded, String::new())
    }

    /// The cluster failed: the controller treats it as a failed rollout
    /// (counted against `maxFailures`, may trigger the abort).
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(ValidationResult::Failed, message.into())
    }

    /// Not decided yet: the controller asks again later (see
    /// [`Validation::recheck_after`]).
    pub fn in_progress(message: impl Into<String>) -> Self {
        Self::new(ValidationResult::Inprogress, message.into())
    }

    /// Sets the message.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    /// Asks the controller to check again after `after`.
    pub fn recheck_after(mut self, after: Duration) -> Self {
        self.recheck_after = Some(after);
        self
    }

    fn new(result: ValidationResult, message: String) -> Self {
        Self {
            result,
            message,
            recheck_after: None,
        }
    }
}

impl From<Validation> for ValidateResponse {
    fn from(v: Validation) -> Self {
        ValidateResponse {
            result: v.result.into(),
            message: v.message,
            // Only a duration beyond i64 seconds fails to convert; no hint then.
            recheck_after: v
                .recheck_after
                .and_then(|d| prost_types::Duration::try_from(d).ok()),
        }
    }
}

/// The answer of `MutateManifestWork`.
#[derive(Debug, Clone, PartialEq)]
pub enum Mutation {
    /// Apply the work as it came (sent as an empty `manifest_work`).
    Unchanged,
    /// Apply this work instead. It must keep the input's `apiVersion`,
    /// `kind`, `metadata.name`, `metadata.namespace` and `spec.executor`
    /// (`rollout_proto::IDENTITY_FIELDS`); the SDK answers
    /// `INTERNAL` naming the field otherwise, as the gateway would.
    Changed(ManifestWork),
}

impl From<ManifestWork> for Mutation {
    fn from(work: ManifestWork) -> Self {
        Mutation::Changed(work)
    }
}

/// A rollout plugin: one async method per hook of `RolloutPluginService`.
///
/// Only [`RolloutPlugin::info`] is required. Every hook has a neutral default:
/// `initialize` answers [`RolloutPlugin::info`], `begin_rollout` and
/// `progress_rollout` succeed, `validate_rollout_completion` answers
/// SUCCEEDED and `mutate_manifest_work` answers [`Mutation::Unchanged`].
///
/// Implement the hooks with `async fn`; their futures must be `Send` (hold no
/// `std::sync::MutexGuard` or `Rc` across an `.await`). Every call is
/// idempotent from the controller's point of view: it may repeat a call after
/// a timeout or a retry, so a hook must give the same answer for the same
/// request, and must finish well within the caller's deadline (at most 30 s).
/// The plugin is shared by all calls (`&self`): keep mutable state behind a
/// lock or an atomic.
pub trait RolloutPlugin: Send + Sync + 'static {
    /// The plugin's name, version and the hooks it implements.
    fn info(&self) -> PluginInfo;

    /// `Initialize`: called when the controller or the gateway (re)connects.
    /// Answers [`RolloutPlugin::info`] unless overridden.
    fn initialize(
        &self,
        request: InitializeRequest,
    ) -> impl Future<Output = Result<PluginInfo, PluginError>> + Send {
        let _ = request;
        let info = self.info();
        async move { Ok(info) }
    }

    /// `BeginRollout`: the work is about to be applied to
    /// `request.cluster_name`.
    fn begin_rollout(
        &self,
        request: RolloutPluginRequest,
    ) -> impl Future<Output = Result<(), PluginError>> + Send {
        let _ = request;
        async { Ok(()) }
    }

    /// `ProgressRollout`: one reconcile of the placement, with the number of
    /// clusters in each status in `request.counts` and, unless the plugin
    /// declared [`RolloutStateDetail::Counts`], every cluster's status in
    /// `request.rollout_status`.
    fn progress_rollout(
        &self,
        request: RolloutPluginRequest,
    ) -> impl Future<Output = Result<(), PluginError>> + Send {
        let _ = request;
        async { Ok(()) }
    }

    /// `ValidateRolloutCompletion`: the work on `request.cluster_name`
    /// stopped progressing; is the cluster good?
    fn validate_rollout_completion(
        &self,
        request: RolloutPluginRequest,
    ) -> impl Future<Output = Result<Validation, PluginError>> + Send {
        let _ = request;
        async { Ok(Validation::succeeded()) }
    }

    /// `MutateManifestWork`: change the work about to be applied to
    /// `request.cluster_name` (while `request.aborting`, the rollback to the
    /// last good revision), or leave it.
    fn mutate_manifest_work(
        &self,
        request: RolloutPluginRequest,
        work: ManifestWork,
    ) -> impl Future<Output = Result<Mutation, PluginError>> + Send {
        let _ = (request, work);
        async { Ok(Mutation::Unchanged) }
    }
}

/// A shared plugin is a plugin: keep an `Arc` to inspect its state while it
/// serves.
impl<P: RolloutPlugin> RolloutPlugin for Arc<P> {
    fn info(&self) -> PluginInfo {
        P::info(self)
    }

    fn initialize(
        &self,
        request: InitializeRequest,
    ) -> impl Future<Output = Result<PluginInfo, PluginError>> + Send {
        P::initialize(self, request)
    }

    fn begin_rollout(
        &self,
        request: RolloutPluginRequest,
    ) -> impl Future<Output = Result<(), PluginError>> + Send {
        P::begin_rollout(self, request)
    }

    fn progress_rollout(
        &self,
        request: RolloutPluginRequest,
    ) -> impl Future<Output = Result<(), PluginError>> + Send {
        P::progress_rollout(self, request)
    }

    fn validate_rollout_completion(
        &self,
        request: RolloutPluginRequest,
    ) -> impl Future<Output = Result<Validation, PluginError>> + Send {
        P::validate_rollout_completion(self, request)
    }

    fn mutate_manifest_work(
        &self,
        request: RolloutPluginRequest,
        work: ManifestWork,
    ) -> impl Future<Output = Result<Mutation, PluginError>> + Send {
        P::mutate_manifest_work(self, request, work)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_declares_hooks() {
        let all = PluginInfo::new("p", "1");
        assert!(Hook::ALL.iter().all(|h| all.implements(*h)));
        let one = PluginInfo::new("p", "1").hooks([Hook::MutateManifestWork]);
        assert!(one.implements(Hook::MutateManifestWork));
        assert!(!one.implements(Hook::BeginRollout));
        let response = InitializeResponse::from(one);
        assert_eq!(response.hooks, [Hook::MutateManifestWork as i32]);
        assert_eq!(response.name, "p");
    }

    #[test]
    fn info_declares_the_state_it_wants() {
        // The default is today's behaviour: the full list, said explicitly.
        let full = PluginInfo::new("p", "1");
        assert!(full.wants_full_state());
        assert_eq!(
            InitializeResponse::from(full).state_detail(),
            RolloutStateDetail::Full
        );
        let counts = PluginInfo::new("p", "1").state_detail(RolloutStateDetail::Counts);
        assert!(!counts.wants_full_state());
        assert_eq!(
            InitializeResponse::from(counts).state_detail(),
            RolloutStateDetail::Counts
        );
        let unspecified = PluginInfo::new("p", "1").state_detail(RolloutStateDetail::Unspecified);
        assert_eq!(unspecified.state_detail, RolloutStateDetail::Full);
    }

    #[test]
    fn validation_converts_with_its_hint() {
        let r = ValidateResponse::from(
            Validation::in_progress("soaking").recheck_after(Duration::from_millis(1500)),
        );
        assert_eq!(r.result(), ValidationResult::Inprogress);
        assert_eq!(r.message, "soaking");
        let d = r.recheck_after.unwrap();
        assert_eq!((d.seconds, d.nanos), (1, 500_000_000));
        let r = ValidateResponse::from(Validation::failed("boom"));
        assert_eq!(r.result(), ValidationResult::Failed);
        assert!(r.recheck_after.is_none());
        let r = ValidateResponse::from(Validation::succeeded().with_message("ok"));
        assert_eq!(
            (r.result(), r.message.as_str()),
            (ValidationResult::Succeeded, "ok")
        );
    }
}
