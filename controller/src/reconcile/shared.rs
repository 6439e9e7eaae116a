//! One work per cluster per ManifestWorkReplicaSet: a cluster that several
//! of the set's placements select is rolled out by the first of them in
//! `spec.placementRefs` order, with that placement's strategy, plugin and
//! position; the later ones leave it out (it is in none of their decision
//! groups, so a work one of them already had there is pruned as for a
//! cluster that left it). Pure.

use std::collections::BTreeMap;

use crate::rollout::{ClusterGroup, Strategy};

/// Takes each cluster out of every placement of `resolved` (in spec order)
/// but the first that selects it; returns, per placement that lost any,
/// the clusters left out and the placement that keeps each.
pub(super) fn first_placement_keeps(
    resolved: &mut [(String, Strategy, Vec<ClusterGroup>)],
) -> BTreeMap<String, Vec<(String, String)>> {
    let mut keeper: BTreeMap<String, String> = BTreeMap::new();
    let mut left_out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for (placement, _, groups) in resolved.iter_mut() {
        for group in groups.iter_mut() {
            group.clusters.retain(|cluster| match keeper.get(cluster) {
                Some(first) if first != placement => {
                    let entry = left_out.entry(placement.clone()).or_default();
                    entry.push((cluster.clone(), first.clone()));
                    false
                }
                Some(_) => true,
                None => {
                    keeper.insert(cluster.clone(), placement.clone());
                    true
                }
            });
        }
    }
    left_out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(index: i32, clusters: &[&str]) -> ClusterGroup {
        ClusterGroup {
            index,
            name: String::new(),
            clusters: clusters.iter().map(|c| (*c).to_owned()).collect(),
        }
    }

    #[test]
    fn the_first_placement_in_spec_order_keeps_a_shared_cluster() {
        let raw: crate::rollout::RawStrategy =
            serde_json::from_value(serde_json::json!({"type": "All"})).expect("raw strategy");
        let strategy = Strategy::from_raw(&raw).expect("valid");
        let mut resolved = vec![
            (
                "canary".to_owned(),
                strategy.clone(),
                vec![group(0, &["c1"]), group(1, &["c2", "c3"])],
            ),
            (
                "prod".to_owned(),
                strategy.clone(),
                vec![group(0, &["c3", "c4", "c1"])],
            ),
            ("rest".to_owned(), strategy, vec![group(0, &["c4", "c5"])]),
        ];
        let left_out = first_placement_keeps(&mut resolved);
        let clusters = |i: usize| -> Vec<Vec<String>> {
            resolved[i].2.iter().map(|g| g.clusters.clone()).collect()
        };
        assert_eq!(clusters(0), [vec!["c1"], vec!["c2", "c3"]]);
        // Groups keep their index and order, emptied or not.
        assert_eq!(clusters(1), [vec!["c4"]]);
        assert_eq!(clusters(2), [vec!["c5"]]);
        let named = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
                .collect()
        };
        assert_eq!(
            left_out["prod"],
            named(&[("c3", "canary"), ("c1", "canary")])
        );
        assert_eq!(left_out["rest"], named(&[("c4", "prod")]));
        assert!(!left_out.contains_key("canary"));
    }
}
