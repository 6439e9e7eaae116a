"""revision-stamper: an OCM rollout plugin in Python (grpcio).

It implements one hook, MutateManifestWork: every manifest of the work gets
the annotations

    rollout-hooks.io/revision: <desired_revision>
    rollout-hooks.io/placement: <placement_name>

so each cluster's objects say which revision of which placement put them
there, plus the annotations the rollout's plugin configuration asks for under
its own key (the keys of a pipeline's other plugins are ignored):

    rolloutStrategy:
      pluginConfig:
        revision-stamper:
          annotations: {team: payments}
 The work's own apiVersion, kind, metadata.name and metadata.namespace
are never touched (the gateway refuses an answer that changes them), and the
answer depends only on the request, so a repeated call gets the same answer.

Run:  python revision_stamper.py --listen 127.0.0.1:0
Prints `revision-stamper listening grpc=ADDR` on stdout once bound, logs on
stderr, serves grpc.health.v1.Health, and drains on SIGTERM or Ctrl-C.
Generate the API's modules first with ./generate.sh (into gen/).
"""

import argparse
import json
import logging
import os
import signal
import sys
import threading
from concurrent import futures

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen"))

import grpc  # noqa: E402
from google.protobuf import empty_pb2  # noqa: E402
from grpc_health.v1 import health, health_pb2, health_pb2_grpc  # noqa: E402
from ocm.rolloutplugin.v1alpha1 import rollout_plugin_pb2 as pb  # noqa: E402
from ocm.rolloutplugin.v1alpha1 import rollout_plugin_pb2_grpc as pb_grpc  # noqa: E402

NAME = "revision-stamper"
VERSION = "0.1.0"
SERVICE_NAME = "ocm.rolloutplugin.v1alpha1.RolloutPluginService"
REVISION_ANNOTATION = "rollout-hooks.io/revision"
PLACEMENT_ANNOTATION = "rollout-hooks.io/placement"
# The SDK's default, so the 10,000-cluster states the controller may send fit.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024

log = logging.getLogger(NAME)


class BadWork(ValueError):
    """The request's work is not a ManifestWork this plugin can stamp."""


class BadConfig(ValueError):
    """The rollout's plugin configuration does not fit this plugin."""


def _loads(text, bad):
    """`text` parsed as JSON; `bad` (an exception class) saying why not.

    Any input the parser cannot take is the caller's, refused with a clear
    reason: malformed JSON or bytes that are not UTF-8 (ValueError), and
    JSON nested deeper than Python's recursion limit (RecursionError, which
    is no ValueError and would otherwise reach the caller as UNKNOWN).
    """
    try:
        return json.loads(text)
    except RecursionError as e:
        raise bad("not JSON this plugin can read: nested too deep") from e
    except ValueError as e:
        raise bad(f"not JSON: {e}") from e


def extra_annotations(plugin_config_json: str) -> dict:
    """The annotations a rollout's plugin_config_json asks for, under
    `revision-stamper.annotations` (a map of strings); {} when it asks for
    none. Raises BadConfig naming the key when the value does not fit.
    """
    if not plugin_config_json:
        return {}
    config = _loads(plugin_config_json, BadConfig)
    if not isinstance(config, dict):
        raise BadConfig("not a JSON object")
    mine = config.get(NAME, {})
    if not isinstance(mine, dict):
        raise BadConfig(f"{NAME}: not an object")
    annotations = mine.get("annotations", {})
    if not isinstance(annotations, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()
    ):
        raise BadConfig(f"{NAME}.annotations: not a map of strings")
    return annotations


def stamp(work: dict, revision: str, placement: str, extra: dict = None) -> dict:
    """Returns a copy of `work` whose manifests carry the two annotations
    (and `extra`, which never overrides them).

    Pure: the answer depends only on its inputs. Raises BadWork when the
    work is not a JSON object or a manifest is not one.
    """
    if not isinstance(work, dict):
        raise BadWork("manifest_work is not a JSON object")
    out = json.loads(json.dumps(work))
    manifests = out.get("spec", {}).get("workload", {}).get("manifests", [])
    if not isinstance(manifests, list):
        raise BadWork("spec.workload.manifests is not a list")
    for i, manifest in enumerate(manifests):
        if not isinstance(manifest, dict):
            raise BadWork(f"spec.workload.manifests[{i}] is not an object")
        metadata = manifest.setdefault("metadata", {})
        annotations = metadata.get("annotations") or {}
        annotations.update(extra or {})
        annotations[REVISION_ANNOTATION] = revision
        annotations[PLACEMENT_ANNOTATION] = placement
        metadata["annotations"] = annotations
    return out


class RevisionStamper(pb_grpc.RolloutPluginServiceServicer):
    """The gRPC service: Initialize and MutateManifestWork.

    The hooks it does not declare answer neutrally, should a caller call
    them anyway.
    """

    def Initialize(self, request, context):
        log.info("initialized by %s", request.controller_version or "an unnamed caller")
        return pb.InitializeResponse(
            name=NAME, version=VERSION, hooks=[pb.HOOK_MUTATE_MANIFEST_WORK]
        )

    def BeginRollout(self, request, context):
        return empty_pb2.Empty()

    def ProgressRollout(self, request, context):
        return empty_pb2.Empty()

    def ValidateRolloutCompletion(self, request, context):
        return pb.ValidateResponse(result=pb.VALIDATION_RESULT_SUCCEEDED)

    def MutateManifestWork(self, request, context):
        rollout = request.rollout
        try:
            extra = extra_annotations(rollout.plugin_config_json)
        except BadConfig as e:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"plugin_config_json (the rollout's pluginConfig): {e}"
            )
        try:
            work = _loads(request.manifest_work or b"null", BadWork)
            stamped = stamp(work, rollout.desired_revision, rollout.placement_name, extra)
        except BadWork as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"manifest_work: {e}")
        log.info(
            "stamped cluster=%s revision=%s aborting=%s",
            rollout.cluster_name,
            rollout.desired_revision,
            rollout.aborting,
        )
        return pb.MutateManifestWorkResponse(
            manifest_work=json.dumps(stamped, separators=(",", ":")).encode()
        )


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def serve(listen, tls_cert=None, tls_key=None, client_ca=None, extra_options=()):
    """Starts the server; returns (server, bound address). `extra_options` are
    more grpc server options (say, ("grpc.max_connection_age_ms", N))."""
    options = [
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        *extra_options,
    ]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=options)
    pb_grpc.add_RolloutPluginServiceServicer_to_server(RevisionStamper(), server)
    health_servicer = health.HealthServicer()
    health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_servicer.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if tls_cert:
        credentials = grpc.ssl_server_credentials(
            [(_read(tls_key), _read(tls_cert))],
            root_certificates=_read(client_ca) if client_ca else None,
            require_client_auth=bool(client_ca),
        )
        port = server.add_secure_port(listen, credentials)
    else:
        port = server.add_insecure_port(listen)
    if port == 0:
        raise OSError(f"cannot listen on {listen}")
    server.start()
    host = listen.rsplit(":", 1)[0]
    return server, f"{host}:{port}"


def main(argv=None):
    parser = argparse.ArgumentParser(prog=NAME, description=__doc__.split("\n")[0])
    parser.add_argument("--listen", default="127.0.0.1:7004", help="gRPC address (port 0 picks one)")
    parser.add_argument("--tls-cert", help="serve TLS with this certificate chain (PEM)")
    parser.add_argument("--tls-key", help="the private key of --tls-cert (PEM)")
    parser.add_argument("--client-ca", help="require client certificates from this CA (mutual TLS)")
    args = parser.parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key) or (args.client_ca and not args.tls_cert):
        parser.error("--tls-cert and --tls-key go together; --client-ca needs them")
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    server, addr = serve(args.listen, args.tls_cert, args.tls_key, args.client_ca)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"{NAME} listening grpc={addr}", flush=True)
    stop.wait()
    log.info("draining")
    server.stop(grace=10).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
