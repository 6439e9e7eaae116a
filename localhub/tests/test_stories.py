"""The three stories on a real hub, installed with `kubectl apply -k`:
traffic-weights writes each cluster's position and weight into its work,
smoke-test soaks each cluster and fails one, the controller aborts and
restores every updated cluster at once with the rollback mutation, and OCM's
own agent applies each work on its managed cluster. What is asserted is what
OCM users read: the ManifestWorkReplicaSet's and the carrier's status, the
Events, and the objects on each managed cluster."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

from tests.conftest import ROOT, binary
from tests.hub import Hub
from tests.rollout import (NAME, NS, carrier_placement, decided_clusters, events, example_mwrs, set_plugin_config,
                           spoke_deployment)

POSITION = "rollout-hooks.io/cluster-position"
WEIGHT = "rollout-hooks.io/canary-weight"
ROLLBACK = "rollout-hooks.io/rollback"
ROLLBACK_REVISION = "rollout-hooks.io/rollback-revision"


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


# What the abort test saw, for the simulator's comparison after it.
OBSERVED: dict = {}


def hook_calls(metrics: str) -> dict[str, int]:
    """rollout_controller_hook_calls_total summed per hook."""
    calls: dict[str, int] = {}
    for line in metrics.splitlines():
        match = re.match(r'rollout_controller_hook_calls_total\{([^}]*)\} (\S+)', line)
        if match:
            hook = re.search(r'hook="([^"]+)"', match.group(1)).group(1)
            calls[hook] = calls.get(hook, 0) + int(float(match.group(2)))
    return calls


def test_failed_smoke_test_aborts_and_restores_every_updated_cluster(first_revision, controller, hub: Hub, bed_dir):
    clusters = decided_clusters(hub)
    failing = clusters[1]
    before = hook_calls(controller.metrics())
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
    after = hook_calls(controller.metrics())
    OBSERVED.update(failing=failing, position=clusters.index(failing), status=status,
                    calls={h: after.get(h, 0) - before.get(h, 0) for h in after})
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


def test_a_carrier_made_again_after_the_abort_keeps_it(first_revision, controller, hub: Hub):
    """The carrier deleted and made again (a GitOps prune, `kubectl replace
    --force`) after the abort above: the controller takes the revisions and
    the abort back from the set's annotations, so the failed revision is not
    rolled out again and every cluster stays at the first revision."""
    assert OBSERVED, "the real hub's abort did not run"
    before = hub.get("manifestworkreplicasetrollout", NAME, NS)
    failed = before["status"]["updateRevision"]
    written = {"apiVersion": before["apiVersion"], "kind": before["kind"],
               "metadata": {"name": NAME, "namespace": NS}, "spec": before["spec"]}
    hub.kubectl("delete", "manifestworkreplicasetrollout", NAME, "-n", NS, "--timeout=60s")
    # Applied again as a GitOps tool would; the controller may have made an
    # empty one meanwhile (it then gets this spec).
    hub.apply(written)

    def recovered():
        carrier = hub.get("manifestworkreplicasetrollout", NAME, NS) or {}
        if carrier.get("metadata", {}).get("uid") == before["metadata"]["uid"]:
            return None
        status = carrier.get("status") or {}
        return status if status.get("currentRevision") and status.get("placements") else None

    status = hub.wait_for(recovered, 60, "the new carrier's status")
    assert hub.get("manifestworkreplicasetrollout", NAME, NS)["spec"] == before["spec"]
    assert status["currentRevision"] == first_revision, status
    assert status["updateRevision"] == failed and status.get("abortedTime"), status
    mwrs = hub.get("manifestworkreplicaset", NAME, NS)
    assert status["setUID"] == mwrs["metadata"]["uid"], status
    # Several reconciles later (the carrier's own writes wake some), no
    # cluster has the failed revision.
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        for cluster in hub.clusters:
            labels = spoke_deployment(hub, cluster)["spec"]["template"]["metadata"].get("labels") or {}
            assert "version" not in labels, f"{cluster} got the failed revision again: {labels}"
            work = hub.list("manifestworks", cluster, selector="work.open-cluster-management.io/manifestworkreplicaset")[0]
            hashed = work["metadata"]["labels"].get("work.open-cluster-management.io/controller-hash")
            assert hashed != failed, f"{cluster}'s work is at the failed revision again"
        time.sleep(1)


def test_the_simulator_with_ocms_crds_reaches_the_real_hubs_outcome(first_revision, gateway, hub: Hub, bed_dir):
    """`simulate --crds` with OCM's real CRDs, the same strategy, plugins and
    failing position as the real hub's abort above: the same cluster aborts,
    the same revision is restored, the same hooks are called; and the
    revisions are the hub's, although the hub hashes its templates after
    its API server filled in the CRDs' defaults."""
    assert OBSERVED, "the real hub's abort did not run"
    sys.path.insert(0, str(ROOT / "localhub"))
    from lib import parts
    crds = bed_dir / "ocm-crds"
    crds.mkdir(exist_ok=True)
    for f in parts.crds(parts.HUB_CRDS):
        (crds / f.name).write_bytes(f.read_bytes())
    previous = example_mwrs(hub)
    update = json.loads(json.dumps(previous))
    update["spec"]["manifestWorkTemplate"]["workload"]["manifests"][0]["spec"]["template"]["metadata"]["labels"][
        "version"] = "v2"
    (bed_dir / "previous.json").write_text(json.dumps(previous))
    (bed_dir / "update.json").write_text(json.dumps(update))
    failing = f"cluster-{OBSERVED['position'] + 1:03d}"
    result = subprocess.run([
        str(binary("rollout-controller")), "simulate", "--clusters", "3", "--strategy", "Progressive",
        "--max-concurrency", "1", "--abort-on-failure", "--plugin", "safe-rollout",
        "--plugin-config", json.dumps({"soakTime": "1s", "failClusters": [failing]}),
        "--gateway", gateway, "--crds", str(crds), "--template", str(bed_dir / "update.json"),
        "--previous-template", str(bed_dir / "previous.json"), "--summary", str(bed_dir / "summary.json"),
        "--apply-latency", "1s"], capture_output=True, text=True, timeout=300)
    assert result.returncode in (0, 1), result.stderr[-3000:]
    summary = json.loads((bed_dir / "summary.json").read_text())
    print(f"\nsimulate: {json.dumps({k: summary[k] for k in ('result', 'hookCalls', 'abort')})}\n"
          f"real hub: {json.dumps(OBSERVED['calls'])}", flush=True)
    failures = [f["cluster"] for f in summary["abort"]["failures"]]
    assert failures == [failing], summary["abort"]
    assert summary["currentRevision"] == summary["previousRevision"], summary
    assert summary["previousRevision"] == first_revision, (summary["previousRevision"], first_revision)
    assert OBSERVED["status"]["updateRevision"] in json.dumps(summary), (OBSERVED["status"]["updateRevision"], summary)
    real = {h: n for h, n in OBSERVED["calls"].items() if h != "Initialize" and n}
    simulated = {h: n for h, n in summary["hookCalls"].items() if n}
    # BeginRollout and MutateManifestWork are called once per cluster and
    # step: they agree exactly. ProgressRollout (once per reconcile) and
    # ValidateRolloutCompletion (polled while a cluster soaks) follow how
    # often the world changes, which a real agent does more often than the
    # simulated one; within a small factor, so that a reconcile loop that
    # wakes itself (hundreds of calls) fails here.
    polled = {"ProgressRollout", "ValidateRolloutCompletion"}
    assert {h: n for h, n in real.items() if h not in polled} == {
        h: n for h, n in simulated.items() if h not in polled}, (real, simulated)
    for hook in polled:
        assert 0 < real.get(hook, 0) <= 5 * simulated.get(hook, 0), (hook, real, simulated)


def test_nothing_the_controller_needs_is_refused(controller):
    """The controller ran as the overlay's ServiceAccount throughout: the
    hub's RBAC refused none of its requests."""
    log = controller.process.text()
    refused = [line for line in log.splitlines() if "forbidden" in line.lower() or " 403" in line]
    assert not refused, "\n".join(refused[:5])


def test_a_field_ocm_does_not_have_is_pruned_and_the_carrier_keeps_the_plugin(first_revision, hub: Hub):
    """The design's fields written on the ManifestWorkReplicaSet itself are
    dropped by the real API server (OCM's CRD has no such field); the carrier
    keeps the plugin, and a new revision rolls out through it."""
    result = hub.kubectl("patch", "manifestworkreplicaset", NAME, "-n", NS, "--type", "json", "-p", json.dumps([
        {"op": "add", "path": "/spec/placementRefs/0/rolloutStrategy/plugin", "value": "no-such-plugin"},
        {"op": "replace",
         "path": "/spec/manifestWorkTemplate/workload/manifests/0/spec/template/metadata/labels/version",
         "value": "v3"}]))
    assert "unknown field" in result.stderr, result.stderr
    stored = hub.get("manifestworkreplicaset", NAME, NS)
    assert "plugin" not in stored["spec"]["placementRefs"][0]["rolloutStrategy"], stored["spec"]
    set_plugin_config(hub, {"soakTime": "1s"})

    def rolled_out():
        s = carrier_placement(hub)
        counts = s["placement"].get("clusterCounts") or {}
        done = (counts.get("succeeded") == 3 and s.get("currentRevision") == s.get("updateRevision")
                and s.get("currentRevision") != first_revision)
        return s if done else None

    hub.wait_for(rolled_out, 120, "the third revision to succeed on every cluster through the carrier's plugin")
    for cluster in hub.clusters:
        deployment = spoke_deployment(hub, cluster)
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        annotations = deployment["metadata"].get("annotations") or {}
        assert labels.get("version") == "v3", f"{cluster}: {labels}"
        assert annotations.get(POSITION, "").endswith("/3"), f"{cluster}: {annotations}"
