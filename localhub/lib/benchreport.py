"""localhub/bench's figures: the medians over its rounds, the tables of
docs/performance.md ("On a real hub") and the goals, met or missed. Pure,
but for reading the machine and the commit."""

from __future__ import annotations

import platform
import statistics
import subprocess
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

NAMES = {"ours": "rollout-controller", "ocm": "OCM's controller"}
WALL_GOAL = 1.2


def machine(root: Path, command: str) -> dict:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "?")
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    load = Path("/proc/loadavg").read_text().split()[:3]
    import os
    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "nproc": os.cpu_count(),
            "cpu": model, "kernel": platform.release(), "commit": commit + (" (with changes)" if dirty else ""),
            "load": " ".join(load), "command": command}


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def rollout_requests(r: dict) -> Counter:
    return Counter(r["audit"]["controller"]["requests"]["rollout"])


def written(r: dict) -> Counter:
    return Counter(r["audit"]["controller"]["written"]["rollout"])


def watch_events(r: dict) -> float:
    """Watch events the API server sent during the rollout, less those the
    status reporter received itself (its watch of every ManifestWork)."""
    sent = sum(r["metrics"]["apiserver_watch_events_total"].values())
    return sent - sum(v for k, v in r["reporter"].items() if k.startswith("watch ") and k != "watch bytes")


def watch_by_resource(r: dict) -> Counter:
    """Watch events of the resources a ManifestWorkReplicaSet controller
    watches (more than 10 in the rollout), ManifestWorks less the reporter's."""
    sent = Counter({k: v for k, v in r["metrics"]["apiserver_watch_events_total"].items() if v > 10})
    mine = sum(v for k, v in r["reporter"].items() if k.startswith("watch ") and k != "watch bytes")
    if "manifestworks" in sent:
        sent["manifestworks"] -= mine
    return sent


def summary(rounds: list[dict], controller: str) -> dict:
    mine = [r for r in rounds if r["controller"] == controller]
    if not mine:
        return {}
    clusters = mine[0]["clusters"]
    revisions = len(mine[0]["walls"])
    units = clusters * revisions
    return {
        "rounds": len(mine), "clusters": clusters, "revisions": revisions,
        "walls": [median([r["walls"][i] for r in mine]) for i in range(revisions)],
        "wall": median([sum(r["walls"]) for r in mine]),
        "cpu_s": median([r["cpu_s"] for r in mine]),
        "peak_rss_mib": median([r["peak_rss_kib"] / 1024 for r in mine]),
        "requests": median([sum(rollout_requests(r).values()) for r in mine]),
        "per_cluster": median([sum(rollout_requests(r).values()) / units for r in mine]),
        "start_requests": median([sum(r["audit"]["controller"]["requests"]["start"].values()) for r in mine]),
        "written_kib": median([sum(written(r).values()) / 1024 for r in mine]),
        "written_per_cluster": median([sum(written(r).values()) / units for r in mine]),
        "watch_events": median([watch_events(r) for r in mine]),
        "by_request": {k: median([rollout_requests(r)[k] for r in mine]) / units
                       for k in sorted(set().union(*(rollout_requests(r) for r in mine)))},
        "written_by_request": {k: median([written(r)[k] for r in mine]) / units
                               for k in sorted(set().union(*(written(r) for r in mine)))},
        "by_request_total": {k: median([rollout_requests(r)[k] for r in mine])
                             for k in sorted(set().union(*(rollout_requests(r) for r in mine)))},
        "watch_by_resource": {k: median([watch_by_resource(r)[k] for r in mine])
                              for k in sorted(set().union(*(watch_by_resource(r) for r in mine)))},
        "start_by_request": {k: median([Counter(r["audit"]["controller"]["requests"]["start"])[k] for r in mine])
                             for k in sorted(set().union(*(r["audit"]["controller"]["requests"]["start"]
                                                            for r in mine)))},
        "helpers": {name: {"cpu_s": median([r["helpers"][name]["cpu_s"] for r in mine]),
                           "peak_rss_mib": median([r["helpers"][name]["peak_rss_kib"] / 1024 for r in mine])}
                    for name in mine[0]["helpers"]},
        "errors": sorted({e for r in mine for e in r["reporter"].get("errors", [])})[:5],
    }


def goals(ours: dict, ocm: dict) -> list[tuple[str, str, str, bool]]:
    if not ours or not ocm:
        return []
    return [
        ("API requests per cluster rolled out ≤ OCM's", f"{ours['per_cluster']:.2f}", f"{ocm['per_cluster']:.2f}",
         ours["per_cluster"] <= ocm["per_cluster"]),
        (f"wall time to a completed rollout ≤ {WALL_GOAL}× OCM's", f"{ours['wall']:.1f} s",
         f"{ocm['wall'] * WALL_GOAL:.1f} s ({ocm['wall']:.1f} s × {WALL_GOAL})", ours["wall"] <= ocm["wall"] * WALL_GOAL),
        ("peak RSS ≤ OCM's", f"{ours['peak_rss_mib']:.1f} MiB", f"{ocm['peak_rss_mib']:.1f} MiB",
         ours["peak_rss_mib"] <= ocm["peak_rss_mib"]),
    ]


def extra_requests(ours: dict, ocm: dict) -> list[tuple[str, float, float]]:
    """The requests ours makes more of than OCM's, per cluster rolled out."""
    keys = set(ours.get("by_request", {})) | set(ocm.get("by_request", {}))
    rows = [(k, ours["by_request"].get(k, 0.0), ocm["by_request"].get(k, 0.0)) for k in keys]
    return sorted([r for r in rows if r[1] - r[2] >= 0.0005], key=lambda r: r[2] - r[1])


def markdown(rounds: list[dict], host: dict, args) -> str:
    s = {c: summary(rounds, c) for c in ("ours", "ocm")}
    present = [c for c in ("ours", "ocm") if s[c]]
    lines = [f"Run {host['date']}, commit `{host['commit']}`; {host['nproc']} CPUs ({host['cpu']}), Linux "
             f"{host['kernel']}, load average {host['load']} at the end, the machine shared with other builds. "
             f"{args.clusters} clusters, {args.revisions} revisions, Progressive maxConcurrency "
             f"{args.max_concurrency}, reporter delay {args.delay} s; medians of {args.rounds} rounds.", "",
             "```sh", host["command"], "```", "",
             "| figure | " + " | ".join(NAMES[c] for c in present) + " |",
             "|---|" + "--:|" * len(present)]

    def row(label, fmt):
        lines.append(f"| {label} | " + " | ".join(fmt(s[c]) for c in present) + " |")
    for i in range(args.revisions):
        row(f"wall time, revision {i + 1}", lambda x, i=i: f"{x['walls'][i]:.1f} s")
    row("wall time, all revisions", lambda x: f"{x['wall']:.1f} s")
    row("CPU during the rollout (user + system)", lambda x: f"{x['cpu_s']:.2f} s")
    row("peak RSS (VmHWM)", lambda x: f"{x['peak_rss_mib']:.1f} MiB")
    row("API requests during the rollout", lambda x: f"{x['requests']:.0f}")
    row("… per cluster rolled out", lambda x: f"{x['per_cluster']:.2f}")
    row("API requests while starting", lambda x: f"{x['start_requests']:.0f}")
    row("request bodies written", lambda x: f"{x['written_kib']:.0f} KiB")
    row("… per cluster rolled out", lambda x: f"{x['written_per_cluster'] / 1024:.2f} KiB")
    row("watch events sent to it", lambda x: f"{x['watch_events']:.0f}")
    for name in s["ours"].get("helpers", {}) if s["ours"] else []:
        lines.append(f"| {name} beside it: CPU, peak RSS | {s['ours']['helpers'][name]['cpu_s']:.2f} s, "
                     f"{s['ours']['helpers'][name]['peak_rss_mib']:.1f} MiB |" + " – |" * (len(present) - 1))
    lines += ["", "Requests during the rollout by verb and resource: the count, and per cluster rolled out "
              "(clusters × revisions):", "",
              "| request | " + " | ".join(NAMES[c] for c in present) + " |", "|---|" + "--:|" * len(present)]
    keys = sorted(set().union(*(s[c]["by_request"] for c in present)))
    for k in keys:
        lines.append(f"| `{k}` | " + " | ".join(
            f"{s[c]['by_request_total'].get(k, 0):.0f} ({s[c]['by_request'].get(k, 0):.3f})" for c in present) + " |")
    lines += ["", "Watch events sent during the rollout, by resource (ManifestWorks less the reporter's own):", "",
              "| resource | " + " | ".join(NAMES[c] for c in present) + " |", "|---|" + "--:|" * len(present)]
    for k in sorted(set().union(*(s[c]["watch_by_resource"] for c in present))):
        lines.append(f"| `{k}` | " + " | ".join(f"{s[c]['watch_by_resource'].get(k, 0):.0f}" for c in present) + " |")
    lines += ["", "Requests while starting (lists and watches):", "",
              "| request | " + " | ".join(NAMES[c] for c in present) + " |", "|---|" + "--:|" * len(present)]
    for k in sorted(set().union(*(s[c]["start_by_request"] for c in present))):
        lines.append(f"| `{k}` | " + " | ".join(f"{s[c]['start_by_request'].get(k, 0):.0f}" for c in present) + " |")
    if s["ours"] and s["ocm"]:
        lines += ["", "| goal | rollout-controller | OCM's controller | result |", "|---|--:|--:|---|"]
        for goal, mine, theirs, met in goals(s["ours"], s["ocm"]):
            lines.append(f"| {goal} | {mine} | {theirs} | {'met' if met else 'missed'} |")
        extra = extra_requests(s["ours"], s["ocm"])
        if extra:
            lines += ["", "Requests rollout-controller makes more of, per cluster rolled out: " + "; ".join(
                f"`{k}` {a:.3f} vs {b:.3f}" for k, a, b in extra) + "."]
    for c in present:
        if s[c]["errors"]:
            lines += ["", f"Status reporter errors in the {NAMES[c]} rounds: {s[c]['errors']}"]
    return "\n".join(lines) + "\n"
