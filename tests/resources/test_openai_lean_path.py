"""The lean HTTP/1.1 path (`resources.openai.lean`, plain-http completions over the worker's
own stream) against httpx on the same odd-but-legal and broken replies: the same requests are
answered and the same ones fail. A raw socket server writes each reply byte for byte."""

from __future__ import annotations

import gzip
import json
import socket
import socketserver
import threading
import time

import pytest

from benchmarks.client_throughput import client_path
from benchmarks.lib.hostile import completion_body
from resources.engine import Request
from resources.openai.engine import OpenAIEngine

BODY = json.dumps(completion_body("ok")).encode()


def head(status: int = 200, reason: str = "OK", extra=()) -> bytes:
    lines = "".join(f"{k}: {v}\r\n" for k, v in extra)
    return f"HTTP/1.1 {status} {reason}\r\n{lines}\r\n".encode()


def chunked(data: bytes, size: int = 7) -> bytes:
    out = b""
    for i in range(0, len(data), size):
        piece = data[i : i + size]
        out += b"%x;ext=1\r\n" % len(piece) + piece + b"\r\n"
    return out + b"0\r\nX-Trailer: t\r\n\r\n"


def sized(body: bytes = BODY, **extra) -> bytes:
    return head(extra=[("Content-Length", len(body)), *extra.items()]) + body


GZ = gzip.compress(BODY)
CASES = {  # name -> (reply for the n-th request, what the connection does after it)
    "content-length": lambda n: (sized(), "keep"),
    "chunked": lambda n: (head(extra=[("Transfer-Encoding", "chunked")]) + chunked(BODY), "keep"),
    "connection-close": lambda n: (sized(**{"Connection": "close"}), "close"),
    "http10-until-close": lambda n: (b"HTTP/1.0 200 OK\r\n\r\n" + BODY, "close"),
    "100-continue-first": lambda n: (b"HTTP/1.1 100 Continue\r\n\r\n" + sized(), "keep"),
    "gzip": lambda n: (
        head(extra=[("Content-Length", len(GZ)), ("Content-Encoding", "gzip")]) + GZ,
        "keep",
    ),
    "server-closes-idle": lambda n: (sized(), "close-silently"),
    "oversize": lambda n: (head(extra=[("Content-Length", 5000)]) + b"x" * 5000, "keep"),
    "malformed-status": lambda n: (b"HTTZ/9 200 OK\r\n\r\n", "close"),
    "close-mid-body": lambda n: (head(extra=[("Content-Length", len(BODY) + 50)]) + BODY, "close"),
    "503-then-ok": lambda n: (  # 3 in all: no request meets more than its 2 retries
        head(503, "Service Unavailable", [("Content-Length", 2), ("Retry-After", "0")]) + b"{}"
        if n <= 3
        else sized(),
        "keep",
    ),
    "split-writes": lambda n: ([sized()[:10], sized()[10:60], sized()[60:]], "keep"),
}


class RawServer:
    """Reads each request (headers + Content-Length body) and writes `CASES[case]`'s bytes."""

    def __init__(self, case: str) -> None:
        self.case, self.n = case, 0

    def __enter__(self) -> RawServer:
        owner = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                while self.rfile.readline():
                    headers = {}
                    while (row := self.rfile.readline()) not in (b"\r\n", b""):
                        key, _, value = row.decode().partition(":")
                        headers[key.strip().lower()] = value.strip()
                    self.rfile.read(int(headers.get("content-length", 0)))
                    owner.n += 1
                    out, then = CASES[owner.case](owner.n)
                    for piece in out if isinstance(out, list) else [out]:
                        self.connection.sendall(piece)
                        time.sleep(0.002)
                    if then == "close-silently":
                        time.sleep(0.01)
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    if then == "close":
                        return

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def outcome(case: str, path: str) -> tuple[list[bool], bool]:
    with RawServer(case) as srv, client_path(path):
        engine = OpenAIEngine(srv.url, "m", max_concurrency=2, probe=False, server_style="vllm",
                              max_retries=2, initial_backoff_s=0.01, max_backoff_s=0.02,
                              timeout_s=2, max_reply_bytes=4096, seed=0)  # fmt: skip
        result = engine.run("q", [Request(f"r{i}", f"p {i}") for i in range(6)])
    return [r.ok for r in result.responses], all(r.ok or r.error for r in result.responses)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_lean_path_answers_what_httpx_answers(case: str) -> None:
    lean, httpx_path = outcome(case, "lean"), outcome(case, "httpx")
    assert lean == httpx_path
    assert lean[1]  # every row answered or failed with a reason
