//! PluginLoaded: whether each plugin a strategy names answers `Initialize`
//! through the gateway, cached per plugin for a while so a reconcile does
//! not call it every time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use rollout_proto::v1alpha1::{InitializeRequest, InitializeResponse};
use tokio::time::Instant;

use crate::api::conditions::plugin_failed_message;
use crate::hooks::{Call, HookCalls, HookError, Hooks};

/// How long an answer of `Initialize` is reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PluginCacheTtl {
    /// After a success.
    pub(crate) available: Duration,
    /// After a failure (the plugin is asked again this soon).
    pub(crate) failed: Duration,
}

impl Default for PluginCacheTtl {
    fn default() -> Self {
        PluginCacheTtl {
            available: Duration::from_secs(300),
            failed: Duration::from_secs(10),
        }
    }
}

/// The PluginLoaded False message for `plugin`'s failed `Initialize`.
pub(crate) fn failure_message(plugin: &str, error: &HookError) -> String {
    plugin_failed_message(plugin, &error.load_failure_detail())
}

struct Entry {
    at: Instant,
    result: Result<InitializeResponse, HookError>,
}

/// The last `Initialize` answer of each plugin.
pub(crate) struct PluginCache {
    ttl: PluginCacheTtl,
    entries: Mutex<HashMap<String, Entry>>,
}

impl std::fmt::Debug for PluginCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginCache")
            .field("ttl", &self.ttl)
            .finish()
    }
}

impl PluginCache {
    /// An empty cache.
    pub(crate) fn new(ttl: PluginCacheTtl) -> PluginCache {
        PluginCache {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// How soon a failed plugin is asked again.
    pub(crate) fn retry_after(&self) -> Duration {
        self.ttl.failed
    }

    /// Whether `plugin` is loaded: the cached answer while fresh, else a new
    /// `Initialize` (with `request`) through `hooks`.
    pub(crate) async fn check<H: Hooks>(
        &self,
        hooks: &H,
        call: Call<'_>,
        request: InitializeRequest,
    ) -> Result<InitializeResponse, HookError> {
        let now = Instant::now();
        if let Some(cached) = self.cached(call.plugin, now) {
            return cached;
        }
        let result = hooks.initialize(call, request).await;
        if let Err(error) = &result {
            tracing::warn!(plugin = call.plugin, %error, "rollout plugin is not available");
        }
        if let Ok(mut entries) = self.entries.lock() {
            entries.insert(
                call.plugin.to_owned(),
                Entry {
                    at: Instant::now(),
                    result: result.clone(),
                },
            );
        }
        result
    }

    fn cached(&self, plugin: &str, now: Instant) -> Option<Result<InitializeResponse, HookError>> {
        let entries = self.entries.lock().ok()?;
        let entry = entries.get(plugin)?;
        let ttl = if entry.result.is_ok() {
            self.ttl.available
        } else {
            self.ttl.failed
        };
        (now.duration_since(entry.at) < ttl).then(|| entry.result.clone())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::hooks::{HookKind, PerHook};

    /// Counts Initialize calls; fails them while `down`.
    #[derive(Default)]
    struct Counting {
        calls: AtomicUsize,
        down: std::sync::atomic::AtomicBool,
    }

    impl PerHook for Counting {
        async fn initialize(&self, _: InitializeRequest) -> Result<InitializeResponse, HookError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                return Err(HookError {
                    hook: HookKind::Initialize,
                    code: tonic::Code::Unavailable,
                    message: String::new(),
                    origin: crate::hooks::Origin::Answer,
                });
            }
            Ok(InitializeResponse::default())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn answers_are_cached_per_plugin_for_their_ttl() {
        let hooks = Counting::default();
        let cache = PluginCache::new(PluginCacheTtl {
            available: Duration::from_secs(60),
            failed: Duration::from_secs(5),
        });
        let trace = opentelemetry::Context::new();
        let call = |plugin| Call {
            plugin,
            trace: &trace,
        };
        let check = |plugin| cache.check(&hooks, call(plugin), InitializeRequest::default());
        assert!(check("a").await.is_ok());
        assert!(check("a").await.is_ok());
        assert_eq!(hooks.calls.load(Ordering::SeqCst), 1, "cached");
        assert!(check("b").await.is_ok());
        assert_eq!(hooks.calls.load(Ordering::SeqCst), 2, "per plugin");

        // A failure is remembered for the shorter TTL.
        hooks.down.store(true, Ordering::SeqCst);
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(check("a").await.is_err());
        assert!(check("a").await.is_err());
        assert_eq!(hooks.calls.load(Ordering::SeqCst), 3);
        hooks.down.store(false, Ordering::SeqCst);
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(
            check("a").await.is_ok(),
            "asked again after the failure TTL"
        );
        assert_eq!(cache.retry_after(), Duration::from_secs(5));
    }

    #[test]
    fn failure_messages_follow_the_design() {
        let unavailable = |message: &str| HookError {
            hook: HookKind::Initialize,
            code: tonic::Code::Unavailable,
            message: message.into(),
            origin: crate::hooks::Origin::Answer,
        };
        assert_eq!(
            failure_message("my-rollout", &unavailable("")),
            "my-rollout plugin: Initialize fails with unavailable plugin server endpoint."
        );
        assert_eq!(
            failure_message(
                "my-rollout",
                &unavailable("plugin \"my-rollout\": connection refused")
            ),
            "my-rollout plugin: Initialize fails with unavailable plugin server endpoint \
             (plugin \"my-rollout\": connection refused)."
        );
        let not_found = HookError {
            hook: HookKind::Initialize,
            code: tonic::Code::NotFound,
            message: "plugin \"x\" is not registered".into(),
            origin: crate::hooks::Origin::Answer,
        };
        assert_eq!(
            failure_message("x", &not_found),
            "x plugin: Initialize fails with NOT_FOUND: plugin \"x\" is not registered."
        );
    }
}
