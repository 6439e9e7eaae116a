"""Binding that says what it did, on a real hub: a ManifestWorkReplicaSet
whose carrier was written under a misspelled name gets an empty carrier
made for it, and its `CarrierBound` condition and a Warning Event name the
carrier that binds to nothing; a `targetRef` on the misspelled one then
binds it explicitly, and the real API server refuses a `targetRef` of
another kind. Its placement selects no cluster (no
ManagedClusterSetBinding in its namespace), so nothing is rolled out."""

from __future__ import annotations

import json

from tests.hub import Hub

NS = "binding-demo"


def test_a_misspelled_carrier_is_named_where_the_set_is_bound(controller, hub: Hub):
    hub.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    hub.apply({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
               "metadata": {"name": "nowhere", "namespace": NS}, "spec": {"clusterSets": ["default"]}})
    hub.apply({"apiVersion": "rollout-hooks.io/v1alpha1", "kind": "ManifestWorkReplicaSetRollout",
               "metadata": {"name": "web-rolout", "namespace": NS},
               "spec": {"placements": [{"name": "nowhere", "plugin": "safe-rollout", "abortOnFailure": True}]}})
    hub.apply({"apiVersion": "work.open-cluster-management.io/v1alpha1", "kind": "ManifestWorkReplicaSet",
               "metadata": {"name": "web-rollout", "namespace": NS},
               "spec": {"placementRefs": [{"name": "nowhere", "rolloutStrategy": {"type": "All"}}],
                        "manifestWorkTemplate": {"workload": {"manifests": [
                            {"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "web", "namespace": "default"}}]}}}})
    try:
        def bound():
            mwrs = hub.get("manifestworkreplicaset", "web-rollout", NS) or {}
            conditions = (mwrs.get("status") or {}).get("conditions") or []
            return next((c for c in conditions if c["type"] == "CarrierBound"), None)

        condition = hub.wait_for(bound, 60, "the CarrierBound condition")
        assert condition["status"] == "False" and condition["reason"] == "NothingBound", condition
        assert '"web-rolout"' in condition["message"] and "created" in condition["message"], condition
        assert hub.get("manifestworkreplicasetrollout", "web-rollout", NS) is not None, "no empty carrier made"
        warnings = [e for e in hub.list("events.events.k8s.io", NS)
                    if e.get("reason") == "BindingProblem" and e["regarding"]["name"] == "web-rollout"]
        assert warnings and '"web-rolout"' in warnings[0]["note"], warnings

        # The fix an operator makes: name the set explicitly.
        carrier = {"apiVersion": "rollout-hooks.io/v1alpha1", "kind": "ManifestWorkReplicaSetRollout",
                   "metadata": {"name": "web-rolout", "namespace": NS},
                   "spec": {"targetRef": {"kind": "ManifestWorkReplicaSet", "name": "web-rollout"},
                            "placements": [{"name": "nowhere", "plugin": "safe-rollout",
                                            "abortOnFailure": True}]}}
        hub.apply(carrier)
        explicit = hub.wait_for(lambda: (c := bound()) and c["reason"] == "TargetRef" and c, 60,
                                "CarrierBound with reason TargetRef")
        assert explicit["status"] == "True" and f"{NS}/web-rolout" in explicit["message"], explicit
        carrier["spec"]["targetRef"]["kind"] = "Deployment"
        refused = hub.kubectl("apply", "-f", "-", stdin=json.dumps(carrier), check=False)
        assert refused.returncode != 0 and "Unsupported value" in refused.stderr, refused.stderr
    finally:
        # The set first (the controller removes its finalizer), then the
        # namespace, so that no reconcile meets a terminating namespace.
        hub.kubectl("delete", "manifestworkreplicaset", "web-rollout", "-n", NS, "--timeout=60s")
        hub.kubectl("delete", "namespace", NS, "--wait=false")
