"""The wire: a stdlib threading HTTP server around `SimApp`, and its lifecycle.

`SimServer(engine, host=, port=, config=)` binds at once (port 0 picks a free one); `start()`
serves in a daemon thread, `close()` stops accepting, lets hung connections go, answers queued
tickets and joins the dispatcher (and closes the engine when `owns_engine`). Each handler thread
reads one request, asks `SimApp.handle` and writes the `Reply`, carrying out a wire fault
("hang", "drop", "malformed") when the reply has one. Keep-alive, HTTP/1.1.

For tests: `with serve_in_thread(gpu="L4") as base_url: ...` starts a real server on a free
loopback port in a background thread and yields `http://127.0.0.1:PORT/v1`.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from resources.engine import LLMEngine
from resources.sim.server.app import Reply, ServerConfig, SimApp, engine_facts, error_reply
from resources.sim.server.errors import ApiError

__all__ = ["SimServer", "build_engine", "serve_in_thread"]

log = logging.getLogger(__name__)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], app: SimApp) -> None:
        self.app = app
        self.stopping = threading.Event()
        """Set on close: hung handlers let their connections go."""
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up mid-reply is routine: log it, do not print a traceback."""
        log.debug("connection from %s ended with an error", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    """Reads one request, asks `SimApp.handle`, writes the `Reply` (keep-alive, HTTP/1.1)."""

    protocol_version = "HTTP/1.1"
    server_version = "llm-assets-sim"
    timeout = 300
    """Seconds an idle keep-alive connection is kept before its thread lets it go."""
    server: _HTTPServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            length = int(headers.get("content-length", "0") or 0)
        except ValueError:
            self.write_reply(error_reply(ApiError(400, "Content-Length is not an integer")))
            return
        if length > self.server.app.config.max_body_bytes:
            self.close_connection = True
            limit = self.server.app.config.max_body_bytes
            self.write_reply(
                error_reply(ApiError(413, f"body of {length} bytes exceeds the limit {limit}"))
            )
            return
        body = self.rfile.read(length) if length > 0 else b""
        self.write_reply(self.server.app.handle(method, self.path, headers, body))

    def write_reply(self, reply: Reply) -> None:
        if reply.fault == "hang":
            self._hang()
            return
        payload = reply.encoded()
        if reply.fault == "malformed":
            payload = payload[: max(1, len(payload) // 2)]  # valid framing, truncated JSON
        self.send_response(reply.status)
        if reply.body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        if reply.fault == "drop":
            self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        self.wfile.write(payload)

    def _hang(self) -> None:
        """Answer nothing until the client hangs up, `max_hang_s` passes or the server stops;
        then close the connection without a reply."""
        self.close_connection = True
        deadline = time.monotonic() + self.server.app.config.faults.max_hang_s
        while time.monotonic() < deadline and not self.server.stopping.is_set():
            try:
                readable, _, _ = select.select([self.connection], [], [], 0.1)
                if readable and not self.connection.recv(1, socket.MSG_PEEK):
                    return  # the client closed its end
            except OSError:
                return
            if readable:
                time.sleep(0.1)  # the client sent more bytes: keep ignoring them

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Request lines go to `logging` at DEBUG; headers (and so keys) are never logged."""
        log.debug("%s - %s", self.address_string(), format % args)


def build_engine(**fields: Any) -> LLMEngine:
    """A `SimulatedEngine` from `SimulatedEngineConfig` fields (imported here, so this module
    loads without the simulator), with `vllm serve`'s batch budgets unless `usage` is given."""
    from resources.sim.engine import SimulatedEngine

    return SimulatedEngine(**{"usage": "serve", **fields})


class SimServer:
    """A running (or startable) sim server: `start()` serves in a daemon thread, `close()`
    stops it and the batcher (and the engine when `owns_engine`). Usable as a context manager."""

    def __init__(
        self,
        engine: LLMEngine,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        config: ServerConfig | None = None,
        owns_engine: bool = False,
    ) -> None:
        self.engine = engine
        self.owns_engine = owns_engine
        self.app = SimApp(engine, config)
        self._httpd = _HTTPServer((host, port), self.app)
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def host(self) -> str:
        return self._httpd.server_address[0]

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """The root URL (`/health` lives here)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (ends in `/v1`), what `OpenAIEngine(base_url=...)` takes."""
        return f"{self.url}/v1"

    def start(self) -> SimServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"sim-server-{self.port}",
                daemon=True,
            )
            self._thread.start()
        return self

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._httpd.stopping.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=10)
        self._httpd.server_close()
        self.app.close()
        if self.owns_engine:
            self.engine.close()

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def serve_in_thread(
    engine: LLMEngine | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    config: ServerConfig | None = None,
    **engine_kwargs: Any,
) -> Iterator[str]:
    """Serve in a background thread on a free port (port=0); yield the `/v1` base URL.

    Without `engine`, builds `SimulatedEngine(**engine_kwargs)` (gpu, model, policy,
    enable_prefix_caching, ...); the served model name defaults to the engine's model.
    """
    owns_engine = engine is None
    if engine is not None and engine_kwargs:
        raise TypeError(f"engine given; unexpected engine settings {sorted(engine_kwargs)}")
    if config is None:
        name = engine_kwargs.get("model") if owns_engine else engine_facts(engine).model
        config = ServerConfig(served_model_name=name or ServerConfig.served_model_name)
    if engine is None:
        engine = build_engine(**engine_kwargs)
    with SimServer(engine, host=host, port=port, config=config, owns_engine=owns_engine) as server:
        yield server.base_url
