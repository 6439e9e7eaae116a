"""localhub/bench end to end at a small size (one controller, to stay
short): this project's controller rolls the set out on a hub-only bed, with
the status reporter standing in for the agents, and the API server's audit
log attributes its requests to its own user (docs/performance.md, "On a
real hub")."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT, TARGET, binary


def test_a_rollout_on_a_hub_only_bed_is_measured_from_the_audit_log(tmp_path):
    for name in ("rollout-controller", "rollout-gateway", "echo-plugin"):
        binary(name)
    out = tmp_path / "bench.md"
    result = subprocess.run([sys.executable, str(ROOT / "localhub" / "bench"), "--clusters", "5", "--rounds", "1",
                             "--revisions", "1", "--max-concurrency", "100%", "--delay", "0.2", "--timeout", "60",
                             "--controllers", "ours", "--target", str(TARGET), "--dir", str(tmp_path / "beds"),
                             "--out", str(out)], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    [ours] = json.loads(out.with_suffix(".json").read_text())["rounds"]
    assert ours["controller"] == "ours" and len(ours["walls"]) == 1 and ours["walls"][0] > 0, ours
    assert ours["peak_rss_kib"] > 0 and ours["cpu_s"] > 0, ours
    # Two writes per work (Applied, then Progressing False), none failed.
    assert ours["reporter"]["status writes"] == 10 and not ours["reporter"]["errors"], ours["reporter"]
    # The controller's own writes, as its own user: each work applied
    # server-side (a patch) and its plugin's verdict recorded (a patch).
    requests = ours["audit"]["controller"]["requests"]["rollout"]
    assert requests.get("patch manifestworks") == 10 and "create manifestworks" not in requests, requests
    assert ours["audit"]["controller"]["written"]["rollout"]["patch manifestworks"] > 0
    assert ours["metrics"]["apiserver_watch_events_total"].get("manifestworks", 0) > 0
    assert "| API requests during the rollout |" in out.read_text()
