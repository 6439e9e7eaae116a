"""The three stories on a real hub, installed with `kubectl apply -k`:
traffic-weights writes each cluster's position and weight into its work,
smoke-test soaks each cluster and fails one, the controller aborts and
restores every updated cluster at once with the rollback mutation, and OCM's
own agent applies each work on its managed cluster. What is asserted is what
OCM users read: the ManifestWorkReplicaSet's and the carrier's status, the
Events, and the objects on each managed cluster."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.conftest import ROOT, binary
from tests.hub import Hub

NS = "rollout-demo"
NAME = "hello-rollout"
POSITION = "rollout.ocm.io/cluster-position"
WEIGHT = "rollout.ocm.io/canary-weight"
ROLLBACK = "rollout.ocm.io/rollback"
ROLLBACK_REVISION = "rollout.ocm.io/rollback-revision"


def carrier_placement(hub: Hub) -> dict:
    status = (hub.get("manifestworkreplicasetrollout", NAME, NS) or {}).get("status") or {}
    return {**status, "placement": (status.get("placements") or [{}])[0]}


def spoke_deployment(hub: Hub, cluster: str) -> dict | None:
    return hub.get("deployment", "hello", "default", on=cluster)


def set_plugin_config(hub: Hub, config: dict) -> None:
    hub.kubectl("patch", "manifestworkreplicasetrollout", NAME, "-n", NS, "--type", "merge", "-p", json.dumps(
        {"spec": {"placements": [{"name": "hello-placement", "plugin": "safe-rollout",
                                  "pluginConfig": config, "abortOnFailure": True}]}}))


def events(hub: Hub) -> list[dict]:
    items = hub.list("events.events.k8s.io", NS)
    return [e for e in items if (e.get("regarding") or {}).get("name") == NAME]


@pytest.fixture(scope="module")
def first_revision(controller, hub: Hub):
    """The example applied as a user applies it, its placement bound to the
    cluster set `default` (the binding a cluster-set admin makes), rolled out
    to the three clusters OCM's placement selects."""
    hub.kubectl("apply", "-k", str(ROOT / "deploy" / "examples" / "hello-rollout"))
    hub.apply({"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
               "metadata": {"name": "default", "namespace": NS}, "spec": {"clusterSet": "default"}})
    set_plugin_config(hub, {"soakTime": "1s"})

    def rolled_out():
        s = carrier_placement(hub)
        counts = s["placement"].get("clusterCounts") or {}
        return s if counts.get("succeeded") == 3 and s.get("currentRevision") == s.get("updateRevision") else None

    status = hub.wait_for(rolled_out, 120, "the first revision to succeed on all three clusters")
    return status["currentRevision"]


def decided_clusters(hub: Hub) -> list[str]:
    items = hub.list("placementdecisions", NS, selector="cluster.open-cluster-management.io/placement=hello-placement")
    return [d["clusterName"] for i in items for d in i["status"]["decisions"]]


def test_traffic_weights_in_every_work_applied_by_the_agent(first_revision, hub: Hub):
    clusters = decided_clusters(hub)
    assert sorted(clusters) == hub.clusters, "OCM's placement controller decided other clusters"
    for cluster in hub.clusters:
        work = hub.list("manifestworks", cluster, selector="work.open-cluster-management.io/manifestworkreplicaset")[0]
        conditions = {c["type"]: c["status"] for c in work["status"]["conditions"]}
        assert conditions.get("Applied") == "True" and conditions.get("Progressing") == "False", conditions
        deployment = spoke_deployment(hub, cluster)
        assert deployment, f"OCM's agent applied nothing on {cluster}"
        annotations = deployment["metadata"].get("annotations") or {}
        position = annotations.get(POSITION, "")
        assert position.endswith("/3"), f"{cluster}: no position from traffic-weights: {annotations}"
        assert WEIGHT in annotations, annotations
    mwrs = hub.get("manifestworkreplicaset", NAME, NS)
    summary = mwrs["status"]["summary"]
    assert summary["total"] == 3 and summary["applied"] == 3, summary
    rolled = {c["type"]: c for c in mwrs["status"]["conditions"]}["PlacementRolledOut"]
    assert rolled["status"] == "True", rolled


def test_failed_smoke_test_aborts_and_restores_every_updated_cluster(first_revision, hub: Hub, bed_dir):
    clusters = decided_clusters(hub)
    failing = clusters[1]
    watch = subprocess.Popen([str(binary("rollout-controller")), "get", NAME, "-n", NS, "--watch",
                              "--kubeconfig", str(hub.kubeconfig())],
                             stdout=open(bed_dir / "watch.txt", "wb"), stderr=subprocess.STDOUT)
    set_plugin_config(hub, {"soakTime": "1s", "failClusters": [failing]})
    hub.kubectl("patch", "manifestworkreplicaset", NAME, "-n", NS, "--type", "json", "-p", json.dumps([{
        "op": "add", "path": "/spec/manifestWorkTemplate/workload/manifests/0/spec/template/metadata/labels/version",
        "value": "v2"}]))
    started = time.monotonic()

    def rolled_back():
        s = carrier_placement(hub)
        done = [e for e in events(hub) if e.get("reason") == "RollbackFinished"]
        return s if s.get("abortedTime") and done else None

    status = hub.wait_for(rolled_back, 120, "the abort and the rollback")
    took = time.monotonic() - started
    assert status["currentRevision"] == first_revision, status
    assert status["updateRevision"] != first_revision, status
    reasons = [e["reason"] for e in events(hub)]
    assert "AbortStarted" in reasons, reasons
    updated = clusters[:2]
    for cluster in hub.clusters:
        def restored(c=cluster):
            d = spoke_deployment(hub, c)
            labels = d["spec"]["template"]["metadata"].get("labels") or {}
            return d if "version" not in labels else None
        deployment = hub.wait_for(restored, 60, f"{cluster} back at the first revision")
        annotations = deployment["metadata"].get("annotations") or {}
        if cluster in updated:
            assert annotations.get(ROLLBACK) == "true", f"{cluster}: {annotations}"
            assert annotations.get(ROLLBACK_REVISION) == first_revision, annotations
        else:
            assert ROLLBACK not in annotations, f"{cluster} was never updated, yet: {annotations}"
    mwrs = hub.get("manifestworkreplicaset", NAME, NS)
    progressing = {c["type"]: c for c in mwrs["status"]["conditions"]}.get("Progressing")
    print(f"\nabort and rollback observed {took:.1f} s after the template change; "
          f"Progressing: {progressing}", flush=True)
    watch.terminate()
    watch.wait(10)
    frames = (bed_dir / "watch.txt").read_text(errors="replace")
    assert failing in frames and "abort" in frames.lower(), frames[-3000:]
