"""`kubectl delete -k` of the hub overlay removes the project's objects and
nothing of OCM's: its CRDs, every ManifestWork and every object on the
managed clusters stay. (Runs last: it takes the project off the hub.)"""

from __future__ import annotations

import sys

from tests.conftest import ROOT
from tests.hub import Hub
from tests.rollout import NAME, NS, spoke_deployment


def test_delete_k_removes_only_the_projects_objects(first_revision, controller, hub: Hub):
    sys.path.insert(0, str(ROOT / "localhub"))
    from lib import objects, parts

    controller.process.stop()
    works = {c: [w["metadata"]["name"] for w in hub.list("manifestworks", c)] for c in hub.clusters}
    assert all(works.values()), works
    hub.kubectl("delete", "-k", str(ROOT / "deploy" / "overlays" / "sidecar"), "--timeout=120s")

    assert hub.get("namespace", "rollout-hooks") is None, "the project's namespace is still there"
    assert hub.get("clusterrole", "rollout-controller") is None
    assert hub.get("crd", "manifestworkreplicasetrollouts.rollout-hooks.io") is None
    for crd in objects.crd_names(parts.crds(parts.HUB_CRDS)):
        assert hub.get("crd", crd) is not None, f"OCM's CRD {crd} was deleted"
    assert hub.get("manifestworkreplicaset", NAME, NS) is not None, "the user's ManifestWorkReplicaSet went"
    for cluster, names in works.items():
        left = [w["metadata"]["name"] for w in hub.list("manifestworks", cluster)]
        assert left == names, f"{cluster}: works {names} became {left}"
        assert spoke_deployment(hub, cluster) is not None, f"the workload on {cluster} was removed"
    for cluster in hub.clusters:
        assert hub.get("namespace", cluster) is not None, f"the cluster namespace {cluster} was deleted"
