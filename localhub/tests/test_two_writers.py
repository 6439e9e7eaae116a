"""Never two writers, on a real hub: OCM's own ManifestWorkReplicaSet
controller (its hub work controller with the gate on, built from OCM's
module like the rest of the bed) is started beside this project's. The
project's controller finds it from its status writes and stands aside,
saying so in the carrier's condition, an Event and /readyz, while OCM's
controller strips its labels from the works. Once OCM's is stopped, the
project's goes on: the works OCM rewrote are left alone for the conflict
back-off, then taken over, rolled out to and validated again, never
counted as validated. (Runs after the stories, before the
uninstall.)"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

from tests.conftest import ROOT
from tests.hub import Hub
from tests.rollout import NAME, NS, events

sys.path.insert(0, str(ROOT / "localhub"))
from lib import bed as localhub, objects  # noqa: E402

HASH = "work.open-cluster-management.io/controller-hash"
VALIDATION = "rollout.open-cluster-management.io/validation"
VALIDATION_REVISION = "rollout.open-cluster-management.io/validation-revision"
VALIDATION_GENERATION = "rollout.open-cluster-management.io/validation-generation"


def readyz(controller) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{controller.health}/readyz", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def other_controller(hub: Hub) -> dict | None:
    carrier = hub.get("manifestworkreplicasetrollout", NAME, NS) or {}
    conditions = (carrier.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "OtherController"), None)


def works(hub: Hub) -> list[dict]:
    return [w for c in hub.clusters
            for w in hub.list("manifestworks", c, selector="work.open-cluster-management.io/manifestworkreplicaset")]


def test_ocms_controller_is_found_and_the_works_it_rewrote_are_validated_again(
        first_revision, controller, hub: Hub, processes):
    ocm = processes.start("ocm-work-manager", [
        hub.kubectl_bin.parent / "work", "manager", "--kubeconfig", hub.kubeconfig("hub"),
        "--namespace", objects.HUB_NAMESPACE, "--listen", f"127.0.0.1:{localhub.free_port()}",
        "--disable-leader-election", "--feature-gates", "ManifestWorkReplicaSet=true"])
    try:
        found = hub.wait_for(lambda: (c := other_controller(hub)) and c["status"] == "True" and c, 60,
                             "the carrier's OtherController condition")
        assert found["reason"] == "OtherStatusWriter", found
        assert 'field manager "work"' in found["message"], found
        status, body = readyz(controller)
        assert status == 503 and "not reconciling" in body, (status, body)
        assert any(e.get("reason") == "OtherController" for e in events(hub)), events(hub)
        # OCM's controller rewrites the works this controller mutated: the
        # plain template, this controller's labels gone.
        hub.wait_for(lambda: any(HASH not in (w["metadata"].get("labels") or {}) for w in works(hub)), 60,
                     "OCM's controller to strip this controller's label from a work")
        mwrs = hub.get("manifestworkreplicaset", NAME, NS)
        kinds = {c["type"] for c in mwrs["status"]["conditions"]}
        assert not kinds & {"PluginLoaded", "Progressing"}, f"stale conditions left on the set: {kinds}"
    finally:
        ocm.stop()

    seen = {}

    def validated_again():
        carrier = (hub.get("manifestworkreplicasetrollout", NAME, NS) or {}).get("status") or {}
        revision = carrier.get("updateRevision")
        listed = works(hub)
        seen.update(carrier=carrier, works=[(w["metadata"]["namespace"], w["metadata"]["generation"],
                                              w["metadata"].get("labels"), w["metadata"].get("annotations"))
                                             for w in listed])
        if other_controller(hub) or not revision or carrier.get("currentRevision") != revision:
            return None
        if len(listed) != 3:
            return None
        for work in listed:
            labels, annotations = work["metadata"].get("labels") or {}, work["metadata"].get("annotations") or {}
            if labels.get(HASH) != revision or annotations.get(VALIDATION) != "Succeeded" \
                    or annotations.get(VALIDATION_REVISION) != revision \
                    or annotations.get(VALIDATION_GENERATION) != str(work["metadata"]["generation"]):
                return None
        return listed

    # --other-writer-quiet and --conflict-backoff are 10 s in this tier: the
    # works OCM's controller wrote are then taken over.
    try:
        hub.wait_for(validated_again, 120, "every work rolled out to and validated again after OCM's "
                     "controller stopped")
    except AssertionError as error:
        raise AssertionError(f"{error}\nlast seen: {seen}") from None
    status, body = readyz(controller)
    assert status == 200, (status, body)
