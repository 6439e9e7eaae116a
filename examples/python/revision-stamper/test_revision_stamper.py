"""Tests of revision-stamper: its logic, then the real process checked by
rollout-plugin-check and called through a real rollout-gateway.

The end-to-end tests need the binaries: ROLLOUT_PLUGIN_CHECK and
ROLLOUT_GATEWAY name them (.ci/plugins.sh sets both, and ROLLOUT_HOOKS_E2E=1
so that a missing binary fails instead of skipping).

Run:  python -m unittest -v test_revision_stamper
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest
from concurrent import futures
import urllib.request

import revision_stamper as rs

HERE = os.path.dirname(os.path.abspath(__file__))

WORK = {
    "apiVersion": "work.open-cluster-management.io/v1",
    "kind": "ManifestWork",
    "metadata": {"name": "web", "namespace": "cluster1"},
    "spec": {
        "workload": {
            "manifests": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "annotations": {"a": "b"}}},
            ]
        }
    },
}


class StampTest(unittest.TestCase):
    def test_every_manifest_is_stamped_and_the_work_keeps_its_identity(self):
        out = rs.stamp(WORK, "rev-2", "canary")
        for manifest in out["spec"]["workload"]["manifests"]:
            self.assertEqual(manifest["metadata"]["annotations"][rs.REVISION_ANNOTATION], "rev-2")
            self.assertEqual(manifest["metadata"]["annotations"][rs.PLACEMENT_ANNOTATION], "canary")
        self.assertEqual(out["spec"]["workload"]["manifests"][1]["metadata"]["annotations"]["a"], "b")
        for key in ("apiVersion", "kind", "metadata"):
            self.assertEqual(out[key], WORK[key])
        self.assertNotIn("annotations", WORK["spec"]["workload"]["manifests"][0]["metadata"], "input untouched")

    def test_stamping_is_idempotent(self):
        once = rs.stamp(WORK, "rev-2", "canary")
        self.assertEqual(rs.stamp(once, "rev-2", "canary"), once)

    def test_a_work_that_is_not_an_object_is_refused(self):
        for bad in ([1], None, {"spec": {"workload": {"manifests": "x"}}}, {"spec": {"workload": {"manifests": [1]}}}):
            with self.assertRaises(rs.BadWork):
                rs.stamp(bad, "r", "p")


class ConfigTest(unittest.TestCase):
    def test_the_plugins_own_key_adds_annotations(self):
        config = json.dumps({"revision-stamper": {"annotations": {"team": "payments"}}, "soakTime": "5m"})
        extra = rs.extra_annotations(config)
        self.assertEqual(extra, {"team": "payments"})
        out = rs.stamp(WORK, "rev-2", "canary", extra)
        for manifest in out["spec"]["workload"]["manifests"]:
            self.assertEqual(manifest["metadata"]["annotations"]["team"], "payments")

    def test_no_config_or_other_plugins_keys_add_nothing(self):
        for config in ("", "{}", '{"soakTime": "5m", "failClusters": ["c1"]}'):
            self.assertEqual(rs.extra_annotations(config), {}, config)

    def test_the_stamps_are_not_overridden(self):
        extra = {rs.REVISION_ANNOTATION: "forged"}
        out = rs.stamp(WORK, "rev-2", "canary", extra)
        self.assertEqual(out["spec"]["workload"]["manifests"][0]["metadata"]["annotations"][rs.REVISION_ANNOTATION], "rev-2")

    def test_a_config_that_does_not_fit_names_the_key(self):
        for bad, says in (
            ("[1]", "not a JSON object"),
            ("{", "not JSON"),
            ('{"revision-stamper": 1}', "revision-stamper: not an object"),
            ('{"revision-stamper": {"annotations": {"n": 1}}}', "revision-stamper.annotations"),
        ):
            with self.assertRaises(rs.BadConfig) as caught:
                rs.extra_annotations(bad)
            self.assertIn(says, str(caught.exception), bad)

    def test_a_config_nested_too_deep_is_bad_config_not_a_crash(self):
        # 2,000 levels in 4 KB: past Python's recursion limit (1,000), which
        # raises RecursionError, not ValueError.
        for depth in (2_000, 100_000):
            with self.assertRaises(rs.BadConfig) as caught:
                rs.extra_annotations('{"a":' * depth + "1" + "}" * depth)
            self.assertIn("nested too deep", str(caught.exception))


class Aborted(Exception):
    pass


class Context:
    """The part of grpc.ServicerContext a handler uses to fail a call."""

    def abort(self, code, details):
        self.code, self.details = code, details
        raise Aborted()


class BadInputTest(unittest.TestCase):
    def mutate(self, config="", work=b""):
        import grpc

        request = rs.pb.MutateManifestWorkRequest(
            rollout=rs.pb.RolloutPluginRequest(plugin_config_json=config), manifest_work=work
        )
        context = Context()
        with self.assertRaises(Aborted):
            rs.RevisionStamper().MutateManifestWork(request, context)
        self.assertEqual(context.code, grpc.StatusCode.INVALID_ARGUMENT, context.details)
        return context.details

    def test_any_input_the_plugin_cannot_read_is_invalid_argument(self):
        deep = 2_000
        self.assertIn("pluginConfig", self.mutate(config='{"a":' * deep + "1" + "}" * deep))
        self.assertIn("pluginConfig", self.mutate(config="{"))
        for work in (b"{", b"\xff\xfe", b"[1]", ('{"a":' * deep + "1" + "}" * deep).encode()):
            self.assertIn("manifest_work", self.mutate(work=work))


def binary(var):
    path = os.environ.get(var)
    if not path:
        if os.environ.get("ROLLOUT_HOOKS_E2E") == "1":
            raise AssertionError(f"{var} is not set")
        raise unittest.SkipTest(f"{var} names no binary")
    return path


def start(args):
    """Starts a process that prints `NAME listening grpc=ADDR ...` first;
    returns it and the words of that line."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if " listening grpc=" not in line:
        proc.kill()
        raise AssertionError(f"{args[0]} printed {line!r}, not its listening line")
    fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
    return proc, fields


def stop(proc):
    proc.stdout.close()
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return proc.returncode


class EndToEndTest(unittest.TestCase):
    def setUp(self):
        self.plugin, fields = start([sys.executable, os.path.join(HERE, "revision_stamper.py"), "--listen", "127.0.0.1:0"])
        self.addr = fields["grpc"]

    def tearDown(self):
        self.assertEqual(stop(self.plugin), 0, "a clean drain on SIGTERM")

    def test_rollout_plugin_check_passes(self):
        check = subprocess.run([binary("ROLLOUT_PLUGIN_CHECK"), self.addr], capture_output=True, text=True, timeout=60)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        self.assertEqual(
            [line.split()[1] for line in check.stdout.splitlines()],
            ["initialize", "deadline", "idempotent", "identity", "unknown-fields", "large-state", "health"],
        )

    def test_a_call_through_the_gateway(self):
        import grpc

        gateway_bin = binary("ROLLOUT_GATEWAY")
        with tempfile.TemporaryDirectory() as d:
            config = os.path.join(d, "config.yaml")
            with open(config, "w") as f:
                f.write(f"plugins:\n  - name: stamper\n    endpoint: {self.addr}\n    insecure: true\n")
            gateway, fields = start(
                [gateway_bin, "--config", config, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]
            )
            try:
                with urllib.request.urlopen(f"http://{fields['admin']}/readyz", timeout=10) as ready:
                    self.assertEqual(ready.status, 200)
                with grpc.insecure_channel(fields["grpc"]) as channel:
                    client = rs.pb_grpc.RolloutPluginServiceStub(channel)
                    rollout = rs.pb.RolloutPluginRequest(
                        mwrs_name="web", mwrs_namespace="default", placement_name="canary",
                        cluster_name="cluster1", cluster_index=1, total_cluster_count=2,
                        desired_revision="rev-7",
                    )
                    answer = client.MutateManifestWork(
                        rs.pb.MutateManifestWorkRequest(rollout=rollout, manifest_work=json.dumps(WORK).encode()),
                        metadata=[("ocm-rollout-plugin", "stamper")],
                        timeout=10,
                    )
                work = json.loads(answer.manifest_work)
                annotations = work["spec"]["workload"]["manifests"][0]["metadata"]["annotations"]
                self.assertEqual(annotations[rs.REVISION_ANNOTATION], "rev-7")
                self.assertEqual(annotations[rs.PLACEMENT_ANNOTATION], "canary")
            finally:
                self.assertEqual(stop(gateway), 0)


class GracefulGoawayTest(unittest.TestCase):
    """grpcio's max_connection_age makes the plugin send GOAWAY to every
    connection 200 ms after it opens, as grpc servers do in production; calls
    through the gateway, 1 and 32 at a time, with no retries and a circuit
    breaker that opens at the first failure, must never fail."""

    def test_no_call_fails_while_the_plugin_keeps_going_away(self):
        import grpc

        gateway_bin = binary("ROLLOUT_GATEWAY")
        server, addr = rs.serve(
            "127.0.0.1:0",
            extra_options=[("grpc.max_connection_age_ms", 200), ("grpc.max_connection_age_grace_ms", 5000)],
        )
        try:
            with tempfile.TemporaryDirectory() as d:
                config = os.path.join(d, "config.yaml")
                with open(config, "w") as f:
                    f.write(
                        f"plugins:\n  - name: stamper\n    endpoint: {addr}\n    insecure: true\n"
                        "    retry:\n      maxAttempts: 1\n"
                        "    circuitBreaker:\n      consecutiveFailures: 1\n      openFor: 1m\n"
                    )
                gateway, fields = start(
                    [gateway_bin, "--config", config, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]
                )
                try:
                    with grpc.insecure_channel(fields["grpc"]) as channel:
                        client = rs.pb_grpc.RolloutPluginServiceStub(channel)
                        for in_flight in (1, 32):
                            calls, failed, first = self._load(client, in_flight, seconds=3)
                            self.assertGreater(calls, in_flight)
                            self.assertEqual(failed, 0, f"{failed} of {calls} calls failed at {in_flight} in flight: {first}")
                finally:
                    self.assertEqual(stop(gateway), 0)
        finally:
            server.stop(0)

    @staticmethod
    def _load(client, in_flight, seconds):
        import grpc

        rollout = rs.pb.RolloutPluginRequest(
            mwrs_name="web", mwrs_namespace="default", placement_name="canary",
            cluster_name="cluster1", cluster_index=1, total_cluster_count=2, desired_revision="rev-7",
        )
        request = rs.pb.MutateManifestWorkRequest(rollout=rollout, manifest_work=json.dumps(WORK).encode())
        until = time.monotonic() + seconds

        def worker(_):
            calls, failed, first = 0, 0, None
            while time.monotonic() < until:
                calls += 1
                try:
                    client.MutateManifestWork(request, metadata=[("ocm-rollout-plugin", "stamper")], timeout=10)
                except grpc.RpcError as e:
                    failed += 1
                    first = first or f"{e.code()}: {e.details()}"
            return calls, failed, first

        with futures.ThreadPoolExecutor(in_flight) as pool:
            results = list(pool.map(worker, range(in_flight)))
        return (
            sum(r[0] for r in results),
            sum(r[1] for r in results),
            next((r[2] for r in results if r[2]), None),
        )


if __name__ == "__main__":
    unittest.main()
