//! The design's registration path: the ClusterManager's
//! `spec.workConfiguration.plugins` become the gateway's plugin registry, the
//! `config.yaml` key of the ConfigMap `work-controller-config` in the hub's
//! namespace, which the gateway mounts (or watches with `--configmap`).
//!
//! [`render_registry`] is the pure half: configuration in, `config.yaml` text
//! out, in the registry format of docs/plugin-api.md §3. [`apply_registry`] and
//! [`register_plugins`] write it with a server-side apply, so the controller
//! owns exactly the fields it sets and repeated calls are no-ops.
//!
//! `workConfiguration.plugins` is the design's field; OCM's own
//! ClusterManager CRD does not have it, and an API server serving that CRD
//! prunes it. A ClusterManager without the field (absent, not an empty
//! list) says nothing about plugins, so [`register_from`] leaves the
//! ConfigMap as it is rather than writing an empty registry over it. The
//! watch runs on the leader only (`app::run`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ObjectMeta, Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use thiserror::Error;

use crate::api::{ClusterManager, RolloutPipeline, RolloutPlugin, WorkConfiguration};

/// Where the ClusterManager's plugins are, as a JSON pointer.
pub(crate) const PLUGINS_POINTER: &str = "/spec/workConfiguration/plugins";

/// The ConfigMap holding the registry.
pub(crate) const CONFIG_MAP_NAME: &str = "work-controller-config";

/// The ConfigMap key holding the registry file.
pub(crate) const CONFIG_KEY: &str = "config.yaml";

/// The hub namespace of a default ClusterManager installation, where the
/// design puts the ConfigMap.
pub const DEFAULT_NAMESPACE: &str = "open-cluster-management-hub";

// The registration writes as the controller's one field manager.
use crate::orchestrate::FIELD_MANAGER;

/// A registration that could not be written.
#[derive(Debug, Error)]
pub(crate) enum RegistrationError {
    /// The ClusterManager could not be read as one.
    #[error("reading ClusterManager {name}: {source}")]
    Decode {
        /// The ClusterManager's name.
        name: String,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
    /// The registry could not be encoded as YAML.
    #[error("encoding the plugin registry as YAML: {0}")]
    Encode(#[source] serde_saphyr::ser::Error),
    /// The API server refused the apply, or could not be reached.
    #[error("applying ConfigMap {namespace}/{CONFIG_MAP_NAME}: {source}")]
    Apply {
        /// The ConfigMap's namespace.
        namespace: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
}

/// The registry file as written: the gateway's `RawConfig` restricted to
/// what a ClusterManager carries.
#[derive(Serialize)]
struct Registry<'a> {
    plugins: &'a [RolloutPlugin],
    #[serde(skip_serializing_if = "<[RolloutPipeline]>::is_empty")]
    pipelines: &'a [RolloutPipeline],
}

/// The registry `config.yaml` for `work`: a `plugins` list with each
/// plugin's `name`, `endpoint`, `caCertificate` (`caBundle` unless empty,
/// `caFile` when set) and any further
/// fields it carries, in the ClusterManager's order; then `pipelines` when
/// there are any. No work configuration, or no plugins, gives
/// `plugins: []`, a registry that serves nothing (rather than an empty file,
/// which the gateway would ignore, keeping plugins that were removed).
///
/// Nothing is validated here: the gateway checks the file and reports every
/// problem. Fails only if YAML encoding fails.
pub(crate) fn render_registry(
    work: Option<&WorkConfiguration>,
) -> Result<String, RegistrationError> {
    let registry = Registry {
        plugins: work.map(|w| w.plugins.as_slice()).unwrap_or_default(),
        pipelines: work.map(|w| w.pipelines.as_slice()).unwrap_or_default(),
    };
    // Plain scalars only: a long caBundle stays on one line.
    let options = serde_saphyr::ser_options! { prefer_block_scalars: false };
    serde_saphyr::to_string_with_options(&registry, options).map_err(RegistrationError::Encode)
}

/// The ConfigMap `work-controller-config` in `namespace` holding
/// `config_yaml` under [`CONFIG_KEY`], owned by `owner` when given (so it is
/// garbage-collected with the ClusterManager). Only the fields the
/// registration owns are set, as a server-side apply wants.
pub(crate) fn registry_config_map(
    namespace: &str,
    config_yaml: String,
    owner: Option<OwnerReference>,
) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(CONFIG_MAP_NAME.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_owned(),
                FIELD_MANAGER.to_owned(),
            )])),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(CONFIG_KEY.to_owned(), config_yaml)])),
        ..ConfigMap::default()
    }
}

/// Server-side applies `config_map` (as built by [`registry_config_map`])
/// with field manager [`FIELD_MANAGER`], forcing ownership of its fields, and
/// returns the ConfigMap the API server stored. Fails if the API server
/// refuses or cannot be reached.
pub(crate) async fn apply_registry(
    client: Client,
    config_map: &ConfigMap,
) -> Result<ConfigMap, RegistrationError> {
    let namespace = config_map.namespace().unwrap_or_default();
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(CONFIG_MAP_NAME, &params, &Patch::Apply(config_map))
        .await
        .map_err(|source| RegistrationError::Apply { namespace, source })
}

/// The whole registration: renders `cluster_manager`'s work configuration
/// ([`render_registry`]) into `work-controller-config` in `namespace`, owned
/// by the ClusterManager when it has a uid, and applies it
/// ([`apply_registry`]).
pub(crate) async fn register_plugins(
    client: Client,
    cluster_manager: &ClusterManager,
    namespace: &str,
) -> Result<ConfigMap, RegistrationError> {
    let config_yaml = render_registry(cluster_manager.spec.work_configuration.as_ref())?;
    let owner = cluster_manager.owner_ref(&());
    let config_map = registry_config_map(namespace, config_yaml, owner);
    apply_registry(client, &config_map).await
}

/// What [`register_from`] did.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Registered {
    /// The registry was written; the ConfigMap as stored.
    Written(Box<ConfigMap>),
    /// The ClusterManager has no `workConfiguration.plugins` (OCM's CRD has
    /// none, or the API server pruned it): the ConfigMap is left as it is.
    FieldAbsent,
}

/// Registers the plugins of the ClusterManager `raw` (as the API server
/// returned it) in `namespace` ([`register_plugins`]), unless it has no
/// `spec.workConfiguration.plugins` at all: then nothing is written, since
/// an absent field is not an empty registry. An empty list is written as
/// one (every plugin removed).
pub(crate) async fn register_from(
    client: Client,
    raw: &serde_json::Value,
    namespace: &str,
) -> Result<Registered, RegistrationError> {
    if raw.pointer(PLUGINS_POINTER).is_none() {
        return Ok(Registered::FieldAbsent);
    }
    let cluster_manager: ClusterManager =
        serde_json::from_value(raw.clone()).map_err(|source| RegistrationError::Decode {
            name: raw["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            source,
        })?;
    register_plugins(client, &cluster_manager, namespace)
        .await
        .map(|written| Registered::Written(Box::new(written)))
}

/// Keeps the registry in `namespace` up to date: watches every
/// ClusterManager and registers its plugins ([`register_from`]) each time
/// one is created or changes. Runs until the watch ends (never, normally);
/// a failed registration is logged and retried on the next change or
/// re-list. The caller runs it on the leader only.
pub(crate) async fn watch_and_register(client: Client, namespace: &str) {
    use futures::StreamExt;
    use kube::api::{ApiResource, DynamicObject};
    use kube::runtime::{WatchStreamExt, watcher};

    // Read as the API server sends it, to tell an absent field from an
    // empty list.
    let resource = ApiResource::erase::<ClusterManager>(&());
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut events = std::pin::pin!(
        watcher(api, watcher::Config::default())
            .default_backoff()
            .applied_objects()
    );
    while let Some(event) = events.next().await {
        let object = match event {
            Ok(object) => object,
            Err(error) => {
                tracing::warn!(%error, "watching ClusterManagers");
                continue;
            }
        };
        let name = object.name_any();
        let raw = match serde_json::to_value(&object) {
            Ok(raw) => raw,
            Err(error) => {
                tracing::warn!(cluster_manager = %name, %error, "reading a ClusterManager");
                continue;
            }
        };
        match register_from(client.clone(), &raw, namespace).await {
            Ok(Registered::Written(_)) => {
                tracing::info!(cluster_manager = %name, namespace, "plugin registry written");
            }
            Ok(Registered::FieldAbsent) => tracing::warn!(
                cluster_manager = %name,
                namespace,
                "spec.workConfiguration.plugins is absent (OCM's ClusterManager CRD has no such \
                 field, or the API server pruned it): the registry ConfigMap {CONFIG_MAP_NAME} \
                 is left as it is"
            ),
            Err(error) => tracing::warn!(%error, "plugin registration failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use http::{Method, Request, Response, StatusCode};
    use kube::client::Body;
    use serde_json::{Value, json};

    use super::*;
    use crate::api::clustermanager::{CaCertificate, ClusterManagerSpec};

    fn plugin(name: &str, endpoint: &str, ca: Option<&str>) -> RolloutPlugin {
        RolloutPlugin {
            name: name.into(),
            endpoint: endpoint.into(),
            ca_certificate: ca.map(|b| CaCertificate {
                ca_bundle: b.into(),
                ca_file: None,
            }),
            extra: BTreeMap::new(),
        }
    }

    fn work(plugins: Vec<RolloutPlugin>) -> WorkConfiguration {
        WorkConfiguration {
            plugins,
            ..WorkConfiguration::default()
        }
    }

    #[test]
    fn renders_the_registry_format() {
        let long_bundle = "TFMwdExTMUNSVWRKVGlCRFJWSlVTVVpKUTBGVVJTMHRMUzB0Q2sxSlNVSm1ha05EUVZNeVowRjNTVUpCWjBsVlNTdGxWMXBzY2pORU9IWnhhMjFz";
        let with_extras = RolloutPlugin {
            extra: BTreeMap::from([
                ("insecure".to_owned(), json!(true)),
                ("timeout".to_owned(), json!("5s")),
                ("hubs".to_owned(), json!(["hub-a"])),
            ]),
            ..plugin("smoke", "127.0.0.1:7001", None)
        };
        let with_pipeline = WorkConfiguration {
            pipelines: vec![RolloutPipeline {
                name: "safe".into(),
                plugins: vec!["a".into(), "b".into()],
            }],
            ..work(vec![
                plugin("a", "a.ns:1", Some("QQ==")),
                plugin("b", "b.ns:2", Some("Qg==")),
            ])
        };
        let cases: Vec<(&str, Option<WorkConfiguration>, String)> = vec![
            ("no work configuration", None, "plugins: []\n".into()),
            ("no plugins", Some(work(vec![])), "plugins: []\n".into()),
            (
                "the design's example",
                Some(work(vec![
                    plugin("my-rollout-1", "my-rollout1.my-namespace:10843", Some("REPLACE_WITH_BASE64_CA_CERT")),
                    plugin("my-rollout-2", "my-rollout2.my-namespace:10843", Some("REPLACE_WITH_BASE64_CA_CERT")),
                ])),
                "plugins:\n\
                 - name: my-rollout-1\n  endpoint: my-rollout1.my-namespace:10843\n  caCertificate:\n    caBundle: REPLACE_WITH_BASE64_CA_CERT\n\
                 - name: my-rollout-2\n  endpoint: my-rollout2.my-namespace:10843\n  caCertificate:\n    caBundle: REPLACE_WITH_BASE64_CA_CERT\n"
                    .into(),
            ),
            (
                "a long CA bundle stays on one line",
                Some(work(vec![plugin("p", "p.ns:1", Some(long_bundle))])),
                format!("plugins:\n- name: p\n  endpoint: p.ns:1\n  caCertificate:\n    caBundle: {long_bundle}\n"),
            ),
            (
                "further registry fields pass through",
                Some(work(vec![with_extras])),
                "plugins:\n- name: smoke\n  endpoint: 127.0.0.1:7001\n  hubs:\n  - hub-a\n  insecure: true\n  timeout: 5s\n".into(),
            ),
            (
                "pipelines follow the plugins",
                Some(with_pipeline),
                "plugins:\n\
                 - name: a\n  endpoint: a.ns:1\n  caCertificate:\n    caBundle: QQ==\n\
                 - name: b\n  endpoint: b.ns:2\n  caCertificate:\n    caBundle: Qg==\n\
                 pipelines:\n- name: safe\n  plugins:\n  - a\n  - b\n"
                    .into(),
            ),
        ];
        for (name, work, want) in cases {
            let got = render_registry(work.as_ref()).expect("encodes");
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn rendered_registry_reads_back_as_written() {
        // Values YAML would otherwise read as another type stay strings.
        let tricky = work(vec![
            plugin("yes", "on:123", Some("0x10")),
            plugin("a: b", "#x", Some("~")),
        ]);
        let text = render_registry(Some(&tricky)).expect("encodes");
        let parsed: Value = serde_saphyr::from_str(&text).expect("valid YAML");
        assert_eq!(
            parsed,
            json!({"plugins": [
                {"name": "yes", "endpoint": "on:123", "caCertificate": {"caBundle": "0x10"}},
                {"name": "a: b", "endpoint": "#x", "caCertificate": {"caBundle": "~"}}
            ]})
        );
    }

    #[test]
    fn a_ca_file_passes_through_and_an_empty_bundle_is_left_out() {
        let from_file = RolloutPlugin {
            ca_certificate: Some(CaCertificate {
                ca_bundle: String::new(),
                ca_file: Some("/var/run/secrets/plugin-ca/ca.crt".into()),
            }),
            ..plugin("p", "p.ns:1", None)
        };
        let got = render_registry(Some(&work(vec![
            from_file,
            plugin("q", "q.ns:1", Some("")),
        ])))
        .expect("encodes");
        assert_eq!(
            got,
            "plugins:\n\
             - name: p\n  endpoint: p.ns:1\n  caCertificate:\n    caFile: /var/run/secrets/plugin-ca/ca.crt\n\
             - name: q\n  endpoint: q.ns:1\n  caCertificate: {}\n"
        );
    }

    #[test]
    fn config_map_holds_the_registry() {
        let owner = OwnerReference {
            api_version: "operator.open-cluster-management.io/v1".into(),
            kind: "ClusterManager".into(),
            name: "cluster-manager".into(),
            uid: "u-1".into(),
            ..OwnerReference::default()
        };
        let cm = registry_config_map("hub", "plugins: []\n".into(), Some(owner));
        assert_eq!(
            serde_json::to_value(&cm).expect("serializes"),
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {
                    "name": "work-controller-config", "namespace": "hub",
                    "labels": {"app.kubernetes.io/managed-by": "rollout-controller"},
                    "ownerReferences": [{"apiVersion": "operator.open-cluster-management.io/v1",
                                         "kind": "ClusterManager", "name": "cluster-manager", "uid": "u-1"}]
                },
                "data": {"config.yaml": "plugins: []\n"}
            })
        );
        let no_owner = registry_config_map("hub", String::new(), None);
        assert_eq!(no_owner.metadata.owner_references, None);
    }

    fn cluster_manager() -> ClusterManager {
        let mut cm = ClusterManager::new(
            "cluster-manager",
            ClusterManagerSpec {
                work_configuration: Some(work(vec![plugin(
                    "my-rollout",
                    "my-rollout.my-namespace:10843",
                    Some("Q0E="),
                )])),
                ..ClusterManagerSpec::default()
            },
        );
        cm.metadata.uid = Some("0b5c-uid".into());
        cm
    }

    /// Answers one request of `handle` with `status` and `body`, returning
    /// the request's method, path with query, content type and JSON body.
    async fn answer_one(
        mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
        status: StatusCode,
        body: Value,
    ) -> (Method, String, String, Value) {
        let (request, send) = handle.next_request().await.expect("one request");
        let method = request.method().clone();
        let uri = request.uri().to_string();
        let content_type = request
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = request
            .into_body()
            .collect_bytes()
            .await
            .expect("request body");
        let sent: Value = serde_json::from_slice(&bytes).expect("a JSON body");
        let response = Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(&body).expect("encodes")))
            .expect("response");
        send.send_response(response);
        (method, uri, content_type, sent)
    }

    #[tokio::test]
    async fn register_plugins_applies_the_config_map_server_side() {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let want = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "work-controller-config", "namespace": "open-cluster-management-hub",
                "labels": {"app.kubernetes.io/managed-by": "rollout-controller"},
                "ownerReferences": [{"apiVersion": "operator.open-cluster-management.io/v1",
                                     "kind": "ClusterManager", "name": "cluster-manager",
                                     "uid": "0b5c-uid"}]
            },
            "data": {"config.yaml": "plugins:\n- name: my-rollout\n  endpoint: my-rollout.my-namespace:10843\n  caCertificate:\n    caBundle: Q0E=\n"}
        });
        // The API server answers with the stored object.
        let mut stored = want.clone();
        stored["metadata"]["resourceVersion"] = json!("7");
        let server = tokio::spawn(answer_one(handle, StatusCode::OK, stored));

        let applied = register_plugins(client, &cluster_manager(), DEFAULT_NAMESPACE)
            .await
            .expect("applied");
        let (method, uri, content_type, sent) = server.await.expect("server task");

        assert_eq!(method, Method::PATCH);
        let (path, query) = uri.split_once('?').expect("a query");
        assert_eq!(
            path,
            "/api/v1/namespaces/open-cluster-management-hub/configmaps/work-controller-config"
        );
        let mut params: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
        params.sort_unstable();
        assert_eq!(params, ["fieldManager=rollout-controller", "force=true"]);
        assert_eq!(content_type, "application/apply-patch+yaml");
        assert_eq!(sent, want);
        assert_eq!(applied.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(
            applied
                .data
                .as_ref()
                .and_then(|d| d.get(CONFIG_KEY))
                .map(String::as_str),
            want["data"]["config.yaml"].as_str()
        );
    }

    #[tokio::test]
    async fn an_absent_plugins_field_writes_nothing() {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        // As an API server serving OCM's own CRD returns it: no plugins.
        let pruned = json!({
            "apiVersion": "operator.open-cluster-management.io/v1", "kind": "ClusterManager",
            "metadata": {"name": "cluster-manager", "uid": "0b5c-uid"},
            "spec": {"workConfiguration": {"workDriver": "kube",
                     "featureGates": [{"feature": "ManifestWorkReplicaSet", "mode": "Enable"}]}}
        });
        for raw in [
            pruned.clone(),
            json!({"metadata": {"name": "cm"}, "spec": {}}),
        ] {
            let done = register_from(client.clone(), &raw, DEFAULT_NAMESPACE)
                .await
                .expect("nothing to fail");
            assert_eq!(done, Registered::FieldAbsent);
        }
        drop(client);
        assert!(
            handle.next_request().await.is_none(),
            "no request for an absent field"
        );
    }

    #[tokio::test]
    async fn an_empty_plugins_list_is_written_as_one() {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let raw = json!({
            "apiVersion": "operator.open-cluster-management.io/v1", "kind": "ClusterManager",
            "metadata": {"name": "cluster-manager", "uid": "0b5c-uid"},
            "spec": {"workConfiguration": {"plugins": []}}
        });
        let server = tokio::spawn(answer_one(
            handle,
            StatusCode::OK,
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "work-controller-config", "namespace": "hub-hosted"}
            }),
        ));
        let done = register_from(client, &raw, "hub-hosted")
            .await
            .expect("written");
        assert!(matches!(done, Registered::Written(_)));
        let (_, uri, _, sent) = server.await.expect("server task");
        assert!(
            uri.starts_with("/api/v1/namespaces/hub-hosted/configmaps/work-controller-config?"),
            "{uri}"
        );
        assert_eq!(sent["data"]["config.yaml"], "plugins: []\n");
    }

    #[tokio::test]
    async fn a_refused_apply_names_the_config_map() {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let status = json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "configmaps \"work-controller-config\" is forbidden",
            "reason": "Forbidden", "code": 403
        });
        let server = tokio::spawn(answer_one(handle, StatusCode::FORBIDDEN, status));
        let config_map = registry_config_map("hub", "plugins: []\n".into(), None);

        let err = apply_registry(client, &config_map)
            .await
            .expect_err("forbidden");
        server.await.expect("server task");

        assert!(matches!(&err, RegistrationError::Apply { namespace, .. } if namespace == "hub"));
        let message = err.to_string();
        assert!(
            message.starts_with("applying ConfigMap hub/work-controller-config: "),
            "{message}"
        );
        assert!(message.contains("forbidden"), "{message}");
    }
}
