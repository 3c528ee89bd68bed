"""One llama.cpp `llama-server` process on 127.0.0.1, started and stopped by this process.

`LlamaServer(binary, model).start()` (or `with LlamaServer(...) as server:`) starts the server
and returns once `/health` answers 200; `stop()` ends it. Invariants:

- bound to 127.0.0.1 only; on `port` (0: a free port chosen here; a taken port is refused in
  one line before anything starts);
- never outlives its owner: a small `sh` watchdog beside it kills the server within a second
  of the owning Python process being gone (also after `kill -9`, which no `atexit` or
  `finally` survives); `stop()` kills the server and the watchdog and waits for both; every
  server still running at interpreter exit is stopped (`atexit`);
- a server that exits during start-up, or is not healthy within `startup_timeout_s`, raises
  `ServerStartError` with the last lines of its log; stdout and stderr go to `log_path`;
- `slots` parallel slots share a `slots * ctx_per_slot` context; the host-memory prompt cache
  is OFF by default (`cache_ram_mib=0`), so a slot's cache is the one prompt it last held,
  the simplest rule to predict (llama.cpp's default keeps up to 8 GiB of old prompts);
- `swa_full` (default on) keeps a full-size KV cache for sliding-window attention layers:
  without it llama.cpp reuses no prefix at all on such models (Gemma 3: 0 cached tokens of
  17 shared, measured), with it a prefix is reused as on any other model;
- `/metrics` (Prometheus: `llamacpp:prompt_tokens_cached_total`, ...) is on; `tokenize(text)`
  is the server's own tokenization, without BOS.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import threading
import time
import weakref
from pathlib import Path

import httpx

__all__ = ["LlamaServer", "ServerStartError", "free_port"]


class ServerStartError(RuntimeError):
    """The server could not be started (port taken, exited, not healthy): one line."""


WATCHDOG = (
    # $1: the owner's pid, $2: the server's; kill the server once the owner is gone, checked
    # twice a second; end when the server ends
    'while kill -0 "$2" 2>/dev/null; do '
    'if ! kill -0 "$1" 2>/dev/null; then kill -KILL "$2"; exit 0; fi; sleep 0.5; done'
)

_RUNNING: weakref.WeakSet[LlamaServer] = weakref.WeakSet()
_RUNNING_LOCK = threading.Lock()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_taken(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


class LlamaServer:
    """One `llama-server` process; see the module docstring."""

    def __init__(
        self,
        binary: Path,
        model: Path,
        *,
        alias: str = "model",
        port: int = 0,
        slots: int = 1,
        ctx_per_slot: int = 4096,
        threads: int = 1,
        cache_ram_mib: int = 0,
        seed: int = 0,
        swa_full: bool = True,
        log_path: Path | None = None,
        startup_timeout_s: float = 120.0,
    ) -> None:
        self.binary, self.model, self.alias = Path(binary), Path(model), alias
        self.requested_port = port
        self.slots, self.ctx_per_slot, self.threads = slots, ctx_per_slot, threads
        self.cache_ram_mib, self.seed, self.swa_full = cache_ram_mib, seed, swa_full
        self.log_path = Path(log_path or Path(model).with_suffix(".server.log"))
        self.startup_timeout_s = startup_timeout_s
        self.port = 0
        self._process: subprocess.Popen | None = None
        self._watchdog: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible API root (what `OpenAIEngine` takes)."""
        return f"{self.url}/v1"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The server's pid (None when not running)."""
        return None if self._process is None else self._process.pid

    def command(self) -> list[str]:
        return [
            str(self.binary),
            "--model", str(self.model),
            "--alias", self.alias,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--parallel", str(self.slots),
            "--ctx-size", str(self.slots * self.ctx_per_slot),
            "--threads", str(self.threads),
            "--cache-ram", str(self.cache_ram_mib),
            "--seed", str(self.seed),
            "--metrics",
            "--no-webui",
            *(["--swa-full"] if self.swa_full else []),
        ]  # fmt: skip

    def start(self) -> LlamaServer:
        if self._process is not None:
            raise RuntimeError(f"llama-server already running on port {self.port}")
        if self.requested_port and _port_taken(self.requested_port):
            raise ServerStartError(
                f"port {self.requested_port} on 127.0.0.1 is taken; choose another port, or 0 "
                "for a free one"
            )
        self.port = self.requested_port or free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C meant for the owner is the owner's to handle
            )
        self._watchdog = subprocess.Popen(
            ["sh", "-c", WATCHDOG, "llama-server-watchdog", str(os.getpid()), str(self.pid)],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        with _RUNNING_LOCK:
            _RUNNING.add(self)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self.stop()
                raise ServerStartError(f"llama-server exited at start-up: {self._log_tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise ServerStartError(
            f"llama-server not healthy after {self.startup_timeout_s} s: {self._log_tail()}"
        )

    def stop(self) -> None:
        """Kill the server and its watchdog and wait for both (SIGKILL: the server keeps
        nothing worth a graceful shutdown, and a SIGTERM ignored since the owner's start, as
        in a background CI job, could not end it). Safe to call twice."""
        process, self._process = self._process, None
        watchdog, self._watchdog = self._watchdog, None
        with _RUNNING_LOCK:
            _RUNNING.discard(self)
        for proc in (process, watchdog):
            if proc is not None:
                proc.kill()
                proc.wait()

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _log_tail(self, lines: int = 15) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        tail = [line for line in text.splitlines() if line.strip()][-lines:]
        return f"(log {self.log_path}) " + " | ".join(tail)

    def tokenize(self, text: str) -> list[int]:
        reply = httpx.post(
            f"{self.url}/tokenize", json={"content": text, "add_special": False}, timeout=30.0
        )
        return reply.raise_for_status().json()["tokens"]


@atexit.register
def _stop_all() -> None:
    with _RUNNING_LOCK:
        servers = list(_RUNNING)
    for server in servers:
        server.stop()
