"""Per-relQuery accounting (relserve.txt Eq. 2 and 13) from `SimulatedEngine.run_workload`."""

from __future__ import annotations

import pytest

from resources.engine import Request
from resources.sim import SimulatedEngine
from resources.sim.relquery import RelQuery, relquery_timing, summarize
from tests.resources.sim.helpers import IntTokenizer, prompt


def relquery(rid: str, first: int, n: int, arrival: float, length: int = 64, out: int = 8):
    reqs = [
        Request(f"{rid}/{i}", prompt(range(first + i * 1000, first + i * 1000 + length)), out)
        for i in range(n)
    ]
    return RelQuery(rid, reqs, arrival)


def engine(policy: str = "fcfs", **kw) -> SimulatedEngine:
    return SimulatedEngine("A100-40GB", "opt-13b", policy, tokenizer=IntTokenizer(), **kw)


def test_timing_definitions() -> None:
    t = relquery_timing("q", 1.0, 4, [(2.0, 3.0, 6.0), (2.5, 4.0, 5.0)], num_errors=2)
    assert (t.waiting_s, t.core_s, t.tail_s, t.latency_s) == (1.0, 2.0, 2.0, 5.0)
    assert t.unit_waiting_s == 0.25 and t.num_errors == 2
    with pytest.raises(ValueError, match="inconsistent"):
        relquery_timing("q", 3.0, 1, [(2.0, 3.0, 4.0)])
    empty = relquery_timing("q", 1.0, 1, [])
    assert empty.latency_s == 0.0


def test_summary_statistics() -> None:
    timings = [relquery_timing(str(i), 0.0, 1, [(0.0, 0.0, float(i))]) for i in range(1, 101)]
    s = summarize(timings)
    assert s.mean_latency_s == pytest.approx(50.5)
    assert s.p50_latency_s == pytest.approx(50.5) and s.max_latency_s == 100.0
    assert s.p99_latency_s == pytest.approx(99.01)
    with pytest.raises(ValueError, match="at least one"):
        summarize([])


@pytest.mark.parametrize("policy", ["fcfs", "vllm-v1", "sarathi", "static-priority", "relserve"])
def test_periods_add_up_and_respect_arrivals(policy: str) -> None:
    rqs = [
        relquery("a", 0, 30, 0.0),
        relquery("b", 100_000, 5, 0.05),
        relquery("c", 200_000, 3, 9.0),
    ]
    result = engine(policy).run_workload(rqs)
    for rq, res in zip(rqs, result.relqueries, strict=True):
        t = res.timing
        assert t.relquery_id == rq.relquery_id and t.arrival_s == rq.arrival_s
        assert min(t.waiting_s, t.core_s, t.tail_s) >= 0
        assert t.waiting_s + t.core_s + t.tail_s == pytest.approx(t.latency_s)
        assert t.finish_s == max(r.finish_s for r in res.responses)
        assert all(r.ttft_s >= rq.arrival_s for r in res.responses)
    # c arrives after everything else is done: no waiting, and the engine idled until then
    assert result.relqueries[2].timing.waiting_s == pytest.approx(0.0)
    assert result.makespan_s == result.relqueries[2].timing.finish_s
    assert result.scheduler_s > 0 and result.num_iterations > 0


def test_workload_of_one_relquery_matches_run() -> None:
    rq = relquery("a", 0, 20, 0.0)
    run = engine().run("a", rq.requests)
    wl = engine().run_workload([rq])
    assert wl.relqueries[0].responses == run.responses
    assert wl.makespan_s == run.stats.engine_time_s


def test_rejected_requests_are_error_rows_not_timing() -> None:
    too_long = Request("x", prompt(range(3000)), 4)  # opt-13b context is 2048
    rq = RelQuery("a", [*relquery("a", 0, 2, 0.0).requests, too_long], 0.0)
    res = engine().run_workload([rq]).relqueries[0]
    assert [r.ok for r in res.responses] == [True, True, False]
    assert res.timing.num_errors == 1 and res.timing.num_requests == 3


def test_bad_workloads_are_refused() -> None:
    with pytest.raises(ValueError, match=r"duplicates \['a'\]"):
        engine().run_workload([relquery("a", 0, 1, 0.0), relquery("a", 10, 1, 0.0)])
    with pytest.raises(ValueError, match="arrival_s must be >= 0, got -1"):
        engine().run_workload([relquery("a", 0, 1, -1.0)])
