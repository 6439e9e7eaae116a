"""One work per cluster per ManifestWorkReplicaSet, on a real hub: two
placements of one set that OCM's placement controller both decides over
every cluster. The first placement in `spec.placementRefs` keeps each
cluster; the second rolls out none, and OCM's agent applies the one work
on every spoke."""

from __future__ import annotations

from tests.hub import Hub

NS = "shared-demo"
PLACEMENT_LABEL = "work.open-cluster-management.io/placementname"
OWNER_LABEL = "work.open-cluster-management.io/manifestworkreplicaset"


def test_a_cluster_two_placements_select_gets_one_work(controller, hub: Hub):
    hub.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    hub.apply({"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
               "metadata": {"name": "default", "namespace": NS}, "spec": {"clusterSet": "default"}})
    for name in ("first", "second"):
        hub.apply({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
                   "metadata": {"name": name, "namespace": NS}, "spec": {"clusterSets": ["default"]}})
    hub.apply({"apiVersion": "work.open-cluster-management.io/v1alpha1", "kind": "ManifestWorkReplicaSet",
               "metadata": {"name": "shared", "namespace": NS},
               "spec": {"placementRefs": [{"name": "first", "rolloutStrategy": {"type": "All"}},
                                          {"name": "second", "rolloutStrategy": {"type": "All"}}],
                        "manifestWorkTemplate": {"workload": {"manifests": [
                            {"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "shared-demo", "namespace": "default"},
                             "data": {"from": "shared"}}]}}}})
    try:
        def works():
            items = hub.list("manifestworks", None, selector=f"{OWNER_LABEL}={NS}.shared")
            return items if len({w["metadata"]["namespace"] for w in items}) == len(hub.clusters) else None

        hub.wait_for(works, 60, "a work on every cluster")

        def on_every_spoke():
            return all(hub.get("configmap", "shared-demo", "default", on=c) for c in hub.clusters)

        hub.wait_for(on_every_spoke, 60, "the ConfigMap applied by OCM's agent on every spoke")
        # Both placements are decided over every cluster by now; one more
        # reconcile has had time to write a second work if it would.
        decided = lambda name: sum(len(d.get("status", {}).get("decisions", [])) for d in hub.list(  # noqa: E731
            "placementdecisions", NS, selector=f"cluster.open-cluster-management.io/placement={name}"))
        hub.wait_for(lambda: decided("second") == len(hub.clusters), 60, "the second placement's decisions")
        hub.wait_for(lambda: (s := (hub.get("manifestworkreplicaset", "shared", NS) or {}).get("status"))
                     and any(p["name"] == "second" for p in s.get("placementSummary") or []), 60,
                     "a summary of the second placement")
        items = hub.list("manifestworks", None, selector=f"{OWNER_LABEL}={NS}.shared")
        by_cluster: dict[str, list[str]] = {}
        for work in items:
            by_cluster.setdefault(work["metadata"]["namespace"], []).append(work["metadata"]["labels"][PLACEMENT_LABEL])
        assert by_cluster == {c: ["first"] for c in hub.clusters}, by_cluster
        summary = {p["name"]: p for p in hub.get("manifestworkreplicaset", "shared", NS)["status"]["placementSummary"]}
        assert summary["first"]["summary"]["total"] == len(hub.clusters), summary
        assert summary["second"]["summary"].get("total", 0) == 0, summary
    finally:
        hub.kubectl("delete", "manifestworkreplicaset", "shared", "-n", NS, "--timeout=60s")
        hub.kubectl("delete", "namespace", NS, "--wait=false")
