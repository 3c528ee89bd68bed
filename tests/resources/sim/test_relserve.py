"""RelServe on hand-made two-relQuery scenarios whose right order is known (relserve.txt §4.3),
the updater's reuse and progress, the starvation threshold (Eq. 13), the tail rule (Fig. 12's
trade-off), the overhead."""

from __future__ import annotations

import pytest

from benchmarks.lib.workload import WorkloadConfig, generate_workload
from resources.engine import Request
from resources.sim import ApproxTokenizer, SimulatedEngine
from resources.sim.policies import RelServeConfig, RelServePolicy
from resources.sim.policies.arranger import ArrangerConfig
from resources.sim.policies.updater import UpdaterConfig
from resources.sim.relquery import RelQuery
from tests.resources.sim.helpers import IntTokenizer, prompt

ALL = ["fcfs", "vllm-v1", "sarathi", "static-priority", "relserve", "relserve-v1"]


def rq(rid: str, first: int, n: int, arrival: float, length: int = 100, out: int = 20):
    reqs = [
        Request(f"{rid}/{i}", prompt(range(first + i * 1000, first + i * 1000 + length)), out)
        for i in range(n)
    ]
    return RelQuery(rid, reqs, arrival)


TEXT = ApproxTokenizer()


def serve(policy, relqueries, blocks: int | None = None):
    """Hand-made prompts are integer ids (IntTokenizer); generated workloads are text."""
    tokenizer = IntTokenizer() if relqueries[0].requests[0].prompt[0].isdigit() else TEXT
    eng = SimulatedEngine(
        "A100-40GB", "opt-13b", policy, tokenizer=tokenizer, num_gpu_blocks_override=blocks
    )
    return eng.run_workload(relqueries)


def relserve(arrangement: str = "adaptive", **updater) -> RelServePolicy:
    return RelServePolicy(
        RelServeConfig(updater=UpdaterConfig(**updater), arranger=ArrangerConfig(arrangement))
    )


def total_latency(result) -> float:
    return sum(t.latency_s for t in result.timings)


# -- case 1: preemption (a shorter relQuery arrives while a long one runs) ------------------------
def preemption_case():
    # 120 requests cannot all fit 400 KV blocks: the long relQuery keeps requests waiting
    return [rq("long", 0, 120, 0.0), rq("short", 900_000, 2, 0.3)]


@pytest.mark.parametrize("policy", ALL)
def test_preemption_case_per_policy(policy: str) -> None:
    res = serve(policy, preemption_case(), blocks=400)
    long, short = res.timings
    if policy in ("static-priority", "relserve"):
        # priority policies serve the short relQuery at once (shortest first is right)
        assert short.finish_s < long.finish_s and short.waiting_s < 0.6
    elif policy == "relserve-v1":
        # vLLM v1 admits a waiting request only into free blocks (no preemption on admission):
        # the short relQuery starts once the long one's first requests free some, then
        # overtakes the long one's waiting requests
        assert short.finish_s < long.finish_s and short.waiting_s < 2.0
    else:
        # FCFS-family policies queue it behind every waiting request of the long one
        assert short.waiting_s > 2.0
    assert all(r.ok for q in res.relqueries for r in q.responses)


def test_relserve_preemption_pauses_decoding_and_beats_fcfs() -> None:
    policy = relserve()
    res = serve(policy, preemption_case(), blocks=400)
    fcfs = serve("fcfs", preemption_case(), blocks=400)
    assert policy.cases.get("preemption/prefill", 0) >= 1
    assert total_latency(res) < total_latency(fcfs)


# -- case 2: internal (the running relQuery still has requests waiting) ---------------------------
def test_internal_case_prefills_the_running_relquery_back_to_back() -> None:
    # 40 x 200 tokens = 4 prefill batches of 10 (2048-token budget); a larger one waits behind
    policy = relserve()
    first, second = rq("first", 0, 40, 0.0, length=200, out=10), rq("second", 10**6, 60, 0.01, 200)
    res = serve(policy, [first, second])
    a, b = res.timings
    assert policy.cases.get("internal/prefill", 0) >= 3
    eng = SimulatedEngine("A100-40GB", "opt-13b", tokenizer=IntTokenizer())
    c = eng.coefficients
    batch = c.a * 2000 + c.b * 10 * 200**2 + c.e * 10 + c.f
    assert a.core_s == pytest.approx(4 * batch, rel=1e-6)  # nothing interleaved with its prefills
    assert b.first_prefill_start_s >= a.last_prefill_end_s
    assert a.finish_s < b.finish_s


# -- case 3: transitional (the running relQuery is in its tail) -----------------------------------
def transitional(long_outputs: bool):
    if long_outputs:  # both decode long: combining the decodes saves the newcomer ~100 steps
        return [rq("r1", 0, 4, 0.0, out=100), rq("r2", 10**6, 4, 0.12, length=150, out=100)]
    # short tails, big prefill: finishing r1's few steps first costs r2 little
    return [rq("r1", 0, 4, 0.0, out=5), rq("r2", 10**6, 10, 0.12, length=200, out=5)]


@pytest.mark.parametrize(("long_outputs", "right"), [(True, "prefill"), (False, "decode")])
def test_transitional_case_picks_the_arrangement_with_lower_latency(
    long_outputs: bool, right: str
) -> None:
    results = {}
    for arrangement in ("adaptive", "prefill", "decode"):
        policy = relserve(arrangement)
        results[arrangement] = (serve(policy, transitional(long_outputs)), policy)
    wrong = "decode" if right == "prefill" else "prefill"
    # the known right order: the arrangement with the lower total latency ...
    assert total_latency(results[right][0]) < total_latency(results[wrong][0])
    # ... is the one Eq. 15-17 choose
    adaptive, policy = results["adaptive"]
    assert policy.cases.get(f"transitional/{right}", 0) >= 1
    assert policy.cases.get(f"transitional/{wrong}", 0) == 0
    assert total_latency(adaptive) == pytest.approx(total_latency(results[right][0]))


# -- the updater ---------------------------------------------------------------------------------
def test_priorities_are_reused_for_untouched_waiting_relqueries() -> None:
    policy = relserve()
    wl = generate_workload(WorkloadConfig(rate=1.0, num_relqueries=15, max_requests=30, seed=3))
    with_reuse = serve(policy, wl)
    overhead = policy.overhead()
    assert overhead["num_reused"] > 0 and overhead["num_pem"] > 0
    without = serve(relserve(enable_reuse=False), wl)
    # Eq. 12 only skips work whose result would not change much: same latencies within 10%
    assert with_reuse.summary().mean_latency_s == pytest.approx(
        without.summary().mean_latency_s, rel=0.1
    )


def test_policies_change_timing_never_answers() -> None:
    wl = generate_workload(WorkloadConfig(rate=2.0, num_relqueries=8, max_requests=20, seed=4))
    texts = None
    for policy in ALL:
        res = serve(policy, wl)
        got = [[(r.id, r.text, r.output_tokens) for r in q.responses] for q in res.relqueries]
        texts = texts or got
        assert got == texts


# -- starvation (Eq. 13) and the tail rule ----------------------------------------------------
STARVE_WL = WorkloadConfig(rate=0.5, seed=2)
"""100 relQueries near the simulated engine's capacity (the bound itself is checked on random
traces in test_starvation.py)."""


@pytest.fixture(scope="module")
def starvation_runs():
    wl = generate_workload(STARVE_WL)
    out = {}
    for threshold in (None, 1.0, 0.5):
        out[threshold] = serve(relserve(starvation_threshold_s=threshold), wl).summary()
    return out


def test_no_unit_waiting_time_exceeds_the_threshold(starvation_runs) -> None:
    assert starvation_runs[None].max_unit_waiting_s > 1.0  # without it, some wait longer
    for threshold in (1.0, 0.5):  # >= the worst iteration (0.49 s): the bound is the threshold
        assert starvation_runs[threshold].max_unit_waiting_s <= threshold


def test_starting_relqueries_on_time_costs_little_mean(starvation_runs) -> None:
    # a start batch is one request per due relQuery: the mean moves by a few percent at most
    none = starvation_runs[None].mean_latency_s
    for threshold in (1.0, 0.5):
        assert starvation_runs[threshold].mean_latency_s < 1.05 * none


def test_tail_deadline_trades_mean_for_max() -> None:
    # Fig. 12's trade-off, from the tail rule: a tighter deadline, a lower max, a higher mean
    wl = generate_workload(WorkloadConfig(rate=0.7, seed=0))
    runs = {d: serve(relserve(tail_deadline_s=d), wl).summary() for d in (None, 60.0, 30.0)}
    none, loose, tight = runs[None], runs[60.0], runs[30.0]
    assert none.max_latency_s > loose.max_latency_s > tight.max_latency_s
    assert none.mean_latency_s < loose.mean_latency_s < tight.mean_latency_s


def test_scheduler_overhead_is_small_against_simulated_time() -> None:
    wl = generate_workload(WorkloadConfig(rate=0.7, num_relqueries=30, seed=1))
    policy = relserve()
    res = serve(policy, wl)
    o = policy.overhead()
    assert o["updater_s"] + o["arranger_s"] < 0.01 * res.makespan_s


def test_config_errors_name_values() -> None:
    with pytest.raises(ValueError, match="'middle'.*adaptive.*prefill.*decode"):
        ArrangerConfig("middle")
    with pytest.raises(ValueError, match="num_samples must be >= 1, got 0"):
        UpdaterConfig(num_samples=0)
    with pytest.raises(ValueError, match="starvation_threshold_s.*-1"):
        UpdaterConfig(starvation_threshold_s=-1)
    with pytest.raises(ValueError, match="tail_deadline_s must be > 0 or None, got 0"):
        UpdaterConfig(tail_deadline_s=0)
    with pytest.raises(ValueError, match="lookahead_iterations must be >= 1.*got 0.5"):
        UpdaterConfig(starvation_lookahead_iterations=0.5)
