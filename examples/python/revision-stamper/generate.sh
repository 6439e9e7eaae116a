#!/usr/bin/env bash
# Generates the plugin API's Python modules from the repository's .proto into
# gen/ (not committed): gen/ocm/rolloutplugin/v1alpha1/rollout_plugin_pb2*.py.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# PROTO_DIR names the directory holding ocm/rolloutplugin/v1alpha1/ (the
# proto/ folder of rollout-hooks); by default the one of this checkout, so the
# script runs from any directory, and a copy outside the repository sets it.
proto="${PROTO_DIR:-$here/../../../proto}"
if [ ! -f "$proto/ocm/rolloutplugin/v1alpha1/rollout_plugin.proto" ]; then
  echo "generate.sh: no ocm/rolloutplugin/v1alpha1/rollout_plugin.proto under $proto;" \
    "set PROTO_DIR to rollout-hooks' proto/ directory (or a copy of it)" >&2
  exit 2
fi
python="${PYTHON:-python3}"
rm -rf "$here/gen"
mkdir -p "$here/gen"
"$python" -m grpc_tools.protoc -I "$proto" \
  --python_out="$here/gen" --grpc_python_out="$here/gen" \
  ocm/rolloutplugin/v1alpha1/rollout_plugin.proto
