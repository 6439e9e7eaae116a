"""What a bed's hub and managed clusters hold before anyone uses them: OCM's
CRDs and the objects OCM's registration would have made when the clusters
joined (the clusters, their namespaces, the default cluster sets). Nothing of
this project: tests and users install that themselves, as on any hub.
"""

from __future__ import annotations

import base64
import json
import time

from . import kube, parts

HUB_NAMESPACE = "open-cluster-management-hub"
AGENT_NAMESPACE = "open-cluster-management-agent"
PROBE_NAMESPACE = "localhub-probe"
CLUSTERSET_LABEL = "cluster.open-cluster-management.io/clusterset"


def crd_names(files) -> list[str]:
    names = []
    for f in files:
        text = f.read_text()
        # Each file holds one CRD; its metadata.name is the first `name:`
        # under `metadata:`.
        after = text.split("\nmetadata:", 1)[1]
        names.append(next(line.split(":", 1)[1].strip() for line in after.splitlines()
                          if line.strip().startswith("name:")))
    return names


def install(bed, say) -> None:
    hub_crds, spoke_crds = parts.crds(parts.HUB_CRDS), parts.crds(parts.SPOKE_CRDS)
    spokes = [] if bed.hub_only else bed.clusters
    hub = bed.kubectl("hub")
    hub.apply_files(hub_crds)
    for cluster in spokes:
        bed.kubectl(cluster).apply_files(spoke_crds)
    hub.wait_established(crd_names(hub_crds), 60)
    for cluster in spokes:
        bed.kubectl(cluster).wait_established(crd_names(spoke_crds), 60)
    say(f"OCM's CRDs established ({len(hub_crds)} on the hub, {len(spoke_crds)} on each of "
        f"{len(spokes)} clusters)")
    hub.apply(documents(hub_objects(bed)))
    for cluster in spokes:
        bed.kubectl(cluster).apply(documents([namespace(AGENT_NAMESPACE)]))
    named = ", ".join(bed.clusters) if len(bed.clusters) <= 20 else f"cluster1 … {bed.clusters[-1]}"
    say(f"managed clusters {named} registered in cluster set `default`")


def documents(objects: list[dict]) -> str:
    return "".join("---\n" + json.dumps(o) + "\n" for o in objects)


def namespace(name: str, labels: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}


def hub_objects(bed) -> list[dict]:
    ca = base64.b64encode((bed.pki / "ca.crt").read_bytes()).decode()
    objects = [namespace("open-cluster-management"), namespace(HUB_NAMESPACE)]
    # OCM's registration makes these two sets on every hub.
    objects.append({"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSet",
                    "metadata": {"name": "default"},
                    "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}})
    objects.append({"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSet",
                    "metadata": {"name": "global"},
                    "spec": {"clusterSelector": {"selectorType": "LabelSelector", "labelSelector": {}}}})
    for cluster in bed.clusters:
        objects.append(namespace(cluster, {"open-cluster-management.io/cluster-name": cluster}))
        # A hub-only bed's clusters have no API server to point at.
        configs = [] if bed.hub_only else [{"url": f"https://127.0.0.1:{bed.ports[cluster]}", "caBundle": ca}]
        objects.append({
            "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": cluster, "labels": {CLUSTERSET_LABEL: "default", "name": cluster}},
            "spec": {"hubAcceptsClient": True, "managedClusterClientConfigs": configs},
        })
    return objects


def probe_objects(bed) -> list[dict]:
    """A placement over every cluster and a work per cluster: `up` returns
    once OCM's placement controller decided them all and every agent applied
    its work."""
    objects: list[dict] = [namespace(PROBE_NAMESPACE),
               {"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
                "metadata": {"name": "default", "namespace": PROBE_NAMESPACE}, "spec": {"clusterSet": "default"}},
               {"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
                "metadata": {"name": "every-cluster", "namespace": PROBE_NAMESPACE},
                "spec": {"clusterSets": ["default"]}}]
    # A hub-only bed has no agent to apply a work.
    for cluster in [] if bed.hub_only else bed.clusters:
        objects.append({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": PROBE_NAMESPACE, "namespace": cluster},
            "spec": {"workload": {"manifests": [{
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": PROBE_NAMESPACE, "namespace": "default"},
                "data": {"cluster": cluster}}]}},
        })
    return objects


def wait_placement_ready(bed, deadline: float) -> None:
    hub = bed.kubectl("hub")
    hub.apply(documents(probe_objects(bed)))
    want = set(bed.clusters)
    decided: set[str] = set()
    applied: set[str] = set(want) if bed.hub_only else set()
    while time.monotonic() < deadline:
        out = hub.run("get", "placementdecisions", "-n", PROBE_NAMESPACE, "-o", "json").stdout
        decided = {d["clusterName"] for item in json.loads(out)["items"]
                   for d in item.get("status", {}).get("decisions", [])}
        for cluster in want - applied:
            work = json.loads(hub.run("get", "manifestwork", PROBE_NAMESPACE, "-n", cluster, "-o", "json").stdout)
            conditions = {c["type"]: c["status"] for c in work.get("status", {}).get("conditions", [])}
            if conditions.get("Applied") == "True" and conditions.get("Available") == "True":
                applied.add(cluster)
        if decided == want and applied == want:
            break
        time.sleep(0.3)
    else:
        raise kube.NotReady(f"OCM's placement decided {len(decided)} of {len(want)} clusters "
                            f"(missing: {sorted(want - decided)[:10]}); works applied on {len(applied)} "
                            f"(missing: {sorted(want - applied)[:10]})")
    for cluster in [] if bed.hub_only else bed.clusters:
        hub.run("delete", "manifestwork", PROBE_NAMESPACE, "-n", cluster, "--wait=false")
    hub.run("delete", "namespace", PROBE_NAMESPACE, "--wait=false")
