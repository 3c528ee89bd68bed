"""A persistent cache of successful LLM responses in one DuckDB file, shared by processes.

Keys: `EngineKey.request_key(request)` is the SHA-256 of a canonical JSON of (engine name,
model, sampling parameters = temperature + `max_tokens` + `OutputSpec`, rendered prompt). The
request's `id` and `priority` are not part of it: they change no answer.

Invariants:
- only successful responses are stored (`put_many` skips those with `error` set), so a rerun
  retries every failed request;
- an entry, once stored, is never overwritten: the first writer of a key wins, and the
  responses table has one row per key (no duplicates across writers);
- a response read back equals the one stored, except its `id`, which is the stored request's
  (callers put their own id back, as `resources.runner` does);
- the file is held only for the length of one call (open, one transaction, close). DuckDB lets
  one process at a time open a file for writing; a call that finds the file locked by another
  process waits with exponential backoff and jitter, up to `lock_timeout_s`, then raises
  `CacheLockTimeout` naming the file. Two concurrent materializations in two processes are
  therefore safe, at the price of waiting for each other's (short) transactions;
- `ResponseCache(enabled=False)` (or `ResponseCache.disabled()`) never touches the disk:
  `get_many` finds nothing, `put_many` stores nothing, `count` is 0;
- a response whose engine did not report cached tokens (`cached_tokens_known=False`) is
  stored with `cached_tokens = -1` and read back unknown again (never as 0 cached);
- nothing secret is stored: no request headers, no API key, not even the prompt (only its hash);
  the replica that gave an answer is stored as its base URL without credentials (`replica`),
  and read back with the answer.

Default location: `$LLM_ASSETS_HOME/responses.duckdb`, `LLM_ASSETS_HOME` defaulting to
`./.llm_assets` (read when the cache is built, never at import time).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import random
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from resources.engine import LLMEngine, Request, Response
from resources.home import llm_assets_home
from resources.storage import storage_guard

__all__ = [
    "CACHE_FILE_NAME",
    "KEY_VERSION",
    "CacheLockTimeout",
    "EngineKey",
    "ResponseCache",
    "default_cache_path",
]

CACHE_FILE_NAME = "responses.duckdb"
KEY_VERSION = 1
"""Bumped when the key's recipe changes (old entries then simply stop matching)."""
TABLE = "responses"
_LOCK_MESSAGE = "could not set lock"
_PROCESS_LOCKS: dict[str, threading.Lock] = {}
_PROCESS_LOCKS_GUARD = threading.Lock()


def _process_lock(path: Path) -> threading.Lock:
    """One lock per cache file within this process: DuckDB shares one database instance
    between the connections of a process, so two threads writing at once could conflict."""
    name = str(path.resolve())
    with _PROCESS_LOCKS_GUARD:
        return _PROCESS_LOCKS.setdefault(name, threading.Lock())


_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("engine", pa.string()),
        ("model", pa.string()),
        ("request_id", pa.string()),
        ("text", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("cached_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("ttft_s", pa.float64()),
        ("finish_s", pa.float64()),
        ("replica", pa.string()),
    ]
)


def default_cache_path() -> Path:
    """`$LLM_ASSETS_HOME/responses.duckdb`."""
    return llm_assets_home() / CACHE_FILE_NAME


class CacheLockTimeout(TimeoutError):
    """Another process held the cache file for longer than `lock_timeout_s`."""


@dataclass(frozen=True)
class EngineKey:
    """What, besides the request, decides an answer: the engine, the model, the temperature,
    and who answers (a remote server's identity and endpoint).

    `EngineKey.of(engine)` reads the declared `LLMEngine.name`, `.model`, `.temperature` and
    `.identity`. A sim server and a vLLM server serving the same model name, or one server's
    completions and chat endpoints, never share answers; replicas of one deployment do.
    """

    engine: str
    """Engine name as `LLMEngine.name` gives it ("sim", "vllm", "openai", ...)."""
    model: str
    """Served model name."""
    temperature: float = 0.0
    """Sampling temperature; a different temperature is a different answer."""
    identity: str = ""
    """Who answers (`LLMEngine.identity`: for a server, what it reports itself as and the
    endpoint); "" for an in-process engine. Part of the key when set."""

    @classmethod
    def of(cls, engine: LLMEngine) -> EngineKey:
        return cls(engine.name, engine.model, float(engine.temperature), engine.identity)

    def request_key(self, request: Request) -> str:
        """The stable cache key of `request` under this engine (64 hex digits)."""
        payload = {
            "v": KEY_VERSION,
            "engine": self.engine,
            "model": self.model,
            "temperature": self.temperature,
            "max_tokens": request.max_tokens,
            "output": dataclasses.asdict(request.output),
            "prompt": request.prompt,
        }
        if self.identity:  # absent for in-process engines: their keys stay as they were
            payload["identity"] = self.identity
        text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ResponseCache:
    """Successful responses by request key, in a DuckDB file (see the module invariants)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        enabled: bool = True,
        lock_timeout_s: float = 120.0,
        initial_backoff_s: float = 0.01,
        max_backoff_s: float = 0.5,
    ) -> None:
        """`path`: the DuckDB file (default `default_cache_path()`); its folder is created on
        first use. `lock_timeout_s`: longest one call waits for another process's lock."""
        if lock_timeout_s <= 0:
            raise ValueError(f"lock_timeout_s must be > 0, got {lock_timeout_s}")
        if initial_backoff_s <= 0 or max_backoff_s < initial_backoff_s:
            raise ValueError(
                "backoff must satisfy 0 < initial_backoff_s <= max_backoff_s, got "
                f"initial={initial_backoff_s} max={max_backoff_s}"
            )
        self.enabled = enabled
        self.path = Path(path) if path is not None else default_cache_path()
        self.lock_timeout_s = lock_timeout_s
        self.initial_backoff_s = initial_backoff_s
        self.max_backoff_s = max_backoff_s
        self.lock_waits = 0
        """How many times a call of this object found the file locked and waited."""
        self._ready = False

    @classmethod
    def disabled(cls) -> ResponseCache:
        """A cache that stores nothing and finds nothing (the bypass path)."""
        return cls(path=os.devnull, enabled=False)

    def __repr__(self) -> str:
        return f"ResponseCache(path={str(self.path)!r}, enabled={self.enabled})"

    # -- connections ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection to the file, waiting out other processes' locks; closed on exit.
        Calls of one process on one file take turns (`_process_lock`). A full disk or a
        folder without write permission, here or in the caller's block (a COMMIT), is a
        `StorageError` naming the file."""
        with storage_guard(self.path, "the response cache"):  # a full disk is one line
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with _process_lock(self.path):
                yield from self._connect_locked()

    def _connect_locked(self) -> Iterator[duckdb.DuckDBPyConnection]:
        deadline = time.monotonic() + self.lock_timeout_s
        delay = self.initial_backoff_s
        while True:
            try:
                con = duckdb.connect(str(self.path))
                break
            except duckdb.IOException as exc:
                if _LOCK_MESSAGE not in str(exc).lower():
                    raise
                if time.monotonic() + delay > deadline:
                    raise CacheLockTimeout(
                        f"response cache {str(self.path)!r} stayed locked by another process "
                        f"for more than lock_timeout_s={self.lock_timeout_s:g}s"
                    ) from exc
                self.lock_waits += 1
                time.sleep(delay * (0.5 + random.random()))
                delay = min(self.max_backoff_s, delay * 2)
        try:
            if not self._ready:
                con.execute(
                    f"""CREATE TABLE IF NOT EXISTS {TABLE} (
                        key VARCHAR PRIMARY KEY,
                        engine VARCHAR NOT NULL,
                        model VARCHAR NOT NULL,
                        request_id VARCHAR,
                        text VARCHAR NOT NULL,
                        prompt_tokens BIGINT NOT NULL,
                        cached_tokens BIGINT NOT NULL,
                        output_tokens BIGINT NOT NULL,
                        ttft_s DOUBLE,
                        finish_s DOUBLE,
                        stored_at TIMESTAMP DEFAULT current_timestamp,
                        replica VARCHAR
                    )"""
                )
                # a file written before answers named their replica gains the column (NULL)
                con.execute(f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS replica VARCHAR")
                self._ready = True
            yield con
        finally:
            con.close()

    # -- the API ----------------------------------------------------------------------------

    def get_many(self, keys: Iterable[str]) -> dict[str, Response]:
        """The stored response of every key that has one (keys without one are absent)."""
        wanted = list(dict.fromkeys(keys))
        if not self.enabled or not wanted:
            return {}
        if not self.path.exists():
            return {}
        lookup = pa.table({"key": pa.array(wanted, pa.string())})
        with self._connect() as con:
            con.register("wanted_keys", lookup)
            rows = con.execute(
                f"""SELECT r.key, r.request_id, r.text, r.prompt_tokens, r.cached_tokens,
                           r.output_tokens, r.ttft_s, r.finish_s, r.replica
                    FROM {TABLE} r JOIN wanted_keys w ON r.key = w.key"""
            ).fetchall()
            con.unregister("wanted_keys")
        return {
            key: Response(
                id=request_id or "",
                text=text,
                prompt_tokens=int(prompt_tokens),
                cached_tokens=max(0, int(cached_tokens)),
                cached_tokens_known=int(cached_tokens) >= 0,
                output_tokens=int(output_tokens),
                ttft_s=float(ttft_s or 0.0),
                finish_s=float(finish_s or 0.0),
                replica=replica,
            )
            for (key, request_id, text, prompt_tokens, cached_tokens, output_tokens, ttft_s,
                 finish_s, replica) in rows
        }  # fmt: skip

    def put_many(
        self, items: Sequence[tuple[str, Response]], *, engine: str = "", model: str = ""
    ) -> int:
        """Store the successful responses of `items` in one transaction; return how many new
        entries were written (error responses and keys already stored are skipped).

        `engine` / `model` are descriptive columns only (the key already encodes them).
        """
        if not self.enabled:
            return 0
        fresh: dict[str, Response] = {}
        for key, response in items:
            if response.error is None and key not in fresh:
                fresh[key] = response
        if not fresh:
            return 0
        table = _arrow_rows(fresh, engine, model)
        with self._connect() as con:
            con.register("new_rows", table)
            con.execute("BEGIN TRANSACTION")
            try:
                before = _count(con)
                con.execute(
                    f"""INSERT INTO {TABLE} ({", ".join(_SCHEMA.names)})
                        SELECT n.* FROM new_rows n
                        WHERE NOT EXISTS (SELECT 1 FROM {TABLE} r WHERE r.key = n.key)"""
                )
                written = _count(con) - before
                con.execute("COMMIT")
            except BaseException:
                # a COMMIT that failed (a full disk) has already ended the transaction: the
                # error to show is that one, not ROLLBACK's "no transaction is active"
                with contextlib.suppress(duckdb.Error):
                    con.execute("ROLLBACK")
                raise
            finally:
                con.unregister("new_rows")
        return written

    def count(self) -> int:
        """How many responses are stored (0 when disabled or before the first write)."""
        if not self.enabled or not self.path.exists():
            return 0
        with self._connect() as con:
            return _count(con)

    def keys(self) -> set[str]:
        """Every stored key (for tests and audits)."""
        if not self.enabled or not self.path.exists():
            return set()
        with self._connect() as con:
            return {row[0] for row in con.execute(f"SELECT key FROM {TABLE}").fetchall()}


def _count(con: duckdb.DuckDBPyConnection) -> int:
    row = con.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
    return int(row[0]) if row else 0


def _arrow_rows(rows: dict[str, Response], engine: str, model: str) -> pa.Table:
    columns: dict[str, list[Any]] = {name: [] for name in _SCHEMA.names}
    for key, r in rows.items():
        cached = r.cached_tokens if r.cached_tokens_known else -1
        values = (key, engine, model, r.id, r.text, r.prompt_tokens, cached,
                  r.output_tokens, r.ttft_s, r.finish_s, r.replica)  # fmt: skip
        for name, value in zip(_SCHEMA.names, values, strict=True):
            columns[name].append(value)
    return pa.table(columns, schema=_SCHEMA)
