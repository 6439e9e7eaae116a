"""Headless Chromium driven over the DevTools protocol on a pipe
(`--remote-debugging-pipe`: JSON messages ended by NUL on file descriptors
3 and 4, no websocket and no package), for the dashboard's test on the real
hub. The Chromium is $ROLLOUT_HOOKS_CHROMIUM (localhub/test sets it with
test-support/chromium/find, which installs Debian's package when missing)
or `chromium` on PATH."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time


def find() -> str | None:
    named = os.environ.get("ROLLOUT_HOOKS_CHROMIUM")
    return named if named and os.path.isfile(named) else shutil.which("chromium")


class Browser:
    def __init__(self, chromium: str, width: int = 1280, height: int = 860):
        self.profile = tempfile.mkdtemp(prefix="chromium.")
        # The shell moves this process's pipes to the fds Chromium reads
        # (3) and writes (4). --no-sandbox: the tier runs as root, where the
        # sandbox will not start; the page is the test's own.
        self.popen = subprocess.Popen(
            ["sh", "-c", 'exec "$0" "$@" 3<&0 4>&1 </dev/null >/dev/null', chromium,
             "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--hide-scrollbars", f"--window-size={width},{height}",
             f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.next_id, self.session, self.pending = 0, None, b""
        target = self.call("Target.createTarget", {"url": "about:blank"})
        self.session = self.call("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})["sessionId"]

    def call(self, method: str, params: dict | None = None) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session:
            message["sessionId"] = self.session
        self.popen.stdin.write(json.dumps(message).encode() + b"\0")
        self.popen.stdin.flush()
        while True:
            while b"\0" not in self.pending:
                chunk = os.read(self.popen.stdout.fileno(), 1 << 16)
                if not chunk:
                    raise AssertionError(f"Chromium closed the pipe during {method}")
                self.pending += chunk
            raw, self.pending = self.pending.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise AssertionError(f"{method}: {answer['error']}")
                return answer["result"]

    def eval(self, expression: str):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float, what: str):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"{what}: never true: {expression}\n{self.eval('document.body.innerText')}")

    def screenshot(self) -> bytes:
        return base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"})["data"])

    def close(self) -> None:
        try:
            self.session = None
            self.call("Browser.close")
            self.popen.wait(10)
        except (AssertionError, OSError, subprocess.TimeoutExpired):
            self.popen.kill()
            self.popen.wait()
        shutil.rmtree(self.profile, ignore_errors=True)
