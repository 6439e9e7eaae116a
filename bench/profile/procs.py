"""What the profile scripts share: child processes that write to a file of
their own, a line awaited in such a file, a process's CPU time, and the
gateway registry gwbench writes (plugins at endpoints, insecure)."""
import os, re, subprocess, time

TICK = os.sysconf("SC_CLK_TCK")


class Children:
    """The processes a script starts, each writing stdout and stderr to its
    own file, all stopped (SIGTERM) by `stop`."""

    def __init__(self):
        self.procs = []

    def start(self, cmd, out, env=None):
        p = subprocess.Popen(cmd, stdout=open(out, "w"), stderr=subprocess.STDOUT, env=env)
        self.procs.append(p)
        return p

    def stop(self):
        for p in self.procs:
            p.terminate()


def wait_line(path, pattern, tries=200):
    """The first match of `pattern` in the file `path`, polled every 50 ms,
    `tries` times; exits naming the file when it never comes."""
    for _ in range(tries):
        m = re.search(pattern, open(path).read())
        if m:
            return m
        time.sleep(0.05)
    raise SystemExit(f"no {pattern} in {path}")


def cpu_seconds(pid):
    """User + system CPU seconds of process `pid` (all its threads)."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def registry(entries):
    """A gateway registry of (name, endpoint) pairs, each plugin insecure."""
    return "plugins:\n" + "".join(
        f"  - name: {n}\n    endpoint: {a}\n    insecure: true\n" for n, a in entries)
