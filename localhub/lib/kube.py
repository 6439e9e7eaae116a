"""Talking to a bed's API servers: kubeconfigs, readiness, and kubectl."""

from __future__ import annotations

import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path


class NotReady(Exception):
    """An API server or object did not become ready in time."""


def write_kubeconfig(path: Path, name: str, port: int, pki: Path, user: dict[str, str]) -> None:
    """A kubeconfig for the API server on 127.0.0.1:port, trusting the bed's
    CA, as `user` (client-certificate/client-key paths, or a token)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {
            "server": f"https://127.0.0.1:{port}",
            "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)


def admin_user(pki: Path) -> dict[str, str]:
    return {"client-certificate": str(pki / "admin.crt"), "client-key": str(pki / "admin.key")}


def _context(pki: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return context


def wait_ready(port: int, pki: Path, deadline: float, alive) -> None:
    """Until the API server on port answers /readyz with ok; `alive()` says
    whether its process still runs (a dead one fails at once)."""
    context = _context(pki)
    last = "no answer"
    while time.monotonic() < deadline:
        if not alive():
            raise NotReady(f"the API server on port {port} exited ({last})")
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=context,
                                        timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError, ssl.SSLError) as error:
            last = str(error)
        time.sleep(0.2)
    raise NotReady(f"the API server on port {port} was not ready in time ({last})")


def wait_http(url: str, deadline: float, alive, what: str) -> None:
    """Until url answers at all (OCM's controllers serve /healthz over TLS
    with a certificate of their own: any HTTP answer means serving)."""
    context = ssl._create_unverified_context()  # noqa: S323 - loopback, the controller's self-signed cert
    last = "no answer"
    while time.monotonic() < deadline:
        if not alive():
            raise NotReady(f"{what} exited ({last})")
        try:
            with urllib.request.urlopen(url, context=context, timeout=2):
                return
        except urllib.error.HTTPError:
            return
        except (urllib.error.URLError, OSError, ssl.SSLError) as error:
            last = str(error)
        time.sleep(0.2)
    raise NotReady(f"{what} did not serve {url} in time ({last})")


class Kubectl:
    """The bed's own kubectl (built with the API servers) against one kubeconfig."""

    def __init__(self, kubectl: Path, kubeconfig: Path):
        self.kubectl = kubectl
        self.kubeconfig = kubeconfig

    def run(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run([str(self.kubectl), "--kubeconfig", str(self.kubeconfig), *args],
                                input=stdin, capture_output=True, text=True)
        if check and result.returncode != 0:
            raise subprocess.CalledProcessError(result.returncode, result.args, result.stdout,
                                                result.stderr)
        return result

    def apply(self, manifest: str) -> None:
        self.run("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=manifest)

    def apply_files(self, files: list[Path]) -> None:
        args = []
        for f in files:
            args += ["-f", str(f)]
        self.run("apply", "--server-side", "--force-conflicts", *args)

    def wait_established(self, crds: list[str], timeout_s: int) -> None:
        self.run("wait", "--for=condition=Established", f"--timeout={timeout_s}s",
                 *[f"crd/{name}" for name in crds])
