#!/usr/bin/env bash
# A simulated fleet rollout through the real gateway and the echo plugin, with
# the CPU each process used: `bench/fleet.sh CLUSTERS [RUNS]`.
#
# Builds nothing: run `cargo build --release --workspace` first. Prints one
# line per run (wall time, hook calls per second, CPU seconds of the
# controller, the gateway and the plugin) and the summary JSON of the last run
# to stdout. Every process it starts is stopped on exit.
set -euo pipefail

clusters=${1:?usage: bench/fleet.sh CLUSTERS [RUNS]}
runs=${2:-1}
bin=${BIN_DIR:-$(dirname "$0")/../target/release}
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# CPU seconds (user + system) a process has used so far, from /proc.
cpu() {
    local ticks
    ticks=$(awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat")
    awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", t / hz }'
}

# The first line a process prints: its bound address.
address_of() {
    local file=$1 pattern=$2 line
    for _ in $(seq 100); do
        line=$(grep -o "$pattern" "$file" 2>/dev/null | head -1 || true)
        if [ -n "$line" ]; then
            echo "${line#*=}"
            return
        fi
        sleep 0.1
    done
    echo "no address in $file" >&2
    exit 1
}

for run in $(seq "$runs"); do
    "$bin/echo-plugin" --listen 127.0.0.1:0 >"$work/echo.out" 2>"$work/echo.err" &
    echo_pid=$!
    pids+=("$echo_pid")
    plugin=$(address_of "$work/echo.out" '127\.0\.0\.1:[0-9]*')
    cat >"$work/config.yaml" <<EOF
plugins:
  - name: echo
    endpoint: $plugin
    insecure: true
EOF
    "$bin/rollout-gateway" --config "$work/config.yaml" --listen 127.0.0.1:0 \
        --admin-listen 127.0.0.1:0 >"$work/gw.out" 2>"$work/gw.err" &
    gw_pid=$!
    pids+=("$gw_pid")
    gateway=$(address_of "$work/gw.out" 'grpc=[0-9.:]*')

    start=$(date +%s.%N)
    ${PROFILE:-} "$bin/rollout-controller" simulate --clusters "$clusters" --strategy Progressive \
        --max-concurrency 10% --plugin echo --gateway "http://$gateway" --json \
        --summary "$work/summary.json" >"$work/steps.jsonl" &
    sim_pid=$!
    # Sample the controller's CPU until it exits (its /proc entry goes with it).
    sim_cpu=0
    while kill -0 "$sim_pid" 2>/dev/null; do
        sim_cpu=$(cpu "$sim_pid" 2>/dev/null || echo "$sim_cpu")
        sleep 0.2
    done
    wait "$sim_pid"
    end=$(date +%s.%N)
    python3 - "$work/summary.json" "$start" "$end" "$sim_cpu" "$(cpu "$gw_pid")" "$(cpu "$echo_pid")" "$run" <<'EOF'
import json, sys
summary = json.load(open(sys.argv[1]))
start, end = float(sys.argv[2]), float(sys.argv[3])
print(f"run {sys.argv[7]}: {summary['result']} wall {end - start:.1f} s, "
      f"{summary.get('hookCallsPerSecond', 0):.0f} hook calls/s "
      f"({sum(summary['hookCalls'].values())} calls), CPU s: controller ≥{sys.argv[4]}, "
      f"gateway {sys.argv[5]}, plugin {sys.argv[6]}, controller peak RSS "
      f"{summary.get('peakRssMib', '?')} MiB")
EOF
    kill "$gw_pid" "$echo_pid"
    wait "$gw_pid" "$echo_pid" 2>/dev/null || true
    pids=()
done
cat "$work/summary.json"
echo
