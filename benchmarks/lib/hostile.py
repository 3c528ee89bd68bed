"""A hostile OpenAI-style HTTP server on 127.0.0.1, for tests and `benchmarks.faults`.

`HostileServer(script)` answers each request as `script(method, path, body) -> Action` says,
writing the bytes itself on the socket (stdlib `socketserver`, one thread per connection), so
it can do what well-behaved servers never do:

- `Reply(status, body, headers, raw, delay_s)`: a plain JSON (or raw bytes) reply;
- `Drip(status, body, interval_s, headers_too)`: the reply one byte every `interval_s`
  (the headers too with `headers_too`);
- `Endless(interval_s)`: HTTP 200 with a chunked body that never ends (one small chunk every
  `interval_s`);
- `Silent()`: reads the request and never answers.

Every loop is bounded: it stops when the client goes away, when the server is closed, or after
`max_action_s` (30 s by default), so nothing outlives a test. `completion_body(...)` builds a
well-formed completion. Use as a context manager; `url` is `http://127.0.0.1:PORT/v1`,
`calls` counts completion calls (POSTs) and `seen` holds (method, path, headers, JSON body)
per request.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Drip", "Endless", "HostileServer", "Reply", "Silent", "completion_body"]


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None
    delay_s: float = 0.0
    """Wait this long (bounded, interruptible by the server closing) before replying."""


@dataclass(frozen=True)
class Drip:
    status: int = 200
    body: Any = None
    interval_s: float = 0.2
    headers_too: bool = False


@dataclass(frozen=True)
class Endless:
    interval_s: float = 0.05


@dataclass(frozen=True)
class Silent:
    pass


Action = Reply | Drip | Endless | Silent
Script = Callable[[str, str, dict[str, Any]], Action]


def completion_body(text: str = "Yes", prompt_tokens: int = 10, cached: int | None = 4) -> dict:
    """A well-formed `/v1/completions` reply body."""
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": 1}
    usage["total_tokens"] = prompt_tokens + 1
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return {"choices": [{"index": 0, "text": text, "finish_reason": "stop"}], "usage": usage}


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
            404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error",
            503: "Service Unavailable"}  # fmt: skip


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _payload(body: Any, raw: bytes | None) -> bytes:
    return raw if raw is not None else json.dumps(body).encode()


class HostileServer:
    """See the module docstring."""

    def __init__(self, script: Script, *, max_action_s: float = 30.0) -> None:
        self.script = script
        self.max_action_s = max_action_s
        self.calls = 0
        self.seen: list[tuple[str, str, dict[str, str], dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._server: socketserver.ThreadingTCPServer | None = None
        self.url = ""

    def __enter__(self) -> HostileServer:
        owner = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                try:
                    while not owner._closed.is_set() and owner._one(self):
                        pass
                except OSError:
                    pass

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # -- one request on a connection; False ends the connection ------------------------------

    def _one(self, h: socketserver.StreamRequestHandler) -> bool:
        line = h.rfile.readline(65537)
        if not line:
            return False
        method, path, _ = line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while (row := h.rfile.readline(65537)) not in (b"\r\n", b"\n", b""):
            k, _, v = row.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        length = int(headers.get("content-length", "0") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        with self._lock:
            self.seen.append((method, path, headers, body))
            if method == "POST":
                self.calls += 1
        action = self.script(method, path, body)
        return self._act(h.connection, action)

    def _act(self, sock: socket.socket, action: Action) -> bool:
        until = time.monotonic() + self.max_action_s
        if isinstance(action, Reply):
            if action.delay_s and self._closed.wait(min(action.delay_s, self.max_action_s)):
                return False
            payload = _payload(action.body, action.raw)
            head = {"Content-Type": "application/json", "Content-Length": str(len(payload))}
            sock.sendall(_head(action.status, {**head, **action.headers}) + payload)
            return True
        if isinstance(action, Silent):
            while not self._closed.is_set() and time.monotonic() < until:
                if self._client_gone(sock, 0.05):
                    break
            return False
        if isinstance(action, Drip):
            payload = _payload(action.body, None)
            head = _head(action.status, {"Content-Type": "application/json",
                                         "Content-Length": str(len(payload))})  # fmt: skip
            if not action.headers_too:
                sock.sendall(head)
                head = b""
            for byte in head + payload:
                if self._closed.is_set() or time.monotonic() >= until:
                    return False
                sock.sendall(bytes([byte]))
                if self._client_gone(sock, action.interval_s):
                    return False
            return True
        if isinstance(action, Endless):
            sock.sendall(_head(200, {"Content-Type": "application/json",
                                     "Transfer-Encoding": "chunked"}))  # fmt: skip
            sock.sendall(b"1\r\n{\r\n")
            while not self._closed.is_set() and time.monotonic() < until:
                sock.sendall(b"1\r\n \r\n")
                if self._client_gone(sock, action.interval_s):
                    break
            return False
        raise TypeError(f"unknown action {action!r}")

    @staticmethod
    def _client_gone(sock: socket.socket, wait_s: float) -> bool:
        """Wait up to `wait_s`; True when the client closed the connection meanwhile."""
        sock.settimeout(wait_s)
        try:
            data = sock.recv(1, socket.MSG_PEEK)
        except TimeoutError:
            return False
        except OSError:
            return True
        finally:
            sock.settimeout(None)
        return data == b""
