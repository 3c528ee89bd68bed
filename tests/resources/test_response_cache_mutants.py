"""ResponseCache behaviours the mutation sample showed untested: pinned keys (a cache file
written before an upgrade still hits), the on-disk sentinel for unknown cached tokens, exact
round trips, the lock counter and the lock deadline."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import duckdb
import pytest

from resources.engine import Request, Response
from resources.response_cache import CacheLockTimeout, EngineKey, ResponseCache
from tests.resources.test_response_cache import _hold  # a spawn target: one importable copy

REQUEST = Request("a", "Is the sky blue?", max_tokens=7)


def test_request_keys_are_pinned_so_an_existing_cache_file_keeps_hitting() -> None:
    # KEY_VERSION 1 keys, computed once: a change here orphans every stored answer
    assert EngineKey("openai", "llama-2-7b").request_key(REQUEST) == (
        "bed7a97a99eb7134f377666557718118b281343fdf5b290cd3fd4c475a0f6721"
    )
    remote = EngineKey("openai", "llama-2-7b", 0.5, "vllm@http://h:8000/v1/completions")
    assert remote.request_key(REQUEST) == (
        "a9a223a3607cfc2c2c212381266f8f55c41013a22718be504ccd8bb5cb0079c3"
    )


def test_unknown_cached_tokens_are_stored_as_minus_one_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "c.duckdb"
    unknown = Response("r1", "Yes", 100, 0, 1, 0.5, 0.75, cached_tokens_known=False)
    ResponseCache(path).put_many([("k1", unknown), ("k2", Response("r2", "No", 9, 3, 1, 0, 0))])
    with duckdb.connect(str(path), read_only=True) as con:
        rows = con.execute("SELECT key, cached_tokens FROM responses ORDER BY key").fetchall()
    assert rows == [("k1", -1), ("k2", 3)]  # the documented sentinel an audit query relies on


def test_a_response_with_an_empty_id_reads_back_unchanged(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "c.duckdb")
    stored = Response("", "Yes", 100, 10, 1, 0.5, 0.75)
    cache.put_many([("k", stored)])
    assert cache.get_many(["k"]) == {"k": stored}


def test_lock_waits_counts_only_real_waits(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "c.duckdb")
    assert cache.lock_waits == 0
    cache.put_many([("k", Response("r", "Yes", 1, 0, 1, 0.1, 0.2))])
    assert cache.get_many(["k"]) and cache.count() == 1
    assert cache.lock_waits == 0  # nobody else held the file


def test_a_wait_that_would_pass_the_deadline_is_not_started(tmp_path: Path) -> None:
    path = tmp_path / "held.duckdb"
    ResponseCache(path).count()
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold, args=(str(path), 4.0, ready))
    holder.start()
    try:
        assert ready.wait(30)
        # the first backoff (0.5 s) already ends past the 0.2 s deadline: give up at once
        cache = ResponseCache(path, lock_timeout_s=0.2, initial_backoff_s=0.5, max_backoff_s=0.5)
        started = time.monotonic()
        with pytest.raises(CacheLockTimeout):
            cache.count()
        assert time.monotonic() - started < 0.2
        assert cache.lock_waits == 0
    finally:
        holder.kill()
        holder.join(30)
