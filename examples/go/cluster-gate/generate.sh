#!/usr/bin/env bash
# Generates the plugin API's Go package from the repository's .proto with
# protoc, protoc-gen-go and protoc-gen-go-grpc, into OUT (default: gen/, not
# committed), as the Go module open-cluster-management.io/rollout-hooks/gen/go
# that go.mod replaces with ./gen. The package itself is
# OUT/ocm/rolloutplugin/v1alpha1 (the .proto's go_package).
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
out="${1:-$here/gen}"
module=open-cluster-management.io/rollout-hooks/gen/go
rm -rf "$out"
mkdir -p "$out"
protoc -I "$proto" \
  --go_out="$out" --go_opt=module="$module" \
  --go-grpc_out="$out" --go-grpc_opt=module="$module" \
  ocm/rolloutplugin/v1alpha1/rollout_plugin.proto
cat >"$out/go.mod" <<MOD
module $module

go 1.19

require (
	google.golang.org/grpc v1.33.3
	google.golang.org/protobuf v1.28.1
)
MOD
