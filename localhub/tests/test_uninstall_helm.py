"""The Helm chart on a real hub: `helm install` creates the objects the chart
renders, with the RBAC the sidecar overlay grants, and `helm uninstall`
removes the project's objects and nothing of OCM's. (Runs after
test_uninstall.py, which takes the kustomize install off the hub: the two
installs share their cluster-scoped names.)"""

from __future__ import annotations

import subprocess
import sys

import yaml

from tests.conftest import ROOT
from tests.hub import Hub

HELM = ROOT / "deploy" / "helm" / "helm"
NS = "rollout-hooks"
TENANT = "helm-tenant"


def helm(hub: Hub, *args: str) -> str:
    result = subprocess.run([str(HELM), "--kubeconfig", str(hub.kubeconfig()), *args],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stderr}"
    return result.stdout


def rules(objects: list[dict]) -> dict[str, list]:
    return {f"{o['kind']} {o['metadata']['name']}": o.get("rules") for o in objects
            if o and o["kind"] in ("ClusterRole", "Role")}


def test_helm_install_then_uninstall_leaves_ocm_alone(hub: Hub):
    sys.path.insert(0, str(ROOT / "localhub"))
    from lib import objects, parts

    hub.kubectl("delete", "-k", str(ROOT / "deploy" / "overlays" / "sidecar"), "--ignore-not-found", "--timeout=120s")
    # OCM's objects of a user: a ManifestWorkReplicaSet and a ManifestWork.
    hub.kubectl("create", "namespace", TENANT)
    hub.apply({"apiVersion": "work.open-cluster-management.io/v1alpha1", "kind": "ManifestWorkReplicaSet",
               "metadata": {"name": "kept", "namespace": TENANT},
               "spec": {"placementRefs": [{"name": "p"}], "manifestWorkTemplate": {"workload": {"manifests": []}}}})
    cluster = hub.clusters[0]
    hub.apply({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
               "metadata": {"name": "kept", "namespace": cluster}, "spec": {"workload": {"manifests": []}}})

    hub.kubectl("create", "namespace", NS)
    hub.kubectl("label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted")
    helm(hub, "install", "rollout-hooks", str(ROOT / "deploy" / "chart"), "-n", NS)
    manifest = [o for o in yaml.safe_load_all(helm(hub, "get", "manifest", "rollout-hooks", "-n", NS)) if o]
    assert len(manifest) >= 14, [o["kind"] for o in manifest]
    for obj in manifest:
        meta = obj["metadata"]
        assert hub.get(obj["kind"], meta["name"], meta.get("namespace")) is not None, f"{obj['kind']} {meta['name']} missing"

    # The RBAC on the hub is the overlay's, rule for rule.
    overlay = yaml.safe_load_all(hub.kubectl("kustomize", str(ROOT / "deploy" / "overlays" / "sidecar")).stdout)
    installed = {k: hub.get(*k.split(" "), NS if k.startswith("Role ") else None)["rules"] for k in rules(manifest)}
    assert installed == rules(list(overlay))
    account = hub.token_kubeconfig(NS, "rollout-controller")
    for args in [("watch", "manifestworkreplicasets.work.open-cluster-management.io", "-A"),
                 ("create", "manifestworks.work.open-cluster-management.io", "-n", cluster),
                 ("create", "manifestworkreplicasetrollouts.rollout-hooks.io", "-n", TENANT)]:
        assert hub.kubectl("auth", "can-i", *args, kubeconfig=account, check=False).stdout.strip() == "yes", args
    assert hub.kubectl("auth", "can-i", "get", "secrets", "-n", cluster, kubeconfig=account,
                       check=False).stdout.strip() == "no"
    hub.apply({"apiVersion": "rollout-hooks.io/v1alpha1", "kind": "ManifestWorkReplicaSetRollout",
               "metadata": {"name": "kept", "namespace": TENANT}, "spec": {}})

    helm(hub, "uninstall", "rollout-hooks", "-n", NS, "--wait", "--timeout", "120s")
    for obj in manifest:
        meta = obj["metadata"]
        hub.wait_for(lambda: hub.get(obj["kind"], meta["name"], meta.get("namespace")) is None, 60,
                     f"{obj['kind']} {meta['name']} to be deleted")
    assert not hub.list("secrets", NS), "the release's records stay"
    for crd in objects.crd_names(parts.crds(parts.HUB_CRDS)):
        assert hub.get("crd", crd) is not None, f"OCM's CRD {crd} was deleted"
    assert hub.get("manifestworkreplicaset", "kept", TENANT) is not None
    assert hub.get("manifestwork", "kept", cluster) is not None
    for name in hub.clusters:
        assert hub.get("namespace", name) is not None, f"the cluster namespace {name} was deleted"
    hub.kubectl("delete", "namespace", NS, TENANT, "--timeout=120s")
