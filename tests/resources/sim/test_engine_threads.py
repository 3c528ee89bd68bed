"""`SimulatedEngine.run` from several threads at once equals the same runs one after another,
and leaves the block pool consistent (the lock in `run` is what makes both true).

What is comparable: every thread runs the SAME request list, so whichever thread takes the lock
i-th finds the engine in the same state as the i-th run of a serial sequence (the state after
i-1 identical runs). The concurrent runs' results, as a multiset, therefore equal the serial
runs' (cache hits and simulated time included), and every run's texts and prompt/output
tokens equal the serial ones. Only the assignment of runs to relquery ids depends on thread
timing. A short switch interval makes the threads interleave inside runs, so without the
lock the shared pool races (a `KeyError` on the free queue, lost reference counts, hits on
blocks another run is still computing) on every run of this test, not by luck.
"""

from __future__ import annotations

import sys
import threading

import pytest

from resources.engine import Request
from resources.sim import SimulatedEngine

THREADS = 4
RUNS_PER_THREAD = 3
PREFIX = "You are a film critic. Decide whether the review below is positive. " * 4
REQUESTS = [
    Request(str(i), f"{PREFIX}Review {i}: the plot was {i % 13} and the acting {i % 7}.", 4)
    for i in range(200)
]
# 4 threads x 3 runs x 200 requests = 2,400 requests.


def make_engine() -> SimulatedEngine:
    """Small batches (hundreds of iterations a run, admissions spread over the whole run) and a
    pool that evicts: blocks are allocated, hit, freed and evicted throughout every run."""
    return SimulatedEngine(max_num_seqs=8, max_num_batched_tokens=256, num_gpu_blocks_override=96)


def summary(result) -> tuple:
    """What a run must reproduce: totals, simulated time and every response but its timing."""
    s = result.stats
    responses = tuple(
        (r.id, r.text, r.prompt_tokens, r.cached_tokens, r.output_tokens, r.error)
        for r in result.responses
    )
    return (
        s.n_requests,
        s.prompt_tokens,
        s.cached_tokens,
        s.output_tokens,
        s.errors,
        s.engine_time_s,
        responses,
    )


def assert_pool_consistent(engine: SimulatedEngine) -> None:
    stats = engine.cache_stats()
    # every block but vLLM's null block is back in the free queue, once
    assert stats["num_free_blocks"] == engine.num_kv_blocks - 1, stats
    # `reset_cache` refuses while any block has a nonzero reference count
    engine.reset_cache()
    assert engine.cache_stats()["num_cached_blocks"] == 0


@pytest.fixture
def fast_switching():
    """Let threads switch every 10 microseconds (default 5 ms) so they interleave in a run."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


def test_concurrent_runs_equal_serial_runs_and_free_every_block(fast_switching) -> None:
    serial_engine = make_engine()
    serial = [
        summary(serial_engine.run(f"s{i}", REQUESTS)) for i in range(THREADS * RUNS_PER_THREAD)
    ]
    assert len({run[2] for run in serial}) > 1  # the cache state matters: runs differ in hits

    engine = make_engine()
    results: dict[str, tuple] = {}
    failures: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def work(t: int) -> None:
        start.wait()
        try:
            for k in range(RUNS_PER_THREAD):
                results[f"t{t}-{k}"] = summary(engine.run(f"t{t}-{k}", REQUESTS))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, f"runs raised {failures!r}"
    assert sorted(results.values()) == sorted(serial)
    assert_pool_consistent(engine)
    # and the engine still works: after the reset a run equals a fresh engine's first run
    assert summary(engine.run("again", REQUESTS)) == serial[0]
