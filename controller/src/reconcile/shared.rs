//! One work per cluster per ManifestWorkReplicaSet: a cluster that several
//! of the set's placements select is rolled out by one of them, with that
//! placement's strategy, plugin and position: the one whose work it
//! already has (so a placement that starts selecting it later does not
//! move it, which would delete its work before the other's rollout reaches
//! it), else the first of them in `spec.placementRefs` order. The others
//! leave it out (it is in none of their decision groups, so a work one of
//! them had there is pruned as for a cluster that left it). Pure.

use std::collections::{BTreeMap, HashMap};

use crate::rollout::{ClusterGroup, Strategy};

/// Takes each cluster out of every placement of `resolved` (in spec order)
/// but the one that keeps it; `working`: `(cluster, placement)` of the
/// works that exist. Returns, per placement that lost any, the clusters
/// left out and the placement that keeps each.
pub(super) fn one_placement_per_cluster<'a>(
    resolved: &mut [(String, Strategy, Vec<ClusterGroup>)],
    working: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> BTreeMap<String, Vec<(String, String)>> {
    // Each placement's position in the spec, by the clusters it selects.
    let mut selected: HashMap<(&str, &str), usize> = HashMap::new();
    for (position, (placement, _, groups)) in resolved.iter().enumerate() {
        for cluster in groups.iter().flat_map(|g| &g.clusters) {
            selected.insert((placement.as_str(), cluster.as_str()), position);
        }
    }
    // A cluster stays with the placement whose work it has (the first in
    // spec order when it has several), while that placement selects it.
    let mut kept: BTreeMap<String, (usize, String)> = BTreeMap::new();
    for (cluster, placement) in working {
        let Some(&position) = selected.get(&(placement, cluster)) else {
            continue;
        };
        if kept
            .get(cluster)
            .is_none_or(|(first, _)| *first >= position)
        {
            kept.insert(cluster.to_owned(), (position, placement.to_owned()));
        }
    }
    let mut keeper: BTreeMap<String, String> = kept.into_iter().map(|(c, (_, p))| (c, p)).collect();
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

    fn strategy() -> Strategy {
        let raw: crate::rollout::RawStrategy =
            serde_json::from_value(serde_json::json!({"type": "All"})).expect("raw strategy");
        Strategy::from_raw(&raw).expect("valid")
    }

    #[test]
    fn a_shared_cluster_stays_with_its_work_else_goes_to_the_first_placement() {
        let mut resolved = vec![
            (
                "canary".to_owned(),
                strategy(),
                vec![group(0, &["c1"]), group(1, &["c2", "c3"])],
            ),
            (
                "prod".to_owned(),
                strategy(),
                vec![group(0, &["c3", "c4", "c1"])],
            ),
            ("rest".to_owned(), strategy(), vec![group(0, &["c4", "c5"])]),
        ];
        // c4 has prod's work already: it stays with prod; c5's work is of
        // a placement that does not select it.
        let left_out = one_placement_per_cluster(
            &mut resolved,
            [("c4", "rest"), ("c4", "prod"), ("c5", "prod")],
        );
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

        // A cluster whose work is a later placement's stays there.
        let mut resolved = vec![
            (
                "canary".to_owned(),
                strategy(),
                vec![group(0, &["c1", "c3"])],
            ),
            ("prod".to_owned(), strategy(), vec![group(0, &["c3"])]),
        ];
        let left_out = one_placement_per_cluster(&mut resolved, [("c3", "prod")]);
        assert_eq!(resolved[0].2[0].clusters, ["c1"]);
        assert_eq!(resolved[1].2[0].clusters, ["c3"]);
        assert_eq!(left_out["canary"], named(&[("c3", "prod")]));
    }
}
