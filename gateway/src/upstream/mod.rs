//! One plugin as the gateway reaches it: an HTTP/2 connection (plaintext, or
//! TLS trusting the plugin's own CA bundle alone), shared with the other
//! plugins of the same endpoint and TLS settings, and what the gateway has
//! learned of the hooks it implements. Calls are framed by [`crate::transport::grpc`]
//! and queued on an `h2` stream whole, so a request leaves in one write.
//!
//! An [`Upstream`] outlives registry reloads for as long as its
//! [`UpstreamKey`] (endpoint and TLS settings) does not change, so the
//! connection, and the knowledge gathered on it, is kept.

use rollout_policies::lock;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use http::HeaderMap;
use rollout_proto::declaration::Decision;
use rollout_proto::v1alpha1::{
    Hook, InitializeResponse, MutateManifestWorkResponse, RolloutStateDetail,
};
use rollout_proto::verdict;
use rustls_pki_types::ServerName;
use tokio::time::Instant;
use tonic::{Code, Status};

use rollout_policies::breaker::{Breaker, BreakerState};
use rollout_policies::budget::RetryBudget;
use rollout_policies::layer::ConcurrencyLimitLayer;
use rollout_policies::{BudgetPolicy, Policy};

use crate::error::{CALLER_HEADROOM_BYTES, CallError, DeadlineOwner};
use crate::hub::Hub;
use crate::transport::client::PluginConnection;
use crate::transport::grpc::{self, Payload};
use crate::transport::pending::CallBytes;

use crate::hooks::{HookKind, HookRequest, HookResponse};

mod channel;
mod exchange;
mod hubs;
mod key;
mod learned;
mod tls_configs;
pub(crate) use channel::Channel;
pub(crate) use hubs::HubPlace;
use hubs::Hubs;
pub(crate) use key::{CaBundle, ClientIdentity, UpstreamKey};
use learned::Learned;
pub(crate) use learned::Load;
use tls_configs::TlsConfigs;

/// Settings shared by every upstream connection.
#[derive(Debug, Clone)]
pub struct ChannelSettings {
    /// Largest message sent to or accepted from a plugin.
    pub(crate) max_message_bytes: usize,
    pub(crate) connect_timeout: Duration,
    /// The TLS client configurations made so far, shared by every upstream
    /// of the same material.
    pub(crate) tls_configs: Arc<TlsConfigs>,
}

impl Default for ChannelSettings {
    fn default() -> Self {
        ChannelSettings {
            max_message_bytes: 16 * 1024 * 1024,
            connect_timeout: Duration::from_secs(5),
            tls_configs: Arc::default(),
        }
    }
}

/// A plugin as the gateway reaches it: its [`Channel`] (shared with the
/// other upstreams of the same key), and the state kept per plugin.
pub struct Upstream {
    key: UpstreamKey,
    settings: ChannelSettings,
    /// The URI of each method, built once: `SCHEME://HOST:PORT/SERVICE/METHOD`.
    uris: MethodUris,
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    /// The connection, shared with every upstream of the same key.
    channel: Arc<Channel>,
    /// What its Initialize answers said, per hub.
    learned: Learned,
    /// Central mode: each other hub's breaker and share of the bound.
    hubs: Hubs,
    /// Held while a call loads the plugin (its Initialize before a hook), so
    /// concurrent calls share one Initialize.
    loading: Arc<tokio::sync::Mutex<()>>,
    /// The concurrency bound, circuit breaker and retry budget of the plugin:
    /// they live as long as its connection settings do, across reloads.
    limit: ConcurrencyLimitLayer,
    breaker: Arc<Mutex<Breaker>>,
    budget: Arc<Mutex<RetryBudget>>,
    budget_policy: Mutex<BudgetPolicy>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("endpoint", &self.key.endpoint.to_string())
            .finish_non_exhaustive()
    }
}

/// A circuit breaker's state at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Circuit {
    pub(crate) state: BreakerState,
    /// The failures in a row so far.
    pub(crate) consecutive_failures: u32,
}

/// The settings an upstream keeps across reloads, for tests: its
/// concurrency bound, and its breaker's and budget's policies.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KeptSettings {
    pub(crate) max_concurrent_calls: usize,
    pub(crate) breaker: rollout_policies::BreakerPolicy,
    pub(crate) budget: BudgetPolicy,
}

/// An upstream could not be set up (bad TLS material).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UpstreamError(String);

impl Upstream {
    /// Prepares the upstream over `channel`, which the caller shares only
    /// between upstreams of the same `key`; nothing is dialled until the
    /// first call.
    /// `home_hub` is the hub of the registry file defining the plugin
    /// (`None`: shared): other hubs' calls meet breakers of their own.
    pub(crate) fn sharing(
        key: UpstreamKey,
        settings: &ChannelSettings,
        policy: &Policy,
        channel: Arc<Channel>,
        home_hub: Option<&Hub>,
    ) -> Result<Upstream, UpstreamError> {
        let tls = match &key.ca_bundle {
            None => None,
            Some(ca_bundle) => {
                let config = settings
                    .tls_configs
                    .get(ca_bundle, key.client_identity.as_ref())
                    .map_err(|e| {
                        UpstreamError(format!("TLS settings for {}: {e}", key.endpoint))
                    })?;
                let name = ServerName::try_from(key.endpoint.host.clone()).map_err(|e| {
                    UpstreamError(format!(
                        "{} is not a valid TLS server name: {e}",
                        key.endpoint.host
                    ))
                })?;
                Some((config, name))
            }
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let uris = MethodUris::new(&format!("{scheme}://{}", key.endpoint))
            .map_err(|e| UpstreamError(format!("invalid endpoint {}: {e}", key.endpoint)))?;
        Ok(Upstream {
            uris,
            key,
            settings: settings.clone(),
            tls,
            channel,
            learned: Learned::default(),
            hubs: Hubs::new(home_hub.cloned()),
            loading: Arc::default(),
            limit: ConcurrencyLimitLayer::new(policy.max_concurrent_calls),
            breaker: Arc::new(Mutex::new(Breaker::new(&policy.circuit_breaker))),
            budget: Arc::new(Mutex::new(RetryBudget::new(&policy.retry_budget, now()))),
            budget_policy: Mutex::new(policy.retry_budget.clone()),
        })
    }

    /// Applies the policy of a new registry snapshot to the state this
    /// upstream keeps: the concurrency bound is resized and keeps counting
    /// the calls in flight; the breaker keeps its state under new thresholds;
    /// the budget starts over only if its own settings changed. Called only
    /// once the snapshot is committed.
    pub(crate) fn update_policy(&self, policy: &Policy) {
        self.limit.set_max(policy.max_concurrent_calls);
        lock(&self.breaker).set_policy(&policy.circuit_breaker);
        self.hubs.set_breaker_policy(&policy.circuit_breaker);
        let mut current = lock(&self.budget_policy);
        if *current != policy.retry_budget {
            *lock(&self.budget) = RetryBudget::new(&policy.retry_budget, now());
            *current = policy.retry_budget.clone();
        }
    }

    /// The plugin's concurrency bound (shared with its stack).
    pub(crate) fn limit(&self) -> ConcurrencyLimitLayer {
        self.limit.clone()
    }

    /// The settings of the state kept across reloads, for tests.
    #[cfg(test)]
    pub(crate) fn kept_settings(&self) -> KeptSettings {
        KeptSettings {
            max_concurrent_calls: self.limit.max(),
            breaker: lock(&self.breaker).policy().clone(),
            budget: lock(&self.budget_policy).clone(),
        }
    }

    /// The plugin's circuit breaker (shared with its stack).
    pub(crate) fn breaker(&self) -> Arc<Mutex<Breaker>> {
        self.breaker.clone()
    }

    /// The plugin's retry budget (shared with its stack).
    pub(crate) fn retry_budget(&self) -> Arc<Mutex<RetryBudget>> {
        self.budget.clone()
    }

    /// The connection this upstream calls over, to share with a new
    /// upstream of the same key.
    pub(crate) fn channel(&self) -> &Arc<Channel> {
        &self.channel
    }

    /// The breaker the calls of `hub` meet: the plugin's own for its own
    /// hub and callers without one, else that hub's (central mode: one
    /// hub's failures never open another hub's circuit).
    pub(crate) fn breaker_for(&self, hub: &str) -> Arc<Mutex<Breaker>> {
        let policy = lock(&self.breaker).policy().clone();
        self.hubs
            .breaker(hub, &policy)
            .unwrap_or_else(|| self.breaker.clone())
    }

    /// Each other hub's circuit now, for `/debug/plugins`.
    pub(crate) fn circuits_by_hub(&self) -> Vec<(Hub, BreakerState)> {
        self.hubs.circuits(now())
    }

    /// Sets the registered hubs that may call the plugin: each other than
    /// its own, and every other caller together, may hold at most a share
    /// of the concurrency bound (`hubs`' module doc).
    pub(crate) fn set_callers(&self, hubs: &[Hub]) {
        self.hubs.set_callers(hubs);
    }

    /// A place in `hub`'s share of the concurrency bound, held for the
    /// whole call (`None` when the hub is not kept apart); refused with
    /// [`CallError::Overloaded`] when the hub's share is taken, whatever
    /// other hubs hold.
    pub(crate) fn hub_place(&self, hub: Option<&Hub>) -> Result<Option<HubPlace>, CallError> {
        self.hubs
            .place(hub, self.limit.max())
            .map_err(|share| CallError::Overloaded { max: share })
    }

    /// The plugin's own circuit now.
    pub(crate) fn circuit(&self) -> Circuit {
        let breaker = lock(&self.breaker);
        Circuit {
            state: breaker.state(now()),
            consecutive_failures: breaker.consecutive_failures(),
        }
    }

    pub(crate) fn key(&self) -> &UpstreamKey {
        &self.key
    }

    /// What to do with a call of `kind` from `hub` (`None`: a caller without
    /// a hub): the shared rule of [`rollout_proto::declaration`] over what
    /// this hub's Initialize answers said.
    pub(crate) fn decide(&self, hub: Option<&Hub>, kind: HookKind) -> Decision {
        self.learned.decide(hub, kind)
    }

    /// What is known of the plugin for `hub`: loaded with its declaration,
    /// or not loaded and why.
    pub(crate) fn load_state(&self, hub: Option<&Hub>) -> Load {
        self.learned.load(hub)
    }

    /// Every hub's [`Load`] seen so far ("" = no hub), for `/debug/plugins`.
    pub(crate) fn load_states(&self) -> Vec<(String, Load)> {
        self.learned.all()
    }

    /// The rollout state the plugin wants from `hub`'s calls: `Counts` once
    /// its latest `InitializeResponse` for that hub declared it; `Full`
    /// otherwise.
    pub(crate) fn state_detail(&self, hub: Option<&Hub>) -> RolloutStateDetail {
        if self.learned.counts_only(hub) {
            RolloutStateDetail::Counts
        } else {
            RolloutStateDetail::Full
        }
    }

    /// The hooks `hub`'s calls may reach, by name; `None` when the plugin is
    /// not loaded for it.
    pub(crate) fn known_hooks(&self, hub: Option<&Hub>) -> Option<Vec<&'static str>> {
        match self.learned.load(hub) {
            Load::Loaded { declaration, .. } => {
                Some(declaration.hooks().into_iter().map(Hook::name).collect())
            }
            Load::NotLoaded { .. } => None,
        }
    }

    /// Holds the plugin's loading lock now, if no one does, for an
    /// Initialize about to be sent: calls that need the plugin meanwhile
    /// wait for its answer instead of sending their own.
    pub(crate) fn hold_loading(&self) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        self.loading.clone().try_lock_owned().ok()
    }

    /// Loads the plugin for `hub` unless it is loaded: one Initialize at a
    /// time per plugin, sent through `initialize` (the plugin's stack), by
    /// `deadline`. Calls that waited for another's Initialize use its result.
    pub(crate) async fn ensure_loaded<F, Fut>(
        &self,
        hub: Option<&Hub>,
        deadline: Instant,
        owner: DeadlineOwner,
        initialize: F,
    ) -> Result<(), CallError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<HookResponse, CallError>>,
    {
        let Ok(_loading) = tokio::time::timeout_at(deadline, self.loading.lock()).await else {
            return Err(CallError::Expired {
                owner,
                message: "waiting for the plugin's Initialize".into(),
            });
        };
        if matches!(self.learned.load(hub), Load::Loaded { .. }) {
            return Ok(());
        }
        initialize().await.map(drop)
    }

    /// One call to the plugin, bounded by `deadline` (whose deadline it is:
    /// `owner`), whose remaining time is sent on as the plugin's
    /// `grpc-timeout`. `forward` holds the caller's headers to pass on (trace
    /// context); `hub` is the calling hub, whose declaration an Initialize
    /// answer records.
    ///
    /// Errors: the plugin's own status ([`CallError::Plugin`]);
    /// [`CallError::Expired`] when the deadline passes first or the plugin
    /// says it did; [`CallError::DeadlineBeforeCall`];
    /// [`CallError::Unreachable`] when the plugin cannot be reached (the
    /// message says why: connection refused, TLS certificate verification…);
    /// [`CallError::Undecodable`] / [`CallError::TooLarge`] for an answer the
    /// gateway cannot take.
    pub async fn call(
        &self,
        request: HookRequest,
        deadline: Instant,
        owner: DeadlineOwner,
        forward: &HeaderMap,
        hub: Option<&Hub>,
    ) -> Result<HookResponse, CallError> {
        self.call_held(request, deadline, owner, forward, hub, None)
            .await
    }

    /// [`Upstream::call`] for a caller's call: the plugin's answer is held
    /// in `held`, the bytes the call holds, while it lives;
    /// [`CallError::PendingBytes`] when they have no room for it.
    pub(crate) async fn call_held(
        &self,
        request: HookRequest,
        deadline: Instant,
        owner: DeadlineOwner,
        forward: &HeaderMap,
        hub: Option<&Hub>,
        held: Option<&CallBytes>,
    ) -> Result<HookResponse, CallError> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(CallError::DeadlineBeforeCall);
        }
        let expired = || CallError::Expired {
            owner,
            message: format!("no answer within {} ms", remaining.as_millis()),
        };
        let kind = request.kind();
        let is_initialize = kind == HookKind::Initialize;
        let request_bytes = request.message_len();
        let call = async {
            let detail = self.state_detail(hub);
            // Made again for each stream sent: a stream the plugin never
            // processed is sent again on a new connection.
            let payload = &|| request.payload_for(detail);
            match kind {
                HookKind::Initialize => self
                    .unary::<InitializeResponse>(kind, payload, deadline, forward, held)
                    .await
                    .map(HookResponse::Initialize),
                HookKind::BeginRollout | HookKind::ProgressRollout => self
                    .unary::<()>(kind, payload, deadline, forward, held)
                    .await
                    .map(|()| HookResponse::Empty),
                HookKind::ValidateRolloutCompletion => {
                    let message = self
                        .unary_raw(kind, payload, deadline, forward, held)
                        .await?;
                    verdict::read_validate(message)
                        .map(HookResponse::ValidateRolloutCompletion)
                        .map_err(|e| undecodable(e.to_string()))
                }
                HookKind::MutateManifestWork => self
                    .unary::<MutateManifestWorkResponse>(kind, payload, deadline, forward, held)
                    .await
                    .map(HookResponse::MutateManifestWork),
            }
        };
        let result = match tokio::time::timeout_at(deadline, call).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(Failed::Call(error))) => Err(error),
            // A plugin server that gave up on the forwarded `grpc-timeout`
            // answers DEADLINE_EXCEEDED (or CANCELLED, as tonic's does): that
            // is the deadline passing, whoever's it was.
            Ok(Err(Failed::Plugin(status)))
                if matches!(status.code(), Code::DeadlineExceeded | Code::Cancelled) =>
            {
                Err(CallError::Expired {
                    owner,
                    message: status.message().to_string(),
                })
            }
            Ok(Err(Failed::Plugin(status))) => Err(CallError::Plugin(status)),
            Err(_) => Err(expired()),
        };
        match result {
            Ok(HookResponse::Initialize(init)) => self.loaded(hub, init),
            Err(CallError::TooLarge(over))
                if request_bytes + CALLER_HEADROOM_BYTES > self.settings.max_message_bytes =>
            {
                Err(CallError::CallerTooLarge(over))
            }
            // The caller's calls holding too much says nothing of the plugin.
            Err(error) if is_initialize && !matches!(error, CallError::PendingBytes(_)) => {
                Err(self.not_loaded(hub, error))
            }
            other => other,
        }
    }

    /// An OK Initialize answer from `hub`'s Initialize: the plugin is loaded
    /// for that hub, unless its declaration is invalid.
    fn loaded(
        &self,
        hub: Option<&Hub>,
        init: InitializeResponse,
    ) -> Result<HookResponse, CallError> {
        match self.learned.learn(hub, &init) {
            Ok(_) => Ok(HookResponse::Initialize(init)),
            Err(e) => Err(CallError::NotAPlugin(format!(
                "its InitializeResponse is not a valid declaration: {e}"
            ))),
        }
    }

    /// A failed Initialize from `hub`: the plugin is not loaded. UNIMPLEMENTED
    /// means the server is not a rollout plugin (a wrong endpoint): the
    /// plugin's failure, never a skip.
    fn not_loaded(&self, hub: Option<&Hub>, error: CallError) -> CallError {
        let error = if error.is_unimplemented() {
            CallError::NotAPlugin(format!(
                "its Initialize answered UNIMPLEMENTED: {} does not serve {} (is the registry entry's endpoint right?)",
                self.key.endpoint,
                rollout_proto::SERVICE_NAME
            ))
        } else {
            error
        };
        let refused = matches!(error, CallError::NotAPlugin(_) | CallError::Undecodable(_));
        self.learned.failed(hub, &error.to_string(), refused);
        error
    }

    async fn unary<Resp: prost::Message + Default>(
        &self,
        method: HookKind,
        payload: &(dyn Fn() -> Payload + Sync),
        deadline: Instant,
        forward: &HeaderMap,
        held: Option<&CallBytes>,
    ) -> Result<Resp, Failed> {
        let message = self
            .unary_raw(method, payload, deadline, forward, held)
            .await?;
        grpc::decode_message(message).map_err(|e| undecodable(e.to_string()))
    }

    /// The shared connection, dialled (once, for all waiting calls) if there
    /// is none, it has closed, or it is going away.
    async fn connection(&self, deadline: Instant) -> Result<Arc<PluginConnection>, Failed> {
        self.channel
            .connection(
                &self.key.endpoint,
                self.tls.as_ref(),
                deadline,
                self.settings.connect_timeout,
            )
            .await
            .map_err(|e| match e {
                // The deadline passing is the call's own timer's (see
                // `call`), whose owner it knows.
                channel::NoConnection::Deadline => Failed::Call(CallError::Expired {
                    owner: DeadlineOwner::Caller,
                    message: "no connection".into(),
                }),
                channel::NoConnection::Unreachable(cause) => {
                    Failed::Call(CallError::Unreachable(cause))
                }
            })
    }
}

/// The URI of each method of one plugin, built once.
#[derive(Debug)]
struct MethodUris([http::Uri; 5]);

impl MethodUris {
    fn new(base: &str) -> Result<MethodUris, http::uri::InvalidUri> {
        let uri = |kind: HookKind| {
            format!("{base}/{}/{}", rollout_proto::SERVICE_NAME, kind.as_str()).parse()
        };
        Ok(MethodUris([
            uri(HookKind::Initialize)?,
            uri(HookKind::BeginRollout)?,
            uri(HookKind::ProgressRollout)?,
            uri(HookKind::ValidateRolloutCompletion)?,
            uri(HookKind::MutateManifestWork)?,
        ]))
    }

    fn get(&self, kind: HookKind) -> http::Uri {
        self.0[kind as usize].clone()
    }
}

/// The clock the policy layers use (tokio's, so paused-clock tests drive it).
fn now() -> std::time::Instant {
    Instant::now().into_std()
}

const USER_AGENT: &str = concat!("rollout-gateway/", env!("CARGO_PKG_VERSION"));

/// How [`Upstream::unary`] failed: the plugin's own non-OK status (which
/// [`Upstream::call`] reads in the light of the deadline), or anything else.
enum Failed {
    Plugin(Status),
    Call(CallError),
}

fn undecodable(why: String) -> Failed {
    Failed::Call(CallError::Undecodable(why))
}
