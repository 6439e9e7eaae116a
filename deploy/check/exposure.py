"""What the deployments expose and how they are kept available (used by
check.py): NetworkPolicy on the gateway's admin port, a PodDisruptionBudget
for the controller, gRPC probes for gRPC servers, `prometheus.io/port` on
the pod's own metrics port, and the tracing backends (no Jaeger v1, the
collector's exporters pointing at a Service port that exists).

Each function takes a Report (check.Report) and the rendered objects, and
only reads them.
"""

from __future__ import annotations

import ipaddress
import re

import yaml

import manifests as m

# The images of Jaeger v1 (all-in-one and its split components); Jaeger v2
# is `jaegertracing/jaeger` at 2.x.
JAEGER_V1 = re.compile(r"(^|/)jaegertracing/(all-in-one|jaeger-(collector|query|agent|ingester))(:|@|$)"
                       r"|(^|/)jaegertracing/jaeger:1\.")
CONTROLLER_CONTAINER = "controller"
# Where the gateway and the controller send their spans.
OTLP_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def templates(objects: list[dict]):
    """(object, pod spec, pod template metadata) of every pod template."""
    for obj in objects:
        pod = m.pod_spec(obj)
        if pod is None:
            continue
        spec = obj.get("spec") or {}
        template = spec.get("template") or ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}
        meta = obj.get("metadata") if obj.get("kind") == "Pod" else template.get("metadata")
        yield obj, pod, meta or {}


def namespace(obj: dict) -> str | None:
    return (obj.get("metadata") or {}).get("namespace")


def named_port(cont: dict, number: int | None) -> str | None:
    return next((p.get("name") for p in cont.get("ports") or [] if p.get("containerPort") == number), None)


def loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def peer_is_everyone(peer: dict) -> bool:
    """A NetworkPolicy peer that admits every pod of every namespace, or every address."""
    if peer.get("namespaceSelector") == {} and not (peer.get("podSelector") or {}):
        return True
    block = (peer.get("ipBlock") or {}).get("cidr", "")
    return block in ("0.0.0.0/0", "::/0")


def rule_covers(rule: dict, number: int, name: str | None) -> bool:
    ports = rule.get("ports")
    if not ports:
        return True
    return any(p.get("port") in (number, name) or p.get("port") is None for p in ports)


def check_admin_network_policy(report, objects: list[dict]) -> int:
    """Every gateway whose admin port (--admin-listen: probes, metrics and
    /debug/plugins, which lists every plugin and hub) is reachable beyond
    the pod's loopback is selected by an Ingress NetworkPolicy, and every
    rule of those that admits the admin port names who may connect (not
    everyone). Returns how many admin ports are covered."""
    covered = 0
    for obj, pod, meta in templates(objects):
        gateway = m.container(pod, m.GATEWAY)
        listen = m.flag_values(gateway.get("args") or [], "--admin-listen") if gateway else []
        if not listen or loopback(listen[-1]):
            continue
        number = m.port_of(listen[-1])
        name = named_port(gateway, number)
        policies = [p for p in objects if p.get("kind") == "NetworkPolicy"
                    and namespace(p) == namespace(obj)
                    and m.selects((p.get("spec") or {}).get("podSelector"), meta.get("labels"))
                    and "Ingress" in ((p.get("spec") or {}).get("policyTypes") or ["Ingress"])]
        if not report.check(bool(policies), f"{m.ident(obj)}: a NetworkPolicy limits who reaches the gateway's "
                                            f"admin port {number} (/debug/plugins lists every plugin and hub)"):
            continue
        open_rules = [f"NetworkPolicy {(p.get('metadata') or {}).get('name')}"
                      for p in policies for rule in (p.get("spec") or {}).get("ingress") or []
                      if rule_covers(rule, number, name)
                      and (not rule.get("from") or any(peer_is_everyone(x) for x in rule["from"]))]
        if report.check(not open_rules, f"{m.ident(obj)}: no ingress rule admits everyone to the admin port "
                                        f"{number} ({', '.join(open_rules)})"):
            covered += 1
    return covered


def check_controller_pdb(report, objects: list[dict]) -> None:
    """The controller, when it runs more than one replica, has a
    PodDisruptionBudget that keeps one running through a drain and still
    lets the drain proceed."""
    deployment = m.find(objects, "Deployment", m.CONTROLLER, m.PROJECT_NAMESPACE)
    if deployment is None or not m.container(m.pod_spec(deployment), CONTROLLER_CONTAINER):
        return
    replicas = (deployment.get("spec") or {}).get("replicas", 1)
    if replicas < 2:
        return
    labels = ((deployment["spec"].get("template") or {}).get("metadata") or {}).get("labels")
    budgets = [b for b in objects if b.get("kind") == "PodDisruptionBudget"
               and namespace(b) == m.PROJECT_NAMESPACE
               and m.selects((b.get("spec") or {}).get("selector"), labels)]
    if not report.check(len(budgets) == 1, f"{m.ident(deployment)}: one PodDisruptionBudget selects its "
                                           f"{replicas} replicas (found {len(budgets)})"):
        return
    spec = budgets[0].get("spec") or {}
    allows = (isinstance(spec.get("maxUnavailable"), int) and 0 < spec["maxUnavailable"] < replicas) or \
             (isinstance(spec.get("minAvailable"), int) and 0 < spec["minAvailable"] < replicas)
    report.check(allows, f"{m.ident(deployment)}: its PodDisruptionBudget keeps a replica and lets a drain "
                         f"evict one (maxUnavailable or minAvailable, a number between 0 and {replicas}: got {spec})")


def grpc_servers(objects: list[dict], obj: dict, pod: dict, meta: dict) -> list[dict]:
    """The containers of a pod that serve gRPC: a port named `grpc`, or a
    port a Service with `appProtocol: grpc` sends to."""
    grpc_targets = set()
    for svc in objects:
        if svc.get("kind") == "Service" and namespace(svc) == namespace(obj) and \
                m.selects((svc.get("spec") or {}).get("selector"), meta.get("labels")):
            grpc_targets |= {p.get("targetPort") for p in (svc["spec"].get("ports") or [])
                             if p.get("appProtocol") == "grpc"}
    return [cont for cont in pod.get("containers") or []
            if any(p.get("name") == "grpc" or p.get("name") in grpc_targets or p.get("containerPort") in grpc_targets
                   for p in cont.get("ports") or [])]


def check_grpc_probes(report, objects: list[dict]) -> int:
    """No gRPC server is probed with tcpSocket (an open port says nothing of
    the server behind it): a plugin is probed with the kubelet's `grpc`
    probe, on its --health-listen port when it has one (the probe speaks no
    TLS). Returns how many probes were looked at."""
    seen = 0
    for obj, pod, meta in templates(objects):
        for cont in grpc_servers(objects, obj, pod, meta):
            health = m.flag_values(cont.get("args") or [], "--health-listen")
            for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
                probe = cont.get(kind)
                if not probe:
                    continue
                seen += 1
                where = f"{m.ident(obj)} container {cont.get('name')}: {kind}"
                if not report.check("tcpSocket" not in probe,
                                    f"{where} is not a tcpSocket probe of a gRPC server (use `grpc: {{port: N}}`)"):
                    continue
                if health and "grpc" in probe:
                    report.check(probe["grpc"].get("port") == m.port_of(health[-1]),
                                 f"{where} asks the plaintext health port --health-listen {health[-1]}")
    return seen


def metrics_port(pod: dict) -> tuple[str, int | None] | None:
    """The pod's own metrics port: the controller's --health-listen when the
    pod runs the controller, else the gateway's --admin-listen."""
    for name, flag in ((CONTROLLER_CONTAINER, "--health-listen"), (m.GATEWAY, "--admin-listen")):
        cont = m.container(pod, name)
        values = m.flag_values(cont.get("args") or [], flag) if cont else []
        if values:
            return f"{name} {flag} {values[-1]}", m.port_of(values[-1])
    return None


def check_prometheus_annotations(report, objects: list[dict]) -> int:
    """`prometheus.io/port` of a scraped pod is the pod's own metrics port
    (the controller's for the controller pod, the gateway's admin port for a
    gateway), declared as a containerPort. Returns how many pods."""
    checked = 0
    for obj, pod, meta in templates(objects):
        annotations = meta.get("annotations") or {}
        if annotations.get("prometheus.io/scrape") != "true":
            continue
        checked += 1
        port = annotations.get("prometheus.io/port")
        declared = {p.get("containerPort") for cont in pod.get("containers") or [] for p in cont.get("ports") or []}
        own = metrics_port(pod)
        report.check(port is not None and port.isdigit() and int(port) in declared,
                     f"{m.ident(obj)}: prometheus.io/port {port!r} is a containerPort of the pod")
        if own is not None:
            report.check(port == str(own[1]), f"{m.ident(obj)}: prometheus.io/port {port!r} is the pod's own "
                                              f"metrics port ({own[0]})")
    return checked


def check_tracing_backends(report, objects: list[dict]) -> int:
    """No Jaeger v1 image; every OTLP exporter of a collector configuration
    (a ConfigMap's config.yaml with `exporters`), and every container's
    OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, points at a Service port of the
    render that sends to a declared port of the pods it selects. Returns how
    many endpoints were followed."""
    for obj, pod, _ in templates(objects):
        for cont in m.containers(pod):
            image = cont.get("image") or ""
            report.check(not JAEGER_V1.search(image),
                         f"{m.ident(obj)} container {cont.get('name')}: {image} is not a Jaeger v1 image "
                         "(use jaegertracing/jaeger 2.x, which takes OTLP)")
    followed = 0
    for obj, pod, _ in templates(objects):
        for cont in m.containers(pod):
            for env in cont.get("env") or []:
                if env.get("name") in OTLP_ENDPOINT_VARIABLES and env.get("value"):
                    followed += 1
                    report.check(service_port_reaches(objects, namespace(obj), env["value"]),
                                 f"{m.ident(obj)} container {cont.get('name')}: {env['name']} {env['value']!r} "
                                 "is a Service port of the render, sent to a declared container port")
    for cm in objects:
        if cm.get("kind") != "ConfigMap":
            continue
        try:
            config = yaml.safe_load((cm.get("data") or {}).get("config.yaml") or "")
        except yaml.YAMLError:
            continue
        exporters = (config or {}).get("exporters") if isinstance(config, dict) else None
        for name, exporter in (exporters or {}).items():
            if not name.split("/")[0] in ("otlp", "otlp_grpc", "otlphttp", "otlp_http"):
                continue
            followed += 1
            endpoint = str((exporter or {}).get("endpoint", ""))
            report.check(service_port_reaches(objects, namespace(cm), endpoint),
                         f"ConfigMap {(cm.get('metadata') or {}).get('name')}: exporter {name} endpoint "
                         f"{endpoint!r} is a Service port of the render, sent to a declared container port")
    return followed


def service_port_reaches(objects: list[dict], ns: str | None, endpoint: str) -> bool:
    # SERVICE[.NAMESPACE[.svc[.cluster.local]]]:PORT, with a scheme and a path or not.
    match = re.match(r"^(?:https?://)?([a-z0-9-]+)(?:\.([a-z0-9-]+)(?:\.svc(?:\.[a-z0-9.-]+)?)?)?:(\d+)(?:/\S*)?$",
                     endpoint)
    if not match:
        return False
    host, ns, number = match.group(1), match.group(2) or ns, int(match.group(3))
    svc = m.find(objects, "Service", host, ns)
    port = next((p for p in ((svc or {}).get("spec") or {}).get("ports") or [] if p.get("port") == number), None)
    if port is None:
        return False
    target = port.get("targetPort", number)
    for obj, pod, meta in templates(objects):
        if namespace(obj) == ns and m.selects(svc["spec"].get("selector"), meta.get("labels")):
            if any(p.get("containerPort") == target or p.get("name") == target
                   for cont in pod.get("containers") or [] for p in cont.get("ports") or []):
                return True
    return False
