//! Convenient reads of a [`RolloutPluginRequest`]: which cluster, where it
//! stands in the rollout order, which MWRS.

use std::fmt;

use rollout_proto::v1alpha1::RolloutPluginRequest;

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
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

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

    #[test]
    fn cluster_and_key() {
        assert_eq!(request(1, 1, "").cluster(), None);
        assert_eq!(request(1, 1, "c1").cluster(), Some("c1"));
        assert_eq!(request(1, 1, "c1").mwrs_key(), "default/hello");
    }
}
