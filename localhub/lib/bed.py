"""A localhub bed: start its processes (`up`) and stop every one (`down`).

One etcd; one kube-apiserver for the hub and one per managed cluster, all on
that etcd under their own --etcd-prefix (one API server cannot host several
work agents: their AppliedManifestWorks would collide); kube-controller-manager
on the hub for garbage collection and namespace deletion; OCM's placement
controller on the hub; OCM's work agent for each managed cluster; optionally
OCM's hub work controller with its ManifestWorkReplicaSet controller on; and
localhub-spoke-status for the workloads (see docs/localhub.md).
Everything listens on 127.0.0.1 only.

A hub-only bed (`hub_only`) is the hub's API server and OCM's placement
controller with N registered clusters and nothing behind them: no cluster API
servers, agents or kube-controller-manager. Something else reports the works'
status there (localhub/bench's status reporter).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import kube, objects, parts

STATE = "localhub.json"
READY_TIMEOUT_S = 180


class BedError(Exception):
    """The bed could not be started or stopped as asked."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Bed:
    dir: Path
    bins: Path
    clusters: list[str]
    hub_only: bool = False
    audit_policy: Path | None = None
    processes: list[dict] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def pki(self) -> Path:
        return self.dir / "pki"

    def kubeconfig(self, name: str) -> Path:
        return self.dir / f"{name}.kubeconfig"

    def kubectl(self, name: str = "hub") -> kube.Kubectl:
        return kube.Kubectl(self.bins / "kubectl", self.kubeconfig(name))

    def start(self, name: str, *args: str) -> subprocess.Popen:
        logs = self.dir / "logs"
        logs.mkdir(exist_ok=True)
        log = open(logs / f"{name}.log", "ab")
        process = subprocess.Popen([str(self.bins / args[0]), *args[1:]], stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                   cwd=self.dir)
        log.close()
        self.processes.append({"name": name, "pid": process.pid, "log": str(logs / f"{name}.log")})
        self.save()
        return process

    def save(self) -> None:
        state = {"dir": str(self.dir), "bins": str(self.bins), "clusters": self.clusters,
                 "hub_only": self.hub_only, "ports": self.ports, "processes": self.processes, "versions": parts.versions()}
        (self.dir / STATE).write_text(json.dumps(state, indent=2) + "\n")


def up(dir: Path, clusters: int, mwrs_controller: bool, say, hub_only: bool = False,
       audit_policy: Path | None = None) -> Bed:
    """Starts a bed; `audit_policy` turns the hub's audit log on
    (DIR/logs/hub-audit.log, JSON lines) with that policy file."""
    if (dir / STATE).exists():
        raise BedError(f"{dir} holds a bed already: `localhub down --dir {dir}` first")
    bins = parts.bin_dir()
    dir.mkdir(parents=True, exist_ok=True)
    bed = Bed(dir=dir.resolve(), bins=bins, clusters=[f"cluster{i}" for i in range(1, clusters + 1)],
              hub_only=hub_only, audit_policy=audit_policy)
    started = time.monotonic()
    try:
        subprocess.run([str(bins / "localhub-pki"), str(bed.pki)], check=True)
        start_api_servers(bed, say)
        objects.install(bed, say)
        start_ocm(bed, mwrs_controller, say)
    except BaseException:
        say("start failed; stopping what was started (logs are in "
            f"{bed.dir / 'logs'})")
        down(bed.dir, say=lambda *_: None)
        raise
    spokes = "" if hub_only else f" and {', '.join(str(bed.kubeconfig(c)) for c in bed.clusters)}"
    say(f"ready in {time.monotonic() - started:.1f} s: {bed.kubeconfig('hub')}{spokes}")
    return bed


def start_api_servers(bed: Bed, say) -> None:
    etcd_port, etcd_peer = free_port(), free_port()
    bed.ports["etcd"] = etcd_port
    etcd = bed.start("etcd", "etcd", "--name", "localhub", "--data-dir", str(bed.dir / "etcd"),
                     "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
                     "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
                     "--listen-peer-urls", f"http://127.0.0.1:{etcd_peer}",
                     "--initial-advertise-peer-urls", f"http://127.0.0.1:{etcd_peer}",
                     "--initial-cluster", f"localhub=http://127.0.0.1:{etcd_peer}",
                     # A bed is thrown away after use: no fsync per write.
                     "--unsafe-no-fsync", "--listen-metrics-urls", f"http://127.0.0.1:{free_port()}")
    say(f"etcd on 127.0.0.1:{etcd_port}")
    servers = []
    for name in ["hub"] if bed.hub_only else ["hub", *bed.clusters]:
        port = free_port()
        bed.ports[name] = port
        servers.append((name, port, bed.start(f"kube-apiserver-{name}", "kube-apiserver",
                                              *api_server_args(bed, name, port, etcd_port))))
    deadline = time.monotonic() + READY_TIMEOUT_S
    for name, port, process in servers:
        kube.wait_ready(port, bed.pki, deadline, lambda p=process, e=etcd: p.poll() is None and e.poll() is None)
        kube.write_kubeconfig(bed.kubeconfig(name), name, port, bed.pki, kube.admin_user(bed.pki))
        say(f"kube-apiserver of {name} ready on 127.0.0.1:{port}")
    bed.save()


def api_server_args(bed: Bed, name: str, port: int, etcd_port: int) -> list[str]:
    pki = bed.pki
    return [
        "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
        "--secure-port", str(port), "--cert-dir", str(bed.dir / "certs" / name),
        "--tls-cert-file", str(pki / "serving.crt"), "--tls-private-key-file", str(pki / "serving.key"),
        "--client-ca-file", str(pki / "ca.crt"),
        # Front-proxy authentication, which OCM's controllers read from
        # kube-system/extension-apiserver-authentication (and log errors
        # about every few seconds when it is empty). The allowed name is one
        # no certificate of the bed carries: nobody can use it.
        "--requestheader-client-ca-file", str(pki / "ca.crt"),
        "--requestheader-allowed-names", "localhub-front-proxy",
        "--requestheader-username-headers", "X-Remote-User",
        "--requestheader-group-headers", "X-Remote-Group",
        "--requestheader-extra-headers-prefix", "X-Remote-Extra-",
        "--etcd-servers", f"http://127.0.0.1:{etcd_port}", "--etcd-prefix", f"/{name}",
        # The hub authorizes as a real one does: the project's ClusterRoles
        # are what let its controller act (docs/localhub.md).
        "--authorization-mode", "RBAC",
        "--service-account-issuer", f"https://localhub.{name}.invalid",
        "--service-account-key-file", str(pki / "service-accounts.pub"),
        "--service-account-signing-key-file", str(pki / "service-accounts.key"),
        "--api-audiences", f"https://localhub.{name}.invalid",
        # No Service of the API server to keep (nothing routes to a bed).
        "--endpoint-reconciler-type", "none",
        "--enable-priority-and-fairness=false", "--profiling=false",
        "--service-cluster-ip-range", "10.96.0.0/16",
    ] + audit_args(bed, name)


def audit_args(bed: Bed, name: str) -> list[str]:
    if name != "hub" or bed.audit_policy is None:
        return []
    return ["--audit-policy-file", str(bed.audit_policy),
            "--audit-log-path", str(bed.dir / "logs" / "hub-audit.log"), "--audit-log-format", "json",
            "--audit-log-maxsize", "0", "--audit-log-maxbackup", "0"]


def start_ocm(bed: Bed, mwrs_controller: bool, say) -> None:
    hub = str(bed.kubeconfig("hub"))
    waits = []
    if not bed.hub_only:
        start_controller_manager(bed, waits)
    port = free_port()
    waits.append(("OCM's placement controller", port, bed.start(
        "placement", "placement", "controller", "--kubeconfig", hub, "--namespace",
        objects.HUB_NAMESPACE, "--listen", f"127.0.0.1:{port}", "--disable-leader-election")))
    if mwrs_controller:
        port = free_port()
        waits.append(("OCM's work controller", port, bed.start(
            "work-manager", "work", "manager", "--kubeconfig", hub, "--namespace", objects.HUB_NAMESPACE,
            "--listen", f"127.0.0.1:{port}", "--disable-leader-election",
            "--feature-gates", "ManifestWorkReplicaSet=true")))
    for cluster in [] if bed.hub_only else bed.clusters:
        spoke = str(bed.kubeconfig(cluster))
        port = free_port()
        waits.append((f"OCM's work agent of {cluster}", port, bed.start(
            f"work-agent-{cluster}", "work", "agent", "--spoke-cluster-name", cluster,
            "--hub-kubeconfig", hub, "--kubeconfig", spoke, "--spoke-kubeconfig", spoke,
            # Where the agent's "kube" work source finds the hub.
            "--workload-source-config", hub,
            "--namespace", objects.AGENT_NAMESPACE, "--listen", f"127.0.0.1:{port}",
            "--disable-leader-election",
            # How often the agent reads the applied objects' status and
            # evaluates the condition rules (10 s by default).
            "--status-sync-interval", "1s")))
    if not bed.hub_only:
        bed.start("spoke-status", "localhub-spoke-status", "--rollout-time", "1s",
                  *[str(bed.kubeconfig(c)) for c in bed.clusters])
    deadline = time.monotonic() + READY_TIMEOUT_S
    for what, port, process in waits:
        kube.wait_http(f"https://127.0.0.1:{port}/healthz", deadline, lambda p=process: p.poll() is None, what)
        say(f"{what} serving on 127.0.0.1:{port}")
    objects.wait_placement_ready(bed, deadline)


def start_controller_manager(bed: Bed, waits: list) -> None:
    hub = str(bed.kubeconfig("hub"))
    port = free_port()
    waits.append(("kube-controller-manager", port, bed.start(
        "kube-controller-manager", "kube-controller-manager", "--kubeconfig", hub,
        "--controllers", "garbage-collector-controller,namespace-controller,clusterrole-aggregation-controller",
        "--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", str(port),
        "--authentication-kubeconfig", hub, "--authorization-kubeconfig", hub)))


def alive(pid: int, dir: Path) -> bool:
    """Whether pid is still one of this bed's processes (not a reused pid)."""
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return Path(cwd) == dir


def down(dir: Path, say) -> int:
    """Stops every process of the bed in dir: SIGTERM, then SIGKILL after 10 s;
    etcd last, once the API servers on it have stopped (an API server whose
    etcd is gone does not finish its shutdown). Returns how many were running."""
    state_file = dir / STATE
    if not state_file.exists():
        raise BedError(f"no bed in {dir} (no {STATE})")
    state = json.loads(state_file.read_text())
    root = Path(state["dir"])
    running = [p for p in state["processes"] if alive(p["pid"], root)]
    deadline = time.monotonic() + 10
    for group in ([p for p in running if p["name"] != "etcd"], [p for p in running if p["name"] == "etcd"]):
        for process in reversed(group):
            os.kill(process["pid"], signal.SIGTERM)
        while any(alive(p["pid"], root) for p in group) and time.monotonic() < deadline:
            time.sleep(0.1)
    for process in running:
        if alive(process["pid"], root):
            say(f"{process['name']} (pid {process['pid']}) did not stop on SIGTERM: killed")
            os.kill(process["pid"], signal.SIGKILL)
    state_file.unlink()
    say(f"stopped {len(running)} processes")
    return len(running)
