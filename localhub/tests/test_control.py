"""Manual control of a rollout on a real hub, by a namespace tenant (a
ServiceAccount bound to Kubernetes' `edit` in the namespace, through the
overlay's aggregated roles) with `rollout-controller pause|resume|abort|
retry|promote`: a pause holds the next cluster while the one in flight
finishes its validation; the resume lets it start; an abort by hand
restores every updated cluster to the first revision; a retry rolls the
revision out again, and promotions end the plugin's soak cluster by
cluster. What is asserted is what a user reads: the carrier's
`spec.control` and `status.control`, the set's Progressing condition, the
Events, `get`, and the objects OCM's agent applied on each spoke."""

from __future__ import annotations

import json
import subprocess
import time

from tests.conftest import binary
from tests.hub import Hub
from tests.rollout import example_mwrs

NS = "control-demo"
NAME = "canary"
OPERATOR = f"system:serviceaccount:{NS}:operator"
HASH = "work.open-cluster-management.io/controller-hash"
OWNER = "work.open-cluster-management.io/manifestworkreplicaset"


def template(hub: Hub, version: str) -> dict:
    """The example's template (a Deployment whose rollout the agent's
    condition rules report), as Deployment `control-demo` labelled with
    `version`."""
    work = json.loads(json.dumps(example_mwrs(hub)["spec"]["manifestWorkTemplate"]))
    deployment = work["workload"]["manifests"][0]
    deployment["metadata"]["name"] = "control-demo"
    deployment["spec"]["template"]["metadata"]["labels"]["version"] = version
    for config in work["manifestConfigs"]:
        config["resourceIdentifier"]["name"] = "control-demo"
    return work


def carrier(hub: Hub) -> dict:
    return hub.get("manifestworkreplicasetrollout", NAME, NS) or {}


def status(hub: Hub) -> dict:
    return carrier(hub).get("status") or {}


def revisions(hub: Hub) -> dict[str, str]:
    """Each cluster's work revision."""
    works = hub.list("manifestworks", None, selector=f"{OWNER}={NS}.{NAME}")
    return {w["metadata"]["namespace"]: w["metadata"]["labels"].get(HASH) for w in works}


def at(hub: Hub, revision: str) -> list[str]:
    return sorted(c for c, r in revisions(hub).items() if r == revision)


def spoke_versions(hub: Hub) -> dict[str, str | None]:
    def version(cluster: str) -> str | None:
        deployment = hub.get("deployment", "control-demo", "default", on=cluster) or {}
        return (((deployment.get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
            "labels", {}).get("version")
    return {c: version(c) for c in hub.clusters}


def progressing(hub: Hub) -> dict:
    mwrs = hub.get("manifestworkreplicaset", NAME, NS)
    return {c["type"]: c for c in mwrs["status"]["conditions"]}["Progressing"]


def reasons(hub: Hub) -> list[tuple[str, str]]:
    items = hub.list("events.events.k8s.io", NS)
    return [(e.get("reason"), e.get("note", "")) for e in items if (e.get("regarding") or {}).get("name") == NAME]


def soak(hub: Hub, time: str) -> None:
    hub.kubectl("patch", "manifestworkreplicasetrollout", NAME, "-n", NS, "--type", "merge", "-p", json.dumps(
        {"spec": {"placements": [{"name": "all", "plugin": "safe-rollout", "pluginConfig": {"soakTime": time}}]}}))


def test_pause_resume_abort_retry_and_promote_by_hand(controller, hub: Hub, bed_dir):
    hub.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    hub.apply({"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
               "metadata": {"name": "default", "namespace": NS}, "spec": {"clusterSet": "default"}})
    hub.apply({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
               "metadata": {"name": "all", "namespace": NS}, "spec": {"clusterSets": ["default"]}})
    # The tenant: edit in its namespace, and nothing else.
    hub.kubectl("create", "serviceaccount", "operator", "-n", NS)
    hub.kubectl("create", "rolebinding", "operator-edit", "-n", NS, "--clusterrole=edit",
                f"--serviceaccount={NS}:operator")
    operator = hub.token_kubeconfig(NS, "operator")
    hub.apply({"apiVersion": "rollout-hooks.io/v1alpha1", "kind": "ManifestWorkReplicaSetRollout",
               "metadata": {"name": NAME, "namespace": NS},
               "spec": {"placements": [{"name": "all", "plugin": "safe-rollout",
                                        "pluginConfig": {"soakTime": "1s"}}]}})
    mwrs = {"apiVersion": "work.open-cluster-management.io/v1alpha1", "kind": "ManifestWorkReplicaSet",
            "metadata": {"name": NAME, "namespace": NS},
            "spec": {"placementRefs": [{"name": "all", "rolloutStrategy": {
                "type": "Progressive", "progressive": {"maxConcurrency": 1}}}],
                "manifestWorkTemplate": template(hub, "v1")}}
    hub.apply(mwrs)

    def cli(*args: str) -> str:
        result = subprocess.run([str(binary("rollout-controller")), *args, NAME, "-n", NS,
                                 "--kubeconfig", str(operator)], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, f"rollout-controller {' '.join(args)}: {result.stderr}"
        return result.stdout

    try:
        def rolled_out():
            s = status(hub)
            return s if s.get("updateRevision") and s.get("currentRevision") == s.get("updateRevision") else None

        first = hub.wait_for(rolled_out, 120, "the first revision on every cluster")["currentRevision"]
        hub.wait_for(lambda: set(spoke_versions(hub).values()) == {"v1"}, 60, "v1 on every spoke")

        # A long soak: the first cluster of the next revision validates
        # while the rollout is paused.
        soak(hub, "6s")
        mwrs["spec"]["manifestWorkTemplate"] = template(hub, "v2")
        hub.apply(mwrs)
        update = hub.wait_for(lambda: (s := status(hub).get("updateRevision")) != first and s, 30,
                              "the new update revision")
        hub.wait_for(lambda: at(hub, update), 30, "the first cluster at the new revision")
        said = cli("pause", "--reason", "watching the canary")
        assert f"pause requested by {OPERATOR} (watching the canary)" in said, said
        paused = hub.wait_for(lambda: (status(hub).get("control") or {}).get("paused"), 30,
                              "the controller to hold the rollout")
        assert paused["by"] == OPERATOR and paused["reason"] == "watching the canary", paused
        started = at(hub, update)
        assert len(started) == 1, started

        # Its validation goes on to its end; no other cluster starts.
        def canary_succeeded():
            placement = (status(hub).get("placements") or [{}])[0]
            return (placement.get("clusterCounts") or {}).get("succeeded", 0) >= 1
        hub.wait_for(canary_succeeded, 60, "the canary's validation to end while paused")
        time.sleep(4)
        assert at(hub, update) == started, f"a cluster started while paused: {revisions(hub)}"
        condition = progressing(hub)
        assert condition["reason"] == "RolloutPaused", condition
        assert f"paused by {OPERATOR} (watching the canary)" in condition["message"], condition
        view = subprocess.run([str(binary("rollout-controller")), "get", NAME, "-n", NS,
                               "--kubeconfig", str(hub.kubeconfig())], capture_output=True, text=True, timeout=60)
        assert "॥ Paused" in view.stdout and "watching the canary" in view.stdout, view.stdout
        (bed_dir / "control-get-paused.txt").write_text(view.stdout)

        # Resumed: the next cluster starts.
        cli("resume")
        hub.wait_for(lambda: len(at(hub, update)) == 2, 60, "the next cluster once resumed")

        # Aborted by hand (no abortOnFailure anywhere): every updated
        # cluster goes back to the first revision, at once.
        said = cli("abort", "--reason", "latency up 20%")
        assert said.startswith(f"abort of revision {update} requested by {OPERATOR}"), said

        def aborted():
            s = status(hub)
            return s if s.get("abortedTime") and sorted(at(hub, first)) == hub.clusters else None
        s = hub.wait_for(aborted, 60, "the abort and every cluster back at the first revision")
        assert s["control"]["abort"]["result"] == "Acted", s["control"]
        hub.wait_for(lambda: set(spoke_versions(hub).values()) == {"v1"}, 60, "v1 back on every spoke")
        notes = [n for r, n in reasons(hub) if r == "AbortStarted"]
        assert any(f"asked by {OPERATOR} (latency up 20%)" in n for n in notes), reasons(hub)
        assert "RolloutPaused" in [r for r, _ in reasons(hub)] and "RolloutResumed" in [r for r, _ in reasons(hub)]
        # The abort acts once: still aborted, nothing rolled out again.
        time.sleep(3)
        assert sorted(at(hub, first)) == hub.clusters, revisions(hub)

        # Retried, with a soak of an hour: each cluster waits on its
        # validation until promoted by name.
        soak(hub, "1h")
        cli("retry")
        hub.wait_for(lambda: not status(hub).get("abortedTime"), 30, "the abort cleared")
        assert status(hub)["control"]["retry"]["result"] == "Acted"
        promoted: list[str] = []
        deadline = time.monotonic() + 120
        while status(hub).get("currentRevision") != update:
            assert time.monotonic() < deadline, f"not rolled out again: {status(hub)}"
            listed = (status(hub).get("placements") or [{}])[0].get("clusters") or []
            validating = [c["clusterName"] for c in listed if c.get("rolloutStatus") == "Validating"]
            if validating:
                cli("promote", "--clusters", validating[0], "--reason", "soak enough")
                promoted.append(validating[0])
            time.sleep(1)
        promoted = sorted(set(promoted))
        assert sorted(promoted) == hub.clusters, promoted
        hub.wait_for(lambda: set(spoke_versions(hub).values()) == {"v2"}, 60, "v2 on every spoke")
        assert status(hub)["control"]["promote"]["result"] == "Acted"
        work = hub.list("manifestworks", promoted[0], selector=f"{OWNER}={NS}.{NAME}")[0]
        annotations = work["metadata"]["annotations"]
        assert annotations.get("rollout.open-cluster-management.io/validation-message") == \
            f"promoted by {OPERATOR} (soak enough)", annotations
    finally:
        hub.kubectl("delete", "manifestworkreplicaset", NAME, "-n", NS, "--timeout=60s", check=False)
        hub.kubectl("delete", "namespace", NS, "--wait=false", check=False)
