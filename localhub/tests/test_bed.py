"""The bed itself: OCM's own placement controller decides, OCM's own work
agent applies and reports, as on any hub."""

from __future__ import annotations

from tests.hub import Hub

NAMESPACE = "bed-check"


def conditions(obj: dict | None) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (obj or {}).get("status", {}).get("conditions", [])}


def test_placement_decides_every_cluster(hub: Hub):
    hub.kubectl("create", "namespace", NAMESPACE)
    hub.apply({"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
               "metadata": {"name": "default", "namespace": NAMESPACE}, "spec": {"clusterSet": "default"}})
    hub.apply({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
               "metadata": {"name": "all", "namespace": NAMESPACE}, "spec": {"clusterSets": ["default"]}})

    def decided():
        items = hub.list("placementdecisions", NAMESPACE,
                         selector="cluster.open-cluster-management.io/placement=all")
        names = sorted(d["clusterName"] for i in items for d in i.get("status", {}).get("decisions", []))
        return names if names == sorted(hub.clusters) else None

    assert hub.wait_for(decided, 60, "OCM's placement controller to decide every cluster") == hub.clusters
    placement = hub.get("placement", "all", NAMESPACE)
    assert placement["status"]["numberOfSelectedClusters"] == len(hub.clusters)


def test_agent_applies_and_reports_progressing_from_condition_rules(hub: Hub):
    cluster = hub.clusters[0]
    work = {
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": "bed-check", "namespace": cluster},
        "spec": {
            "workload": {"manifests": [{
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "bed-check", "namespace": "default"},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "bed-check"}},
                         "template": {"metadata": {"labels": {"app": "bed-check"}},
                                      "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}},
            }]},
            "manifestConfigs": [{
                "resourceIdentifier": {"group": "apps", "resource": "deployments", "name": "bed-check",
                                       "namespace": "default"},
                "conditionRules": [{
                    "condition": "Progressing", "type": "CEL",
                    "celExpressions": ["!(has(object.status.availableReplicas) && "
                                       "object.status.availableReplicas >= object.spec.replicas)"],
                    "messageExpression": "result ? 'rolling out' : 'rolled out'"}],
            }],
        },
    }
    hub.apply(work)

    def reported():
        c = conditions(hub.get("manifestwork", "bed-check", cluster))
        return c if c.get("Applied") == "True" and c.get("Progressing") == "False" else None

    final = hub.wait_for(reported, 60, "OCM's agent to report Applied and, from the rule, Progressing=False")
    assert final.get("Available") == "True", final
    deployment = hub.get("deployment", "bed-check", "default", on=cluster)
    assert deployment is not None, "the agent applied nothing on the managed cluster"
    assert deployment["status"]["availableReplicas"] == 2
    # Every other cluster has no such object: one work, one cluster.
    for other in hub.clusters[1:]:
        assert hub.get("deployment", "bed-check", "default", on=other) is None
    hub.kubectl("delete", "manifestwork", "bed-check", "-n", cluster)
    hub.wait_for(lambda: hub.get("deployment", "bed-check", "default", on=cluster) is None, 60,
                 "the agent to delete what it applied once its work is gone")
