"""`rollout-controller dashboard` on the real hub, in headless Chromium:
the page lists the example's ManifestWorkReplicaSet and shows each cluster
OCM's placement decided with the status `get -o json` gives it; it reads
only (its kubeconfig is the hub admin's, and nothing it does writes). The
page is saved as a PNG: in the bed's directory, and at
$LOCALHUB_DASHBOARD_SCREENSHOT when set (docs/observability.md, "The
dashboard", makes docs/img/dashboard.png so)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests import browser
from tests.conftest import binary
from tests.hub import Hub
from tests.rollout import NAME, NS


def statuses_by_get(hub: Hub) -> dict[str, str]:
    out = subprocess.run([str(binary("rollout-controller")), "get", NAME, "-n", NS, "-o", "json",
                          "--kubeconfig", str(hub.kubeconfig())], capture_output=True, text=True, check=True)
    view = json.loads(out.stdout)
    return {c["name"]: c["status"] for p in view["placements"] for g in p["groups"] for c in g["clusters"]}


TILES = "JSON.stringify(Object.fromEntries([...document.querySelectorAll('.tile[data-cluster]')]" \
        ".map(t => [t.dataset.cluster, t.dataset.status])))"


def test_the_dashboard_shows_the_rollout_on_the_real_hub(first_revision, hub: Hub, processes, bed_dir):
    chromium = browser.find()
    if not chromium:
        pytest.fail("no Chromium: localhub/test sets ROLLOUT_HOOKS_CHROMIUM with test-support/chromium/find")
    dashboard = processes.start("dashboard", [binary("rollout-controller"), "dashboard", "--listen", "127.0.0.1:0",
                                              "--kubeconfig", hub.kubeconfig()])
    address = dashboard.wait_line(r"serving http://(\S+)/ ", 30).group(1)
    page = browser.Browser(chromium)
    try:
        page.call("Page.navigate", {"url": f"http://{address}/#/{NS}/{NAME}"})
        page.wait_for(f"document.querySelectorAll('.tile[data-cluster]').length === {len(hub.clusters)}", 30,
                      "a tile per cluster")

        def same_as_get():
            shown = json.loads(page.eval(TILES))
            return shown if shown == statuses_by_get(hub) else None

        shown = hub.wait_for(same_as_get, 30, "the page to show the statuses get shows")
        assert sorted(shown) == sorted(hub.clusters), shown
        listed = page.eval(f"document.querySelector('[data-rollout=\"{NS}/{NAME}\"]') !== null")
        assert listed, page.eval("document.body.innerText")
        assert page.eval("document.getElementById('connection').dataset.state") == "live"
        shot = page.screenshot()
    finally:
        page.close()
        dashboard.stop()
    (bed_dir / "dashboard.png").write_bytes(shot)
    if os.environ.get("LOCALHUB_DASHBOARD_SCREENSHOT"):
        shutil.copyfile(bed_dir / "dashboard.png", os.environ["LOCALHUB_DASHBOARD_SCREENSHOT"])
    assert dashboard.popen.returncode == 0, dashboard.text()[-3000:]
