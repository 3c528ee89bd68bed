"""ResponseCache on real DuckDB files: keys, round trips, errors not stored, two processes."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

from llm_assets.output_spec import OutputSpec
from resources.engine import Request, Response
from resources.home import llm_assets_home
from resources.response_cache import (
    CacheLockTimeout,
    EngineKey,
    ResponseCache,
    default_cache_path,
)
from resources.storage import StorageError

KEY = EngineKey("openai", "llama-2-7b")


def ok(i: int, text: str = "Yes") -> Response:
    return Response(f"r{i}", text, 100 + i, 10 + i, 1, 0.5, 0.75)


def test_request_key_is_stable_and_covers_engine_model_sampling_and_prompt() -> None:
    base = Request("a", "prompt", max_tokens=2, output=OutputSpec.choice(["Yes", "No"]))
    key = KEY.request_key(base)
    assert len(key) == 64 and key == KEY.request_key(base)
    # the id and the priority do not change the answer, so not the key
    assert KEY.request_key(Request("b", "prompt", 2, base.output, priority=7)) == key
    variants = [
        EngineKey("sim", "llama-2-7b").request_key(base),
        EngineKey("openai", "llama-3-8b").request_key(base),
        EngineKey("openai", "llama-2-7b", temperature=0.7).request_key(base),
        KEY.request_key(Request("a", "prompt", 3, base.output)),
        KEY.request_key(Request("a", "prompt", 2, OutputSpec.choice(["No", "Yes"]))),
        KEY.request_key(Request("a", "prompt ", 2, base.output)),
    ]
    assert len({key, *variants}) == len(variants) + 1
    # stable across processes and versions: pinned
    assert KEY.request_key(Request("x", "hello")) == KEY.request_key(Request("y", "hello"))


def test_engine_key_of_an_engine() -> None:
    from resources.openai.engine import OpenAIEngine

    engine = OpenAIEngine("http://127.0.0.1:9/v1", "m", temperature=0.3)
    assert EngineKey.of(engine) == EngineKey("openai", "m", 0.3, "unknown;completions")  # no server


def test_round_trip_count_and_first_writer_wins(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "sub" / "responses.duckdb")
    assert cache.count() == 0 and cache.get_many(["k0"]) == {}
    assert not cache.path.exists()  # reading never creates the file
    assert cache.put_many([("k0", ok(0)), ("k1", ok(1)), ("k1", ok(9, "dup"))]) == 2
    assert cache.count() == 2
    assert cache.put_many([("k1", ok(1, "No")), ("k2", ok(2))]) == 1
    got = cache.get_many(["k0", "k1", "k2", "missing"])
    assert set(got) == {"k0", "k1", "k2"}
    assert got["k0"] == ok(0)
    assert got["k1"].text == "Yes"  # never overwritten
    assert cache.keys() == {"k0", "k1", "k2"}
    # another object on the same file sees the same entries
    assert ResponseCache(cache.path).count() == 3


def test_error_responses_are_not_stored(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "c.duckdb")
    failed = Response("r1", "", 0, 0, 0, 1.0, 1.0, error="failed after 6 attempts: HTTP 503")
    assert cache.put_many([("k0", ok(0)), ("k1", failed)]) == 1
    assert set(cache.get_many(["k0", "k1"])) == {"k0"}
    assert cache.put_many([("k1", failed)]) == 0


def test_disabled_cache_never_touches_the_disk(tmp_path: Path) -> None:
    path = tmp_path / "never.duckdb"
    cache = ResponseCache(path, enabled=False)
    assert cache.put_many([("k", ok(0))]) == 0
    assert cache.get_many(["k"]) == {} and cache.count() == 0
    assert not path.exists()
    off = ResponseCache.disabled()
    assert not off.enabled and off.put_many([("k", ok(0))]) == 0


def test_default_path_follows_llm_assets_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LLM_ASSETS_HOME", raising=False)
    assert llm_assets_home() == Path(".llm_assets").resolve()
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    assert default_cache_path() == tmp_path / "home" / "responses.duckdb"
    assert ResponseCache().path == tmp_path / "home" / "responses.duckdb"


def test_constructor_errors_name_the_value(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="lock_timeout_s must be > 0, got 0"):
        ResponseCache(tmp_path / "c.duckdb", lock_timeout_s=0)


# -- two processes ------------------------------------------------------------------------------


def _writer(path: str, worker: int, n: int, shared: int, start: Any, waits: Any) -> None:
    """Write `n` own keys and `shared` keys both workers write, a few per call, reading back;
    report how often the file was found locked by the other process."""
    start.wait(60)  # both processes begin together
    cache = ResponseCache(path, lock_timeout_s=60)
    for i in range(0, n, 5):
        items = [(f"w{worker}-{j}", ok(j, f"w{worker}")) for j in range(i, min(i + 5, n))]
        items += [(f"shared-{j}", ok(j, f"w{worker}")) for j in range(i, min(i + 5, shared))]
        cache.put_many(items)
        got = cache.get_many([k for k, _ in items])
        assert set(got) == {k for k, _ in items}, "a committed entry was not readable"
    waits.put(cache.lock_waits)


def test_two_processes_write_and_read_one_file_concurrently(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.duckdb")
    n, shared = 60, 30
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(2)
    waits = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(path, w, n, shared, start, waits)) for w in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(90)
    assert [p.exitcode for p in procs] == [0, 0]
    assert waits.get(timeout=5) + waits.get(timeout=5) > 0, "the two writers never overlapped"
    cache = ResponseCache(path)
    keys = cache.keys()
    expected = {f"w{w}-{j}" for w in (0, 1) for j in range(n)} | {
        f"shared-{j}" for j in range(shared)
    }
    assert keys == expected  # nothing lost
    assert cache.count() == len(expected)  # nothing duplicated
    with duckdb.connect(path, read_only=True) as con:
        dup = con.execute("SELECT count(*) - count(DISTINCT key) FROM responses").fetchone()
    assert dup == (0,)
    texts = {r.text for r in cache.get_many([f"shared-{j}" for j in range(shared)]).values()}
    assert texts <= {"w0", "w1"}


def _hold(path: str, seconds: float, ready: Any) -> None:
    con = duckdb.connect(path)
    ready.set()
    time.sleep(seconds)
    con.close()


def test_a_locked_file_is_waited_for_then_times_out_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "held.duckdb"
    ResponseCache(path).put_many([("k", ok(0))])
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold, args=(str(path), 1.0, ready))
    holder.start()
    assert ready.wait(30)
    waiting = ResponseCache(path, lock_timeout_s=20)
    started = time.monotonic()
    assert waiting.put_many([("k2", ok(2))]) == 1  # waits until the holder lets go
    assert waiting.lock_waits > 0 and time.monotonic() - started > 0.2
    holder.join(30)

    ready2 = ctx.Event()
    holder = ctx.Process(target=_hold, args=(str(path), 1.5, ready2))
    holder.start()
    assert ready2.wait(30)
    with pytest.raises(CacheLockTimeout, match="held.duckdb.*lock_timeout_s=0.3"):
        ResponseCache(path, lock_timeout_s=0.3).count()
    holder.join(30)


@pytest.fixture
def small_disk(tmp_path):
    """A real 2 MiB filesystem (tmpfs); skipped where mounting is not allowed."""
    import subprocess

    mount = tmp_path / "small"
    mount.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_shows_the_write_error_not_a_rollback_error(small_disk):
    """Issue 22 item 10: a COMMIT that failed on a full disk was hidden behind ROLLBACK's
    "cannot rollback - no transaction is active"."""
    cache = ResponseCache(small_disk / "responses.duckdb")
    text = "x" * 2000
    with pytest.raises(StorageError) as caught:  # (issue 36: one line naming the file)
        for chunk in range(100):
            items = [
                (f"k{chunk}-{i}", Response(f"r{i}", text, 1, 0, 1, 0.1, 0.2)) for i in range(200)
            ]
            cache.put_many(items)
    cause = str(caught.value.__cause__)
    assert "No space left on device" in cause and "rollback" not in cause, cause
    assert str(cache.path) in str(caught.value) and "ENOSPC" in str(caught.value)
