"""vLLM-SP: Eq. 6-7 once at arrival, vLLM v0 priority scheduling, and the shared queue."""

from __future__ import annotations

import pytest

from resources.engine import Request
from resources.sim import SimulatedEngine
from resources.sim.block_cache import BlockPool
from resources.sim.pem import LinearPredictors, static_priority
from resources.sim.policies import (
    ScheduleContext,
    SimSeq,
    StaticPriorityConfig,
    StaticPriorityPolicy,
    get_policy,
)
from resources.sim.policies.priority import RelQueryQueue, sort_running
from resources.sim.relquery import RelQuery
from tests.resources.sim.helpers import IntTokenizer, prompt


def rq(rid: str, first: int, n: int, arrival: float, length: int = 100, out: int = 20):
    reqs = [
        Request(f"{rid}/{i}", prompt(range(first + i * 1000, first + i * 1000 + length)), out)
        for i in range(n)
    ]
    return RelQuery(rid, reqs, arrival)


def engine(policy, blocks: int | None = None) -> SimulatedEngine:
    return SimulatedEngine(
        "A100-40GB", "opt-13b", policy, tokenizer=IntTokenizer(), num_gpu_blocks_override=blocks
    )


def test_queue_orders_relqueries_by_priority_then_arrival() -> None:
    q = RelQueryQueue()
    for i, (rid, arrival) in enumerate([("a", 0.0), ("a", 0.0), ("b", 1.0), ("c", 2.0)]):
        q.append(SimSeq(i, f"{rid}{i}", 10, [], 1, relquery_id=rid, arrival_s=arrival))
    assert [s.request_id for s in q] == ["a0", "a1", "b2", "c3"]
    q.set_priority("a", 5.0)
    q.set_priority("b", 1.0)
    q.set_priority("c", 1.0)
    assert [s.request_id for s in q] == ["b2", "c3", "a0", "a1"]
    assert q.popleft().request_id == "b2" and q.num_groups() == 2 and len(q) == 3
    first = q.popleft()
    q.appendleft(first)  # a preempted request goes back to the front of its relQuery
    assert q[0] is first and [s.request_id for s in q][:1] == ["c3"]
    running = [
        SimSeq(9, "a9", 10, [], 1, relquery_id="a"),
        SimSeq(8, "c8", 10, [], 1, relquery_id="c"),
    ]
    sort_running(running, q)
    assert [s.relquery_id for s in running] == ["c", "a"]


class SpyPolicy(StaticPriorityPolicy):
    """vLLM-SP that keeps its waiting queue, to read the priorities it assigned."""

    def new_waiting_queue(self) -> RelQueryQueue:
        self.queue = super().new_waiting_queue()
        return self.queue


def test_priority_is_eq6_7_computed_once_at_arrival() -> None:
    policy = SpyPolicy()
    eng = engine(policy)
    # submitted first but longer: a; submitted second and shorter: b
    res = eng.run_workload([rq("a", 0, 6, 0.0), rq("b", 100_000, 2, 0.0, length=40, out=5)])
    pred = LinearPredictors.fit(eng.coefficients, max_num_batched_tokens=2048)
    expected = {
        "a": static_priority([100] * 6, [20] * 6, pred),
        "b": static_priority([40] * 2, [5] * 2, pred),
    }
    # after the run the stored values are still the arrival-time ones: never updated
    assert policy.queue.priority == pytest.approx(expected)
    a, b = res.relqueries
    assert b.timing.finish_s < a.timing.finish_s


def test_identity_mapping_and_bad_mapping() -> None:
    assert StaticPriorityConfig("identity").mapping == "identity"
    with pytest.raises(ValueError, match="'quadratic'.*linear.*identity"):
        StaticPriorityConfig("quadratic")


def test_priority_preemption_evicts_lower_priority_running_requests() -> None:
    # a long relQuery fills a tiny KV cache; a short one arrives and must evict to start
    long, short = rq("long", 0, 12, 0.0, out=60), rq("short", 500_000, 1, 0.5, out=5)
    fcfs = engine("fcfs", blocks=64).run_workload([long, short])
    sp = engine("static-priority", blocks=64).run_workload([long, short])
    assert sp.relqueries[1].timing.latency_s < fcfs.relqueries[1].timing.latency_s
    assert sp.relqueries[1].timing.finish_s < sp.relqueries[0].timing.finish_s
    assert all(r.ok for q in sp.relqueries for r in q.responses)


def test_static_priority_batches_are_v0_batches() -> None:
    ctx = ScheduleContext(BlockPool(64), max_num_seqs=8, max_num_batched_tokens=40)
    policy = get_policy("static-priority")
    waiting = policy.new_waiting_queue()
    waiting.extend(
        [SimSeq(0, "w0", 30, [], 5, relquery_id="q"), SimSeq(1, "w1", 30, [], 5, relquery_id="q")]
    )
    ctx.coefficients = engine("fcfs").coefficients
    running: list[SimSeq] = []
    batch = policy.schedule(waiting, running, ctx)
    assert [(s.request_id, n) for s, n in batch] == [("w0", 30)]  # whole prompts, budget 40
