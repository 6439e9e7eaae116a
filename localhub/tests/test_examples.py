"""Every example of deploy/examples as a hub's API server takes it: OCM's
real CRDs and the project's own, strict field validation (an unknown field
is an error, not silently dropped), CEL rules and admission included."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import ROOT
from tests.hub import Hub

EXAMPLES = sorted(p.parent.name for p in (ROOT / "deploy" / "examples").glob("*/kustomization.yaml"))


def test_there_are_examples():
    assert "hello-rollout" in EXAMPLES and "analysed-rollout" in EXAMPLES, EXAMPLES


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_example_validates_strictly_against_ocms_crds(installed: Hub, example: str):
    hub = installed
    directory = ROOT / "deploy" / "examples" / example
    objects = [o for o in yaml.safe_load_all(hub.kubectl("kustomize", str(directory)).stdout) if o]
    # A dry run admits no object into a namespace that does not exist yet:
    # the example's own namespaces are made for real, and removed after.
    made = [o["metadata"]["name"] for o in objects
            if o["kind"] == "Namespace" and hub.get("namespace", o["metadata"]["name"]) is None]
    for name in made:
        hub.apply(next(o for o in objects if o["kind"] == "Namespace" and o["metadata"]["name"] == name))
    try:
        result = hub.kubectl("apply", "--dry-run=server", "--validate=strict", "-k", str(directory), check=False)
        assert result.returncode == 0, result.stderr
        assert "unknown field" not in result.stderr, result.stderr
    finally:
        if made:
            hub.kubectl("delete", "namespace", *made, "--timeout=120s")
