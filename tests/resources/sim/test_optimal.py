"""The optimum (`resources.sim.optimal`): exact on cases whose optimum is known, never above
what any policy achieves on the same workload under the same cost model."""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("highspy", reason="highspy (HiGHS) not installed: pip install highspy")

from benchmarks.lib.workload import WorkloadConfig, generate_workload  # noqa: E402
from resources.engine import Request  # noqa: E402
from resources.sim import ApproxTokenizer, SimulatedEngine  # noqa: E402
from resources.sim.optimal import (  # noqa: E402
    RequestSpec,
    alone_s,
    optimal_mean_latency,
    request_specs,
)
from resources.sim.policies import POLICIES  # noqa: E402
from resources.sim.relquery import RelQuery  # noqa: E402
from tests.resources.sim.helpers import IntTokenizer, prompt  # noqa: E402


def engine(policy: str, tokenizer=None) -> SimulatedEngine:
    return SimulatedEngine("A100-40GB", "opt-13b", policy, tokenizer=tokenizer or IntTokenizer())


def solve(specs, eng: SimulatedEngine, step_s: float, horizon_s: float, **kw):
    return optimal_mean_latency(
        specs,
        eng.coefficients,
        max_num_batched_tokens=8192,
        max_num_seqs=eng.max_num_seqs,
        kv_tokens=eng.num_kv_blocks * 16,
        step_s=step_s,
        horizon_s=horizon_s,
        **kw,
    )


def lone(rid: str, first: int, length: int, out: int, arrival: float) -> RelQuery:
    """A one-request relQuery with a prompt of distinct token ids (no prefix shared)."""
    return RelQuery(rid, [Request(f"{rid}/0", prompt(range(first, first + length)), out)], arrival)


def test_isolated_relqueries_cost_their_time_alone() -> None:
    # arrivals far apart: the optimum is each relQuery alone, which every policy achieves
    wl = [lone("a", 0, 300, 20, 0.5), lone("b", 10_000, 120, 5, 6.0), lone("c", 20_000, 60, 1, 9.0)]
    eng = engine("fcfs")
    fcfs = eng.run_workload(wl).summary().mean_latency_s
    opt = solve(request_specs(wl, eng), eng, step_s=0.5, horizon_s=12.0)
    assert opt.optimal
    assert opt.bound_s == pytest.approx(fcfs, rel=1e-3)
    assert [round(c - r.arrival_s, 6) for c, r in zip(opt.completion_s, wl, strict=True)] == [
        round(alone_s(s, eng.coefficients), 6) for s in request_specs(wl, eng)
    ]


def brute_force_prefill_only(lengths: list[int], coef) -> float:
    """Known optimum for one-token requests all arriving at 0: the best ordered partition of
    the requests into whole-prompt batches (splitting a prompt only adds iterations)."""
    best = float("inf")
    n = len(lengths)
    for labels in itertools.product(range(n), repeat=n):  # batch index of every request
        used = sorted(set(labels))
        if used != list(range(len(used))):
            continue
        now = total = 0.0
        for k in used:
            batch = [lengths[i] for i in range(n) if labels[i] == k]
            now += coef.batch_time(sum(batch), sum(x * x for x in batch), 0, len(batch))
            total += now * len(batch)
        best = min(best, total / n)
    return best


@pytest.mark.parametrize("lengths", [[1000, 200, 400], [600, 600, 50, 900]])
def test_contended_prefills_match_the_brute_force_optimum(lengths: list[int]) -> None:
    eng = engine("fcfs")
    coef = eng.coefficients
    specs = [RequestSpec(i, 0.0, n, 1) for i, n in enumerate(lengths)]
    known = brute_force_prefill_only(lengths, coef)
    step = 0.025
    opt = solve(specs, eng, step_s=step, horizon_s=0.7)
    assert opt.optimal
    assert opt.bound_s <= known + 1e-9  # a lower bound...
    assert opt.bound_s >= known - step  # ...within one step of the known optimum


def test_kv_capacity_binds() -> None:
    # two long decodes whose prompts cannot be held together: they must take turns
    coef = engine("fcfs").coefficients
    specs = [RequestSpec(0, 0.0, 900, 40), RequestSpec(1, 0.0, 900, 40)]
    kw = dict(max_num_batched_tokens=8192, max_num_seqs=256, step_s=0.1, horizon_s=2.5)
    roomy = optimal_mean_latency(specs, coef, kv_tokens=10_000, **kw)
    tight = optimal_mean_latency(specs, coef, kv_tokens=1_000, **kw)
    assert tight.bound_s > roomy.bound_s + 0.3


def test_shared_instruction_is_computed_once() -> None:
    # four requests sharing a 640-token instruction: the bound counts it once
    coef = engine("fcfs").coefficients
    base = tuple(range(40))
    specs = [RequestSpec(0, 0.0, 700, 1, base + (100 + i,)) for i in range(4)]
    apart = [RequestSpec(0, 0.0, 700, 1, tuple(1000 * i + k for k in range(41))) for i in range(4)]
    kw = dict(max_num_batched_tokens=8192, max_num_seqs=256, kv_tokens=50_000, horizon_s=0.8)
    shared = optimal_mean_latency(specs, coef, step_s=0.04, **kw)
    distinct = optimal_mean_latency(apart, coef, step_s=0.04, **kw)
    assert shared.bound_s < 0.7 * distinct.bound_s


@pytest.mark.parametrize("seed", [0, 1])
def test_never_above_any_policy(seed: int) -> None:
    wl = generate_workload(WorkloadConfig(rate=2.0, num_relqueries=6, max_requests=3, seed=seed))
    tok = ApproxTokenizer()
    means, makespan = {}, 0.0
    for name in POLICIES:
        result = engine(name, tok).run_workload(wl)
        means[name] = result.summary().mean_latency_s
        makespan = max(makespan, result.makespan_s)
    eng = engine("fcfs", tok)
    # a time limit keeps it fast: HiGHS's dual bound is a lower bound whether or not it closed
    opt = solve(request_specs(wl, eng), eng, step_s=0.5, horizon_s=makespan + 1.0, time_limit_s=8)
    assert all(opt.bound_s <= m + 1e-9 for m in means.values()), (opt, means)
    assert opt.bound_s > 0.5 * min(means.values())  # and not a trivial bound


def test_bad_input_is_named() -> None:
    coef = engine("fcfs").coefficients
    kw = dict(max_num_batched_tokens=8, max_num_seqs=1, kv_tokens=8)
    with pytest.raises(ValueError, match="step_s and horizon_s must be > 0, got 0"):
        optimal_mean_latency([RequestSpec(0, 0.0, 4, 1)], coef, step_s=0, horizon_s=1, **kw)
    with pytest.raises(ValueError, match="at least one request"):
        optimal_mean_latency([], coef, step_s=1, horizon_s=1, **kw)
