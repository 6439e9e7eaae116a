#!/usr/bin/env bash
# A simulated fleet rollout through the real gateway and the echo plugin, with
# what each process used and what the plugin received.
#
#   bench/fleet.sh [--state-detail full|counts|unset|none] CLUSTERS [RUNS]
#   bench/fleet.sh goals
#
# Builds nothing: run `cargo build --release --workspace` first (BIN_DIR picks
# another build's binaries). For each run it starts the echo plugin (declaring
# --state-detail, default full; `none`: no plugin and no gateway, the
# controller alone, OCM's own rollout) and a gateway, rolls CLUSTERS clusters out
# with `rollout-controller simulate` (Progressive, maxConcurrency 10%), and
# prints one line: the result, wall time, hook calls, the controller's CPU
# (user + system, exact: the shell's `times` after it exits) and peak RSS
# (its own VmHWM, from the summary), the gateway's and the plugin's CPU during
# the rollout (/proc), and the message bytes the plugin received (its exit
# line), in all and per cluster. Then the last run's summary JSON.
#
# `goals` runs every figure of the fleet-scale goals in one go — 1,000, 4,000,
# 10,000 and 100,000 clusters with the plugin declaring counts; 1,000, 4,000
# and 10,000 with it wanting the full list; 10,000 with no plugin — and prints
# a Markdown table of all runs and one of the goals, each measured figure next
# to its goal.
#
# FLEET_TIMEOUT (seconds, default 900) bounds each rollout: one that takes
# longer is stopped and reported as such. Every process started is stopped on
# exit.
set -euo pipefail

usage="usage: bench/fleet.sh [--state-detail full|counts|unset|none] CLUSTERS [RUNS] | bench/fleet.sh goals"
detail=full
args=()
while [ $# -gt 0 ]; do
    case $1 in
    --state-detail)
        detail=${2:?$usage}
        shift 2
        ;;
    --state-detail=*)
        detail=${1#*=}
        shift
        ;;
    -h | --help)
        echo "$usage"
        exit 0
        ;;
    *)
        args+=("$1")
        shift
        ;;
    esac
done
case $detail in full | counts | unset | none) ;; *)
    echo "--state-detail must be full, counts, unset or none, not $detail" >&2
    exit 2
    ;;
esac
[ ${#args[@]} -ge 1 ] || {
    echo "$usage" >&2
    exit 2
}

bin=${BIN_DIR:-$(dirname "$0")/../target/release}
limit=${FLEET_TIMEOUT:-900}
for b in echo-plugin rollout-gateway rollout-controller; do
    [ -x "$bin/$b" ] || {
        echo "no $bin/$b: run cargo build --release --workspace (or set BIN_DIR)" >&2
        exit 1
    }
done
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
    awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }'
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

# One rollout of $1 clusters, the plugin declaring $2; appends its figures as
# one JSON line to $work/runs.jsonl and prints them.
rollout() {
    local clusters=$1 detail=$2 run=$3
    local gw_pid="" echo_pid="" hook_args=()
    : >"$work/echo.out"
    if [ "$detail" != none ]; then
        "$bin/echo-plugin" --listen 127.0.0.1:0 --state-detail "$detail" \
            >"$work/echo.out" 2>"$work/echo.err" &
        echo_pid=$!
        pids+=("$echo_pid")
        local plugin
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
        local gateway
        gateway=$(address_of "$work/gw.out" 'grpc=[0-9.:]*')
        hook_args=(--plugin echo --gateway "http://$gateway")
    fi

    rm -f "$work/summary.json"
    local gw_before echo_before start end status
    gw_before=0 echo_before=0
    [ -z "$gw_pid" ] || gw_before=$(cpu "$gw_pid")
    [ -z "$echo_pid" ] || echo_before=$(cpu "$echo_pid")
    start=$(date +%s.%N)
    # In a subshell whose only child is the controller (under `timeout`), so
    # that `times` gives the controller's own CPU once it has exited.
    set +e
    (
        # shellcheck disable=SC2086 # PROFILE is a command prefix, split on purpose
        timeout "$limit" ${PROFILE:-} "$bin/rollout-controller" simulate --clusters "$clusters" \
            --strategy Progressive --max-concurrency 10% "${hook_args[@]}" \
            --json --summary "$work/summary.json" \
            >"$work/steps.jsonl" 2>"$work/controller.err"
        echo $? >"$work/status"
        times >"$work/times"
    )
    set -e
    end=$(date +%s.%N)
    status=$(cat "$work/status")
    local gw_cpu=0 echo_cpu=0
    if [ -n "$gw_pid" ]; then
        gw_cpu=$(awk -v a="$gw_before" -v b="$(cpu "$gw_pid")" 'BEGIN { printf "%.2f", b - a }')
        echo_cpu=$(awk -v a="$echo_before" -v b="$(cpu "$echo_pid")" 'BEGIN { printf "%.2f", b - a }')
        # The gateway first: the plugin's drain then has no connection to wait for.
        kill -TERM "$gw_pid"
        wait "$gw_pid" 2>/dev/null || true
        kill -TERM "$echo_pid"
        wait "$echo_pid" || true
    fi
    pids=()
    python3 - "$work" "$clusters" "$detail" "$run" "$start" "$end" "$status" "$gw_cpu" \
        "$echo_cpu" "$limit" <<'EOF'
import json, os, re, sys
work, clusters, detail, run = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
start, end, status = float(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7])
gw_cpu, echo_cpu, limit = float(sys.argv[8]), float(sys.argv[9]), sys.argv[10]

def seconds(t):  # bash `times`: 1m2.345s
    m, s = re.fullmatch(r"(\d+)m([\d.]+)s", t).groups()
    return int(m) * 60 + float(s)

# Second line of `times`: user and system time of the shell's children.
children = open(os.path.join(work, "times")).read().split("\n")[1].split()
controller_cpu = seconds(children[0]) + seconds(children[1])
summary_path = os.path.join(work, "summary.json")
summary = json.load(open(summary_path)) if os.path.exists(summary_path) else {}
received = re.search(r"received requests=(\d+) bytes=(\d+)",
                     open(os.path.join(work, "echo.out")).read())
requests, plugin_bytes = (int(received[1]), int(received[2])) if received else (None, None)
if status == 124:
    result = f"STOPPED after {limit} s"
else:
    result = summary.get("result", f"exit {status}")
record = {
    "clusters": clusters, "stateDetail": detail, "run": run, "result": result,
    "wallSeconds": round(end - start, 2), "hookCalls": sum(summary.get("hookCalls", {}).values()),
    "controllerCpuSeconds": round(controller_cpu, 2),
    "controllerPeakRssMib": summary.get("peakRssMib"),
    "gatewayCpuSeconds": gw_cpu, "pluginCpuSeconds": echo_cpu,
    "pluginRequests": requests, "pluginBytes": plugin_bytes,
}
with open(os.path.join(work, "runs.jsonl"), "a") as out:
    out.write(json.dumps(record) + "\n")
rss = record["controllerPeakRssMib"]
per_cluster = f"{plugin_bytes / clusters:,.0f}" if plugin_bytes is not None else "?"
print(f"{clusters:,} clusters, plugin wants {detail}, run {run}: {result}, wall "
      f"{record['wallSeconds']:.1f} s, {record['hookCalls']} hook calls; controller CPU "
      f"{controller_cpu:.2f} s, peak RSS {'?' if rss is None else f'{rss:.0f}'} MiB; "
      f"gateway CPU {gw_cpu:.2f} s; plugin CPU {echo_cpu:.2f} s; to the plugin "
      f"{plugin_bytes if plugin_bytes is not None else '?'} bytes ({per_cluster} per cluster)",
      flush=True)
EOF
}

if [ "${args[0]}" = goals ]; then
    for spec in 1000:counts 4000:counts 10000:counts 1000:full 4000:full 10000:full \
        10000:none 100000:counts; do
        rollout "${spec%%:*}" "${spec#*:}" 1
    done
    python3 - "$work/runs.jsonl" <<'EOF'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
def run(clusters, detail):
    return next(r for r in runs if r["clusters"] == clusters and r["stateDetail"] == detail)
def ok(r):
    return r["result"].upper() == "SUCCEEDED"
def num(v, fmt="{:.1f}"):
    return "?" if v is None else fmt.format(v)
print()
print("| clusters | plugin wants | result | wall s | hook calls | controller CPU s | controller peak RSS MiB | gateway CPU s | plugin CPU s | bytes to the plugin | per cluster |")
print("|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
for r in runs:
    b = r["pluginBytes"]
    print(f"| {r['clusters']:,} | {r['stateDetail']} | {r['result']} | {r['wallSeconds']:.1f} | "
          f"{r['hookCalls']:,} | {r['controllerCpuSeconds']:.2f} | {num(r['controllerPeakRssMib'], '{:.0f}')} | "
          f"{r['gatewayCpuSeconds']:.2f} | {r['pluginCpuSeconds']:.2f} | {num(b, '{:,}')} | "
          f"{num(None if b is None else b / r['clusters'], '{:,.0f}')} |")
k1, k4, k10, k100 = (run(1000, "counts"), run(4000, "counts"), run(10000, "counts"),
                     run(100000, "counts"))
f1, f4, f10 = run(1000, "full"), run(4000, "full"), run(10000, "full")
alone = run(10000, "none")
def verdict(met, r_list):
    if not all(ok(r) for r in r_list):
        return "no (did not complete)"
    return "yes" if met else "no"
rows = [
    ("10,000 clusters, counts only: wall ≤ 15 s", f"{k10['wallSeconds']:.1f} s",
     verdict(k10["wallSeconds"] <= 15, [k10])),
    ("10,000 clusters, full list: wall ≤ 60 s", f"{f10['wallSeconds']:.1f} s",
     verdict(f10["wallSeconds"] <= 60, [f10])),
    ("wall(4,000) / wall(1,000) ≤ 5× (counts only)",
     f"{k4['wallSeconds'] / k1['wallSeconds']:.2f}×",
     verdict(k4["wallSeconds"] / k1["wallSeconds"] <= 5, [k1, k4])),
    ("controller peak RSS at 10,000 ≤ 150 MiB (counts only)",
     f"{num(k10['controllerPeakRssMib'], '{:.0f}')} MiB",
     verdict((k10["controllerPeakRssMib"] or 1e9) <= 150, [k10])),
    ("wall(4,000) / wall(1,000) ≤ 5× (full list: the plugin receives N × N statuses)",
     f"{f4['wallSeconds'] / f1['wallSeconds']:.2f}×",
     verdict(f4["wallSeconds"] / f1["wallSeconds"] <= 5, [f1, f4])),
    ("controller alone (no plugin) at 10,000: CPU ≤ 3 s", f"{alone['controllerCpuSeconds']:.2f} s",
     verdict(alone["controllerCpuSeconds"] <= 3, [alone])),
    ("100,000 clusters, counts only: completes ≤ 5 min", f"{k100['wallSeconds']:.1f} s",
     verdict(k100["wallSeconds"] <= 300, [k100])),
]
if k1["pluginBytes"] and k4["pluginBytes"]:
    ratio = k4["pluginBytes"] / k1["pluginBytes"]
    rows.append(("bytes to a counts-only plugin per rollout O(N): bytes(4,000) / bytes(1,000) ≈ 4",
                 f"{ratio:.2f}×", verdict(ratio < 5, [k1, k4])))
print()
print("| goal | measured | met |")
print("|---|--:|---|")
for goal, measured, met in rows:
    print(f"| {goal} | {measured} | {met} |")
EOF
    exit 0
fi

clusters=${args[0]}
runs=${args[1]:-1}
for run in $(seq "$runs"); do
    rollout "$clusters" "$detail" "$run"
done
cat "$work/summary.json" 2>/dev/null || true
echo
