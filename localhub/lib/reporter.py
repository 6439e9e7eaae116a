"""A stand-in for OCM's work agents on a hub-only bed: it watches every
ManifestWork on the hub and, for each generation it has not reported yet,
writes the work's status as OCM's agent would for a healthy rollout:
`delay` after seeing the generation, Applied, Available, the condition
rules' conditions (Progressing True, Degraded False) and the feedback values;
`delay` later, Progressing False. Every condition carries the generation it
observed. The writes are merge patches of the status subresource, by
`workers` threads, so that whichever controller made the works sees the same
agent.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

from .api import ApiError, Client

WORKS = "/apis/work.open-cluster-management.io/v1/manifestworks"


def work_path(namespace: str, name: str) -> str:
    return f"/apis/work.open-cluster-management.io/v1/namespaces/{namespace}/manifestworks/{name}"


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(old: list[dict], kind: str, status: bool, reason: str, generation: int) -> dict:
    """A condition of `kind`, keeping its lastTransitionTime while its status stays."""
    value = "True" if status else "False"
    before = next((c for c in old if c.get("type") == kind), None)
    since = before["lastTransitionTime"] if before and before.get("status") == value else now_rfc3339()
    return {"type": kind, "status": value, "reason": reason, "message": f"{kind} is {value}",
            "observedGeneration": generation, "lastTransitionTime": since}


def rule_value(kind: str, done: bool) -> bool:
    return {"Progressing": not done, "Degraded": False}.get(kind, True)


def manifest_status(manifest: dict, ordinal: int, config: dict | None, old: dict | None,
                    generation: int, done: bool) -> dict:
    group, _, version = manifest["apiVersion"].rpartition("/")
    meta = manifest.get("metadata") or {}
    kind = manifest["kind"]
    old_conditions = (old or {}).get("conditions") or []
    rules = [r["condition"] for r in (config or {}).get("conditionRules") or []]
    conditions = [condition(old_conditions, c, True, "AsExpected", generation)
                  for c in ("Applied", "Available", "StatusFeedbackSynced")]
    conditions += [condition(old_conditions, c, rule_value(c, done), "ConditionRule", generation) for c in rules]
    status = {"resourceMeta": {"ordinal": ordinal, "group": group, "version": version, "kind": kind,
                               "resource": kind.lower() + "s", "name": meta.get("name", ""),
                               "namespace": meta.get("namespace", "")},
              "conditions": conditions}
    feedback = feedback_values(manifest, config, done)
    if feedback:
        status["statusFeedback"] = {"values": feedback}
    return status


def feedback_values(manifest: dict, config: dict | None, done: bool) -> list[dict]:
    values = []
    replicas = (manifest.get("spec") or {}).get("replicas", 1)
    for rule in (config or {}).get("feedbackRules") or []:
        if rule.get("type") == "WellKnownStatus" and manifest["kind"] == "Deployment":
            ready = replicas if done else 0
            values += [{"name": n, "fieldValue": {"type": "Integer", "integer": v}}
                       for n, v in (("ReadyReplicas", ready), ("Replicas", replicas), ("AvailableReplicas", ready))]
        for path in rule.get("jsonPaths") or []:
            values.append({"name": path["name"], "fieldValue": {"type": "Integer", "integer": replicas}})
    return values


def config_of(spec: dict, manifest: dict) -> dict | None:
    meta = manifest.get("metadata") or {}
    group = manifest["apiVersion"].rpartition("/")[0]
    for config in spec.get("manifestConfigs") or []:
        ident = config.get("resourceIdentifier") or {}
        if ident.get("group", "") == group and ident.get("name") == meta.get("name") \
                and ident.get("namespace", "") == meta.get("namespace", "") \
                and ident.get("resource") == manifest["kind"].lower() + "s":
            return config
    return None


def work_status(work: dict, generation: int, done: bool) -> dict:
    spec = work.get("spec") or {}
    old = work.get("status") or {}
    old_conditions = old.get("conditions") or []
    old_manifests = (old.get("resourceStatus") or {}).get("manifests") or []
    manifests = (spec.get("workload") or {}).get("manifests") or []
    statuses = [manifest_status(m, i, config_of(spec, m), old_manifests[i] if i < len(old_manifests) else None,
                                generation, done) for i, m in enumerate(manifests)]
    rules = {r["condition"] for m in manifests for r in (config_of(spec, m) or {}).get("conditionRules") or []}
    conditions = [condition(old_conditions, "Applied", True, "AppliedManifestWorkComplete", generation),
                  condition(old_conditions, "Available", True, "ResourcesAvailable", generation)]
    conditions += [condition(old_conditions, c, rule_value(c, done), "ConditionRulesAggregated", generation)
                   for c in sorted(rules)]
    return {"conditions": conditions, "resourceStatus": {"manifests": statuses}}


class Reporter:
    """Runs in threads of this process until stop(); `counts` says what it
    received and wrote."""

    def __init__(self, make_client, delay_s: float, workers: int = 8):
        self.make_client = make_client
        self.delay_s = delay_s
        self.latest: dict[tuple[str, str], dict] = {}
        self.reported: dict[tuple[str, str], int] = {}
        # The last write made for each work: (generation, done).
        self.written: dict[tuple[str, str], tuple[int, bool]] = {}
        self.queue: list[tuple[float, int, tuple[str, str], int, bool]] = []
        self.sequence = 0
        self.lock = threading.Condition()
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="reporter")
        self.local = threading.local()
        self.stopping = False
        self.watching = threading.Event()
        self.counts: Counter = Counter()
        self.errors: list[str] = []

    def start(self) -> None:
        threading.Thread(target=self._watch, name="reporter-watch", daemon=True).start()
        threading.Thread(target=self._schedule, name="reporter-schedule", daemon=True).start()
        if not self.watching.wait(30):
            raise RuntimeError("the status reporter's watch did not start")

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
            self.lock.notify_all()
        self.pool.shutdown(wait=True)

    def _client(self) -> Client:
        if not hasattr(self.local, "client"):
            self.local.client = self.make_client()
        return self.local.client

    def _watch(self) -> None:
        client = self.make_client()
        while not self.stopping:
            try:
                # A fresh API server answers 429 until its cache of the CRD is ready.
                listed = client.get(WORKS)
                for work in listed["items"]:
                    self._seen(work)
                self.watching.set()
                for event in client.watch(WORKS, listed["metadata"]["resourceVersion"]):
                    if self.stopping:
                        return
                    self.counts[f"watch {event['type']}"] += 1
                    self.counts["watch bytes"] += event["_bytes"]
                    if event["type"] == "ERROR":
                        break
                    if event["type"] == "BOOKMARK":
                        continue
                    if event["type"] == "DELETED":
                        key = (event["object"]["metadata"]["namespace"], event["object"]["metadata"]["name"])
                        with self.lock:
                            self.latest.pop(key, None)
                            self.reported.pop(key, None)
                            self.written.pop(key, None)
                        continue
                    self._seen(event["object"])
            except (ApiError, OSError) as error:
                self.errors.append(f"watch: {error}")
                time.sleep(0.5)

    def _seen(self, work: dict) -> None:
        meta = work["metadata"]
        key, generation = (meta["namespace"], meta["name"]), meta.get("generation", 1)
        with self.lock:
            self.latest[key] = work
            if self.reported.get(key) == generation:
                return
            self.reported[key] = generation
            due = time.monotonic() + self.delay_s
            for at, done in ((due, False), (due + self.delay_s, True)):
                self.sequence += 1
                heapq.heappush(self.queue, (at, self.sequence, key, generation, done))
            self.lock.notify_all()

    def _schedule(self) -> None:
        while True:
            with self.lock:
                while not self.stopping and (not self.queue or self.queue[0][0] > time.monotonic()):
                    self.lock.wait(None if not self.queue else max(0.0, self.queue[0][0] - time.monotonic()))
                if self.stopping:
                    return
                _, _, key, generation, done = heapq.heappop(self.queue)
            self.pool.submit(self._write, key, generation, done)

    def _retry(self, key: tuple[str, str], generation: int, done: bool, after_s: float = 0.5) -> None:
        """A write once more a moment later: one that failed, as an agent
        retries, or a Progressing False whose Applied is not written yet."""
        with self.lock:
            self.sequence += 1
            heapq.heappush(self.queue, (time.monotonic() + after_s, self.sequence, key, generation, done))
            self.lock.notify_all()

    def _write(self, key: tuple[str, str], generation: int, done: bool) -> None:
        with self.lock:
            work = self.latest.get(key)
            # The two writes of a generation in order, as one agent makes
            # them: the pool's threads may otherwise finish them the other way.
            waiting = done and self.written.get(key) != (generation, False)
        if work is None or work["metadata"].get("generation", 1) != generation:
            return  # deleted, or a newer generation has its own writes queued
        if waiting:
            self._retry(key, generation, done, 0.1)
            return
        try:
            self._client().merge_patch(work_path(*key) + "/status", {"status": work_status(work, generation, done)})
            with self.lock:
                self.written[key] = (generation, done)
            self.counts["status writes"] += 1
        except (ApiError, OSError) as error:
            self.errors.append(f"{key}: {error}")
            self.counts["status writes retried"] += 1
            self._retry(key, generation, done)
