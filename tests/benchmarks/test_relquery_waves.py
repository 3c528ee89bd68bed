"""`benchmarks.lib.relquery_waves`: PEM priorities for real engines, and the wave logic (no GPU)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from benchmarks.lib.relquery_waves import (
    RelQueryScheduler,
    SchedulerConfig,
    approx_token_count,
    serve_relqueries,
)
from resources.engine import LLMEngine, Request, Response, RunResult, RunStats
from resources.sim import SimulatedEngine
from resources.sim.pem import LinearPredictors, pem

PRED = LinearPredictors(alpha_p=0.0002, beta_p=0.025, alpha_d=0.0004, beta_d=0.025)


def reqs(prefix: str, n: int, chars: int = 400, out: int = 10) -> list[Request]:
    return [Request(f"{prefix}/{i}", f"{prefix} {i} " + "x" * chars, out) for i in range(n)]


class RecordingEngine(LLMEngine):
    """Serves every request at once and records the waves (a real engine double, no GPU).
    Every request after the first of its relQuery prefix reports 3/4 of its prompt cached."""

    name = "recording"
    model = "m"
    hardware = "h"
    honours_priority = True

    def __init__(self) -> None:
        self.waves: list[list[Request]] = []

    def run(self, relquery_id: str, requests: Sequence[Request]) -> RunResult:
        self.waves.append(list(requests))
        out = []
        for r in requests:
            tokens = approx_token_count(r.prompt)
            cached = 0 if r.id.endswith("/0") else tokens * 3 // 4
            out.append(Response(r.id, "ok", tokens, cached, 1, 0.1, 0.2))
        stats = RunStats.from_responses(
            out, engine=self.name, model="m", hardware="h", engine_time_s=1.0, wall_time_s=0.5
        )
        return RunResult(out, stats)


def test_estimate_is_pem_of_the_unsubmitted_requests() -> None:
    sched = RelQueryScheduler(PRED)
    sched.add("a", reqs("a", 5))
    toks = [approx_token_count(r.prompt) for r in reqs("a", 5)]
    cfg = sched.config
    expected = pem([float(t) for t in toks], [10] * 5, PRED, cfg.kv_capacity_tokens, 256, 2048)
    assert sched.estimate("a") == pytest.approx(expected)


def test_waves_order_by_priority_and_set_vllm_priorities() -> None:
    sched = RelQueryScheduler(PRED, SchedulerConfig(max_wave_requests=6))
    sched.add("big", reqs("big", 8))
    sched.add("small", reqs("small", 2))
    wave = sched.next_wave()
    assert wave is not None
    # the smaller relQuery comes first; the wave is filled up to 6 with the bigger one
    assert wave.relquery_ids == ["small"] * 2 + ["big"] * 4
    prios = [r.priority for r in wave.requests]
    assert prios[0] == prios[1] < prios[2] == prios[5]
    assert prios[0] == round(wave.priorities["small"] * 1000)
    assert all(isinstance(p, int) and p >= 0 for p in prios)
    assert [r.id for r in wave.requests[2:]] == [f"big/{i}" for i in range(4)]
    with pytest.raises(RuntimeError, match="not completed"):
        sched.next_wave()


def test_re_estimation_between_waves_uses_progress_and_observed_cache_hits() -> None:
    engine = RecordingEngine()
    sched = RelQueryScheduler(PRED, SchedulerConfig(max_wave_requests=4))
    sched.add("a", reqs("a", 10))
    before = sched.estimate("a")
    wave = sched.next_wave()
    sched.complete(wave, engine.run("w", wave.requests).responses)
    # 4 of 10 submitted, and 3 of them reported 3/4 cached: a lower remaining estimate
    assert sched.miss_ratio("a") == pytest.approx(1 - 3 * 0.75 / 4, abs=0.01)
    after = sched.estimate("a")
    ratio = sched.miss_ratio("a")
    cap = sched.config.kv_capacity_tokens
    left = [float(approx_token_count(r.prompt)) for r in reqs("a", 10)[4:]]
    assert after == pytest.approx(pem([t * ratio for t in left], [10] * 6, PRED, cap, 256, 2048))
    assert after < pem(left, [10] * 6, PRED, cap, 256, 2048) < before


def test_serve_relqueries_gives_every_relquery_its_responses_in_order() -> None:
    engine = RecordingEngine()
    batches = {"a": reqs("a", 7), "b": reqs("b", 3), "c": reqs("c", 12)}
    out = serve_relqueries(engine, batches, RelQueryScheduler(PRED, SchedulerConfig(5)))
    assert sum(len(w) for w in engine.waves) == 22 and all(len(w) <= 5 for w in engine.waves)
    submitted = [r.id for w in engine.waves for r in w]
    assert sorted(submitted) == sorted(r.id for v in batches.values() for r in v)
    for rid, requests in batches.items():
        assert [r.id for r in out[rid].responses] == [r.id for r in requests]
        assert out[rid].stats.n_requests == len(requests)
        assert out[rid].stats.engine_time_s > 0
    assert engine.waves[0][0].id.startswith("b/")  # the smallest relQuery went first


def test_serve_relqueries_on_the_simulated_engine() -> None:
    eng = SimulatedEngine("A100-40GB", "opt-13b")
    batches = [("a", reqs("a", 6)), ("b", reqs("b", 2))]
    out = serve_relqueries(eng, batches, RelQueryScheduler.for_deployment("A100-40GB", "opt-13b"))
    assert [r.ok for r in out["a"].responses] == [True] * 6 and out["b"].stats.errors == 0


def test_starvation_threshold_gives_priority_zero() -> None:
    now = [0.0]
    sched = RelQueryScheduler(
        PRED, SchedulerConfig(starvation_threshold_s=0.5), clock=lambda: now[0]
    )
    sched.add("big", reqs("big", 10))
    sched.add("small", reqs("small", 1))
    assert sched.priorities()["small"] < sched.priorities()["big"]
    now[0] = 6.0  # big has waited 0.6 s per request
    assert sched.priorities()["big"] == 0.0
    assert sched.next_wave().relquery_ids[0] == "big"


def test_for_deployment_uses_the_profile_capacity() -> None:
    sched = RelQueryScheduler.for_deployment("A100-40GB", "opt-13b")
    assert (
        sched.config.kv_capacity_tokens
        == SimulatedEngine("A100-40GB", "opt-13b").num_kv_blocks * 16
    )
    assert sched.predictors.alpha_p > 0 and sched.predictors.beta_d > 0


def test_errors_name_the_bad_value() -> None:
    with pytest.raises(ValueError, match="max_wave_requests must be >= 1, got 0"):
        SchedulerConfig(max_wave_requests=0)
    sched = RelQueryScheduler(PRED)
    sched.add("a", reqs("a", 1))
    with pytest.raises(ValueError, match="'a' was already added"):
        sched.add("a", reqs("a", 1))
    with pytest.raises(ValueError, match="'e' has no requests"):
        sched.add("e", [])
    with pytest.raises(ValueError, match="unknown gpu 'T4'"):
        RelQueryScheduler.for_deployment("T4", "opt-13b")
