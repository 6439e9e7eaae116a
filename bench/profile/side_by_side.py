#!/usr/bin/env python3
"""Where the gateway's CPU per call goes, beside the minimal h2 forwarder's.

    python3 bench/profile/side_by_side.py [MODE] [IN_FLIGHT] [SECONDS]

MODE is the echo plugin's (`echo` or `mutate`, default `mutate`), IN_FLIGHT
the calls hookbench keeps in flight (default 1), SECONDS how long perf
records each target (default 5). One echo-plugin, a gateway with the
registry gwbench writes (`echo` and 99 padding plugins) and `h2-forwarder`
in front of the same plugin; for each target in turn, `hookbench` (4 KiB
works, or WORK_BYTES) runs while `perf record -F 2000 --call-graph
dwarf,16384` samples the target for SECONDS. Each sample is given a part by
parts.py's rules; a part's µs per call is its share of the samples times the
target's CPU time over the recording (from /proc/PID/stat) divided by the
calls made meanwhile (hookbench's calls/s times SECONDS).

Prints a Markdown table: the gateway's and the forwarder's µs per call by
part, the parts both have first (HTTP/2, the runtime, the kernel, the
allocator), then what only the gateway does. Under perf a call costs about
1.3x what it costs without; compare the two columns, not with gwbench's
figures. Binaries come from BIN_DIR (default target/release); GATEWAY names
another gateway binary. Needs `perf` (Debian's linux-perf). See
docs/performance.md.
"""
import json, os, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parts  # noqa: E402
from procs import Children, wait_line, cpu_seconds, registry  # noqa: E402

NB = os.environ.get("BIN_DIR", "target/release")
GATEWAY = os.environ.get("GATEWAY", f"{NB}/rollout-gateway")
args = sys.argv[1:]
if args and args[0] in ("-h", "--help"):
    sys.exit(__doc__)
mode = args[0] if len(args) > 0 else "mutate"
in_flight = args[1] if len(args) > 1 else "1"
seconds = float(args[2]) if len(args) > 2 else 5.0

# Parts both targets have, grouped; every other part is the gateway's own.
SHARED = {
    "HTTP/2 and the runtime": ["server h2 conn task", "client h2 conn task", "other (runtime etc)",
                               "upstream unary", "send reply", "call task: other"],
    "kernel send": ["kernel send"],
    "kernel receive": ["kernel recv"],
    "waiting (epoll, switches)": ["idle: epoll_wait + switch"],
    "allocator": ["alloc"],
    "tracing (the h2 crate's own events too)": ["spans (tracing/otel)"],
    "metrics": ["metrics"],
    "timers": ["timers"],
}

run = tempfile.mkdtemp(prefix="side-by-side-")
children = Children()
env = dict(os.environ, RUST_LOG="warn")


def start(cmd, name):
    return children.start(cmd, f"{run}/{name}.out", env)


def wait_for(name, pattern):
    return wait_line(f"{run}/{name}.out", pattern)


def profile(name, pid, addr):
    """µs per call by part of the target `pid`, under load at `addr`."""
    bench = subprocess.Popen(
        [f"{NB}/hookbench", "--target", f"http://{addr}", "--plugin", "echo",
         "--concurrency", in_flight, "--work-bytes", os.environ.get("WORK_BYTES", "4KiB"),
         "--duration", f"{seconds + 4}s", "--warmup", "500ms", "--json"],
        stdout=subprocess.PIPE, text=True)
    time.sleep(2)
    before = cpu_seconds(pid)
    subprocess.run(["perf", "record", "-q", "-F", "2000", "--call-graph", "dwarf,16384",
                    "-o", f"{run}/{name}.data", "-p", str(pid), "--", "sleep", str(seconds)],
                   check=True, capture_output=True)
    used = cpu_seconds(pid) - before
    report = json.loads(bench.communicate()[0])
    calls = report["throughputRps"] * seconds
    script = subprocess.run(["perf", "script", "-i", f"{run}/{name}.data"],
                            capture_output=True, text=True, check=True).stdout
    total, _, by_part = parts.classify(script.splitlines())
    return {part: used * 1e6 * n / total / calls for part, n in by_part.items()}


try:
    start([f"{NB}/echo-plugin", "--listen", "127.0.0.1:0", "--mode", mode], "plugin")
    plugin = wait_for("plugin", r"grpc=([0-9.:]+)").group(1)
    names = ["echo"] + [f"pad-{i:03}" for i in range(1, 100)]
    with open(f"{run}/config.yaml", "w") as f:
        f.write(registry((n, plugin) for n in names))
    gateway = start([GATEWAY, "--config", f"{run}/config.yaml", "--listen", "127.0.0.1:0",
                     "--admin-listen", "127.0.0.1:0"], "gateway")
    gateway_addr = wait_for("gateway", r"grpc=([0-9.:]+)").group(1)
    forwarder = start([f"{NB}/h2-forwarder", "--upstream", plugin], "forwarder")
    forwarder_addr = wait_for("forwarder", r"grpc=([0-9.:]+)").group(1)
    time.sleep(1)
    gw = profile("gateway", gateway.pid, gateway_addr)
    fw = profile("forwarder", forwarder.pid, forwarder_addr)
finally:
    children.stop()

print(f"{mode} plugin, {in_flight} in flight, {seconds:g} s under perf each; µs per call (perf adds about 30 %)\n")
print("| part | rollout-gateway | h2-forwarder | gateway − forwarder |")
print("|---|--:|--:|--:|")
shared = set()
for label, members in SHARED.items():
    shared.update(members)
    g = sum(gw.get(m, 0) for m in members)
    f = sum(fw.get(m, 0) for m in members)
    print(f"| {label} | {g:.1f} | {f:.1f} | {g - f:+.1f} |")
own = sorted(((v, k) for k, v in gw.items() if k not in shared), reverse=True)
for v, k in own:
    f = fw.get(k, 0)
    print(f"| gateway: {k} | {v:.1f} | {f:.1f} | {v - f:+.1f} |")
print(f"| **total** | **{sum(gw.values()):.1f}** | **{sum(fw.values()):.1f}** | "
      f"**{sum(gw.values()) - sum(fw.values()):+.1f}** |")
print(f"\n(perf data and logs in {run})")
