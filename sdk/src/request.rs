//! Convenient reads of a [`RolloutPluginRequest`]: which cluster, where it
//! stands in the rollout order, which MWRS, and the rollout's plugin
//! configuration as the plugin's own type.

use std::fmt;

use rollout_proto::v1alpha1::RolloutPluginRequest;
use serde::de::DeserializeOwned;

use crate::PluginError;

/// A cluster's place in its placement's rollout order: "cluster `index` of
/// `total`", 1-based, with `1 <= index <= total`. Displays as `index/total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClusterPosition {
    index: u32,
    total: u32,
}

impl ClusterPosition {
    /// The position, or `None` unless `1 <= index <= total`.
    pub fn new(index: u32, total: u32) -> Option<Self> {
        (index >= 1 && index <= total).then_some(Self { index, total })
    }

    /// The 1-based index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// How many clusters the placement rolls out to.
    pub fn total(&self) -> u32 {
        self.total
    }

    /// `index / total`, in `(0, 1]`: the share of the fleet that has the new
    /// revision once this cluster has it.
    pub fn fraction(&self) -> f64 {
        f64::from(self.index) / f64::from(self.total)
    }

    /// Whether this is the last cluster of the rollout.
    pub fn is_last(&self) -> bool {
        self.index == self.total
    }
}

impl fmt::Display for ClusterPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.total)
    }
}

/// Reads of a [`RolloutPluginRequest`] that the generated type lacks.
pub trait RolloutRequestExt {
    /// `cluster_index` of `total_cluster_count`, or `None` when they do not
    /// make a valid position (unset on placement-wide hooks, or out of range).
    fn position(&self) -> Option<ClusterPosition>;

    /// `cluster_name`, or `None` when empty (placement-wide hooks).
    fn cluster(&self) -> Option<&str>;

    /// The MWRS as `namespace/name`.
    fn mwrs_key(&self) -> String;

    /// `plugin_config_json` (the rollout's `rolloutStrategy.pluginConfig`,
    /// docs/plugin-api.md §1, "Plugin configuration") decoded as the
    /// plugin's settings type `T`; `Ok(None)` when the rollout has none.
    ///
    /// `T` is usually a `#[derive(Deserialize)]` struct of `Option` fields
    /// (or `#[serde(default)]`), so a key the rollout leaves out falls back
    /// to the plugin's own default (its flag). Keys `T` does not declare are
    /// ignored, unless `T` says `#[serde(deny_unknown_fields)]`: in a
    /// pipeline every member gets the same object. The error converts into
    /// [`PluginError`] as `INVALID_ARGUMENT` naming the field and serde's
    /// reason, so `?` in a hook reports a bad configuration to the
    /// controller.
    fn plugin_config<T: DeserializeOwned>(&self) -> Result<Option<T>, PluginConfigError>;
}

/// A `plugin_config_json` that does not decode as the plugin's settings
/// type: not JSON, or a key of the wrong type.
#[derive(Debug, thiserror::Error)]
#[error("plugin_config_json (the rollout's pluginConfig) does not fit this plugin: {source}")]
pub struct PluginConfigError {
    #[source]
    source: serde_json::Error,
}

impl From<PluginConfigError> for PluginError {
    /// `INVALID_ARGUMENT`: the rollout, not the plugin, must be fixed.
    fn from(error: PluginConfigError) -> Self {
        PluginError::InvalidArgument(error.to_string())
    }
}

impl RolloutRequestExt for RolloutPluginRequest {
    fn position(&self) -> Option<ClusterPosition> {
        let index = u32::try_from(self.cluster_index).ok()?;
        let total = u32::try_from(self.total_cluster_count).ok()?;
        ClusterPosition::new(index, total)
    }

    fn cluster(&self) -> Option<&str> {
        (!self.cluster_name.is_empty()).then_some(self.cluster_name.as_str())
    }

    fn mwrs_key(&self) -> String {
        format!("{}/{}", self.mwrs_namespace, self.mwrs_name)
    }

    fn plugin_config<T: DeserializeOwned>(&self) -> Result<Option<T>, PluginConfigError> {
        if self.plugin_config_json.trim().is_empty() {
            return Ok(None);
        }
        serde_json::from_str(&self.plugin_config_json)
            .map(Some)
            .map_err(|source| PluginConfigError { source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(index: i32, total: i32, cluster: &str) -> RolloutPluginRequest {
        RolloutPluginRequest {
            mwrs_name: "hello".into(),
            mwrs_namespace: "default".into(),
            cluster_name: cluster.into(),
            cluster_index: index,
            total_cluster_count: total,
            ..Default::default()
        }
    }

    #[test]
    fn position_is_valid_only_in_range() {
        let table = [
            (3, 10, Some("3/10")),
            (1, 1, Some("1/1")),
            (10, 10, Some("10/10")),
            (0, 10, None),
            (11, 10, None),
            (-1, 10, None),
            (0, 0, None),
        ];
        for (index, total, want) in table {
            let got = request(index, total, "c").position().map(|p| p.to_string());
            assert_eq!(got.as_deref(), want, "{index} of {total}");
        }
        let p = request(3, 10, "c").position().unwrap();
        assert!((p.fraction() - 0.3).abs() < 1e-9);
        assert!(!p.is_last());
        assert!(ClusterPosition::new(4, 4).unwrap().is_last());
    }

    #[derive(Debug, PartialEq, serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Settings {
        soak_time: Option<String>,
        #[serde(default)]
        fail_clusters: Vec<String>,
    }

    fn configured(json: &str) -> RolloutPluginRequest {
        RolloutPluginRequest {
            plugin_config_json: json.into(),
            ..request(1, 1, "c1")
        }
    }

    #[test]
    fn plugin_config_reads_as_the_plugin_type() {
        assert_eq!(configured("").plugin_config::<Settings>().unwrap(), None);
        assert_eq!(
            configured(r#"{"soakTime":"5m","failClusters":["c1"],"other":{"x":1}}"#)
                .plugin_config::<Settings>()
                .unwrap(),
            Some(Settings {
                soak_time: Some("5m".into()),
                fail_clusters: vec!["c1".into()],
            }),
            "unknown keys are another plugin's"
        );
        assert_eq!(
            configured("{}").plugin_config::<Settings>().unwrap(),
            Some(Settings {
                soak_time: None,
                fail_clusters: vec![],
            })
        );
        // Any type that deserializes, such as a plain JSON value.
        assert_eq!(
            configured(r#"{"n":9007199254740993}"#)
                .plugin_config::<serde_json::Value>()
                .unwrap()
                .unwrap()["n"]
                .as_u64(),
            Some(9_007_199_254_740_993)
        );
    }

    #[test]
    fn a_config_of_the_wrong_shape_is_invalid_argument_naming_field_and_reason() {
        for (json, reason) in [
            (
                r#"{"soakTime":5}"#,
                "invalid type: integer `5`, expected a string",
            ),
            (
                r#"{"failClusters":"c1"}"#,
                "invalid type: string \"c1\", expected a sequence",
            ),
            ("not json", "expected ident"),
        ] {
            let err = configured(json).plugin_config::<Settings>().unwrap_err();
            let status = tonic::Status::from(PluginError::from(err));
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{json}");
            assert!(
                status.message().starts_with(
                    "plugin_config_json (the rollout's pluginConfig) does not fit this plugin: "
                ),
                "{}",
                status.message()
            );
            assert!(status.message().contains(reason), "{}", status.message());
        }
    }

    #[test]
    fn cluster_and_key() {
        assert_eq!(request(1, 1, "").cluster(), None);
        assert_eq!(request(1, 1, "c1").cluster(), Some("c1"));
        assert_eq!(request(1, 1, "c1").mwrs_key(), "default/hello");
    }
}
