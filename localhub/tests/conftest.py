"""The real-hub tier's fixtures: one localhub bed (a real kube-apiserver with
OCM's real CRDs, OCM's placement controller and work agents) for the whole
run, the project installed on it with `kubectl apply -k`, and the project's
real binaries (rollout-controller, rollout-gateway, the example plugins) as
processes on 127.0.0.1.

The binaries come from $LOCALHUB_TARGET (default: target/debug), built by
localhub/test before pytest starts. Nothing here skips: a missing part fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "localhub"))
sys.dont_write_bytecode = True

from lib import bed as localhub  # noqa: E402
from tests.hub import Hub, Processes  # noqa: E402

TARGET = Path(os.environ.get("LOCALHUB_TARGET") or ROOT / "target" / "debug")
BINARIES = ("rollout-controller", "rollout-gateway", "traffic-weights", "smoke-test", "rollback-mutator")


def binary(name: str) -> Path:
    path = TARGET / name
    if not path.exists():
        pytest.fail(f"{path} is missing: build it first (localhub/test runs cargo build)")
    return path


@pytest.fixture(scope="session")
def bed_dir():
    dir = Path(tempfile.mkdtemp(prefix="localhub-tier."))
    yield dir
    if os.environ.get("LOCALHUB_KEEP") != "1":
        shutil.rmtree(dir, ignore_errors=True)


@pytest.fixture(scope="session")
def hub(bed_dir):
    """A bed with three managed clusters; stopped at the end of the run."""
    for name in BINARIES:
        binary(name)
    started = time.monotonic()
    result = subprocess.run([str(ROOT / "localhub" / "localhub"), "up", "--clusters", "3",
                             "--dir", str(bed_dir / "bed")], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.fail(f"localhub up failed:\n{result.stderr}")
    print(f"\nlocalhub up: {time.monotonic() - started:.1f} s", file=sys.stderr)
    state = json.loads((bed_dir / "bed" / localhub.STATE).read_text())
    hub = Hub(bed_dir / "bed", Path(state["bins"]) / "kubectl", state["clusters"])
    yield hub
    print(f"\nlocalhub bed at its end: {hub.bed_rss_mib():.0f} MiB resident", file=sys.stderr)
    subprocess.run([str(ROOT / "localhub" / "localhub"), "down", "--dir", str(bed_dir / "bed")],
                   check=False)


@pytest.fixture(scope="session")
def processes(bed_dir):
    running = Processes(bed_dir / "processes")
    yield running
    running.stop_all()


@pytest.fixture(scope="session")
def installed(hub):
    """The hub overlay installed as an operator installs it."""
    hub.kubectl("apply", "-k", str(ROOT / "deploy" / "overlays" / "sidecar"))
    hub.wait_for(lambda: hub.get("serviceaccount", "rollout-controller", "rollout-hooks"), 30,
                 "the controller's ServiceAccount")
    return hub


PIPELINE = "safe-rollout"
PLUGINS = ("traffic-weights", "smoke-test", "rollback-mutator")


@pytest.fixture(scope="session")
def gateway(processes, bed_dir):
    """The three example plugins and the gateway with the example overlay's
    pipeline `safe-rollout`; returns the gateway's URL."""
    endpoints = {}
    for name in PLUGINS:
        plugin = processes.start(name, [binary(name), "--listen", "127.0.0.1:0"])
        endpoints[name] = plugin.wait_line(rf"{name} listening grpc=(\S+)", 30).group(1)
    registry = bed_dir / "registry.yaml"
    registry.write_text("defaults:\n  timeout: 10s\n  failurePolicy: Fail\nplugins:\n" + "".join(
        f"  - name: {n}\n    endpoint: {e}\n    insecure: true\n" for n, e in endpoints.items())
        + f"pipelines:\n  - name: {PIPELINE}\n    plugins: [{', '.join(PLUGINS)}]\n")
    gw = processes.start("rollout-gateway", [binary("rollout-gateway"), "--config", registry,
                                             "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
    address = gw.wait_line(r"rollout-gateway listening grpc=(\S+)", 30).group(1)
    return f"http://{address}"


class Controller:
    def __init__(self, process, health: str, kubeconfig: Path):
        self.process, self.health, self.kubeconfig = process, health, kubeconfig

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://{self.health}/metrics", timeout=5) as answer:
            return answer.read().decode()


@pytest.fixture(scope="session")
def controller(installed, gateway, processes):
    """`rollout-controller run` as the overlay's ServiceAccount, with a token
    from the TokenRequest API: RBAC on the hub decides what it may do."""
    kubeconfig = installed.token_kubeconfig("rollout-hooks", "rollout-controller")
    health = f"127.0.0.1:{localhub.free_port()}"
    process = processes.start("rollout-controller", [
        binary("rollout-controller"), "run", "--kubeconfig", kubeconfig, "--gateway", gateway,
        "--health-listen", health, "--hub-name", "localhub",
        # OCM's controller, started by test_two_writers, holds reconciles back
        # this long after its last status write (2 min by default), and the
        # works it rewrote are left alone this long before they are taken
        # over (10 min by default).
        "--other-writer-quiet", "10s", "--conflict-backoff", "10s"], env={"RUST_LOG": os.environ.get("LOCALHUB_RUST_LOG", "info")})
    def ready():
        if process.popen.poll() is not None:
            raise AssertionError(f"rollout-controller exited:\n{process.text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://{health}/readyz", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    installed.wait_for(ready, 60, "rollout-controller's /readyz")
    yield Controller(process, health, kubeconfig)
    process.stop()



@pytest.fixture(scope="session")
def first_revision(controller, hub):
    """The example rolled out to every cluster; its revision."""
    from tests.rollout import roll_out_example
    return roll_out_example(controller, hub)
