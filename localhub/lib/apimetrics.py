"""What kube-apiserver says about the requests it served: its /metrics
(Prometheus text) read into counters and diffed between two reads, and its
audit log (JSON lines) summed per user. Pure, but for reading the file."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime
from pathlib import Path

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

# The series read, and the labels each is summed by.
SERIES = {
    "apiserver_request_total": ("verb", "resource", "subresource"),
    "apiserver_watch_events_total": ("resource",),
    "apiserver_watch_events_sizes_sum": ("resource",),
    "apiserver_request_body_size_bytes_sum": ("verb", "resource"),
    "apiserver_response_sizes_sum": ("verb", "resource", "subresource"),
}

# The policy the bench's hub runs with: the request body of every write,
# the metadata of every other request, once per request (when it completes).
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
  - level: Request
    verbs: ["create", "update", "patch", "delete", "deletecollection"]
  - level: Metadata
"""


def parse(text: str) -> dict[str, Counter]:
    """The SERIES of a /metrics page, each a Counter keyed by its labels'
    values in SERIES order."""
    out = {name: Counter() for name in SERIES}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if not match or match.group(1) not in SERIES:
            continue
        labels = dict(LABEL.findall(match.group(2) or ""))
        key = tuple(labels.get(k, "") for k in SERIES[match.group(1)])
        out[match.group(1)][key] += float(match.group(3))
    return out


def diff(before: dict[str, Counter], after: dict[str, Counter]) -> dict[str, Counter]:
    out = {}
    for name, counts in after.items():
        change = Counter()
        for key, value in counts.items():
            delta = value - before.get(name, Counter()).get(key, 0)
            if delta:
                change[key] = delta
        out[name] = change
    return out


def timestamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def request_key(event: dict) -> str:
    """verb resource[/subresource], as the audit event names them."""
    ref = event.get("objectRef") or {}
    resource = ref.get("resource") or event.get("requestURI", "?").split("?")[0]
    if ref.get("subresource"):
        resource += "/" + ref["subresource"]
    return f"{event['verb']} {resource}"


def audit(path: Path, users: set[str], windows: dict[str, tuple[float, float]]) -> dict:
    """Per user in `users` and per named window [start, end) of the time the
    API server received the request: the requests by `verb resource`, and
    the bytes of the request bodies of the writes (the request object as the
    audit log records it, compact JSON)."""
    requests = {u: {w: Counter() for w in windows} for u in users}
    written = {u: {w: Counter() for w in windows} for u in users}
    codes = {u: Counter() for u in users}
    with open(path, encoding="utf-8") as log:
        for line in log:
            event = json.loads(line)
            user = (event.get("user") or {}).get("username")
            if user not in users:
                continue
            received = timestamp(event["requestReceivedTimestamp"])
            key = request_key(event)
            codes[user][(event.get("responseStatus") or {}).get("code", 0)] += 1
            for window, (start, end) in windows.items():
                if start <= received < end:
                    requests[user][window][key] += 1
                    body = event.get("requestObject")
                    if body is not None:
                        written[user][window][key] += len(json.dumps(body, separators=(",", ":")))
    return {"requests": requests, "written": written, "codes": codes}
