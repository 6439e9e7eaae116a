"""The Helm chart (deploy/chart) against the kustomize overlays: `helm lint`
and `helm template` of the pinned helm (deploy/helm/helm), with the default
values and with the values of each hub overlay, compared object by object
with that overlay's render.

What may differ, and nothing else (docs/deploy.md, "With Helm"):

- The Namespace rollout-hooks: the overlays create it; the chart renders
  none, because Helm keeps its release record in the release's namespace,
  which must exist before the first object is created (`kubectl create
  namespace` with the Pod Security labels, or `--create-namespace`).
- The labels the chart adds to each object's metadata (RELEASE_LABELS).
- A registry file (a ConfigMap's `*.yaml` data) is compared as YAML: the
  overlays' files carry comments, and Helm's toYaml orders the keys; a
  `*.json` file (prometheus-analysis's checks) as JSON.
- The tracing overlay's Jaeger and OpenTelemetry Collector (deploy/tracing):
  the chart exports to the collector `tracing.otlpEndpoint` names, and
  deploys none.
- The images: the chart names REGISTRY/NAME:APPVERSION; the comparison
  sets image.registry=localhost, the overlays' registry.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
from pathlib import Path

from manifests import PROJECT_NAMESPACE, containers, ident, pod_spec

HERE = Path(__file__).resolve().parent
HELM = HERE.parent / "helm" / "helm"
RELEASE = "rollout-hooks"
RELEASE_LABELS = ("app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "helm.sh/chart")
# What helm prints when it follows the chart's links to deploy/crds and the
# monitoring overlay's alerts (one source for each file).
SYMLINK_NOTE = re.compile(r'level=INFO msg="found symbolic link in path')


def helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=600)


def template(chart: Path, values: dict, tmp: Path) -> tuple[list[dict] | None, str]:
    """`helm lint --strict` and `helm template` with `values` (a values
    file): (objects, "") or (None, what failed)."""
    import yaml
    file = tmp / "chart-values.json"
    file.write_text(json.dumps(values))
    lint = helm("lint", "--strict", str(chart), "-n", PROJECT_NAMESPACE, "-f", str(file))
    if lint.returncode != 0:
        return None, "helm lint --strict: " + (lint.stdout + lint.stderr).strip()[-2000:]
    got = helm("template", RELEASE, str(chart), "-n", PROJECT_NAMESPACE, "-f", str(file))
    if got.returncode != 0:
        return None, got.stderr.strip()
    return [d for d in yaml.safe_load_all(got.stdout) if d], ""


def read(path: Path) -> str:
    return path.read_text()


def registry_files(directory: Path) -> dict:
    import yaml
    return {p.stem: yaml.safe_load(p.read_text()) for p in sorted(directory.glob("*.yaml"))}


def combinations(overlays: Path) -> dict[str, dict]:
    """The chart's values for each hub overlay, from the overlay's own files
    (registries, and the certificates make-certs wrote into tls/)."""
    import yaml
    central, plugins = overlays / "central" / "tls", overlays / "example-plugins" / "tls"
    local = {"image": {"registry": "localhost"}}
    return {
        "sidecar": local,
        "tracing": {**local, "tracing": {"otlpEndpoint": "http://otel-collector:4317"}},
        "monitoring": {**local, "monitoring": {"enabled": True}},
        "central": {**local, "gateway": {"mode": "central"}, "central": {
            "hubName": "hub-a",
            "client": {"cert": read(central / "hub-a.crt"), "key": read(central / "hub-a.key"),
                       "serverCA": read(central / "server-ca.crt")},
            "gateway": {"registries": registry_files(overlays / "central" / "registries"),
                        "serverCert": read(central / "gateway.crt"), "serverKey": read(central / "gateway.key"),
                        "clientCA": read(central / "client-ca.crt")}}},
        "example-plugins": {**local, "registry": yaml.safe_load(read(plugins / "config.yaml")),
                            "tls": {"gatewayClient": {"enabled": True, "cert": read(plugins / "gateway-client.crt"),
                                                      "key": read(plugins / "gateway-client.key")}},
                            "examplePlugins": {"enabled": True, "clientCA": read(plugins / "ca.crt"), "certs": {
                                name: {"cert": read(plugins / f"{name}.crt"), "key": read(plugins / f"{name}.key")}
                                for name in ("traffic-weights", "smoke-test", "rollback-mutator",
                                             "prometheus-analysis")}}},
    }


def comparable(objects: list[dict]) -> dict[str, dict]:
    """The objects by identity, without the differences the module's
    docstring lists: release labels dropped, registry files parsed, Secret
    data decoded, containers and volumes ordered by name."""
    import yaml
    out = {}
    for obj in objects:
        obj = json.loads(json.dumps(obj))
        meta = obj.setdefault("metadata", {})
        labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in RELEASE_LABELS}
        meta.pop("labels", None)
        if labels:
            meta["labels"] = labels
        if meta.get("annotations") == {}:
            del meta["annotations"]
        if obj.get("kind") == "ConfigMap":
            obj["data"] = {k: yaml.safe_load(v) if k.endswith(".yaml") else json.loads(v) if k.endswith(".json") else v
                           for k, v in (obj.get("data") or {}).items()}
        if obj.get("kind") == "Secret":
            obj["data"] = {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
        pod = pod_spec(obj)
        for field in ("containers", "volumes"):
            if pod and pod.get(field):
                pod[field] = sorted(pod[field], key=lambda item: item.get("name", ""))
        out[f"{obj.get('apiVersion')} {ident(obj)}"] = obj
    return out


def first_difference(a, b, path: str = "") -> str:
    """The path of the first field where a and b differ, with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(a.keys() | b.keys()):
            if a.get(k) != b.get(k):
                return first_difference(a.get(k), b.get(k), f"{path}.{k}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return first_difference(x, y, f"{path}[{i}]")
    return f"{path or '.'}: overlay {json.dumps(a)[:200]}, chart {json.dumps(b)[:200]}"


def differences(overlay: list[dict], chart: list[dict], left_out: list[dict]) -> list[str]:
    """What the chart renders differently from the overlay, by identity, once
    the overlay's Namespace and the objects of `left_out` are set aside."""
    expected = comparable([o for o in overlay if not (o.get("kind") == "Namespace" and
                                                      o["metadata"]["name"] == PROJECT_NAMESPACE)])
    for key in comparable(left_out):
        expected.pop(key, None)
    got = comparable(chart)
    out = [f"only the overlay renders {k}" for k in sorted(expected.keys() - got.keys())]
    out += [f"only the chart renders {k}" for k in sorted(got.keys() - expected.keys())]
    out += [f"{k}: {first_difference(expected[k], got[k])}" for k in sorted(expected.keys() & got.keys())
            if expected[k] != got[k]]
    return out


def check_defaults(report, chart: Path, tmp: Path, docker: Path) -> None:
    """The default values render, with the images a release names:
    REGISTRY/NAME:APPVERSION, each built by deploy/docker/NAME.Dockerfile."""
    import yaml
    objects, err = template(chart, {}, tmp)
    if not report.check(objects is not None, f"helm lint and helm template pass with the default values\n      {err}"):
        return
    version = yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"]
    images = {c["image"] for o in objects for c in containers(pod_spec(o) or {})}
    report.check(bool(images), "the default values render the controller's pod")
    for image in sorted(images):
        match = re.fullmatch(rf"REGISTRY/([a-z0-9-]+):{re.escape(version)}", image)
        dockerfile = docker / f"{match.group(1)}.Dockerfile" if match else None
        report.check(dockerfile is not None and dockerfile.exists() and f"--bin {match.group(1)}" in dockerfile.read_text(),
                     f"default image {image} is REGISTRY/NAME:{version}, built by deploy/docker/NAME.Dockerfile")


def check_chart(report, deploy: Path, renders: dict[str, list[dict]], tracing: list[dict], tmp: Path) -> str:
    """Lints and renders the chart of the `deploy` copy, and compares each
    combination with `renders` (overlay name -> objects); the summary."""
    chart = deploy / "chart"
    lint = helm("lint", "--strict", str(chart))
    noise = [line for line in lint.stderr.splitlines() if not SYMLINK_NOTE.match(line)]
    if not report.check(lint.returncode == 0, "helm lint --strict passes" +
                        "".join(f"\n      {line}" for line in (lint.stdout + "\n".join(noise)).splitlines()[-20:])):
        return "chart: helm lint fails"
    check_defaults(report, chart, tmp, deploy / "docker")
    compared = []
    for overlay, values in combinations(deploy / "overlays").items():
        objects, err = template(chart, values, tmp)
        if not report.check(objects is not None, f"helm lint and helm template pass with the values of overlay {overlay}\n      {err}"):
            continue
        if overlay not in renders:
            report.fail(f"overlay {overlay} did not render: nothing to compare the chart with")
            continue
        differ = differences(renders[overlay], objects, tracing if overlay == "tracing" else [])
        report.check(not differ, f"the chart with the values of {overlay} renders the overlay's objects" +
                     "".join(f"\n      differs: {d}" for d in differ))
        leaked = [ident(o) for o in objects if o.get("kind") == "CustomResourceDefinition"
                  and not o["metadata"]["name"].endswith(".rollout-hooks.io")]
        report.check(not leaked, f"the chart ({overlay}) renders no CRD but the project's: {leaked}")
        compared.append(f"{overlay} ({len(objects)} objects)")
    return "chart: helm lint --strict and helm template; same objects as " + ", ".join(compared)
