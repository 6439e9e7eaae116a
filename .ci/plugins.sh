#!/usr/bin/env bash
# Plugins in any language: runs rollout-plugin-check against every example
# plugin (the four Rust ones, the Go one, the Python one), and the Go and
# Python plugins' own tests (which check them and call them through a real
# rollout-gateway). Builds the Rust binaries it needs (debug, as the tests
# left them). Go comes from Debian's packages (offline, GOPATH mode), Python's
# grpcio from PyPI into a venv under ~/.cache; both are installed when
# missing, and a Go still missing fails the run. Every plugin it starts is
# stopped when it exits, whether it passed or failed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
BIN="$TARGET/debug"

cargo build -q -p rollout-plugin-check -p rollout-gateway \
  -p smoke-test -p traffic-weights -p rollback-mutator -p prometheus-analysis
export ROLLOUT_PLUGIN_CHECK="$BIN/rollout-plugin-check"
export ROLLOUT_GATEWAY="$BIN/rollout-gateway"
export ROLLOUT_HOOKS_E2E=1

# The plugins started, one process id a line in $STATE/pids (a file,
# because each is started inside `addr=$(start_plugin ...)`, a subshell
# whose variables are lost), and their output. They are stopped on every
# exit, a failure and Ctrl-C included.
STATE=$(mktemp -d)
: >"$STATE/pids"
SNIPDIR=
GOWORK_DIR=
cleanup() {
  local pid left
  while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$STATE/pids"
  for _ in $(seq 30); do
    left=0
    while read -r pid; do kill -0 "$pid" 2>/dev/null && left=1; done <"$STATE/pids"
    ((left)) || break
    sleep 0.1
  done
  while read -r pid; do kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true; done <"$STATE/pids"
  rm -rf "$STATE" "$SNIPDIR" "$GOWORK_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Starts a plugin ("$@") and echoes the address of its listening line.
start_plugin() {
  local out
  out=$(mktemp -p "$STATE")
  "$@" >"$out" 2>/dev/null &
  echo $! >>"$STATE/pids"
  for _ in $(seq 300); do
    if grep -q ' listening grpc=' "$out"; then
      sed -n 's/.* listening grpc=\([^ ]*\).*/\1/p' "$out" | head -1
      return
    fi
    sleep 0.1
  done
  echo "plugin $1 printed no listening line" >&2
  return 1
}

echo "-- Go"
# Go is required (the Go plugin, the guide's Go plugin, gofmt): installed
# from Debian's packages when missing, and a failure when still not there.
GO_DEBS=(golang-go golang-google-grpc-dev golang-google-protobuf-dev
  golang-github-golang-protobuf-1-5-dev protobuf-compiler protoc-gen-go protoc-gen-go-grpc)
missing=()
for deb in "${GO_DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$deb" 2>/dev/null | grep -q 'ok installed' || missing+=("$deb")
done
if ((${#missing[@]})); then
  echo "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
for tool in go gofmt; do
  command -v "$tool" >/dev/null || {
    echo "$tool not found on PATH: Go is required to build and check the Go plugins" \
      "(Debian's golang-go)" >&2
    exit 1
  }
done

# Fails unless gofmt reads every file of "$@" and finds it formatted; what
# is checked is named by $1.
check_gofmt() {
  local what=$1 out
  shift
  if ! out=$(gofmt -l "$@"); then
    echo "$what: gofmt cannot parse it (above)" >&2
    exit 1
  fi
  if [[ -n "$out" ]]; then
    echo "$what: not gofmt-formatted:" >&2
    gofmt -d "$@" >&2
    exit 1
  fi
}

echo "-- the guide's Go and Python plugins, as files"
# The fenced block after the line starting `<!-- MARKER` in the guide.
snippet() {
  awk -v m="<!-- $1" 'index($0, m) == 1 { found = 1; next }
    found && /^```/ { if (inside) exit; inside = 1; next }
    inside { print }' docs/plugin-guide.md
}
SNIPDIR=$(mktemp -d)
snippet guide:go >"$SNIPDIR/main.go"
snippet guide:python >"$SNIPDIR/plugin.py"
for f in "$SNIPDIR/main.go" "$SNIPDIR/plugin.py"; do
  [[ -s "$f" ]] || { echo "docs/plugin-guide.md: no block for $(basename "$f")" >&2; exit 1; }
done
# gofmt parses the whole file (an import left out shows in `go vet` below).
check_gofmt "docs/plugin-guide.md's Go plugin" "$SNIPDIR/main.go"
python3 -m py_compile "$SNIPDIR/plugin.py"

echo "-- rollout-plugin-check against the Rust example plugins"
# prometheus-analysis with its example checks and no Prometheus (port 1
# refuses): every validation is INPROGRESS, as with Prometheus down.
for plugin in "smoke-test --soak 30s" traffic-weights rollback-mutator \
  "prometheus-analysis --prometheus-url http://127.0.0.1:1 --config examples/plugins/prometheus-analysis/checks.json"; do
  # shellcheck disable=SC2086
  addr=$(start_plugin $BIN/$plugin --listen 127.0.0.1:0)
  echo "$plugin ($addr)"
  "$ROLLOUT_PLUGIN_CHECK" "$addr"
done

echo "-- the Python plugin (examples/python/revision-stamper)"
PYENV="${ROLLOUT_HOOKS_PY_VENV:-$HOME/.cache/rollout-hooks-py}"
PYDIR=examples/python/revision-stamper
if ! "$PYENV/bin/python" -c 'import grpc, grpc_tools, grpc_health' 2>/dev/null; then
  echo "making the venv $PYENV (grpcio from PyPI)"
  python3 -m venv "$PYENV"
  "$PYENV/bin/pip" install -q --disable-pip-version-check -r "$PYDIR/requirements.txt"
fi
PYTHON="$PYENV/bin/python" "$PYDIR/generate.sh"
addr=$(start_plugin "$PYENV/bin/python" "$PYDIR/revision_stamper.py" --listen 127.0.0.1:0)
echo "revision-stamper ($addr)"
"$ROLLOUT_PLUGIN_CHECK" "$addr"
# The guide's Python plugin, with the generated modules next to it: its
# statements up to the server's (imports, the servicer class) run, and its
# Initialize answers; serving is left out.
cp -r "$PYDIR/gen" "$SNIPDIR/gen"
"$PYENV/bin/python" - "$SNIPDIR/plugin.py" <<'PY'
import ast, sys
path = sys.argv[1]
tree = ast.parse(open(path).read())
head = []
for node in tree.body:
    if isinstance(node, ast.Assign):
        break
    head.append(node)
scope = {"__file__": path, "__name__": "guide"}
exec(compile(ast.Module(head, []), path, "exec"), scope)
servicers = [v for v in scope.values() if isinstance(v, type) and hasattr(v, "Initialize")
             and v.__module__ == "guide"]
assert servicers, "no servicer class in the guide's Python plugin"
print("guide plugin:", servicers[0]().Initialize(None, None).name)
PY
(cd "$PYDIR" && "$PYENV/bin/python" -m unittest -v test_revision_stamper 2>&1 | grep -v ResourceWarning)
# grpcio as the client of every answer shape the gateway's decoder rule
# covers: what the gateway takes, grpcio reads the same way.
ROLLOUT_HOOKS_PYTHON="$PYENV/bin/python" cargo test -q -p rollout-gateway --test it -- \
  plugin_answers::grpcio --nocapture

echo "-- the Go plugin (examples/go/cluster-gate)"
# GOPATH mode, offline: Debian's Go libraries live in /usr/share/gocode; the
# generated API package and the plugin go into a GOPATH of their own under
# their import paths. (Without golang-github-golang-protobuf-1-5-dev,
# grpc-go's codec panics on messages of today's protoc-gen-go.)
GODIR=examples/go/cluster-gate
GOWORK_DIR=$(mktemp -d)
GOIMPORT=open-cluster-management.io/rollout-hooks
mkdir -p "$GOWORK_DIR/src/$GOIMPORT/examples/go"
"$GODIR/generate.sh" "$GOWORK_DIR/src/$GOIMPORT/gen/go"
ln -s "$ROOT/$GODIR" "$GOWORK_DIR/src/$GOIMPORT/examples/go/cluster-gate"
export GO111MODULE=off GOFLAGS= GOPATH="$GOWORK_DIR:/usr/share/gocode"
export GOCACHE="${GOCACHE:-$HOME/.cache/rollout-hooks-go-build}"
check_gofmt "$GODIR" "$GODIR"
(
  cd "$GOWORK_DIR/src/$GOIMPORT/examples/go/cluster-gate"
  go vet .
  go build -o "$GOWORK_DIR/cluster-gate" .
  go test -count=1 -v . 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|_test.go'
)
# The guide's Go plugin, compiled against the same generated package.
mkdir -p "$GOWORK_DIR/src/example.com/guide-plugin"
cp "$SNIPDIR/main.go" "$GOWORK_DIR/src/example.com/guide-plugin/main.go"
(cd "$GOWORK_DIR/src/example.com/guide-plugin" && go vet . && go build -o "$GOWORK_DIR/guide-plugin" .)
addr=$(start_plugin "$GOWORK_DIR/cluster-gate" --listen 127.0.0.1:0)
echo "cluster-gate ($addr)"
"$ROLLOUT_PLUGIN_CHECK" "$addr"
