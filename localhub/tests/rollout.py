"""The example rollout the real-hub tier drives, and how to read it."""

from __future__ import annotations

import json

from tests.conftest import ROOT
from tests.hub import Hub

NS = "rollout-demo"
NAME = "hello-rollout"


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


def roll_out_example(controller, hub: Hub):
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


def example_mwrs(hub: Hub) -> dict:
    """The example's ManifestWorkReplicaSet as its author wrote it (before
    the API server's defaults), as JSON."""
    built = hub.kubectl("kustomize", str(ROOT / "deploy" / "examples" / "hello-rollout")).stdout
    # `create --dry-run=client` converts without reading the live objects.
    rendered = hub.kubectl("create", "--dry-run=client", "-o", "json", "-f", "-", stdin=built).stdout
    decoder, items, at = json.JSONDecoder(), [], 0
    while at < len(rendered.strip()):
        item, at = decoder.raw_decode(rendered, at)
        items.append(item)
        while at < len(rendered) and rendered[at].isspace():
            at += 1
    return next(i for i in items if i["kind"] == "ManifestWorkReplicaSet")
