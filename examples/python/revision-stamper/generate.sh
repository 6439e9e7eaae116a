#!/usr/bin/env bash
# Generates the plugin API's Python modules from the repository's .proto into
# gen/ (not committed): gen/ocm/rolloutplugin/v1alpha1/rollout_plugin_pb2*.py.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
proto="$here/../../../proto"
python="${PYTHON:-python3}"
rm -rf "$here/gen"
mkdir -p "$here/gen"
"$python" -m grpc_tools.protoc -I "$proto" \
  --python_out="$here/gen" --grpc_python_out="$here/gen" \
  ocm/rolloutplugin/v1alpha1/rollout_plugin.proto
