#!/usr/bin/env python3
"""The gateway's resident memory, idle and after each load, fresh gateway per run.

    python3 bench/profile/memory.py RUNS NAME=GATEWAY_BINARY...

e.g. `memory.py 5 before=/tmp/gw-before after=target/release/rollout-gateway`.
Starts two echo-plugins (`--mode echo` and `--mode mutate`), then RUNS times
for each binary in turn (order reversed every other run): a fresh gateway with
a registry of 100 plugins (`echo`, `mutate`, and 98 padding plugins at the
echo plugin's address, unless DISTINCT_ENDPOINTS=1), `VmRSS`/`VmHWM` from /proc/PID/status once /readyz
answers, then after each of gwbench's default scenarios in gwbench's order
(`hookbench --concurrency N --work-bytes SIZE --duration 3s --warmup 500ms`):
c1-4k, c1-4k-mut, c32-4k-mut, c8-64k. Prints each run, its resident memory
split into anonymous (heap, stacks, relocated data) and file-backed (the
binary's and libraries' pages), and per binary the medians in MiB.

Each binary is read whole before its gateway starts, so every run finds it
in the page cache as right after a build: the kernel maps cached pages around
each page a process touches, so the file-backed part otherwise varies by
about 1 MiB with what the page cache holds.

DISTINCT_ENDPOINTS=1 gives each padding plugin an address of its own
(127.0.0.2, 127.0.0.3, …, on the echo plugin's port, which it also serves
there with `--loopback-aliases 98`), so the gateway keeps a connection per
plugin, as with 100 distinct plugin servers: the registry gwbench writes.
LOADS (comma-separated scenario names) runs only those; DURATION (default 3s)
sets the measured time; EXTRA_ARGS adds flags to every gateway; BIN_DIR
(default target/release) holds echo-plugin and hookbench. See docs/performance.md ("How to reproduce") and docs/decisions/0005-resident-memory.md.
"""
import os, re, statistics, subprocess, sys, tempfile, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from procs import Children, wait_line as wait_for, registry  # noqa: E402

NB = os.environ.get("BIN_DIR", "target/release")
DUR = os.environ.get("DURATION", "3s")
SCEN = {"c1-4k": ("1", "4KiB", "echo"), "c1-4k-mut": ("1", "4KiB", "mutate"),
        "c32-4k-mut": ("32", "4KiB", "mutate"), "c8-64k": ("8", "64KiB", "echo")}
DISTINCT = os.environ.get("DISTINCT_ENDPOINTS") == "1"
PADDING = 98
loads = os.environ.get("LOADS", "c1-4k,c1-4k-mut,c32-4k-mut,c8-64k").split(",")
runs = int(sys.argv[1])
gws = [a.split("=", 1) for a in sys.argv[2:]]
run = tempfile.mkdtemp(prefix="memory-")
children = Children()
start = children.start


def wait_line(path, pat):
    # 20 s: a gateway here starts with up to 100 plugin endpoints to dial.
    return wait_for(path, pat, tries=400)


def warm(path):
    # The whole binary in the page cache, as right after a build: the kernel
    # maps cached pages around each one the process touches (fault-around),
    # so the file-backed part of RSS depends on how much of it is cached.
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass


def mem(pid):
    s = open(f"/proc/{pid}/status").read()
    kib = lambda k: int(re.search(rf"{k}:\s+(\d+) kB", s).group(1))
    return kib("VmRSS") / 1024, kib("VmHWM") / 1024, kib("RssAnon") / 1024, kib("RssFile") / 1024


try:
    addrs = {}
    for mode in ["echo", "mutate"]:
        aliases = ["--loopback-aliases", str(PADDING)] if DISTINCT and mode == "echo" else []
        start([f"{NB}/echo-plugin", "--listen", "127.0.0.1:0", "--mode", mode] + aliases, f"{run}/plugin-{mode}.out")
        addrs[mode] = wait_line(f"{run}/plugin-{mode}.out", r"grpc=([0-9.:]+)").group(1)
    port = addrs["echo"].rsplit(":", 1)[1]
    pad = (lambda i: f"127.0.0.{i + 1}:{port}") if DISTINCT else (lambda i: addrs["echo"])
    entries = [("echo", addrs["echo"]), ("mutate", addrs["mutate"])] + [(f"pad-{i:03}", pad(i)) for i in range(1, PADDING + 1)]
    open(f"{run}/config.yaml", "w").write(registry(entries))
    env = dict(os.environ, RUST_LOG="warn")
    [env.pop(k) for k in list(env) if k.startswith("OTEL_")]
    extra = os.environ.get("EXTRA_ARGS", "").split()
    res = {name: [] for name, _ in gws}
    for r in range(runs):
        for name, binary in (gws if r % 2 == 0 else gws[::-1]):
            out = f"{run}/{name}-{r}.out"
            warm(binary)
            p = start([binary, "--config", f"{run}/config.yaml", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"] + extra, out, env)
            m = wait_line(out, r"grpc=([0-9.:]+) admin=([0-9.:]+)")
            for _ in range(100):
                if subprocess.run(["curl", "-sf", f"http://{m.group(2)}/readyz"], capture_output=True).returncode == 0:
                    break
                time.sleep(0.1)
            row = [("idle",) + mem(p.pid)]
            for load in loads:
                conc, size, plugin = SCEN[load]
                subprocess.run([f"{NB}/hookbench", "--target", f"http://{m.group(1)}", "--plugin", plugin,
                                "--concurrency", conc, "--work-bytes", size, "--duration", DUR,
                                "--warmup", "500ms", "--json"], capture_output=True, check=True)
                row.append((load,) + mem(p.pid))
            p.terminate()
            p.wait()
            res[name].append(row)
            print(f"run {r+1} {name:8s} " + "  ".join(f"{l} rss {a:5.1f} hwm {b:5.1f} (anon {c:4.1f} file {d:4.1f})" for l, a, b, c, d in row), file=sys.stderr, flush=True)
    med = statistics.median
    print(f"{'MiB, medians of ' + str(runs) + ' runs':24s} " + " ".join(f"{l + ' rss/hwm':>22s}" for l in ["idle"] + loads))
    for name, rows in res.items():
        cols = []
        for i in range(len(rows[0])):
            cols.append(f"{med([x[i][1] for x in rows]):10.1f} {med([x[i][2] for x in rows]):10.1f} ")
        print(f"{name:24s} " + " ".join(cols))
    print(run)
finally:
    children.stop()
