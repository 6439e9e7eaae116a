"""Prometheus from Debian's `prometheus` package, unpacked without
installing it (`apt-get download` and `dpkg-deb -x`: no daemon is set up,
no root needed once the package lists exist) into a cache outside the
checkout, once: ~/.cache/rollout-hooks/prometheus (or $PROMETHEUS_CACHE).
It holds both binaries the tests use, `prometheus` and `promtool`.

`python3 test-support/prometheus/fetch NAME` prints the path of one;
deploy/check/alerts.py imports `find` for promtool.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

# The Debian package both binaries come from.
PACKAGE = "prometheus"


def cache_dir() -> Path:
    """Where the package is unpacked."""
    explicit = os.environ.get("PROMETHEUS_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "rollout-hooks" / "prometheus"


def find(name: str, cache: Path | None = None) -> tuple[str | None, str]:
    """`name` (`prometheus` or `promtool`) on PATH, else from Debian's
    package unpacked into `cache`, downloaded and unpacked the first time.
    (path or None, what happened)."""
    on_path = shutil.which(name)
    if on_path:
        return on_path, f"{name} on PATH ({on_path})"
    unpacked = (cache or cache_dir()) / "deb"
    binary = unpacked / "usr" / "bin" / name
    if binary.is_file():
        return str(binary), f"{name} of Debian's {PACKAGE} package ({binary})"
    error = unpack(unpacked)
    if error:
        return None, error
    if not binary.is_file():
        return None, f"Debian's {PACKAGE} package has no usr/bin/{name}"
    return str(binary), f"{name} of Debian's {PACKAGE} package, unpacked into {unpacked}"


def unpack(unpacked: Path) -> str | None:
    """Downloads the package and unpacks it into `unpacked` (replacing it
    whole, so a half-done unpack is never used). None, or what failed."""
    if not (shutil.which("apt-get") and shutil.which("dpkg-deb")):
        return f"no apt-get/dpkg-deb to fetch Debian's {PACKAGE} package"
    unpacked.parent.mkdir(parents=True, exist_ok=True)
    download = Path(tempfile.mkdtemp(prefix="prometheus-deb."))
    try:
        def fetch() -> subprocess.CompletedProcess:
            return subprocess.run(["apt-get", "download", PACKAGE], cwd=download,
                                  capture_output=True, text=True, timeout=600)
        got = fetch()
        if got.returncode != 0:
            # No package lists yet (a fresh container): read them once.
            subprocess.run(["apt-get", "update"], capture_output=True, text=True, timeout=600)
            got = fetch()
        debs = sorted(download.glob(f"{PACKAGE}_*.deb"))
        if got.returncode != 0 or not debs:
            return f"apt-get download {PACKAGE} failed: {got.stderr.strip()[-300:]}"
        building = Path(tempfile.mkdtemp(prefix="prometheus-deb.", dir=unpacked.parent))
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(building)], check=True, timeout=300)
        shutil.rmtree(unpacked, ignore_errors=True)
        building.rename(unpacked)
        return None
    except (OSError, subprocess.SubprocessError) as err:
        return f"unpacking Debian's {PACKAGE} package failed: {err}"
    finally:
        shutil.rmtree(download, ignore_errors=True)
