"""run_requests: cache reuse, chunked commits, order, counts, the error-rate guard."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from resources.engine import LLMEngine, Request, Response, RunResult, RunStats
from resources.response_cache import EngineKey, ResponseCache
from resources.runner import RunOutcome, TooManyErrors, raise_if_too_many_errors, run_requests


class Echo(LLMEngine):
    """Answers each prompt upper-cased; prompts containing `fail` fail; records every chunk.
    `crash_on_call` raises on that (1-based) call, like a process dying mid-run."""

    name = "echo"
    model = "echo-1"
    hardware = "cpu"

    def __init__(self, crash_on_call: int | None = None) -> None:
        self.calls: list[list[str]] = []
        self.crash_on_call = crash_on_call

    def run(self, relquery_id: str, requests: Sequence[Request]) -> RunResult:
        self.calls.append([r.id for r in requests])
        if self.crash_on_call == len(self.calls):
            raise KeyboardInterrupt("killed mid-chunk")
        responses = [
            Response(r.id, "", 0, 0, 0, 0.1, 0.1, error="boom")
            if "fail" in r.prompt
            else Response(r.id, r.prompt.upper(), 10, 4, 1, 0.1, 0.2)
            for r in requests
        ]
        errors = sum(1 for r in responses if r.error)
        ok = len(responses) - errors
        stats = RunStats("echo", "echo-1", "cpu", len(requests), 10 * ok, 4 * ok, ok, 1.0, 1.0,
                         errors)  # fmt: skip
        return RunResult(responses, stats)


def reqs(n: int, fail: set[int] = frozenset()) -> list[Request]:  # type: ignore[assignment]
    return [Request(f"id{i}", f"{'fail ' if i in fail else ''}prompt {i}") for i in range(n)]


def test_without_a_cache_everything_is_sent_in_order_in_chunks() -> None:
    engine = Echo()
    progress: list[tuple[int, int]] = []
    out = run_requests(
        engine, "q", reqs(10), chunk_size=4, progress=lambda d, t: progress.append((d, t))
    )
    assert engine.calls == [[f"id{i}" for i in range(4)], [f"id{i}" for i in range(4, 8)],
                            ["id8", "id9"]]  # fmt: skip
    assert [r.id for r in out.responses] == [f"id{i}" for i in range(10)]
    assert [r.text for r in out.responses] == [f"PROMPT {i}" for i in range(10)]
    assert (out.n_requests, out.cache_hits, out.sent, out.answered, out.failed) == (
        10,
        0,
        10,
        10,
        0,
    )
    assert (out.num_chunks, out.stored) == (3, 0)
    assert progress == [(0, 10), (4, 10), (8, 10), (10, 10)]
    assert out.stats.n_requests == 10 and out.stats.prompt_tokens == 100
    assert out.stats.engine_time_s == 3.0


def test_a_rerun_reuses_the_cache_and_retries_only_failures(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "r.duckdb")
    first = run_requests(Echo(), "q", reqs(7, fail={2, 5}), cache=cache, chunk_size=3)
    assert (first.sent, first.answered, first.failed, first.stored) == (7, 5, 2, 5)
    assert [r.id for r in first.errors] == ["id2", "id5"]
    assert cache.count() == 5

    engine = Echo()
    # same prompts, new ids: the cache is keyed by content, ids come from the new requests
    again = [Request(f"new{i}", r.prompt) for i, r in enumerate(reqs(7, fail={2, 5}))]
    second = run_requests(engine, "q", again, cache=cache, chunk_size=3)
    assert engine.calls == [["new2", "new5"]]
    assert (second.cache_hits, second.sent, second.answered, second.failed) == (5, 2, 5, 2)
    assert [r.id for r in second.responses] == [f"new{i}" for i in range(7)]
    assert second.responses[0] == Response("new0", "PROMPT 0", 10, 4, 1, 0.1, 0.2)
    assert second.stats.n_requests == 2 and second.stats.prompt_tokens == 0
    assert (second.reused_prompt_tokens, second.reused_cached_tokens) == (50, 20)
    assert second.n_requests == second.cache_hits + second.sent == second.answered + second.failed


def test_each_chunk_is_committed_before_the_next_so_a_crash_loses_one_chunk(
    tmp_path: Path,
) -> None:
    cache = ResponseCache(tmp_path / "crash.duckdb")
    with pytest.raises(KeyboardInterrupt):
        run_requests(Echo(crash_on_call=3), "q", reqs(10), cache=cache, chunk_size=3)
    assert cache.count() == 6  # chunks 1 and 2 committed; chunk 3 was in flight
    engine = Echo()
    out = run_requests(engine, "q", reqs(10), cache=cache, chunk_size=3)
    assert engine.calls == [["id6", "id7", "id8"], ["id9"]]
    assert (out.cache_hits, out.sent, out.answered) == (6, 4, 10)


def test_another_engine_key_does_not_reuse_answers(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "k.duckdb")
    run_requests(Echo(), "q", reqs(3), cache=cache)
    other = run_requests(Echo(), "q", reqs(3), cache=cache, engine_key=EngineKey("echo", "echo-2"))
    assert other.cache_hits == 0 and other.sent == 3
    assert run_requests(Echo(), "q", reqs(3), cache=cache).cache_hits == 3


def test_disabled_cache_and_empty_input(tmp_path: Path) -> None:
    out = run_requests(Echo(), "q", reqs(2), cache=ResponseCache(tmp_path / "x", enabled=False))
    assert out.sent == 2 and out.stored == 0 and not (tmp_path / "x").exists()
    empty = run_requests(Echo(), "q", [])
    assert (empty.n_requests, empty.sent, empty.num_chunks, empty.error_rate) == (0, 0, 0, 0.0)
    assert empty.stats.engine == "echo" and empty.stats.n_requests == 0
    with pytest.raises(ValueError, match="chunk_size must be >= 1, got 0"):
        run_requests(Echo(), "q", reqs(1), chunk_size=0)


class Dropper(Echo):
    def run(self, relquery_id: str, requests: Sequence[Request]) -> RunResult:
        result = super().run(relquery_id, requests)
        return RunResult(result.responses[:-1], result.stats)


def test_an_engine_that_drops_a_response_is_caught() -> None:
    with pytest.raises(RuntimeError, match=r"returned 2 responses for 3 requests"):
        run_requests(Dropper(), "q", reqs(3))


def outcome_with(n: int, failed: set[int]) -> RunOutcome:
    return run_requests(Echo(), "q", reqs(n, fail=failed))


def test_raise_if_too_many_errors_names_count_rate_and_first_errors() -> None:
    out = outcome_with(10, {1, 4, 7, 8})
    raise_if_too_many_errors(out, 0.4)  # 40% is allowed at 0.4
    with pytest.raises(TooManyErrors) as info:
        raise_if_too_many_errors(out, 0.25)
    message = str(info.value)
    assert "4 of 10 requests failed" in message
    assert "40.0% > max_error_rate 25.0%" in message
    assert "id1: boom; id4: boom; id7: boom" in message and "id8" not in message
    assert info.value.outcome is out
    raise_if_too_many_errors(outcome_with(3, set()), 0.0)
    with pytest.raises(ValueError, match="max_error_rate must be in \\[0, 1\\], got 1.5"):
        raise_if_too_many_errors(out, 1.5)
