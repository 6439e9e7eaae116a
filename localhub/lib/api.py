"""A small client of a bed's hub API server over HTTPS, as a bearer token
or the bed's administrator: requests with JSON bodies, and a watch read
line by line. One connection per client, kept alive; a client is used by one
thread at a time."""

from __future__ import annotations

import http.client
import json
import ssl
from pathlib import Path
from urllib.parse import urlencode


class ApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, method: str, path: str, body: str):
        super().__init__(f"{method} {path}: {status} {body[:500]}")
        self.status = status


class Client:
    def __init__(self, port: int, pki: Path, token: str | None = None, user_agent: str = "localhub"):
        self.port = port
        self.context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        if token is None:
            self.context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self.headers = {"User-Agent": user_agent, "Accept": "application/json"}
        if token is not None:
            self.headers["Authorization"] = f"Bearer {token}"
        self.connection: http.client.HTTPSConnection | None = None

    def _connect(self, timeout: float | None) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=timeout)

    def request(self, method: str, path: str, body: dict | list | None = None,
                content_type: str = "application/json", query: dict | None = None) -> dict:
        url = path + (f"?{urlencode(query)}" if query else "")
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = dict(self.headers)
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            if self.connection is None:
                self.connection = self._connect(30)
            try:
                self.connection.request(method, url, body=data, headers=headers)
                answer = self.connection.getresponse()
                text = answer.read().decode()
                break
            except (http.client.HTTPException, OSError):
                # A kept-alive connection the server closed: once more on a new one.
                self.connection.close()
                self.connection = None
                if attempt == 2:
                    raise
        if answer.status >= 400:
            raise ApiError(answer.status, method, path, text)
        return json.loads(text) if text else {}

    def get(self, path: str, **query) -> dict:
        return self.request("GET", path, query=query or None)

    def merge_patch(self, path: str, body: dict) -> dict:
        return self.request("PATCH", path, body, "application/merge-patch+json")

    def watch(self, path: str, resource_version: str):
        """The events of a watch from resource_version, as dicts, until the
        server ends it; each with the length of its line in `_bytes`."""
        connection = self._connect(None)
        query = urlencode({"watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "true"})
        connection.request("GET", f"{path}?{query}", headers=self.headers)
        answer = connection.getresponse()
        if answer.status >= 400:
            raise ApiError(answer.status, "WATCH", path, answer.read().decode())
        try:
            while True:
                line = answer.readline()
                if not line:
                    return
                event = json.loads(line)
                event["_bytes"] = len(line)
                yield event
        finally:
            connection.close()
