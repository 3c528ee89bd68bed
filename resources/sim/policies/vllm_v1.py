"""vLLM v1's default scheduler (Sarathi-style): running requests first, then chunked prefill.

Each iteration, with a token budget of `max_num_batched_tokens`: every running request (in
admission order) gets its remaining tokens, capped by the budget (a decode needs 1, a partly
prefilled prompt its next chunk); if its blocks cannot be allocated, the last running request is
preempted (recompute, back to the waiting front) until it fits or it is itself the victim. Then,
only if nothing was preempted this iteration, waiting requests are admitted in order, each with
its uncached tokens chunked to the remaining budget, while a sequence slot is free and the KV
cache has blocks for the request's whole sequence (vLLM's `scheduler_reserve_full_isl`, on by
default), not just for its first chunk.
"""

from __future__ import annotations

from collections import deque

from resources.sim.block_cache import BLOCK_SIZE
from resources.sim.policies.base import Batch, Policy, ScheduleContext, SimSeq

__all__ = ["VLLMv1Policy", "v1_step"]


class VLLMv1Policy(Policy):
    name = "vllm-v1"

    def schedule(
        self, waiting: deque[SimSeq], running: list[SimSeq], ctx: ScheduleContext
    ) -> Batch:
        return v1_step(waiting, running, ctx)


def v1_step(waiting, running: list[SimSeq], ctx: ScheduleContext) -> Batch:
    """One vLLM v1 iteration over the queues as they stand (see the module docstring); the
    waiting queue may be any queue with the deque operations (`base`), e.g. a priority one."""
    budget = ctx.max_num_batched_tokens
    batch: Batch = []
    preempted = False
    i = 0
    while i < len(running) and budget > 0:
        seq = running[i]
        num_new = min(seq.num_tokens - seq.num_computed, budget)
        scheduled = True
        while not ctx.allocate(seq, num_new):
            victim = running.pop()
            ctx.preempt(victim)
            waiting.appendleft(victim)
            preempted = True
            if victim is seq:
                scheduled = False
                break
        if not scheduled:
            break
        batch.append((seq, num_new))
        budget -= num_new
        i += 1
    if preempted:
        return batch
    while waiting and budget > 0 and len(running) < ctx.max_num_seqs:
        seq = waiting[0]
        computed = ctx.lookup(seq)
        num_new = min(seq.num_tokens - len(computed) * BLOCK_SIZE, budget)
        if not ctx.allocate(seq, num_new, computed, full_sequence_must_fit=True):
            break
        waiting.popleft()
        running.append(seq)
        seq.record_first_hit()
        batch.append((seq, num_new))
        budget -= num_new
    return batch
