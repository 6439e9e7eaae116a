#!/usr/bin/env python3
"""Two (or more) gateway builds against each other, alternating, in one run.

    python3 bench/profile/alternate.py [OPTIONS] MODE ROUNDS DURATION IN_FLIGHT NAME=GATEWAY_BINARY...

e.g. `alternate.py mutate 5 3s 1 before=/tmp/gw-before after=target/release/rollout-gateway`.
One echo-plugin (`--mode MODE`), a gateway per binary with the registry gwbench
writes (`echo` and 99 padding plugins), then ROUNDS rounds of `hookbench`
against the plugin directly and each gateway in turn (order reversed every
other round), each for DURATION after 500 ms of warm-up. Prints each round and
the medians of the per-round figures: p50, p99, added p50/p99 (against the
direct call of the same round), calls/s as a share of direct, and the
gateway's CPU per call from /proc/PID/stat, then the CPU per call of each of
the gateway's threads by name (`gateway-worker`, the SDK's batch thread
`OpenTelemetry.T…`, `otlp-export`) over the whole run, from
/proc/PID/task/*/stat. echo-plugin, hookbench and otlp-receiver are taken
from BIN_DIR (default target/release); WORK_BYTES (default 4KiB, as
hookbench's --work-bytes) sets the ManifestWork size. See docs/performance.md.

Options (before the positional arguments or among them):

  --env NAME:VAR=VALUE  set VAR in the environment of gateway NAME (`*`: of
                        every gateway); repeatable. `@otlp` in VALUE is
                        replaced by the receiver's URL (--otlp-receiver).
                        The OTEL_* variables of this script's environment
                        never reach a gateway; only these do.
  --arg NAME:ARG        add ARG to gateway NAME's command line (`*`: every
                        gateway); repeatable.
  --renice NAME:NICE    before each of gateway NAME's runs, set the nice value
                        of its export threads (`OpenTelemetry.T…`,
                        `otlp-export`) to NICE: to measure what a lower
                        priority does, against the same binary.
  --otlp-receiver       start `otlp-receiver` (gwbench's OTLP/gRPC receiver
                        as a process) and report the spans it received
                        against the calls made through the gateways whose
                        environment points at it.

e.g. tracing off vs on with the same binary, and two exporting builds:

    alternate.py --otlp-receiver --env traced:OTEL_EXPORTER_OTLP_ENDPOINT=@otlp \\
        mutate 5 3s 32 off=target/release/rollout-gateway traced=target/release/rollout-gateway
"""
import subprocess, sys, time, re, os, statistics, json, tempfile, collections
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from procs import TICK, Children, wait_line, cpu_seconds, registry  # noqa: E402
NB = os.environ.get("BIN_DIR", "target/release")
argv, extra_env, extra_args, renice, with_receiver = [], [], [], [], False
it = iter(sys.argv[1:])
for a in it:
    if a == "--env":
        extra_env.append(next(it))
    elif a == "--arg":
        extra_args.append(next(it))
    elif a == "--renice":
        renice.append(next(it))
    elif a == "--otlp-receiver":
        with_receiver = True
    elif a in ("-h", "--help"):
        print(__doc__); sys.exit(0)
    else:
        argv.append(a)
if len(argv) < 5:
    sys.exit(__doc__)
mode, rounds, dur, conc = argv[0], int(argv[1]), argv[2], argv[3]
gws = [a.split("=", 1) for a in argv[4:]]
def scoped(items, name):
    out = []
    for item in items:
        target, _, rest = item.partition(":")
        if target in ("*", name): out.append(rest)
    return out
run = tempfile.mkdtemp(prefix="alternate-")
children = Children()
start = children.start
def threads(pid):
    """CPU seconds per thread name of process `pid`."""
    by = collections.Counter()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            s = open(f"/proc/{pid}/task/{tid}/stat").read()
        except OSError:
            continue
        comm = s[s.index("(") + 1:s.rindex(")")]
        f = s.rsplit(")", 1)[1].split()
        by[comm] += (int(f[11]) + int(f[12])) / TICK
    return by
try:
    start([f"{NB}/echo-plugin", "--listen", "127.0.0.1:0", "--mode", mode], f"{run}/plugin.out")
    paddr = wait_line(f"{run}/plugin.out", r"grpc=([0-9.:]+)").group(1)
    otlp = None
    if with_receiver:
        receiver = start([f"{NB}/otlp-receiver", "--listen", "127.0.0.1:0"], f"{run}/otlp-receiver.out")
        otlp = "http://" + wait_line(f"{run}/otlp-receiver.out", r"otlp=([0-9.:]+)").group(1)
    open(f"{run}/config.yaml", "w").write(registry((n, paddr) for n in ["echo"] + [f"pad-{i:03}" for i in range(1, 100)]))
    targets = [("direct", paddr, None)]
    base_env = dict(os.environ, RUST_LOG="warn"); [base_env.pop(k) for k in list(base_env) if k.startswith("OTEL_")]
    exporting, gw_procs = set(), {}
    for name, binary in gws:
        env = dict(base_env)
        for kv in scoped(extra_env, name):
            k, _, v = kv.partition("=")
            if "@otlp" in v:
                if otlp is None: raise SystemExit(f"--env {name}:{kv} needs --otlp-receiver")
                v = v.replace("@otlp", otlp); exporting.add(name)
            env[k] = v
        p = start([binary, "--config", f"{run}/config.yaml", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"] + scoped(extra_args, name), f"{run}/{name}.out", env)
        m = wait_line(f"{run}/{name}.out", r"grpc=([0-9.:]+) admin=([0-9.:]+)")
        for _ in range(100):
            if subprocess.run(["curl", "-sf", f"http://{m.group(2)}/readyz"], capture_output=True).returncode == 0: break
            time.sleep(0.1)
        targets.append((name, m.group(1), p.pid)); gw_procs[name] = p
    res = {t[0]: [] for t in targets}
    calls = collections.Counter()
    threads_before = {pid: threads(pid) for _, _, pid in targets if pid}
    def cpu(pid):
        return cpu_seconds(pid) if pid else 0
    for r in range(rounds):
        order = targets if r % 2 == 0 else [targets[0]] + targets[1:][::-1]
        for name, addr, pid in order:
            for nice in scoped(renice, name):
                for tid in os.listdir(f"/proc/{pid}/task"):
                    comm = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
                    if comm.startswith("OpenTelemetry") or comm == "otlp-export":
                        subprocess.run(["renice", "-n", nice, "-p", tid], capture_output=True, check=True)
            c0 = cpu(pid)
            out = subprocess.run([f"{NB}/hookbench", "--target", f"http://{addr}", "--plugin", "echo", "--concurrency", conc, "--work-bytes", os.environ.get("WORK_BYTES", "4KiB"), "--duration", dur, "--warmup", "500ms", "--json"], capture_output=True, text=True)
            c1 = cpu(pid)
            try:
                j = json.loads(out.stdout)
            except Exception:
                print(out.stdout[-500:], out.stderr[-500:]); raise
            n = j["requests"] + j.get("warmupRequests", 0)
            calls[name] += n
            j["cpuUsPerCall"] = (c1 - c0) * 1e6 / n if pid else 0
            res[name].append((j, c1 - c0))
            print(f"round {r+1} {name:10s} p50 {j['latencyMicros']['p50']:7.1f} p99 {j['latencyMicros']['p99']:8.1f} rps {j['throughputRps']:7.0f} cpu/call {j['cpuUsPerCall']:6.1f}", file=sys.stderr, flush=True)
    threads_after = {pid: threads(pid) for _, _, pid in targets if pid}
    json.dump({k: [x[0] for x in v] for k, v in res.items()}, open(f"{run}/raw.json", "w"))
    med = statistics.median
    print(f"{'target':10s} {'p50':>8s} {'p99':>8s} {'added p50':>10s} {'added p99':>10s} {'rps/direct':>10s} {'cpu/call':>8s}   (medians of per-round values over {rounds} rounds, mode {mode}, c{conc})")
    for name, runs in res.items():
        p50 = med([x[0]['latencyMicros']['p50'] for x in runs]); p99 = med([x[0]['latencyMicros']['p99'] for x in runs])
        ad50 = med([x[0]['latencyMicros']['p50'] - d[0]['latencyMicros']['p50'] for x, d in zip(runs, res['direct'])])
        ad99 = med([x[0]['latencyMicros']['p99'] - d[0]['latencyMicros']['p99'] for x, d in zip(runs, res['direct'])])
        ratio = med([x[0]['throughputRps'] / d[0]['throughputRps'] for x, d in zip(runs, res['direct'])])
        cpu_ = med([x[0]['cpuUsPerCall'] for x in runs])
        print(f"{name:10s} {p50:8.1f} {p99:8.1f} {ad50:+10.1f} {ad99:+10.1f} {ratio:10.2f} {cpu_:8.1f}")
    print("CPU µs per call by thread, over the whole run (warm-ups included):")
    for name, _, pid in targets[1:]:
        used = threads_after[pid]; used.subtract(threads_before[pid])
        parts = ", ".join(f"{comm} {v * 1e6 / calls[name]:.1f}" for comm, v in sorted(used.items(), key=lambda kv: -kv[1]) if v > 0)
        print(f"  {name:10s} {parts}")
    if with_receiver:
        # The exporting gateways flush their queues when stopped; then the
        # receiver's count is final.
        for n in exporting: gw_procs[n].terminate()
        for n in exporting: gw_procs[n].wait(timeout=30)
        receiver_cpu = sum(threads(receiver.pid).values())
        receiver.terminate(); receiver.wait(timeout=10)
        spans = re.findall(r"spans=(\d+) exports=(\d+)", open(f"{run}/otlp-receiver.out").read())
        got, exports = (int(spans[-1][0]), int(spans[-1][1])) if spans else (0, 0)
        through = sum(calls[n] for n in exporting)
        print(f"otlp-receiver: {got} spans in {exports} requests for {through} calls through {', '.join(sorted(exporting)) or 'no gateway'}"
              + (f" ({got / through:.3f} per call, after the gateways flushed on SIGTERM; receiver CPU {receiver_cpu * 1e6 / got if got else 0:.2f} µs per span)" if through else ""))
    print(run)
finally:
    children.stop()
