"""localhub/bench end to end at a small size: both controllers roll the
same ManifestWorkReplicaSet out on their own hub-only bed, with the status
reporter standing in for the agents, and the API server's audit log
attributes each one's requests to it (docs/performance.md, "On a real
hub")."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT, TARGET, binary


def test_both_controllers_roll_out_and_their_requests_are_counted(tmp_path):
    for name in ("rollout-controller", "rollout-gateway", "echo-plugin"):
        binary(name)
    out = tmp_path / "bench.md"
    result = subprocess.run([sys.executable, str(ROOT / "localhub" / "bench"), "--clusters", "5", "--rounds", "1",
                             "--revisions", "1", "--max-concurrency", "100%", "--delay", "0.2", "--timeout", "60",
                             "--target", str(TARGET), "--dir", str(tmp_path / "beds"), "--out", str(out)],
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    rounds = {r["controller"]: r for r in json.loads(out.with_suffix(".json").read_text())["rounds"]}
    assert set(rounds) == {"ours", "ocm"}
    for controller, r in rounds.items():
        assert len(r["walls"]) == 1 and r["walls"][0] > 0, r
        assert r["peak_rss_kib"] > 0 and r["cpu_s"] > 0, r
        assert r["reporter"]["status writes"] >= 10, r["reporter"]
        assert not r["reporter"]["errors"], r["reporter"]
    # Each controller's own writes, as its own user in the audit log: OCM's
    # creates the works, this project's applies them server-side (a patch).
    ours = rounds["ours"]["audit"]["controller"]["requests"]["rollout"]
    ocm = rounds["ocm"]["audit"]["controller"]["requests"]["rollout"]
    assert ocm.get("create manifestworks") == 5, ocm
    assert ours.get("patch manifestworks", 0) >= 5 and "create manifestworks" not in ours, ours
    assert rounds["ours"]["audit"]["controller"]["written"]["rollout"]["patch manifestworks"] > 0
    text = out.read_text()
    assert "| goal |" in text and "API requests per cluster rolled out" in text, text
