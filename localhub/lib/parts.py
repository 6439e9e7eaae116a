"""The parts of a localhub bed: which Go packages, built from which pinned
modules, and where the built binaries are kept.

The versions live in one place, ../parts/go.mod (its `require` and `replace`
lines, checked by ../parts/go.sum); this module builds the `tool` packages
that go.mod names, once per set of versions, into a cache outside the
checkout, and finds OCM's CRDs in the Go module cache. It builds the `tool`
packages of another Go module the same way (`bin_dir(module=..., cache=...)`:
deploy/helm's pinned helm).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARTS = HERE.parent / "parts"

# What `go build` calls a binary (its package path's last element, or the one
# before a major-version suffix), renamed where that says nothing: etcd's main
# package is its server module's root.
RENAME = {"server": "etcd"}

# OCM's CRDs, as paths inside the open-cluster-management.io/api module: the
# hub's are those OCM's cluster-manager operator installs on a hub; a managed
# cluster's are those its klusterlet installs there.
HUB_CRDS = (
    "cluster/v1/0000_00_clusters.open-cluster-management.io_managedclusters.crd.yaml",
    "cluster/v1beta2/0000_00_clusters.open-cluster-management.io_managedclustersets.crd.yaml",
    "cluster/v1beta2/0000_01_clusters.open-cluster-management.io_managedclustersetbindings.crd.yaml",
    "cluster/v1beta1/0000_02_clusters.open-cluster-management.io_placements.crd.yaml",
    "cluster/v1beta1/0000_03_clusters.open-cluster-management.io_placementdecisions.crd.yaml",
    "cluster/v1alpha1/0000_05_clusters.open-cluster-management.io_addonplacementscores.crd.yaml",
    "work/v1/0000_00_work.open-cluster-management.io_manifestworks.crd.yaml",
    "work/v1alpha1/0000_00_work.open-cluster-management.io_manifestworkreplicasets.crd.yaml",
    "addon/v1beta1/0000_00_addon.open-cluster-management.io_clustermanagementaddons.crd.yaml",
    "addon/v1beta1/0000_01_addon.open-cluster-management.io_managedclusteraddons.crd.yaml",
    "operator/v1/0000_01_operator.open-cluster-management.io_clustermanagers.crd.yaml",
)
SPOKE_CRDS = (
    "work/v1/0000_01_work.open-cluster-management.io_appliedmanifestworks.crd.yaml",
    "cluster/v1alpha1/0000_02_clusters.open-cluster-management.io_clusterclaims.crd.yaml",
)

# sum.golang.org lists no checksum for these modules; go.sum pins them.
GONOSUMDB = "open-cluster-management.io,sigs.k8s.io/about-api"


class PartsError(Exception):
    """Go is missing, or a part could not be built or found."""


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["GONOSUMDB"] = GONOSUMDB
    env["GOFLAGS"] = "-mod=readonly"
    env.setdefault("CGO_ENABLED", "0")
    return env


def go() -> str:
    found = shutil.which("go")
    if not found:
        raise PartsError("Go is not installed: localhub builds its parts from Go modules "
                         "(Go 1.25 or later; see docs/localhub.md)")
    return found


def project_cache() -> Path:
    """The project's cache outside the checkout: ~/.cache/rollout-hooks."""
    return Path(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")) / "rollout-hooks"


def cache_root() -> Path:
    return Path(os.environ.get("LOCALHUB_CACHE") or project_cache() / "localhub")


def tools(module: Path = PARTS) -> list[str]:
    """The packages the `tool` lines of `module`'s go.mod name, in order."""
    packages, inside = [], False
    for line in (module / "go.mod").read_text().splitlines():
        line = line.strip()
        if line.startswith("tool ") and line != "tool (":
            packages.append(line.split()[1])
        elif line == "tool (":
            inside = True
        elif inside and line == ")":
            break
        elif inside and line:
            packages.append(line)
        elif line.startswith("tool "):
            packages.append(line.split()[1])
    return packages


def key(module: Path = PARTS) -> str:
    """What the built binaries depend on: go.mod, go.sum, our own Go
    sources and the Go version."""
    digest = hashlib.sha256()
    version = subprocess.run([go(), "version"], capture_output=True, text=True, check=True).stdout
    digest.update(version.encode())
    for path in sorted([module / "go.mod", module / "go.sum", *(module / "cmd").rglob("*.go")]):
        digest.update(str(path.relative_to(module)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def go_name(package: str) -> str:
    elements = package.rstrip("/").split("/")
    if len(elements) > 1 and re.fullmatch(r"v[0-9]+", elements[-1]):
        return elements[-2]
    return elements[-1]


def binary_name(package: str) -> str:
    return RENAME.get(go_name(package), go_name(package))


def bin_dir(quiet: bool = False, module: Path = PARTS, cache: Path | None = None,
            name: str | None = None) -> Path:
    """The directory of the binaries `module`'s go.mod names as tools, for
    its versions, building them first when the cache (`cache`, by default
    localhub's) has none. `name` (by default localhub, or the first tool's
    binary for another module) prefixes what the build says."""
    target = (cache or cache_root()) / f"bin-{key(module)}"
    if (target / ".complete").exists():
        return target
    build(target, quiet, module, name)
    return target


def build(target: Path, quiet: bool, module: Path = PARTS, name: str | None = None) -> None:
    packages = tools(module)
    names = ", ".join(binary_name(p) for p in packages)
    name = name or ("localhub" if module == PARTS else binary_name(packages[0]))
    say = (lambda *_: None) if quiet else (lambda msg: print(f"{name}: {msg}", file=sys.stderr, flush=True))
    say(f"building {names} from the modules pinned in {module}/go.mod "
        "(once per set of versions; 10 to 15 minutes on 2 cores with an empty Go cache)")
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix="building.", dir=target.parent))
    started = time.monotonic()
    done = threading.Event()

    def progress() -> None:
        while not done.wait(60):
            say(f"still building ({int(time.monotonic() - started)} s)")

    threading.Thread(target=progress, daemon=True).start()
    try:
        result = subprocess.run(
            [go(), "build", "-trimpath", "-ldflags=-s -w", "-o", str(building) + "/", *packages],
            cwd=module, env=go_env(), capture_output=True, text=True)
        if result.returncode != 0:
            raise PartsError(f"go build failed:\n{result.stderr[-4000:]}")
        for package in packages:
            built = building / go_name(package)
            if built.name != binary_name(package):
                built.rename(building / binary_name(package))
        (building / ".complete").write_text(json.dumps({"packages": packages}) + "\n")
        if target.exists():
            shutil.rmtree(target)
        building.rename(target)
    finally:
        done.set()
        shutil.rmtree(building, ignore_errors=True)
    say(f"built in {int(time.monotonic() - started)} s into {target}")


def module_dir(module: str) -> Path:
    """Where the Go module cache holds `module` at the version go.mod pins."""
    result = subprocess.run([go(), "mod", "download", "-json", module], cwd=PARTS, env=go_env(),
                            capture_output=True, text=True)
    info = json.loads(result.stdout or "{}")
    if result.returncode != 0 or "Dir" not in info:
        raise PartsError(f"cannot download {module}: {info.get('Error') or result.stderr.strip()}")
    return Path(info["Dir"])


def crds(paths: tuple[str, ...]) -> list[Path]:
    root = module_dir("open-cluster-management.io/api")
    files = [root / p for p in paths]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise PartsError(f"OCM's CRDs are not where the pinned api module keeps them: {missing}")
    return files


def versions() -> dict[str, str]:
    """The pinned version of each module a part is built from (go.mod)."""
    wanted = ("go.etcd.io/etcd/server/v3", "k8s.io/kubernetes", "open-cluster-management.io/ocm",
              "open-cluster-management.io/api")
    found = {}
    for line in (PARTS / "go.mod").read_text().splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] in wanted:
            found[words[0]] = words[1]
    return found
