//! Registry sources read from ConfigMaps through the Kubernetes API
//! (`--configmap NAMESPACE/NAME`), for a central gateway that reads each
//! hub's registry without mounting it.
//!
//! One task per ConfigMap runs a kube-rs watcher restricted to that one
//! object (a `metadata.name` field selector) and hands the text of its
//! `config.yaml` key to the [`Registry`], like [`crate::watch`] does for
//! files: a valid change stores a new snapshot, an invalid one, a missing key,
//! a deleted ConfigMap or an unreachable API keeps the previous snapshot and
//! is recorded as the registry's last error. The task never ends on its own:
//! after an error it waits (kube's default backoff) and starts over with a
//! fresh list, whose answer both picks up whatever changed meanwhile and
//! clears the recorded error.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff, Event};
use kube::{Api, Client};

use crate::config::check_dns_subdomain;
use crate::registry::{Applied, Registry};

/// The ConfigMap key that holds the registry.
pub(crate) const KEY: &str = "config.yaml";

/// The longest wait between two attempts, should the backoff ever run dry.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// A ConfigMap named on the command line as `NAMESPACE/NAME`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConfigMapRef {
    pub(crate) namespace: String,
    pub(crate) name: String,
}

impl ConfigMapRef {
    /// The label of the registry source this ConfigMap feeds
    /// (`configmap NAMESPACE/NAME`), used in errors and listings.
    pub fn source_label(&self) -> String {
        format!("configmap {self}")
    }
}

impl fmt::Display for ConfigMapRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Why a `--configmap` value is not a `NAMESPACE/NAME`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigMapRefError {
    #[error("\"{0}\" is not NAMESPACE/NAME")]
    Shape(String),
    #[error("\"{value}\": namespace \"{namespace}\" {why}")]
    Namespace {
        value: String,
        namespace: String,
        why: &'static str,
    },
    #[error("\"{value}\": name \"{name}\" {why}")]
    Name {
        value: String,
        name: String,
        why: &'static str,
    },
}

impl FromStr for ConfigMapRef {
    type Err = ConfigMapRefError;

    /// Parses `NAMESPACE/NAME`: exactly one `/`, a namespace that is a
    /// DNS-1123 label and a name that is a DNS-1123 subdomain.
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let Some((namespace, name)) = value.split_once('/') else {
            return Err(ConfigMapRefError::Shape(value.to_string()));
        };
        if namespace.is_empty() || name.is_empty() || name.contains('/') {
            return Err(ConfigMapRefError::Shape(value.to_string()));
        }
        if let Err(why) = check_dns_label(namespace) {
            return Err(ConfigMapRefError::Namespace {
                value: value.to_string(),
                namespace: namespace.to_string(),
                why,
            });
        }
        if let Err(why) = check_dns_subdomain(name) {
            return Err(ConfigMapRefError::Name {
                value: value.to_string(),
                name: name.to_string(),
                why,
            });
        }
        Ok(ConfigMapRef {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }
}

/// A namespace is a DNS-1123 label: a subdomain without dots, at most 63
/// characters.
fn check_dns_label(name: &str) -> Result<(), &'static str> {
    check_dns_subdomain(name)?;
    if name.contains('.') {
        return Err("may not contain '.'");
    }
    if name.len() > 63 {
        return Err("is longer than 63 characters");
    }
    Ok(())
}

/// Watches `cm` and feeds its `config.yaml` to `registry` as the source
/// named [`ConfigMapRef::source_label`], until the returned task is aborted.
///
/// Each change of the ConfigMap is applied with [`Registry::apply`];
/// `on_loaded` runs after every new snapshot. A missing key, a deleted or
/// absent ConfigMap and API errors (unreachable server, missing RBAC) keep
/// the previous snapshot and are recorded with [`Registry::source_failed`],
/// once for as long as the same failure repeats. The watch then starts over
/// after kube's default backoff (0.8 s doubling to 30 s); the task never
/// panics and never ends by itself.
pub fn spawn(
    client: Client,
    registry: Arc<Registry>,
    cm: ConfigMapRef,
    on_loaded: impl Fn() + Send + Sync + 'static,
) -> tokio::task::JoinHandle<()> {
    let api: Api<ConfigMap> = Api::namespaced(client, &cm.namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", cm.name));
    let mut feed = Feed::new(registry, cm);
    tokio::spawn(async move {
        // The backoff sits outside the watcher rather than on its stream
        // (`WatchStreamExt::default_backoff`): the stream variant resets on
        // every `Ok` item, and the watcher yields `Ok(Init)` before each list
        // attempt, so failing lists would never back off beyond the first step.
        let mut backoff = DefaultBackoff::default();
        loop {
            let mut events = std::pin::pin!(watcher::watcher(api.clone(), config.clone()));
            while let Some(event) = events.next().await {
                match event {
                    Ok(event) => {
                        if !matches!(event, Event::Init) {
                            // The API answered.
                            backoff.reset();
                        }
                        if feed.event(event).await {
                            on_loaded();
                        }
                    }
                    Err(error) => {
                        feed.watch_failed(&error);
                        // Start over with a fresh list: it clears the error
                        // once the API answers again.
                        break;
                    }
                }
            }
            tokio::time::sleep(backoff.next().unwrap_or(MAX_BACKOFF)).await;
        }
    })
}

/// What one watch makes of the watcher's events: the I/O-free part of
/// [`spawn`].
struct Feed {
    registry: Arc<Registry>,
    /// The name of the source it feeds.
    source: String,
    cm: ConfigMapRef,
    /// Whether the ConfigMap was listed since the last `Init`.
    listed: bool,
    /// Whether the ConfigMap was ever seen ("deleted" rather than "not found").
    existed: bool,
    /// The failure last recorded, so that a repeating one is recorded once.
    last_failure: Option<String>,
}

impl Feed {
    fn new(registry: Arc<Registry>, cm: ConfigMapRef) -> Feed {
        Feed {
            registry,
            source: cm.source_label(),
            cm,
            listed: false,
            existed: false,
            last_failure: None,
        }
    }

    /// Handles one watcher event. Returns whether a new snapshot was loaded.
    async fn event(&mut self, event: Event<ConfigMap>) -> bool {
        match event {
            Event::Init => {
                self.listed = false;
                false
            }
            Event::InitApply(object) | Event::Apply(object) => {
                // The field selector lets only this ConfigMap through; check anyway.
                if object.metadata.name.as_deref() != Some(self.cm.name.as_str()) {
                    return false;
                }
                self.listed = true;
                self.existed = true;
                self.applied(&object).await
            }
            Event::Delete(object) => {
                if object.metadata.name.as_deref() == Some(self.cm.name.as_str()) {
                    self.fail("was deleted".to_string());
                }
                false
            }
            Event::InitDone => {
                // A list without the ConfigMap: it is gone, or never was.
                if !self.listed {
                    let message = if self.existed {
                        "was deleted"
                    } else {
                        "not found"
                    };
                    self.fail(message.to_string());
                }
                false
            }
        }
    }

    /// Applies the `config.yaml` of a listed or changed ConfigMap (parsed and
    /// planned on the blocking pool).
    async fn applied(&mut self, object: &ConfigMap) -> bool {
        let Some(text) = object.data.as_ref().and_then(|data| data.get(KEY)) else {
            self.fail(format!("has no key {KEY}"));
            return false;
        };
        // The registry's own outcome replaces whatever was recorded before.
        self.last_failure = None;
        match self
            .registry
            .apply_blocking(&self.source, text.clone())
            .await
        {
            Ok(Applied::Loaded(generation)) => {
                tracing::info!(configmap = %self.cm, generation, "registry loaded");
                true
            }
            Ok(Applied::Unchanged) => false,
            Ok(Applied::Blank) => {
                tracing::warn!(configmap = %self.cm, key = KEY, "registry is empty; keeping the loaded registry");
                false
            }
            Err(error) => {
                tracing::error!(configmap = %self.cm, %error, "registry reload rejected; keeping the loaded registry");
                false
            }
        }
    }

    /// Records a watcher error, unless it is the routine expiry of a watch
    /// (the watcher lists again and nothing was missed).
    fn watch_failed(&mut self, error: &watcher::Error) {
        if is_expired(error) {
            tracing::debug!(configmap = %self.cm, %error, "watch expired; listing again");
            return;
        }
        self.fail(format!("cannot watch: {}", describe(error)));
    }

    /// Records `message` against the source, once while it repeats; the
    /// registry keeps its snapshot.
    fn fail(&mut self, message: String) {
        if self.last_failure.as_deref() == Some(message.as_str()) {
            tracing::debug!(configmap = %self.cm, error = %message, "configmap still failing");
            return;
        }
        tracing::warn!(configmap = %self.cm, error = %message, "configmap not applied; keeping the loaded registry");
        self.registry.source_failed(&self.source, message.clone());
        self.last_failure = Some(message);
    }
}

/// A watcher error in words fit for `/debug/plugins`: an API status as its
/// message, code and reason, not kube's debug dump of it.
fn describe(error: &watcher::Error) -> String {
    let client = |error: &kube::Error| match error {
        kube::Error::Api(status) => describe_status(status),
        other => other.to_string(),
    };
    match error {
        watcher::Error::InitialListFailed(e) => format!("list failed: {}", client(e)),
        watcher::Error::WatchStartFailed(e) => format!("watch failed to start: {}", client(e)),
        watcher::Error::WatchFailed(e) => format!("watch failed: {}", client(e)),
        watcher::Error::WatchError(status) => format!("watch failed: {}", describe_status(status)),
        watcher::Error::NoResourceVersion => error.to_string(),
    }
}

fn describe_status(status: &kube::core::Status) -> String {
    format!("{} ({} {})", status.message, status.code, status.reason)
}

/// HTTP 410 Gone: the resource version the watch resumed from is too old.
fn is_expired(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::core::Status;

    use super::*;
    use crate::registry::{ReloadCounts, SourceInfo};
    use crate::upstream::ChannelSettings;

    #[test]
    fn parses_namespace_slash_name() {
        let cm: ConfigMapRef = "hub-a/work-controller-config".parse().unwrap();
        assert_eq!(cm.namespace, "hub-a");
        assert_eq!(cm.name, "work-controller-config");
        assert_eq!(cm.to_string(), "hub-a/work-controller-config");
        assert_eq!(cm.source_label(), "configmap hub-a/work-controller-config");
        assert!("ns/a.b-c".parse::<ConfigMapRef>().is_ok());
    }

    #[test]
    fn rejects_bad_values_naming_them() {
        for (value, expected) in [
            ("config", "\"config\" is not NAMESPACE/NAME"),
            ("/name", "\"/name\" is not NAMESPACE/NAME"),
            ("ns/", "\"ns/\" is not NAMESPACE/NAME"),
            ("a/b/c", "\"a/b/c\" is not NAMESPACE/NAME"),
            (
                "Hub/cfg",
                "\"Hub/cfg\": namespace \"Hub\" may hold only lowercase letters, digits, '-' and '.'",
            ),
            (
                "a.b/cfg",
                "\"a.b/cfg\": namespace \"a.b\" may not contain '.'",
            ),
            (
                "ns/-cfg",
                "\"ns/-cfg\": name \"-cfg\" must start and end with a letter or digit",
            ),
            (
                "ns/c_f",
                "\"ns/c_f\": name \"c_f\" may hold only lowercase letters, digits, '-' and '.'",
            ),
        ] {
            let err = value.parse::<ConfigMapRef>().expect_err(value);
            assert_eq!(err.to_string(), expected);
        }
        let long = format!("{}/cfg", "n".repeat(64));
        assert!(
            long.parse::<ConfigMapRef>()
                .expect_err("long")
                .to_string()
                .contains("longer than 63")
        );
    }

    const VALID: &str = "plugins:\n  - name: a\n    endpoint: 127.0.0.1:1\n    insecure: true\n";

    fn feed() -> Feed {
        let registry = Arc::new(Registry::new(
            vec![SourceInfo {
                label: "configmap ns/cfg".into(),
            }],
            ChannelSettings::default(),
        ));
        Feed::new(registry, "ns/cfg".parse().unwrap())
    }

    fn object(name: &str, text: Option<&str>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            data: text.map(|t| BTreeMap::from([(KEY.to_string(), t.to_string())])),
            ..ConfigMap::default()
        }
    }

    fn gone() -> watcher::Error {
        let mut status = Status::failure("too old resource version: 1 (5)", "Expired");
        status.code = 410;
        watcher::Error::WatchError(Box::new(status))
    }

    #[tokio::test]
    async fn a_listed_configmap_loads_and_an_unchanged_one_does_not_reload() {
        let mut f = feed();
        assert!(!f.event(Event::Init).await);
        assert!(f.event(Event::InitApply(object("cfg", Some(VALID)))).await);
        assert!(!f.event(Event::InitDone).await);
        assert_eq!(f.registry.load().unwrap().generation, 1);
        // A relist after an expired watch finds the same text.
        f.watch_failed(&gone());
        assert!(f.registry.last_error().is_none());
        f.event(Event::Init).await;
        assert!(!f.event(Event::InitApply(object("cfg", Some(VALID)))).await);
        f.event(Event::InitDone).await;
        assert_eq!(
            f.registry.reload_counts(),
            ReloadCounts {
                success: 1,
                failure: 0
            }
        );
        // Another object (never let through by the selector) is ignored.
        assert!(
            !f.event(Event::Apply(object("other", Some("plugins: ["))))
                .await
        );
        assert!(f.registry.last_error().is_none());
    }

    #[tokio::test]
    async fn missing_key_absent_and_deleted_configmaps_are_recorded_once() {
        let mut f = feed();
        f.event(Event::Init).await;
        f.event(Event::InitDone).await;
        assert_eq!(
            f.registry.last_error().as_deref(),
            Some("configmap ns/cfg: not found")
        );
        f.event(Event::Apply(object("cfg", None))).await;
        assert_eq!(
            f.registry.last_error().as_deref(),
            Some("configmap ns/cfg: has no key config.yaml")
        );
        assert!(f.event(Event::Apply(object("cfg", Some(VALID)))).await);
        assert!(f.registry.last_error().is_none());
        f.event(Event::Delete(object("cfg", Some(VALID)))).await;
        assert_eq!(
            f.registry.last_error().as_deref(),
            Some("configmap ns/cfg: was deleted")
        );
        // The relist that follows finds nothing: same failure, not counted again.
        f.event(Event::Init).await;
        f.event(Event::InitDone).await;
        assert_eq!(
            f.registry.reload_counts(),
            ReloadCounts {
                success: 1,
                failure: 3
            }
        );
        assert!(f.registry.load().is_some(), "the snapshot stays");
        // Recreated with the same text: loads again, clearing the error.
        assert!(f.event(Event::Apply(object("cfg", Some(VALID)))).await);
        assert!(f.registry.last_error().is_none());
    }

    #[tokio::test]
    async fn a_repeating_watch_error_is_recorded_once() {
        let mut f = feed();
        let forbidden = || {
            let mut status = Status::failure("configmaps \"cfg\" is forbidden", "Forbidden");
            status.code = 403;
            watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status)))
        };
        f.watch_failed(&forbidden());
        f.watch_failed(&forbidden());
        let error = f.registry.last_error().unwrap();
        assert!(
            error.starts_with("configmap ns/cfg: cannot watch: ") && error.contains("forbidden"),
            "{error}"
        );
        assert_eq!(
            f.registry.reload_counts(),
            ReloadCounts {
                success: 0,
                failure: 1
            }
        );
        // Once the API answers, the list loads and clears the error.
        f.event(Event::Init).await;
        assert!(f.event(Event::InitApply(object("cfg", Some(VALID)))).await);
        assert!(f.registry.last_error().is_none());
        f.watch_failed(&forbidden());
        assert_eq!(
            f.registry.reload_counts(),
            ReloadCounts {
                success: 1,
                failure: 2
            }
        );
    }
}
