#!/usr/bin/env python3
"""Two (or more) gateway builds against each other, alternating, in one run.

    python3 bench/profile/alternate.py MODE ROUNDS DURATION IN_FLIGHT NAME=GATEWAY_BINARY...

e.g. `alternate.py mutate 5 3s 1 before=/tmp/gw-before after=target/release/rollout-gateway`.
One echo-plugin (`--mode MODE`), a gateway per binary with the registry gwbench
writes (`echo` and 99 padding plugins), then ROUNDS rounds of `hookbench`
against the plugin directly and each gateway in turn (order reversed every
other round), each for DURATION after 500 ms of warm-up. Prints each round and
the medians of the per-round figures: p50, p99, added p50/p99 (against the
direct call of the same round), calls/s as a share of direct, and the
gateway's CPU per call from /proc/PID/stat. echo-plugin and hookbench are
taken from BIN_DIR (default target/release); WORK_BYTES (default 4KiB, as
hookbench's --work-bytes) sets the ManifestWork size. See docs/performance.md.
"""
import subprocess, sys, time, re, os, statistics, json
NB = os.environ.get("BIN_DIR", "target/release")
mode, rounds, dur, conc = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
gws = [a.split("=", 1) for a in sys.argv[5:]]
import tempfile
run = tempfile.mkdtemp(prefix="alternate-")
procs = []
def start(cmd, out, env=None):
    f = open(out, "w"); p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env); procs.append(p); return p
def wait_line(path, pat):
    for _ in range(200):
        m = re.search(pat, open(path).read())
        if m: return m
        time.sleep(0.05)
    raise SystemExit(f"no {pat} in {path}")
try:
    start([f"{NB}/echo-plugin", "--listen", "127.0.0.1:0", "--mode", mode], f"{run}/plugin.out")
    paddr = wait_line(f"{run}/plugin.out", r"grpc=([0-9.:]+)").group(1)
    cfg = "plugins:\n" + "".join(f"  - name: {n}\n    endpoint: {paddr}\n    insecure: true\n" for n in ["echo"] + [f"pad-{i:03}" for i in range(1, 100)])
    open(f"{run}/config.yaml", "w").write(cfg)
    targets = [("direct", paddr, None)]
    env = dict(os.environ, RUST_LOG="warn"); [env.pop(k) for k in list(env) if k.startswith("OTEL_")]
    for name, binary in gws:
        p = start([binary, "--config", f"{run}/config.yaml", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"], f"{run}/{name}.out", env)
        m = wait_line(f"{run}/{name}.out", r"grpc=([0-9.:]+) admin=([0-9.:]+)")
        for _ in range(100):
            if subprocess.run(["curl", "-sf", f"http://{m.group(2)}/readyz"], capture_output=True).returncode == 0: break
            time.sleep(0.1)
        targets.append((name, m.group(1), p.pid))
    res = {t[0]: [] for t in targets}
    tick = os.sysconf("SC_CLK_TCK")
    def cpu(pid):
        if pid is None: return 0
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / tick
    for r in range(rounds):
        order = targets if r % 2 == 0 else [targets[0]] + targets[1:][::-1]
        for name, addr, pid in order:
            c0 = cpu(pid)
            out = subprocess.run([f"{NB}/hookbench", "--target", f"http://{addr}", "--plugin", "echo", "--concurrency", conc, "--work-bytes", os.environ.get("WORK_BYTES", "4KiB"), "--duration", dur, "--warmup", "500ms", "--json"], capture_output=True, text=True)
            c1 = cpu(pid)
            try:
                j = json.loads(out.stdout)
            except Exception:
                print(out.stdout[-500:], out.stderr[-500:]); raise
            n = j["requests"] + j.get("warmupRequests", 0)
            j["cpuUsPerCall"] = (c1 - c0) * 1e6 / n if pid else 0
            res[name].append((j, c1 - c0))
            print(f"round {r+1} {name:10s} p50 {j['latencyMicros']['p50']:7.1f} p99 {j['latencyMicros']['p99']:8.1f} rps {j['throughputRps']:7.0f} cpu/call {j['cpuUsPerCall']:6.1f}", file=sys.stderr, flush=True)
    json.dump({k: [x[0] for x in v] for k, v in res.items()}, open(f"{run}/raw.json", "w"))
    med = statistics.median
    print(f"{'target':10s} {'p50':>8s} {'p99':>8s} {'added p50':>10s} {'added p99':>10s} {'rps/direct':>10s} {'cpu/call':>8s}   (medians of per-round values over {rounds} rounds, mode {mode}, c{conc})")
    for name, runs in res.items():
        p50 = med([x[0]['latencyMicros']['p50'] for x in runs]); p99 = med([x[0]['latencyMicros']['p99'] for x in runs])
        ad50 = med([x[0]['latencyMicros']['p50'] - d[0]['latencyMicros']['p50'] for x, d in zip(runs, res['direct'])])
        ad99 = med([x[0]['latencyMicros']['p99'] - d[0]['latencyMicros']['p99'] for x, d in zip(runs, res['direct'])])
        ratio = med([x[0]['throughputRps'] / d[0]['throughputRps'] for x, d in zip(runs, res['direct'])])
        cpu = med([x[0]['cpuUsPerCall'] for x in runs])
        print(f"{name:10s} {p50:8.1f} {p99:8.1f} {ad50:+10.1f} {ad99:+10.1f} {ratio:10.2f} {cpu:8.1f}")
    print(run)
finally:
    for p in procs: p.terminate()
