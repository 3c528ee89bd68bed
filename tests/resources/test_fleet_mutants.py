"""Tests that go red on bugs planted in the fleet's planner and stealing (issue 34 item 7).

Written against public behaviour (`plan_fleet`'s output, `serve_fleet`'s order of service) so
they hold across reworks of how groups are found and balanced:

- a shared instruction longer than one block groups nothing: prompts that share only it are
  spread, prompts that share a long description beyond it stay on one replica;
- parts are placed longest first: the plan's makespan is within Graham's LPT bound
  (4/3 - 1/(3n)) of the optimum, a bound shortest-first placement breaks;
- a thief takes the victim's LAST unstarted part (the victim serves its queue from the front).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque

from hypothesis import example, given, settings
from hypothesis import strategies as st

from resources.openai.fleet import Replica, serve_fleet
from resources.openai.placement import Part, plan_fleet

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    instruction=st.integers(65, 400),
    movies=st.integers(4, 8),  # at least as many groups as replicas: none is worth cutting
    reviews=st.integers(2, 6),
    replicas=st.integers(2, 4),
)
@example(instruction=100, movies=6, reviews=7, replicas=3)
def test_a_long_shared_instruction_groups_nothing(instruction, movies, reviews, replicas):
    head = "Instruction: " + "i" * instruction + "\n"
    prompts = [
        f"{head}{LETTERS[m]}: " + f"plot of movie {m} " * 20 + f"| review {m}.{r}: " + "ok " * 5
        for m in range(movies)
        for r in range(reviews)
    ]
    plan = plan_fleet(prompts, replicas)
    where = {i: r for r, queue in enumerate(plan.queues) for part in queue for i in part.indices}
    assert sorted(where) == list(range(len(prompts)))
    for m in range(movies):  # a movie's rows share ~300 characters beyond the instruction
        assert len({where[m * reviews + r] for r in range(reviews)}) == 1, (m, plan.queues)
    # and the movies, sharing only the instruction, are spread over the replicas
    used = {where[i] for i in range(len(prompts))}
    assert len(used) == min(replicas, movies), plan.queues


def _optimum(masses: list[float], n: int) -> float:
    best = float("inf")
    for assignment in itertools.product(range(n), repeat=len(masses)):
        loads = [0.0] * n
        for mass, r in zip(masses, assignment, strict=True):
            loads[r] += mass
        best = min(best, max(loads))
    return best


@settings(max_examples=80, deadline=None, derandomize=True)
@given(
    lengths=st.lists(st.integers(50, 3000), min_size=3, max_size=7),
    replicas=st.integers(2, 3),
)
@example(lengths=[400] * 6 + [2400], replicas=2)
def test_parts_are_placed_longest_first(lengths, replicas):
    # one prompt per group: distinct from the first character on
    prompts = [chr(0x100 + k) * length for k, length in enumerate(lengths)]
    plan = plan_fleet(prompts, replicas)
    parts = [part for queue in plan.queues for part in queue]
    makespan = max(sum(p.mass for p in queue) for queue in plan.queues)
    bound = (4 / 3 - 1 / (3 * replicas)) * _optimum([p.mass for p in parts], replicas)
    assert makespan <= bound + 1e-6, (makespan, bound, [[p.mass for p in q] for q in plan.queues])


def test_a_thief_takes_the_victims_last_part() -> None:
    """Replica 0 holds six one-request parts and serves slowly; replica 1 has none and steals.
    Replica 0 serves from the front, so what replica 1 serves must be a tail of the queue,
    starting with the last part."""
    victim, thief = Replica(0, "http://victim"), Replica(1, "http://thief")
    victim.parts = deque((n, Part([n], n, 1.0)) for n in range(6))
    order: list[tuple[int, int]] = []

    async def serve(i: int, replica: Replica) -> bool:
        order.append((replica.index, i))
        await asyncio.sleep(0.05 if replica is victim else 0.001)
        return False

    async def main() -> None:
        await serve_fleet([victim, thief], serve, 1, asyncio.Event())

    asyncio.run(main())
    stolen = [i for r, i in order if r == 1]
    kept = [i for r, i in order if r == 0]
    assert sorted(stolen + kept) == list(range(6))
    assert stolen and stolen[0] == 5, order
    assert kept == list(range(len(kept))) and sorted(stolen) == list(range(len(kept), 6)), order


def test_a_dead_replicas_queued_lanes_move_to_the_live_one() -> None:
    """Replica 0's one part is cut into lanes of 2; its first request kills it: every queued
    lane (not only the one it was serving) is served by replica 1, each request once."""
    dead, live = Replica(0, "http://dead"), Replica(1, "http://live")
    dead.parts = deque([(0, Part(list(range(8)), 0, 8.0))])
    dead.cap = 2
    served: list[tuple[int, int]] = []

    async def serve(i: int, replica: Replica) -> bool:
        await asyncio.sleep(0.001)
        if replica is dead:
            dead.dead = "test: died"
            return True
        served.append((replica.index, i))
        return False

    asyncio.run(serve_fleet([dead, live], serve, 1, asyncio.Event()))
    assert sorted(i for _, i in served) == list(range(8)) and {r for r, _ in served} == {1}


def test_round_robin_repays_nothing_and_keys_survive_lone_surrogates() -> None:
    prompts = ["Q: \ud800 odd", "Q: fine", "Q: \udfff too"]
    plan = plan_fleet(prompts, 2, routing="round_robin")
    assert plan.repaid_tokens == 0
    assert [len(p.key) for q in plan.queues for p in q] == [16, 16, 16]
    assert len(plan_fleet(prompts, 2).queues) == 2  # affinity keys them too
