"""Property tests of the fleet plan (`resources.openai.placement`): every request assigned once, a
group cut only when it exceeds a fair share, order kept inside a replica, balance by mass."""

from __future__ import annotations

import math
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from resources.openai.placement import MAX_CUT_OVERHEAD, plan_fleet, prefix_groups

# GGR-like plans: an instruction, a "movie" block shared by neighbours, a unique review
movies = st.sampled_from(["a" * 70, "b" * 70, "c" * 300, "d" * 20])
rows = st.tuples(movies, st.text("xyz", min_size=40, max_size=400), st.integers(1, 8))


@st.composite
def plans(draw):
    picked = draw(st.lists(rows, min_size=12, max_size=80))
    picked.sort(key=lambda r: r[0])  # GGR puts a movie's rows together
    prompts = [f"Rate it. {movie} | #{k} {review}" for k, (movie, review, _) in enumerate(picked)]
    outputs = [out for _, _, out in picked]
    return prompts, outputs


@settings(max_examples=300, deadline=None)
@given(plans(), st.integers(1, 8), st.sampled_from(["affinity", "round_robin"]))
def test_every_request_once_in_order_inside_each_replica(plan_in, n: int, routing: str) -> None:
    prompts, outputs = plan_in
    plan = plan_fleet(prompts, n, routing=routing, outputs=outputs)
    assert len(plan.queues) == n
    flat = [i for queue in plan.queues for part in queue for i in part.indices]
    assert sorted(flat) == list(range(len(prompts)))  # every request exactly once
    for queue in plan.queues:
        served = [i for part in queue for i in part.indices]
        assert served == sorted(served)  # GGR order kept inside a replica
        for part in queue:  # a part is contiguous
            assert part.indices == list(range(part.indices[0], part.indices[-1] + 1))
    if routing == "round_robin":
        assert all(part.indices == [i] for i, part in enumerate(sorted(
            (p for q in plan.queues for p in q), key=lambda p: p.indices[0])))  # fmt: skip
        return
    groups = prefix_groups(prompts)
    whole: dict[int, float] = {}  # each group's mass, by the definition (uncached prompt)
    for i, p in enumerate(prompts):
        same = i > 0 and groups[i - 1] == groups[i]
        shared = len(os.path.commonprefix([prompts[i - 1], p])) if same else 0
        whole[groups[i]] = whole.get(groups[i], 0.0) + (len(p) - shared) / 4.0 + outputs[i]
    fair = sum(whole.values()) / n
    parts = [part for queue in plan.queues for part in queue]
    by_group: dict[int, list] = {}
    for part in parts:
        assert {groups[i] for i in part.indices} == {part.group}
        by_group.setdefault(part.group, []).append(part)
    assert sorted(by_group) == sorted(whole)
    for g, group_parts in by_group.items():
        if len(group_parts) > 1:  # cut only above the fair share, one routing key per group
            assert whole[g] > fair
            assert len({p.key for p in group_parts}) == 1
    assert plan.repaid_chars / 4.0 <= MAX_CUT_OVERHEAD * sum(whole.values()) + 1e-9


@settings(max_examples=200, deadline=None)
@given(plans(), st.integers(2, 8))
def test_longest_processing_time_first_is_balanced(plan_in, n: int) -> None:
    """LPT's bound: no replica carries more than the fair share plus its largest part."""
    prompts, outputs = plan_in
    plan = plan_fleet(prompts, n, outputs=outputs)
    parts = [part for queue in plan.queues for part in queue]
    if not parts:
        return
    fair = sum(p.mass for p in parts) / n
    biggest = max(p.mass for p in parts)
    for queue, load in zip(plan.queues, plan.loads, strict=True):
        assert math.isclose(load, sum(p.mass for p in queue))
        assert load <= fair + biggest + 1e-9


def test_a_group_continuing_a_chunk_goes_back_to_its_replica() -> None:
    movie = "Rate it. " + "m" * 200
    first = [f"{movie} | review {k}" for k in range(4)]
    other = [f"Rate it. {'o' * 200} | review {k}" for k in range(4)]
    # the previous chunk ended with this movie's rows on replica 2 of 3
    plan = plan_fleet(first + other, 3, tails=[None, None, first[0]])
    assert [p.indices for p in plan.queues[2]] == [[0, 1, 2, 3]]
    no_tails = plan_fleet(first + other, 3)
    assert [p.indices for p in no_tails.queues[2]] != [[0, 1, 2, 3]]


def test_a_group_is_not_cut_when_its_prefix_costs_more_than_the_cut_saves() -> None:
    movie = "Rate it. " + "m" * 4000  # a huge shared prefix, tiny reviews
    prompts = [f"{movie} | {k}" for k in range(8)] + ["Rate it. other"]
    plan = plan_fleet(prompts, 2)
    assert plan.repaid_chars == 0
    assert any(p.indices == list(range(8)) for q in plan.queues for p in q)


# -- serving a plan (`resources.openai.fleet.serve_fleet`) with replicas that fail ---------------


@settings(max_examples=200, deadline=None)
@given(
    plans(),
    st.integers(1, 4),
    st.integers(1, 3),
    st.data(),
)
def test_serve_fleet_ends_every_request_once_whatever_fails(plan_in, n, workers, data) -> None:
    """A fake `serve`: request i fails (retryably) at the replicas in `bad[i]`, a replica dies
    after `life[r]` requests. Like the engine, a failure moves to a live replica not failed at
    yet. Every request ends exactly once; never at a replica it failed at while an untried
    live one existed; and the run ends (no hang) with nothing left when a replica survives."""
    import asyncio

    from resources.openai.fleet import Replica, plan_caps, serve_fleet

    prompts, outputs = plan_in
    plan = plan_fleet(prompts, n, outputs=outputs)
    bad = {i: data.draw(st.sets(st.integers(0, n - 1), max_size=n)) for i in range(len(prompts))}
    life = [data.draw(st.integers(0, len(prompts))) for _ in range(n)]
    replicas = [Replica(r, f"r{r}") for r in range(n)]
    for replica, queue in zip(replicas, plan.queues, strict=True):
        replica.parts.extend((replica.index * 1000 + k, p) for k, p in enumerate(queue))
    plan_caps(replicas, workers, True)
    ended: list[int] = []
    failed_at: dict[int, set[int]] = {}
    stopped = asyncio.Event()

    async def serve(i: int, replica: Replica) -> bool:
        live = {r.index for r in replicas if r.dead is None}
        untried = live - failed_at.get(i, set())
        assert replica.index in untried or not untried  # avoided while another could serve
        await asyncio.sleep(0)  # in flight: other workers run, replicas may die
        live = {r.index for r in replicas if r.dead is None}
        if replica.served >= life[replica.index] and len(live) > 1:
            replica.dead = "died"
            return True
        if replica.index in bad[i]:
            failed_at.setdefault(i, set()).add(replica.index)
            if any(r.dead is None and r.index not in failed_at[i] for r in replicas):
                return True
        replica.served += 1
        ended.append(i)
        return False

    async def main() -> set[int]:
        return await asyncio.wait_for(serve_fleet(replicas, serve, workers, stopped), 10)

    in_flight = asyncio.run(main())
    assert in_flight == set()
    assert sorted(ended) == list(range(len(prompts)))  # each once, none lost


def _serve_with_speeds(delays: list[float], workers: int) -> tuple[list[int], list[int]]:
    """Serve 10 groups of 4 over replicas whose requests take `delays[r]` seconds; the
    requests each replica was planned and the requests each served."""
    import asyncio

    from resources.openai.fleet import Replica, plan_caps, serve_fleet

    prompts = [f"Rate it. {chr(97 + g) * 80} | {k}" for g in range(10) for k in range(4)]
    plan = plan_fleet(prompts, len(delays))
    replicas = [Replica(r, f"r{r}") for r in range(len(delays))]
    for replica, queue in zip(replicas, plan.queues, strict=True):
        replica.parts.extend((replica.index * 1000 + k, p) for k, p in enumerate(queue))
    plan_caps(replicas, workers, True)
    planned = [sum(len(p.indices) for p in queue) for queue in plan.queues]

    async def serve(i: int, replica) -> bool:
        await asyncio.sleep(delays[replica.index])
        replica.served += 1
        return False

    asyncio.run(serve_fleet(replicas, serve, workers, asyncio.Event()))
    return planned, [r.served for r in replicas]


def test_a_fast_replica_steals_from_a_slow_one_and_equal_ones_keep_their_plan() -> None:
    planned, served = _serve_with_speeds([0.0, 0.02], workers=2)
    assert served[0] > planned[0] and sum(served) == 40  # whole parts taken from the slow one
    for workers in (1, 4, 16):  # the first tasks to start never empty the others' queues
        planned, served = _serve_with_speeds([0.001, 0.001, 0.001], workers)
        assert served == planned, (workers, planned, served)
