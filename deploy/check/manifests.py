"""The names and the small readers of rendered manifests that the deploy
check's modules share (check.py, exposure.py): the project's namespace and
workload names, pod templates, containers, flags, ports, label selectors,
a container's environment and the kubelet's `$(NAME)` expansion.
Standard library only: check.py imports it before its packages are
installed."""

from __future__ import annotations

import base64
import re

# The controller's namespace, its own: no namespace of Open Cluster
# Management's, so `kubectl delete -k` of an overlay cannot delete one.
PROJECT_NAMESPACE = "rollout-hooks"
CONTROLLER = "rollout-controller"
GATEWAY = "rollout-gateway"
POD_TEMPLATE_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}


def ident(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{obj.get('kind')} {ns + '/' if ns else ''}{meta.get('name')}"


def find(objects: list[dict], kind: str, name: str, namespace: str | None = None) -> dict | None:
    for obj in objects:
        meta = obj.get("metadata") or {}
        if obj.get("kind") == kind and meta.get("name") == name and (
                namespace is None or meta.get("namespace") == namespace):
            return obj
    return None


def pod_spec(obj: dict) -> dict | None:
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if kind in POD_TEMPLATE_KINDS:
        return (spec.get("template") or {}).get("spec")
    if kind == "CronJob":
        return (((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get("spec")
    if kind == "Pod":
        return spec
    return None


def containers(pod: dict) -> list[dict]:
    return [*(pod.get("initContainers") or []), *(pod.get("containers") or []),
            *(pod.get("ephemeralContainers") or [])]


def container(pod: dict, name: str) -> dict | None:
    return next((c for c in pod.get("containers") or [] if c.get("name") == name), None)


def flag_values(args: list[str], flag: str) -> list[str]:
    """The values of `flag` in `args`, written `--flag VALUE` or `--flag=VALUE`."""
    values = []
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            values.append(args[i + 1])
        elif arg.startswith(flag + "="):
            values.append(arg[len(flag) + 1:])
    return values


def flags_of(args: list[str]) -> list[str]:
    return sorted({a.split("=", 1)[0] for a in args if a.startswith("--")})


def port_of(address: str) -> int | None:
    match = re.search(r":(\d+)$", address)
    return int(match.group(1)) if match else None


def probe_port(c: dict, probe: dict) -> int | None:
    """The container port number a probe's httpGet/tcpSocket/grpc port means."""
    handler = probe.get("httpGet") or probe.get("tcpSocket") or probe.get("grpc") or {}
    port = handler.get("port")
    if isinstance(port, int):
        return port
    for p in c.get("ports") or []:
        if p.get("name") == port:
            return p.get("containerPort")
    return None


def selects(selector: dict | None, labels: dict | None) -> bool:
    """Whether a Service selector (a plain map) or a label selector
    (matchLabels; matchExpressions are not used here and never match)
    selects `labels`."""
    selector = selector or {}
    if "matchLabels" in selector or "matchExpressions" in selector:
        if selector.get("matchExpressions"):
            return False
        selector = selector.get("matchLabels") or {}
    return bool(selector) and all((labels or {}).get(k) == v for k, v in selector.items())


# What the kubelet replaces in a container's command, args and env values:
# `$$` is a `$`; `$(NAME)` is NAME's value when NAME is defined before it,
# else left as it is (Kubernetes' third_party/forked/golang/expansion).
_REFERENCE = re.compile(r"\$\$|\$\(([^)]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    """`text` with the `$(NAME)` references to `env` replaced, as the
    kubelet expands a container's args."""
    def one(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))
    return _REFERENCE.sub(one, text)


def environment(objects: list[dict], namespace: str, c: dict) -> tuple[dict[str, str], list[str]]:
    """The variables container `c` gets from its `env`, in order, each value
    expanded from those before it, a `configMapKeyRef` or `secretKeyRef`
    read from the rendered object; and the problems: a reference to an
    object or key not rendered, which the kubelet would not start the
    container with (unless `optional: true`). Other sources (fieldRef,
    resourceFieldRef) are left out."""
    env: dict[str, str] = {}
    problems: list[str] = []
    for var in c.get("env") or []:
        name = var.get("name", "")
        if "value" in var:
            env[name] = expand(str(var["value"]), env)
            continue
        source = var.get("valueFrom") or {}
        for field, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
            ref = source.get(field)
            if ref is None:
                continue
            obj = find(objects, kind, ref.get("name", ""), namespace)
            data = (obj or {}).get("data") or {}
            if ref.get("key") in data:
                value = data[ref["key"]]
                env[name] = base64.b64decode(value).decode() if kind == "Secret" else value
            elif not ref.get("optional"):
                problems.append(f"env {name}: {kind} {namespace}/{ref.get('name')} has no key {ref.get('key')!r}"
                                f"{'' if obj else ' (not rendered)'}")
    return env, problems
