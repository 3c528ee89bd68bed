"""Run llama.cpp's `llama-server` on 127.0.0.1 for a test or a benchmark.

`LlamaServer(binary, model).start()` (or `with LlamaServer(...) as server:`) starts the server on
a free port and returns once `/health` answers 200; `stop()` terminates it (then kills it after
10 s). Invariants:

- one process per `LlamaServer`, bound to 127.0.0.1 only, never left running after `stop()` or
  the `with` block; its stdout and stderr go to `log_path` (quoted in start-up errors);
- `slots` parallel slots sharing a `slots * ctx_per_slot` context; the host-memory prompt
  cache is OFF by default (`cache_ram_mib=0`), so a slot's cache is the one prompt it last
  held, the simplest rule to predict (llama.cpp's default keeps up to 8 GiB of old prompts);
- `metrics()` reads the Prometheus counters of `/metrics` (`benchmarks.lib.prom`, the one
  parser; `llamacpp:` prefix removed), e.g.
  `prompt_tokens_cached_total` (prompt tokens reused from a slot's cache, summed over every
  completion) and `prompt_tokens_total` (prompt tokens computed);
- `tokenize(text)` is the server's own tokenization, without BOS.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import httpx

from benchmarks.lib.prom import scrape

ALIAS = "random-llama3"
"""The model name the server answers to (`--alias`)."""


def one_slot_cached(token_ids: list[list[int]]) -> list[int]:
    """Cached tokens per request, sent one at a time to one slot with the host prompt cache off:
    the longest common prefix with the previous request's tokens (BOS included), less one when
    the whole prompt matches (llama.cpp always computes at least one token)."""
    cached, previous = [], []
    for ids in token_ids:
        common = 0
        for a, b in zip(previous, ids, strict=False):
            if a != b:
                break
            common += 1
        cached.append(min(common, len(ids) - 1))
        previous = ids
    return cached


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """One `llama-server` process; see the module docstring."""

    def __init__(
        self,
        binary: Path,
        model: Path,
        *,
        slots: int = 1,
        ctx_per_slot: int = 4096,
        threads: int = 1,
        cache_ram_mib: int = 0,
        log_path: Path | None = None,
        startup_timeout_s: float = 120.0,
    ) -> None:
        self.binary, self.model = Path(binary), Path(model)
        self.slots, self.ctx_per_slot, self.threads = slots, ctx_per_slot, threads
        self.cache_ram_mib = cache_ram_mib
        self.log_path = Path(log_path or Path(model).with_suffix(".server.log"))
        self.startup_timeout_s = startup_timeout_s
        self.port = 0
        self._process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible API root (what `OpenAIEngine` takes)."""
        return f"{self.url}/v1"

    def command(self) -> list[str]:
        return [
            str(self.binary),
            "--model", str(self.model),
            "--alias", ALIAS,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--parallel", str(self.slots),
            "--ctx-size", str(self.slots * self.ctx_per_slot),
            "--threads", str(self.threads),
            "--cache-ram", str(self.cache_ram_mib),
            "--metrics",
            "--no-webui",
        ]  # fmt: skip

    def start(self) -> LlamaServer:
        if self._process is not None:
            raise RuntimeError(f"llama-server already running on port {self.port}")
        self.port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._process = None
                raise RuntimeError(f"llama-server exited at start-up: {self._log_tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(
            f"llama-server not healthy after {self.startup_timeout_s} s: {self._log_tail()}"
        )

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _log_tail(self, lines: int = 15) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return f"(log {self.log_path})\n" + "\n".join(text.splitlines()[-lines:])

    def metrics(self) -> dict[str, float]:
        """Counters and gauges of `/metrics`, by name without the `llamacpp:` prefix."""
        return {
            name.removeprefix("llamacpp:"): value
            for name, value in scrape(f"{self.url}/metrics").items()
            if name.startswith("llamacpp:")
        }

    def tokenize(self, text: str) -> list[int]:
        reply = httpx.post(
            f"{self.url}/tokenize", json={"content": text, "add_special": False}, timeout=30.0
        )
        return reply.raise_for_status().json()["tokens"]
