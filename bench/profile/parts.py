#!/usr/bin/env python3
"""Where the gateway's CPU time goes, from `perf script` output.

Each sample's stack is read from the root to the leaf and given the part of
the LAST (deepest) rule that matches one of its frames, so a syscall made
while an h2 connection task writes counts as "kernel send", and the
identity check inside the call task as "json: identity check". Generic
arguments are stripped from frame names before matching.

    perf record -F 2000 --call-graph dwarf,16384 -p GATEWAY_PID -- sleep 5
    perf script | python3 bench/profile/parts.py [CALLS CPU_SECONDS]

With CALLS (calls made during the recording) and CPU_SECONDS (the
gateway's CPU time over it), each part is also given in µs per call.
See docs/performance.md, "How to reproduce".
"""
import sys, re, collections
RULES = [
 ("idle: epoll_wait + switch", r"park_internal|epoll_wait|Driver::turn|schedule_hrtimeout"),
 ("server h2 conn task", r"transport::server::Connection::run|serve_h2"),
 ("client h2 conn task", r"transport::client::handshake"),
 ("call task: other", r"serve_stream|transport::server::.*call"),
 ("call task: route other", r"service::route::|GatewayService::route"),
 ("call task: answer/receive", r"service::receive::|GatewayService::answer|GatewayService::receive|collect_reserved|collect_held"),
 ("send reply", r"service::send\b|transport::send::|SendResponse|send_trailers|send_response"),
 ("caller input checks", r"service::caller_checks::"),
 ("resolve + observe", r"service::resolve::"),
 ("fail-closed verdict", r"rollout_proto::verdict|rollout_proto::declaration|upstream::learned::"),
 ("json: request check_object", r"check_object|check_work"),
 ("json: identity check", r"check_mutation|check_answer|parse_object|identity_change|manifest::(?!check_object)"),
 ("policy layers", r"rollout_policies::"),
 ("upstream unary", r"Upstream::unary|Upstream::call|UpstreamService|upstream::exchange::"),
 ("decode/encode grpc", r"transport::grpc::|MutateStep::decode|prost::"),
 ("spans (tracing/otel)", r"telemetry::trace|telemetry::attempt::.*span|opentelemetry|tracing_subscriber|tracing_core|info_span|Span::|ServerSpan|tracing::span"),
 ("metrics", r"metrics::|prometheus_client|record_call|record_request"),
 ("timers", r"tokio::time::|runtime::time::|TimerEntry|sleep_until|timeout_at"),
 ("alloc", r"mi_|_mi_|__rust_alloc|__rust_dealloc|malloc|free"),
 ("kernel send", r"sys_writev|sys_sendto|tcp_sendmsg"),
 ("kernel recv", r"sys_recvfrom|sys_read\b|tcp_recvmsg"),
]
RULES = [(n, re.compile(p)) for n, p in RULES]
TASKS = {"server h2 conn task", "client h2 conn task", "call task: other", "idle: epoll_wait + switch"}


def strip_generics(f):
    out=[]; depth=0; i=0
    while i < len(f):
        c=f[i]
        if c=='<' and depth==0 and i>0 and (f[i-1].isalnum() or f[i-1] in '_>'):
            depth=1; i+=1; continue
        if depth>0:
            if c=='<': depth+=1
            elif c=='>': depth-=1
            i+=1; continue
        out.append(c); i+=1
    return ''.join(out)


def classify(lines):
    """Samples of `perf script` output, counted by task and by part:
    (total, Counter by task, Counter by part)."""
    top = collections.Counter(); task = collections.Counter(); total = 0
    stack = []
    def flush():
        nonlocal total, stack
        if not stack: return
        total += 1
        frames = list(reversed(stack))  # root -> leaf
        cat = "other (runtime etc)"; t = "runtime/other"
        for f in frames:
            for n, r in RULES:
                if r.search(f):
                    cat = n
                    if n in TASKS: t = n
                    break
        top[cat] += 1; task[t] += 1
        stack = []
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            flush(); continue
        if line.startswith("\t") or line.startswith(" "):
            parts = line.strip().split(" ", 1)
            if len(parts) == 2:
                stack.append(strip_generics(parts[1]))
        else:
            flush()
    flush()
    return total, task, top


if __name__ == "__main__":
    total, task, top = classify(sys.stdin)
    calls = float(sys.argv[1]) if len(sys.argv) > 1 else 0
    cpu_s = float(sys.argv[2]) if len(sys.argv) > 2 else 0
    print(f"samples {total}")
    for name, c in [("by task", task), ("by part (deepest match)", top)]:
        print(name)
        for k, v in c.most_common():
            us = f"{cpu_s*1e6*v/total/calls:7.1f} us/call" if calls and cpu_s else ""
            print(f"  {100*v/total:5.1f}%  {us}  {k}")
