"""Who is preempted, and how many: the victim choices of the policies called directly on small
hand-built queues (every request its own blocks, no prefix sharing), written for the
survivors of the first mutation run (benchmarks/results/mutation.md)."""

from __future__ import annotations

from collections import deque

import pytest

from resources.sim.block_cache import BLOCK_SIZE, BlockPool
from resources.sim.policies.base import ScheduleContext, SimSeq
from resources.sim.policies.priority import RelQueryQueue, decode_step, priority_preemption
from resources.sim.policies.relserve import start_step
from resources.sim.policies.relserve_v1 import make_room
from resources.sim.policies.vllm_v1 import v1_step


def make_seq(index: int, rid: str, blocks: int) -> SimSeq:
    """A request of `blocks` full blocks of its own (hashes no other request shares)."""
    hashes = [1000 * (index + 1) + k for k in range(blocks + 4)]
    return SimSeq(index, f"q{index}", blocks * BLOCK_SIZE, hashes, 4, relquery_id=rid)


def queues(
    ctx: ScheduleContext, running_sizes: tuple[int, ...], head_sizes: tuple[int, ...]
) -> tuple[RelQueryQueue, list[SimSeq], list[str]]:
    """Running requests of relQueries r0, r1, ... holding `running_sizes` blocks each (admitted
    through the queue, in that order), and one waiting request in each of relQueries d0, d1,
    ... of `head_sizes` blocks, all due."""
    queue = RelQueryQueue()
    running = []
    for i, blocks in enumerate(running_sizes):
        seq = make_seq(i, f"r{i}", blocks)
        queue.append(seq)
        queue.pop_first(seq.relquery_id)
        assert ctx.allocate(seq, seq.num_tokens)
        seq.num_computed = seq.num_tokens
        running.append(seq)
    for i, blocks in enumerate(head_sizes):
        queue.append(make_seq(100 + i, f"d{i}", blocks))
    return queue, running, [f"d{i}" for i in range(len(head_sizes))]


def context(
    usable_blocks: int, max_num_seqs: int = 8, watermark: int = 0, budget: int = 8192
) -> ScheduleContext:
    return ScheduleContext(
        BlockPool(usable_blocks + 1), max_num_seqs, budget, watermark_blocks=watermark
    )


def test_make_room_preempts_the_tail_until_the_head_fits_above_the_watermark() -> None:
    ctx = context(8, watermark=1)
    waiting, running, due = queues(ctx, (2, 2, 2), (3,))  # 2 free, 1 of them the watermark's
    victim = running[-1]
    assert make_room(waiting, running, ctx, due) == 1
    assert [s.relquery_id for s in running] == ["r0", "r1"]
    assert victim.blocks == [] and victim.num_computed == 0 and victim.num_preemptions == 1
    assert victim in list(waiting) and ctx.num_preemptions == 1
    assert ctx.pool.num_free == 4


def test_make_room_counts_the_sequence_slots() -> None:
    ctx = context(64, max_num_seqs=3)  # blocks plenty: only the slots bind
    waiting, running, due = queues(ctx, (1, 1, 1), (1,))
    assert make_room(waiting, running, ctx, due) == 1
    assert [s.relquery_id for s in running] == ["r0", "r1"]


def test_make_room_fits_every_due_head_together() -> None:
    ctx = context(8)
    waiting, running, due = queues(ctx, (2, 2, 2), (2, 2))  # 2 free, 4 needed together
    assert make_room(waiting, running, ctx, due) == 1
    assert [s.relquery_id for s in running] == ["r0", "r1"]


def test_make_room_does_nothing_when_the_heads_fit() -> None:
    ctx = context(8)
    waiting, running, due = queues(ctx, (2, 2), (2, 2))
    assert make_room(waiting, running, ctx, due) == 0
    assert len(running) == 2 and ctx.num_preemptions == 0


def test_make_room_counts_every_victim() -> None:
    ctx = context(5)
    waiting, running, due = queues(ctx, (1, 1, 1, 1), (3,))  # 1 free, 3 needed
    assert make_room(waiting, running, ctx, due) == 2
    assert [s.relquery_id for s in running] == ["r0", "r1"]


def prioritized(
    ctx: ScheduleContext, running_sizes: tuple[int, ...], head_blocks: int, head_priority: float
) -> tuple[RelQueryQueue, list[SimSeq]]:
    """Running r0, r1, ... at priorities 0, 1, ... (sorted, as `sort_running` leaves them), and
    a waiting head of `head_blocks` blocks at `head_priority`."""
    waiting, running, _ = queues(ctx, running_sizes, (head_blocks,))
    for i in range(len(running_sizes)):
        waiting.set_priority(f"r{i}", float(i))
    waiting.set_priority("d0", head_priority)
    waiting.reorder()
    return waiting, running


def test_priority_preemption_evicts_lower_priorities_from_the_tail() -> None:
    ctx = context(6)
    waiting, running = prioritized(ctx, (2, 2, 2), 4, 0.5)  # nothing free, 4 needed
    r0, r1, r2 = running
    assert priority_preemption(waiting, running, ctx) == 2
    assert running == [r0]
    assert (r1.num_preemptions, r2.num_preemptions, r0.num_preemptions) == (1, 1, 0)
    assert r1 in list(waiting) and r2 in list(waiting)
    assert ctx.pool.num_free == 4


def test_priority_preemption_stops_at_an_equal_or_higher_priority() -> None:
    ctx = context(6)
    waiting, running = prioritized(ctx, (2, 2, 2), 4, 1.0)
    assert priority_preemption(waiting, running, ctx) == 1  # r2 only: r1's 1.0 is not above
    assert [s.relquery_id for s in running] == ["r0", "r1"]


def test_priority_preemption_stops_once_the_head_fits() -> None:
    ctx = context(6)
    waiting, running = prioritized(ctx, (2, 2, 2), 2, 0.5)
    assert priority_preemption(waiting, running, ctx) == 1
    assert [s.relquery_id for s in running] == ["r0", "r1"]
    ctx = context(64, max_num_seqs=3)  # blocks plenty: the slots bind
    waiting, running = prioritized(ctx, (1, 1, 1), 1, 0.5)
    assert priority_preemption(waiting, running, ctx) == 1


def test_priority_preemption_without_need_or_queue_does_nothing() -> None:
    ctx = context(8)
    waiting, running = prioritized(ctx, (2, 2), 2, 0.5)  # fits already
    assert priority_preemption(waiting, running, ctx) == 0
    assert priority_preemption(RelQueryQueue(), running, ctx) == 0
    assert len(running) == 2 and ctx.num_preemptions == 0


def test_priority_preemption_keeps_the_watermark_free() -> None:
    ctx = context(6, watermark=1)
    waiting, running = prioritized(ctx, (2, 2), 2, 0.5)  # 2 free, 1 of them the watermark's
    assert priority_preemption(waiting, running, ctx) == 1
    assert [s.relquery_id for s in running] == ["r0"]


def test_priority_preemption_counts_a_cached_prefix_against_the_token_budget() -> None:
    """The head's 80 tokens start with r0's four cached blocks: 16 tokens to compute, exactly
    the budget, and one new block of the four free: it fits, nobody is preempted."""
    ctx = context(10, budget=16)
    waiting, running = prioritized(ctx, (4, 2), 5, 0.5)
    head = waiting[0]
    head.hashes = running[0].hashes[:4] + head.hashes
    ctx.pool.register(running[0].blocks, running[0].hashes)
    assert len(ctx.lookup(head)) == 4
    assert priority_preemption(waiting, running, ctx) == 0
    assert len(running) == 2


def decoding(ctx: ScheduleContext, *sizes: int) -> list[SimSeq]:
    """Running requests holding `sizes` full blocks, each with one generated token to compute
    (so its next step needs a new block)."""
    running = []
    for i, blocks in enumerate(sizes):
        seq = make_seq(i, f"r{i}", blocks)
        assert ctx.allocate(seq, seq.num_tokens)
        seq.num_computed = seq.num_tokens
        seq.num_tokens += 1
        seq.generated = 1
        running.append(seq)
    return running


@pytest.mark.parametrize("step", [decode_step, v1_step])
def test_a_decode_without_a_block_preempts_the_tail(step) -> None:
    ctx = context(7)
    a, b, c = running = decoding(ctx, 2, 2, 2)  # 1 free: a takes it, b needs c's
    waiting: deque[SimSeq] = deque([make_seq(9, "w", 1)])
    batch = step(waiting, running, ctx)
    assert batch == [(a, 1), (b, 1)]
    assert running == [a, b] and list(waiting)[0] is c and len(waiting) == 2
    assert (a.num_preemptions, b.num_preemptions, c.num_preemptions) == (0, 0, 1)
    assert c.blocks == [] and ctx.num_preemptions == 1


@pytest.mark.parametrize("step", [decode_step, v1_step])
def test_a_decode_that_is_the_tail_preempts_itself(step) -> None:
    ctx = context(4)
    a, b = running = decoding(ctx, 2, 2)  # nothing free
    waiting: deque[SimSeq] = deque()
    assert step(waiting, running, ctx) == [(a, 1)]  # b's two blocks make room for a
    assert running == [a] and list(waiting) == [b]
    ctx = context(2)
    (a,) = running = decoding(ctx, 2)
    waiting = deque()
    assert step(waiting, running, ctx) == []
    assert running == [] and list(waiting) == [a] and a.num_preemptions == 1


def test_start_step_admits_due_heads_while_the_budget_and_slots_last() -> None:
    ctx = context(64, budget=64)
    waiting, running, due = queues(ctx, (1,), (2, 2, 1))  # 32 + 32 tokens fill the budget
    d0, d1 = list(waiting)[:2]
    assert start_step(waiting, running, ctx, due, evict=False) == [(d0, 32), (d1, 32)]
    assert [s.relquery_id for s in running] == ["r0", "d0", "d1"]
    ctx = context(64, max_num_seqs=3)
    waiting, running, due = queues(ctx, (1, 1), (1, 1))  # one slot left
    d0 = list(waiting)[0]
    assert start_step(waiting, running, ctx, due, evict=False) == [(d0, 16)]
    assert len(running) == 3 and ctx.num_preemptions == 0


def test_start_step_preempts_the_tail_for_a_due_head_but_never_its_own_batch() -> None:
    ctx = context(6)
    waiting, running, due = queues(ctx, (2, 2), (2, 2))  # 2 free: d0 fits, d1 needs r1's
    r0, r1 = running
    d0, d1 = list(waiting)[:2]
    assert start_step(waiting, running, ctx, due, evict=True) == [(d0, 32), (d1, 32)]
    assert running == [r0, d0, d1] and r1.num_preemptions == 1
    ctx = context(3)
    waiting, running, due = queues(ctx, (1,), (2, 2))  # r0's block is not enough for d1
    r0 = running[0]
    d0 = list(waiting)[0]
    assert start_step(waiting, running, ctx, due, evict=True) == [(d0, 32)]
    assert running == [d0] and r0.num_preemptions == 1


def test_start_step_keeps_the_watermark_free() -> None:
    ctx = context(5, watermark=1)
    waiting, running, due = queues(ctx, (2,), (3,))  # 3 free, 1 of them the watermark's
    assert start_step(waiting, running, ctx, due, evict=False) == []
    d0 = list(waiting)[0]
    assert start_step(waiting, running, ctx, due, evict=True) == [(d0, 48)]
    assert running == [d0]


def test_start_step_counts_the_cached_prefix_left_after_an_eviction() -> None:
    """d0's first two blocks are r1's: evicting r1 leaves them cached (free, evictable), so d0
    still computes only its last 32 tokens, once r0 is evicted too for room."""
    ctx = context(5)
    waiting, running, due = queues(ctx, (2, 2), (4,))  # 1 free
    r0, r1 = running
    d0 = list(waiting)[0]
    d0.hashes = r1.hashes[:2] + d0.hashes
    assert start_step(waiting, running, ctx, due, evict=True) == [(d0, 32)]
    assert running == [d0] and d0.num_computed == 32
    assert (r0.num_preemptions, r1.num_preemptions) == (1, 1)


def test_preempt_forgets_the_blocks_and_counts_every_preemption() -> None:
    ctx = context(8)
    (seq,) = running_of = decoding(ctx, 2)
    for n in (1, 2):
        ctx.preempt(running_of[0])
        assert (seq.blocks, seq.num_computed, seq.num_registered) == ([], 0, 0)
        assert seq.num_preemptions == n and ctx.num_preemptions == n
        assert ctx.allocate(seq, seq.num_tokens)


def test_v1_step_stops_when_the_budget_is_spent() -> None:
    ctx = context(8, budget=1)
    a, _ = running = decoding(ctx, 1, 1)
    assert v1_step(deque(), running, ctx) == [(a, 1)]


def test_start_step_keeps_the_hit_reported_at_first_scheduling() -> None:
    ctx = context(5)
    waiting, running, due = queues(ctx, (2, 2), (4,))
    d0 = list(waiting)[0]
    d0.hashes = running[1].hashes[:2] + d0.hashes
    d0.cached_tokens = 0  # first scheduled before, without a hit, then preempted
    start_step(waiting, running, ctx, due, evict=True)
    assert d0.num_computed == 32 and d0.cached_tokens == 0


def test_v1_step_keeps_the_hit_reported_at_first_scheduling() -> None:
    """vLLM sets `num_cached_tokens` only the first time a request is scheduled: a request first
    admitted without a hit (0), preempted, and re-admitted onto cached blocks still reports 0."""
    ctx = context(12)
    waiting, running, _ = queues(ctx, (2, 2), (4,))
    d0 = list(waiting)[0]
    d0.hashes = running[1].hashes[:2] + d0.hashes
    d0.cached_tokens = 0
    v1_step(deque([d0]), running, ctx)
    assert d0 in running and d0.num_computed == 32 and d0.cached_tokens == 0


def test_v1_step_records_the_hit_at_first_scheduling() -> None:
    ctx = context(12)
    waiting, running, _ = queues(ctx, (2, 2), (4,))
    d0 = list(waiting)[0]
    d0.hashes = running[1].hashes[:2] + d0.hashes
    assert d0.cached_tokens < 0  # never scheduled
    v1_step(deque([d0]), running, ctx)
    assert d0.num_computed == 32 and d0.cached_tokens == 32
