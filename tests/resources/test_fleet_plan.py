"""Property tests of the fleet plan (`resources.openai.placement`): every request assigned once,
groups in KV blocks of the engine's tokenizer beyond the fleet-wide prefix, a group cut only
when the balance it buys is worth more than the blocks it repays, balance in predicted seconds
(the cost model's), stealing only when it shortens the predicted makespan."""

from __future__ import annotations

import asyncio
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from resources.openai.fleet import Replica, measured_speeds, plan_caps, serve_fleet
from resources.openai.placement import CostRates, Part, plan_fleet, prefix_groups
from resources.sim.cost_model import BatchShape
from resources.sim.tokenizer import ApproxTokenizer

encode = ApproxTokenizer().encode
BS = 16
CRITICS = ["Ann Lee", "Bob Marsh of Variety", "Carla Dupont-Smith", "Dan O'Brien of Slate"]
PUBLISHERS = ["NYT", "The Guardian", "Rolling Stone Magazine", "Indiewire"]
WORDS = ["plot", "acting", "score", "pacing", "cast", "dull", "brilliant", "long", "funny"]


@st.composite
def plans(draw):
    """GGR-like plans: an instruction of any length (to 400 characters) that every prompt
    shares, one or two short fields (a critic, a publisher: 7-25 characters), a long distinct
    text; sorted, as GGR puts equal leading fields together."""
    instruction = "Does the critic " + "x" * draw(st.integers(0, 400))
    two = draw(st.booleans())
    rows = draw(st.lists(st.tuples(st.sampled_from(CRITICS), st.sampled_from(PUBLISHERS),
                                   st.lists(st.sampled_from(WORDS), min_size=3, max_size=90),
                                   st.integers(1, 64)), min_size=12, max_size=40))  # fmt: skip
    prompts = sorted(
        f"{instruction} {c}{' of ' + p if two else ''} praise it? #{k} {' '.join(text)}"
        for k, (c, p, text, _) in enumerate(rows)
    )
    return prompts, [out for *_, out in rows]


def _hits(queue_prompts: list[list[int]]) -> int:
    """Prefix-cache hit tokens of one replica serving `queue_prompts` in order (unbounded
    cache, whole blocks, never the last token)."""
    seen: list[list[int]] = []
    hits = 0
    for t in queue_prompts:
        best = 0
        for s in seen:
            n = 0
            while n < min(len(s), len(t)) and s[n] == t[n]:
                n += 1
            best = max(best, n)
        hits += min(best, len(t) - 1) // BS * BS
        seen.append(t)
    return hits


@settings(max_examples=60, deadline=None)
@given(plans(), st.integers(1, 8), st.sampled_from(["affinity", "round_robin"]))
def test_every_request_once_in_order_inside_each_replica(plan_in, n: int, routing: str) -> None:
    prompts, outputs = plan_in
    plan = plan_fleet(prompts, n, routing=routing, outputs=outputs)
    assert len(plan.queues) == n
    flat = [i for queue in plan.queues for part in queue for i in part.indices]
    assert sorted(flat) == list(range(len(prompts)))  # every request exactly once
    for queue, load in zip(plan.queues, plan.loads, strict=True):
        served = [i for part in queue for i in part.indices]
        assert served == sorted(served)  # GGR order kept inside a replica
        assert math.isclose(load, sum(p.mass for p in queue))
        for part in queue:  # a part is contiguous
            assert part.indices == list(range(part.indices[0], part.indices[-1] + 1))


@settings(max_examples=60, deadline=None)
@given(plans(), st.integers(2, 8))
def test_affinity_loses_only_the_shared_instruction_and_the_repaid_cuts(plan_in, n) -> None:
    """Cluster hits >= one server's, less the fleet-wide prefix each further replica computes
    once and the blocks a cut group repays: no run of prompts sharing a block beyond the
    instruction is split unless the planner chose to cut it (the 64-character rule split
    critics and publishers of ~50 characters apart and went red here)."""
    prompts, outputs = plan_in
    tokens = [encode(p) for p in prompts]
    plan = plan_fleet(prompts, n, outputs=outputs)
    common = min(len(t) for t in tokens)
    for t in tokens[1:]:
        common = min(common, next((k for k, (a, b) in enumerate(zip(tokens[0], t, strict=False))
                                   if a != b), min(len(t), len(tokens[0]))))  # fmt: skip
    one = _hits(tokens)
    cluster = sum(_hits([tokens[i] for p in q for i in p.indices]) for q in plan.queues)
    assert cluster >= one - (n - 1) * (common // BS * BS) - plan.repaid_tokens


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 600), st.lists(st.sampled_from(WORDS), min_size=2, max_size=40))
def test_the_instruction_every_prompt_shares_groups_nothing(length: int, text) -> None:
    """However long the shared instruction, rows that share nothing beyond it are groups of
    one (a grouping that counted the instruction made every table one group: red)."""
    instruction = "Classify. " + "y" * length
    prompts = [f"{instruction} #{k} {' '.join(text)}" for k in range(12)]
    assert prefix_groups(prompts) == list(range(12))


@settings(max_examples=60, deadline=None)
@given(plans(), st.integers(2, 8))
def test_a_group_is_cut_only_when_the_balance_is_worth_the_repaid_blocks(plan_in, n) -> None:
    prompts, outputs = plan_in
    plan = plan_fleet(prompts, n, outputs=outputs)
    whole = plan_fleet(prompts, 1, outputs=outputs)  # one replica: nothing is ever cut
    groups = {p.group: p for p in whole.queues[0]}
    fair = sum(p.mass for p in groups.values()) / n
    by_group: dict[int, list[Part]] = {}
    for part in (p for q in plan.queues for p in q):
        by_group.setdefault(part.group, []).append(part)
    assert sorted(by_group) == sorted(groups)
    for g, parts in by_group.items():
        if len(parts) > 1:
            extra = sum(p.mass for p in parts) - groups[g].mass
            assert groups[g].mass > fair and 0 <= extra < groups[g].mass - fair
            assert len({p.key for p in parts}) == 1  # one routing key per group


def test_predicted_seconds_are_the_cost_models_for_a_batch() -> None:
    """B identical requests run as one batch by the cost model (one prefill iteration, then
    `out` decode iterations) take what `CostRates` predicts for them at batch B, within 5%;
    an output token weighs several prefill tokens (one weight read per iteration)."""
    rates = CostRates.for_deployment("L4", "llama-2-7b", batch=16)
    c, prompt, out = rates.coefficients, 300, 16
    batch = c.time(BatchShape(prefill=[(prompt, 0)] * 16)) + sum(
        c.time(BatchShape(decode=[prompt + k] * 16)) for k in range(out)
    )
    own, shared = rates.request(prompt, prompt, out)
    assert math.isclose(16 * own + shared, batch, rel_tol=0.05)
    decode_token = sum(rates.request(prompt, 0, 1)) - sum(rates.request(prompt, 0, 0))
    prefill_token = (sum(rates.request(prompt, 101, 0)) - sum(rates.request(prompt, 1, 0))) / 100
    assert decode_token > 5 * prefill_token


def test_a_slow_replica_is_planned_less_work() -> None:
    prompts = [f"Rate it. #{k} " + "word " * 50 for k in range(80)]
    plan = plan_fleet(prompts, 2, outputs=[16] * 80, speeds=[1.0, 0.25])
    biggest = max(p.mass for q in plan.queues for p in q)
    assert abs(plan.loads[1] - 0.25 * plan.loads[0]) <= biggest
    one = Replica(0, "a", served=4, served_s=8.0, busy_wall_s=2.0)
    slow = Replica(1, "b", served=4, served_s=8.0, busy_wall_s=8.0)
    assert measured_speeds([one, slow, Replica(2, "c")]) == [1.0, 0.25, None]


def test_a_group_continuing_a_chunk_goes_back_to_its_replica() -> None:
    movie = "Rate it. " + "m " * 200
    first = [f"{movie} | review {k}" for k in range(4)]
    other = [f"Rate it. {c * 200} | review {k}" for c in ("o ", "p ") for k in range(4)]
    # the previous chunk ended with this movie's rows on replica 2 of 3
    plan = plan_fleet(first + other, 3, outputs=[16] * 12, tails=[None, None, first[0]])
    assert [p.indices for p in plan.queues[2]] == [[0, 1, 2, 3]]
    no_tails = plan_fleet(first + other, 3, outputs=[16] * 12)
    assert [p.indices for p in no_tails.queues[2]] != [[0, 1, 2, 3]]


def test_a_group_is_not_cut_when_its_prefix_costs_more_than_the_cut_saves() -> None:
    movie = "Rate it. " + "m " * 2000  # a huge shared prefix, tiny reviews
    prompts = [f"{movie} | {k}" for k in range(8)] + ["Rate it. other"]
    plan = plan_fleet(prompts, 2, outputs=[1] * 9)
    assert plan.repaid_tokens == 0
    assert any(p.indices == list(range(8)) for q in plan.queues for p in q)


# -- serving a plan (`resources.openai.fleet.serve_fleet`): stealing --------------------------


def _steal(victim_left_s: float, waiting: int) -> dict[int, int]:
    """Replica 0 serves one short request then idles; replica 1 (2 tasks) holds a two-lane
    part of `victim_left_s` predicted seconds, then `waiting` parts (requests 3, 4, ...: one
    request each, 10 s alone, 5 s at a batch of 2). Which replica served each request."""
    replicas = [Replica(0, "r0"), Replica(1, "r1")]
    replicas[0].parts.append((0, Part([0], 0, 0.1, 0.0)))
    replicas[1].parts.append((1, Part([1, 2], 1, victim_left_s, 0.0)))
    replicas[1].parts.extend((2 + k, Part([3 + k], 2 + k, 0.0, 10.0)) for k in range(waiting))
    plan_caps(replicas, 2, True)
    replicas[1].cap = 1
    where: dict[int, int] = {}

    async def serve(i: int, replica: Replica) -> bool:
        await asyncio.sleep(0.01 if i == 0 else 0.05)
        where[i] = replica.index
        return False

    asyncio.run(serve_fleet(replicas, serve, 2, asyncio.Event()))
    return where


def test_a_thief_takes_the_last_part_and_only_when_it_ends_it_sooner() -> None:
    """Replica 1 has 20 s of predicted work left (two waiting parts, 5 s each at its batch of
    2, plus 10 s on its running part): replica 0 ends a waiting part alone in 10 s, sooner,
    so it takes one: the LAST, not the next. With one part waiting (5 s) and 1 s left on the
    running part, replica 0 would end it at 10 s, after replica 1 ends everything (6 s): it
    stays. With 8 s left (13 s in all) it moves (red: taking the next part; stealing without
    the predicted-makespan test)."""
    where = _steal(victim_left_s=10.0, waiting=2)
    assert where[4] == 0 and where[3] == 1
    assert _steal(victim_left_s=1.0, waiting=1)[3] == 1
    assert _steal(victim_left_s=8.0, waiting=1)[3] == 0


def _order(lanes_per_worker: int) -> list[tuple[str, int]]:
    """One replica, 4 tasks, one part of 8 requests cut into lanes of 2: the order in which
    requests start and end."""
    replica = Replica(0, "r0")
    replica.parts.append((0, Part(list(range(8)), 0, 1.0, 1.0)))
    plan_caps([replica], 4, True, lanes_per_worker)
    replica.cap = 2
    events: list[tuple[str, int]] = []

    async def serve(i: int, r: Replica) -> bool:
        events.append(("start", i))
        await asyncio.sleep(0.01)
        events.append(("end", i))
        return False

    asyncio.run(serve_fleet([replica], serve, 4, asyncio.Event()))
    return events


def test_followers_start_after_the_first_request_is_sent_or_answered() -> None:
    """A shared cache (several lanes per task): the part's first request starts first and
    the other lanes start before it is answered (they share its step). A per-slot cache:
    nothing else starts before it is answered (red: the event set before the first request
    started, and followers that waited for the answer on a shared cache)."""
    shared = _order(4)
    assert shared[0] == ("start", 0)
    assert shared.index(("start", 2)) < shared.index(("end", 0))
    per_slot = _order(1)
    assert per_slot[:2] == [("start", 0), ("end", 0)]
