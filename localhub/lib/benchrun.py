"""One round of localhub/bench: a fresh hub-only bed of N clusters, one
ManifestWorkReplicaSet controller on it (this project's `rollout-controller
run` with the no-op `echo-plugin` through `rollout-gateway`, or OCM's own,
the `work manager` with its ManifestWorkReplicaSet controller on), the
status reporter standing in for the work agents, and the same
ManifestWorkReplicaSet rolled out through its revisions. Returns what the
hub's API server counted of that controller's requests (audit log and
/metrics), the wall time of each revision, and the controller's CPU and
peak memory."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from . import apimetrics, bed as beds, objects
from .api import Client
from .reporter import Reporter

NS = "bench"
NAME = "bench"
BENCH_NS = "localhub-bench"
OURS_USER = "system:serviceaccount:rollout-hooks:rollout-controller"
OCM_USER = f"system:serviceaccount:{BENCH_NS}:ocm-work-manager"
REPORTER_USER = f"system:serviceaccount:{BENCH_NS}:status-reporter"
MWRS_PATH = f"/apis/work.open-cluster-management.io/v1alpha1/namespaces/{NS}/manifestworkreplicasets/{NAME}"
OWNER_LABEL = "work.open-cluster-management.io/manifestworkreplicaset"


class RoundError(Exception):
    """A round could not be run to the end."""


@dataclass
class Options:
    clusters: int
    controller: str  # "ours" or "ocm"
    dir: Path
    root: Path  # the repository
    target: Path  # the project's binaries
    revisions: int = 2
    max_concurrency: str = "10%"
    delay_s: float = 0.5
    timeout_s: float = 900
    keep: bool = False  # keep the bed's directory (logs, audit log) after the round


@dataclass
class Round:
    controller: str
    clusters: int
    walls: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    cpu_total_s: float = 0.0
    peak_rss_kib: int = 0
    helpers: dict = field(default_factory=dict)  # gateway and plugin: cpu_s, peak_rss_kib
    audit: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)
    reporter: dict = field(default_factory=dict)


def deployment(revision: int) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "hello", "namespace": "default"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "hello"}},
                     "template": {"metadata": {"labels": {"app": "hello"},
                                               "annotations": {"bench/revision": str(revision)}},
                                  "spec": {"containers": [{"name": "hello", "image": "registry.k8s.io/pause:3.10"}]}}}}


# The example's rules (deploy/examples/hello-rollout), and OCM's well-known
# Deployment feedback.
PROGRESSING = ("!(has(object.status) && has(object.status.observedGeneration) "
               "&& object.status.observedGeneration >= object.metadata.generation "
               "&& (has(object.status.updatedReplicas) ? object.status.updatedReplicas : 0) "
               ">= (has(object.spec.replicas) ? object.spec.replicas : 1))")
DEGRADED = ("has(object.status) && hasConditions(object.status) && object.status.conditions.exists(c, "
            "c.type == 'Progressing' && c.status == 'False' && c.reason == 'ProgressDeadlineExceeded')")


def template(revision: int) -> dict:
    return {"workload": {"manifests": [deployment(revision)]},
            "manifestConfigs": [{
                "resourceIdentifier": {"group": "apps", "resource": "deployments", "name": "hello",
                                       "namespace": "default"},
                "feedbackRules": [{"type": "WellKnownStatus"}],
                "conditionRules": [{"condition": "Progressing", "type": "CEL", "celExpressions": [PROGRESSING]},
                                   {"condition": "Degraded", "type": "CEL", "celExpressions": [DEGRADED]}]}]}


def manifest_work_replica_set(options: Options) -> dict:
    return {"apiVersion": "work.open-cluster-management.io/v1alpha1", "kind": "ManifestWorkReplicaSet",
            "metadata": {"name": NAME, "namespace": NS},
            "spec": {"placementRefs": [{"name": NAME, "rolloutStrategy": {
                "type": "Progressive", "progressive": {"maxConcurrency": options.max_concurrency}}}],
                "manifestWorkTemplate": template(1)}}


def world(options: Options) -> list[dict]:
    """What both controllers' rounds start from, but for the set itself:
    its namespace bound to the cluster set, its Placement, the carrier
    naming the no-op plugin (inert for OCM's controller), and the bench's
    own identities."""
    docs = [objects.namespace(NS), objects.namespace(BENCH_NS),
            {"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
             "metadata": {"name": "default", "namespace": NS}, "spec": {"clusterSet": "default"}},
            {"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
             "metadata": {"name": NAME, "namespace": NS}, "spec": {"clusterSets": ["default"]}},
            {"apiVersion": "rollout-hooks.io/v1alpha1", "kind": "ManifestWorkReplicaSetRollout",
             "metadata": {"name": NAME, "namespace": NS},
             "spec": {"placements": [{"name": NAME, "plugin": "echo"}]}}]
    for account in ("ocm-work-manager", "status-reporter"):
        docs.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": BENCH_NS}})
        docs.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                     "metadata": {"name": f"localhub-bench-{account}"},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                     "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": BENCH_NS}]})
    return docs


def token_kubeconfig(bed: beds.Bed, namespace: str, account: str) -> tuple[Path, str]:
    token = bed.kubectl().run("create", "token", account, "-n", namespace, "--duration", "2h").stdout.strip()
    path = bed.dir / f"{namespace}.{account}.kubeconfig"
    from .kube import write_kubeconfig
    write_kubeconfig(path, "hub", bed.ports["hub"], bed.pki, {"token": token})
    return path, token


def wait(probe, timeout_s: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(interval)
    raise RoundError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


class Processes:
    def __init__(self, dir: Path):
        self.dir = dir
        self.started: list[subprocess.Popen] = []

    def start(self, name: str, args: list, env: dict | None = None) -> subprocess.Popen:
        log = open(self.dir / "logs" / f"{name}.log", "wb")
        process = subprocess.Popen([str(a) for a in args], stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})},
                                   start_new_session=True)
        log.close()
        self.started.append(process)
        return process

    def line(self, name: str, marker: str, process: subprocess.Popen, timeout_s: float = 30) -> str:
        path = self.dir / "logs" / f"{name}.log"

        def found():
            if process.poll() is not None:
                raise RoundError(f"{name} exited {process.returncode}: {path.read_text()[-2000:]}")
            return next((line for line in path.read_text().splitlines() if marker in line), None)
        return wait(found, timeout_s, f"{name} to print {marker!r}")

    def stop_all(self) -> None:
        for process in reversed(self.started):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in reversed(self.started):
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def start_ours(bed: beds.Bed, options: Options, processes: Processes) -> list[subprocess.Popen]:
    """echo-plugin, rollout-gateway naming it `echo`, and `rollout-controller
    run` as the sidecar overlay's ServiceAccount; returns them, the
    controller first, once its /readyz answers 200."""
    plugin = processes.start("echo-plugin", [options.target / "echo-plugin", "--listen", "127.0.0.1:0"])
    address = processes.line("echo-plugin", "listening grpc=", plugin).split("grpc=")[1].split()[0]
    registry = bed.dir / "registry.yaml"
    registry.write_text(f"plugins:\n  - name: echo\n    endpoint: {address}\n    insecure: true\n")
    gateway = processes.start("rollout-gateway", [options.target / "rollout-gateway", "--config", registry,
                                                  "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
    listen = processes.line("rollout-gateway", "listening grpc=", gateway).split("grpc=")[1].split()[0]
    kubeconfig, _ = token_kubeconfig(bed, "rollout-hooks", "rollout-controller")
    health = f"127.0.0.1:{beds.free_port()}"
    controller = processes.start("rollout-controller", [
        options.target / "rollout-controller", "run", "--kubeconfig", kubeconfig, "--gateway", f"http://{listen}",
        "--health-listen", health, "--hub-name", "localhub-bench"], env={"RUST_LOG": "warn"})

    def ready():
        if controller.poll() is not None:
            raise RoundError(f"rollout-controller exited {controller.returncode}")
        try:
            with urllib.request.urlopen(f"http://{health}/readyz", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False
    wait(ready, 60, "rollout-controller's /readyz")
    return [controller, gateway, plugin]


def start_ocm(bed: beds.Bed, processes: Processes) -> list[subprocess.Popen]:
    """OCM's hub work controller with its ManifestWorkReplicaSet controller
    on, as its own ServiceAccount; returns it once it serves /healthz and its
    informers had a moment to list."""
    kubeconfig, _ = token_kubeconfig(bed, BENCH_NS, "ocm-work-manager")
    port = beds.free_port()
    manager = processes.start("ocm-work-manager", [
        bed.bins / "work", "manager", "--kubeconfig", kubeconfig, "--namespace", objects.HUB_NAMESPACE,
        "--listen", f"127.0.0.1:{port}", "--disable-leader-election",
        "--feature-gates", "ManifestWorkReplicaSet=true"])
    from .kube import wait_http
    wait_http(f"https://127.0.0.1:{port}/healthz", time.monotonic() + 60, lambda: manager.poll() is None,
              "OCM's work manager")
    time.sleep(3)
    return [manager]


def rolled_out(admin: Client, revision: int, clusters: int, state: dict) -> bool:
    """Whether the set says PlacementRolledOut (Complete) after having said
    otherwise since this revision was applied, and every cluster's work is
    on the revision with Progressing False for its generation."""
    mwrs = admin.get(MWRS_PATH)
    conditions = (mwrs.get("status") or {}).get("conditions") or []
    rolled = next((c for c in conditions if c["type"] == "PlacementRolledOut"), None)
    done = rolled is not None and rolled["status"] == "True" and rolled.get("reason") == "Complete"
    if not done:
        state["seen_progressing"] = True
        return False
    if not state.get("seen_progressing"):
        return False
    works = admin.get("/apis/work.open-cluster-management.io/v1/manifestworks",
                      labelSelector=f"{OWNER_LABEL}={NS}.{NAME}")["items"]
    on_revision = 0
    for work in works:
        manifests = work["spec"]["workload"]["manifests"]
        annotations = manifests[0]["spec"]["template"]["metadata"].get("annotations") or {}
        conds = {c["type"]: c for c in (work.get("status") or {}).get("conditions") or []}
        progressing = conds.get("Progressing")
        if annotations.get("bench/revision") == str(revision) and progressing \
                and progressing["status"] == "False" \
                and progressing.get("observedGeneration") == work["metadata"].get("generation"):
            on_revision += 1
    state["on_revision"] = on_revision
    return on_revision == clusters and len(works) == clusters


def roll_out(admin: Client, options: Options) -> list[float]:
    """The set created at revision 1, then its template changed for each
    further revision; the wall time of each until rolled_out."""
    walls = []
    for revision in range(1, options.revisions + 1):
        started = time.monotonic()
        if revision == 1:
            admin.request("POST", MWRS_PATH.rsplit("/", 1)[0], manifest_work_replica_set(options))
        else:
            admin.merge_patch(MWRS_PATH, {"spec": {"manifestWorkTemplate": template(revision)}})
        state: dict = {"seen_progressing": revision == 1}
        wait(lambda: rolled_out(admin, revision, options.clusters, state), options.timeout_s,
             f"revision {revision} rolled out to {options.clusters} clusters (last: {state})", interval=0.25)
        walls.append(time.monotonic() - started)
    return walls


def metrics(admin: Client) -> dict:
    # The page is text, not JSON.
    connection = admin._connect(30)
    connection.request("GET", "/metrics", headers=admin.headers)
    text = connection.getresponse().read().decode()
    connection.close()
    return apimetrics.parse(text)


def run(options: Options, say) -> Round:
    options.dir.parent.mkdir(parents=True, exist_ok=True)
    policy = options.dir.parent / f"{options.dir.name}.audit-policy.yaml"
    policy.write_text(apimetrics.AUDIT_POLICY)
    bed = beds.up(options.dir, options.clusters, False, say, hub_only=True, audit_policy=policy)
    processes = Processes(bed.dir)
    result = Round(options.controller, options.clusters)
    reporter = None
    try:
        bed.kubectl().run("apply", "-k", str(options.root / "deploy" / "overlays" / "sidecar"))
        bed.kubectl().apply(objects.documents(world(options)))
        admin = Client(bed.ports["hub"], bed.pki, user_agent="localhub-bench")
        wait(lambda: decided(admin) == options.clusters, 120, f"the Placement to decide {options.clusters} clusters")
        _, token = token_kubeconfig(bed, BENCH_NS, "status-reporter")
        reporter = Reporter(lambda: Client(bed.ports["hub"], bed.pki, token, "localhub-bench-reporter"),
                            options.delay_s)
        reporter.start()
        started = time.time()
        running = start_ours(bed, options, processes) if options.controller == "ours" else start_ocm(bed, processes)
        cpu_before = [cpu_seconds(p.pid) for p in running]
        before, t0 = metrics(admin), time.time()
        reported_before, errors_before = dict(reporter.counts), len(reporter.errors)
        result.walls = roll_out(admin, options)
        after, t1 = metrics(admin), time.time()
        result.cpu_s = cpu_seconds(running[0].pid) - cpu_before[0]
        result.cpu_total_s = cpu_seconds(running[0].pid)
        result.peak_rss_kib = peak_rss_kib(running[0].pid)
        for name, process, cpu in zip(("rollout-gateway", "echo-plugin"), running[1:], cpu_before[1:]):
            result.helpers[name] = {"cpu_s": cpu_seconds(process.pid) - cpu, "peak_rss_kib": peak_rss_kib(process.pid)}
        result.metrics = {k: {" ".join(key): v for key, v in c.items()} for k, c in apimetrics.diff(before, after).items()}
        result.reporter = {k: v - reported_before.get(k, 0) for k, v in reporter.counts.items()}
        result.reporter["errors"] = reporter.errors[errors_before:errors_before + 5]
        processes.stop_all()
        time.sleep(1.5)  # the API server logs each watch once it is closed
        lost = (bed.dir / "logs" / "kube-apiserver-hub.log").read_text(errors="replace").count("Error in audit plugin")
        if lost:
            raise RoundError(f"the API server could not write {lost} audit events (a full disk?): "
                             f"{bed.dir / 'logs' / 'kube-apiserver-hub.log'}")
        user = OURS_USER if options.controller == "ours" else OCM_USER
        found = apimetrics.audit(bed.dir / "logs" / "hub-audit.log", {user, REPORTER_USER},
                                 {"start": (started, t0), "rollout": (t0, t1), "stop": (t1, time.time() + 60)})
        result.audit = {"controller": {k: {w: dict(c) for w, c in v[user].items()} if k != "codes"
                                       else {str(code): n for code, n in v[user].items()}
                                       for k, v in found.items()},
                        "reporter": {w: dict(c) for w, c in found["requests"][REPORTER_USER].items()}}
        return result
    finally:
        if reporter is not None:
            reporter.stop()
        processes.stop_all()
        beds.down(bed.dir, say)
        if not options.keep:
            shutil.rmtree(bed.dir, ignore_errors=True)
            policy.unlink(missing_ok=True)


def decided(admin: Client) -> int:
    listed = admin.get(f"/apis/cluster.open-cluster-management.io/v1beta1/namespaces/{NS}/placementdecisions")
    return sum(len((d.get("status") or {}).get("decisions") or []) for d in listed["items"])
