"""run_requests behaviours the mutation sample showed untested: the wall time and labels of
the run's stats, and well-formed rows for requests never sent after a stop."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from resources.engine import LLMEngine, Request, Response, RunResult, RunStats
from resources.response_cache import ResponseCache
from resources.runner import run_requests


class Echo(LLMEngine):
    """Answers each prompt upper-cased; every chunk reports a wall time of 5 s; stops after
    `stop_after` calls when set."""

    name = "echo"
    model = "echo-1"
    hardware = "cpu-8"

    def __init__(self, stop_after: int | None = None) -> None:
        self.calls = 0
        self.stop_after = stop_after

    def run(self, relquery_id: str, requests: Sequence[Request]) -> RunResult:
        self.calls += 1
        responses = [Response(r.id, r.prompt.upper(), 10, 4, 1, 0.1, 0.2) for r in requests]
        labels = {"engine": "echo", "model": "echo-1", "hardware": "cpu-8"}
        stats = RunStats.from_responses(responses, **labels, engine_time_s=5.0, wall_time_s=5.0)
        stop = "401 unauthorized" if self.calls == self.stop_after else None
        return RunResult(responses, stats, stopped=stop)


def reqs(n: int) -> list[Request]:
    return [Request(f"id{i}", f"prompt {i}") for i in range(n)]


def test_stats_wall_time_is_this_calls_own_not_the_chunks() -> None:
    started = time.perf_counter()
    out = run_requests(Echo(), "q", reqs(6), chunk_size=2)
    elapsed = time.perf_counter() - started
    assert out.stats.n_requests == 6 and out.stats.engine_time_s == 15.0  # summed
    assert isinstance(out.stats.wall_time_s, float)
    assert 0.0 <= out.stats.wall_time_s <= elapsed  # measured, not 3 x 5 s


def test_stats_of_a_run_served_from_the_cache_keep_engine_labels(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "c.duckdb")
    run_requests(Echo(), "q", reqs(3), cache=cache)
    started = time.perf_counter()
    out = run_requests(Echo(), "q", reqs(3), cache=cache)
    elapsed = time.perf_counter() - started
    assert out.cache_hits == 3 and out.sent == 0
    s = out.stats
    assert (s.engine, s.model, s.hardware, s.n_requests) == ("echo", "echo-1", "cpu-8", 0)
    assert isinstance(s.wall_time_s, float) and 0.0 < s.wall_time_s <= elapsed


def test_requests_not_sent_after_a_stop_get_well_formed_error_rows() -> None:
    out = run_requests(Echo(stop_after=1), "q", reqs(5), chunk_size=2)
    assert out.stopped == "401 unauthorized" and out.sent == 2
    unsent = out.responses[2:]
    assert [r.id for r in unsent] == ["id2", "id3", "id4"]
    for r in unsent:
        assert r.error == "not sent: 401 unauthorized"
        assert (r.text, r.prompt_tokens, r.cached_tokens, r.output_tokens) == ("", 0, 0, 0)
        assert (r.ttft_s, r.finish_s) == (0.0, 0.0)
        assert isinstance(r.ttft_s, float) and isinstance(r.finish_s, float)
    assert max(r.finish_s for r in out.responses) == 0.2  # a makespan over all rows works
