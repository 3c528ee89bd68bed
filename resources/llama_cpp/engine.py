"""`LlamaCppEngine`: a real local model on llama.cpp's `llama-server`, managed by the engine.

The engine resolves its model (a bundled name or a GGUF path, `resources.llama_cpp.models`)
and the `llama-server` binary when it is built, so a missing one is a one-line error before
any table is read or any request sent; it starts the server on 127.0.0.1 the first time a
request (or the server's context window) is needed, and stops it in `close()`. Requests go
through the project's OpenAI-compatible client (`resources.openai.engine.OpenAIEngine`) with
llama.cpp's structured outputs (`grammar` for choices and numbers, `json_schema` for JSON),
one lane per slot, prefix groups kept on one slot.

Invariants:
- `RunStats.engine == "llama_cpp"`; `model` is the bundled name or the file's stem;
  `engine_time_s` is the measured wall makespan;
- the response cache keys answers by the weights themselves (`identity` holds the GGUF's
  SHA-256), by chat vs completion and by the server as it reports itself, never by its port;
- no server outlives the engine's owner (`resources.llama_cpp.server`): `close()` stops it,
  and a killed owner's server is stopped by its watchdog.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from resources.configs import LlamaCppEngineConfig, OpenAIEngineConfig
from resources.engine import EngineWrapper, LLMEngine, Request, RunResult
from resources.home import llm_assets_home
from resources.llama_cpp.binary import find_binary
from resources.llama_cpp.models import ModelFile, resolve_model
from resources.llama_cpp.server import LlamaServer, ServerStartError

__all__ = ["LlamaCppEngine"]

log = logging.getLogger(__name__)


def file_sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class LlamaCppEngine(EngineWrapper):
    """See the module docstring. `LlamaCppEngine(model="smollm2-135m", slots=2)` or
    `LlamaCppEngine(config=LlamaCppEngineConfig(...))`."""

    name = "llama_cpp"

    def __init__(self, *args: Any, config: LlamaCppEngineConfig | None = None, **fields) -> None:
        self.config = LlamaCppEngineConfig.resolve(config, args, fields)
        try:
            self.model_file: ModelFile = resolve_model(self.config.model)
            self.binary = find_binary(self.config.llama_server)
        except (FileNotFoundError, ValueError) as exc:
            raise ValueError(str(exc)) from None
        chat = self.config.use_chat
        self.use_chat = bool(self.model_file.instruct) if chat is None else chat
        self.threads = self.config.threads or os.cpu_count() or 1
        self._server: LlamaServer | None = None
        self._client: LLMEngine | None = None
        self._sha256: str | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        state = f"running at {self._server.url}" if self._server else "not started"
        return (
            f"LlamaCppEngine(model={self.model!r}, slots={self.config.slots}, "
            f"use_chat={self.use_chat}, {state})"
        )

    # -- what it is, without starting anything ----------------------------------------------

    @property
    def model(self) -> str:
        return self.model_file.name

    @property
    def hardware(self) -> str:
        return f"cpu ({self.threads} threads)"

    @property
    def temperature(self) -> float:
        return self.config.temperature

    @property
    def max_tokens(self) -> int | None:
        return self.config.max_tokens

    @property
    def enable_prefix_caching(self) -> bool:
        return True

    @property
    def max_model_len(self) -> int:
        """One slot's context window: the server is started with `slots x ctx_per_slot`
        tokens, split evenly over its slots (planning starts no server to ask)."""
        return self.config.ctx_per_slot

    @property
    def honours_priority(self) -> bool:
        return False

    @property
    def gpu_rental(self):
        return None

    @property
    def num_replicas(self) -> int:
        return 1

    @property
    def identity(self) -> str:
        """The server as it reports itself, chat or completion, and the weights' SHA-256."""
        if self._sha256 is None:
            self._sha256 = file_sha256(self.model_file.path)
        return f"{self.inner.identity};gguf-sha256={self._sha256}"

    def count_tokens(self, text: str) -> int:
        """The built-in approximation (`LLMEngine.count_tokens`): planning starts no server."""
        return LLMEngine.count_tokens(self, text)

    @property
    def kv_block_size(self) -> int:
        """llama.cpp reuses a cached prefix token by token (`resources.openai.tokens`)."""
        return 1

    @property
    def server(self) -> LlamaServer | None:
        """The running server, None before the first request or after `close()`."""
        return self._server

    # -- the server, started on first use ---------------------------------------------------

    @property
    def inner(self) -> LLMEngine:
        """The OpenAI-compatible client of the running server (started here on first use)."""
        with self._lock:
            if self._client is None:
                self._start()
            return self._client

    def _start(self) -> None:
        cfg = self.config
        log_dir = Path(cfg.log_dir) if cfg.log_dir else llm_assets_home() / "llama-server"
        server = LlamaServer(
            self.binary,
            self.model_file.path,
            alias=self.model,
            port=cfg.port,
            slots=cfg.slots,
            ctx_per_slot=cfg.ctx_per_slot,
            threads=self.threads,
            cache_ram_mib=cfg.cache_ram_mib,
            seed=cfg.seed,
            log_path=log_dir / f"{self.model}-{os.getpid()}.log",
            startup_timeout_s=cfg.startup_timeout_s,
        )
        log.info(
            "starting llama-server: %s (%s), %d slots x %d tokens, %d threads; log %s",
            self.model, self.model_file.path, cfg.slots, cfg.ctx_per_slot, self.threads,
            server.log_path,
        )  # fmt: skip
        started = time.perf_counter()
        try:
            server.start()
        except ServerStartError as exc:
            raise ServerStartError(f"llama-server for model {self.model!r}: {exc}") from None
        log.info("llama-server ready at %s in %.1f s", server.url, time.perf_counter() - started)
        from resources.openai.engine import OpenAIEngine

        self._server = server
        self._client = OpenAIEngine(
            config=OpenAIEngineConfig(
                base_url=server.base_url,
                model=self.model,
                server_style="llamacpp",
                use_chat=self.use_chat,
                max_concurrency=cfg.slots,
                temperature=cfg.temperature,
                max_tokens=cfg.max_tokens,
                timeout_s=cfg.timeout_s,
                request_deadline_s=max(300.0, 2 * cfg.timeout_s),
                hardware=self.hardware,
            )
        )

    def run(self, relquery_id: str, requests: Sequence[Request]) -> RunResult:
        result = self.inner.run(relquery_id, requests)
        return replace(result, stats=replace(result.stats, engine=self.name))

    def close(self) -> None:
        """Stop the server (safe to call twice; a later request starts a new one)."""
        with self._lock:
            server, client = self._server, self._client
            self._server = self._client = None
        if client is not None:
            client.close()
        if server is not None:
            server.stop()
