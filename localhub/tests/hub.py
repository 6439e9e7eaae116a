"""Helpers of the real-hub tier: kubectl against the bed, and the project's
processes with their logs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path


class Hub:
    """A localhub bed, read and written with its own kubectl."""

    def __init__(self, dir: Path, kubectl: Path, clusters: list[str]):
        self.dir = dir
        self.kubectl_bin = kubectl
        self.clusters = clusters

    def kubeconfig(self, name: str = "hub") -> Path:
        return self.dir / f"{name}.kubeconfig"

    def kubectl(self, *args: str, on: str = "hub", kubeconfig: Path | None = None, stdin: str | None = None,
                check: bool = True) -> subprocess.CompletedProcess:
        config = kubeconfig or self.kubeconfig(on)
        result = subprocess.run([str(self.kubectl_bin), "--kubeconfig", str(config), *args],
                                input=stdin, capture_output=True, text=True)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
        return result

    def get(self, kind: str, name: str, namespace: str | None = None, on: str = "hub") -> dict | None:
        args = ["get", kind, name, "-o", "json"] + (["-n", namespace] if namespace else [])
        result = self.kubectl(*args, on=on, check=False)
        if result.returncode != 0:
            if "NotFound" in result.stderr or "not found" in result.stderr:
                return None
            raise AssertionError(f"kubectl get {kind} {name}: {result.stderr}")
        return json.loads(result.stdout)

    def list(self, kind: str, namespace: str | None = None, on: str = "hub", selector: str | None = None) -> list[dict]:
        args = ["get", kind, "-o", "json"] + (["-n", namespace] if namespace else ["-A"])
        if selector:
            args += ["-l", selector]
        return json.loads(self.kubectl(*args, on=on).stdout)["items"]

    def apply(self, manifest: dict | str, on: str = "hub", *extra: str) -> None:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        self.kubectl("apply", "-f", "-", *extra, on=on, stdin=text)

    def wait_for(self, probe, timeout_s: float, what: str, interval: float = 0.3):
        """probe()'s first truthy value within timeout_s, else a failure naming what."""
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            last = probe()
            if last:
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {last!r})")

    def token_kubeconfig(self, namespace: str, account: str) -> Path:
        """A kubeconfig that authenticates as the ServiceAccount, with a token
        from the TokenRequest API (as a projected token in a pod would be)."""
        token = self.kubectl("create", "token", account, "-n", namespace, "--duration", "2h").stdout.strip()
        config = json.loads(self.kubectl("config", "view", "--raw", "-o", "json").stdout)
        config["users"] = [{"name": account, "user": {"token": token}}]
        for context in config["contexts"]:
            context["context"]["user"] = account
        path = self.dir / f"{namespace}.{account}.kubeconfig"
        path.write_text(json.dumps(config))
        path.chmod(0o600)
        return path

    def bed_rss_mib(self) -> float:
        """Resident memory of every process the bed started."""
        state = json.loads((self.dir / "localhub.json").read_text())
        total = 0
        for process in state["processes"]:
            try:
                status = Path(f"/proc/{process['pid']}/status").read_text()
            except OSError:
                continue
            match = re.search(r"VmRSS:\s+(\d+) kB", status)
            total += int(match.group(1)) if match else 0
        return total / 1024


class Process:
    def __init__(self, name: str, popen: subprocess.Popen, log: Path):
        self.name, self.popen, self.log = name, popen, log

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_line(self, pattern: str, timeout_s: float) -> re.Match:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            match = re.search(pattern, self.text())
            if match:
                return match
            if self.popen.poll() is not None:
                raise AssertionError(f"{self.name} exited {self.popen.returncode}:\n{self.text()[-3000:]}")
            time.sleep(0.1)
        raise AssertionError(f"{self.name} printed no /{pattern}/ in {timeout_s} s:\n{self.text()[-3000:]}")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


class Processes:
    """The project's processes of a run, each with its log file."""

    def __init__(self, dir: Path):
        self.dir = dir
        dir.mkdir(parents=True, exist_ok=True)
        self.running: list[Process] = []

    def start(self, name: str, args: list[str], env: dict | None = None) -> Process:
        log = self.dir / f"{name}.log"
        with open(log, "wb") as out:
            popen = subprocess.Popen([str(a) for a in args], stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        process = Process(name, popen, log)
        self.running.append(process)
        return process

    def stop_all(self) -> None:
        for process in reversed(self.running):
            process.stop()
