"""vLLM v0's default scheduler: FCFS, prefill first, no chunked prefill, no hybrid batches.

Each iteration: admit waiting requests in order while the whole uncached prompt fits the
remaining token budget, a sequence slot is free and the KV pool keeps its 1% watermark; if any
was admitted, the batch is prefill only. Otherwise every running request decodes one token; when
a decode needs a block and none is free, the most recently admitted running request is preempted
(recompute) and goes back to the front of the waiting queue.
"""

from __future__ import annotations

from collections import deque

from resources.sim.policies.base import Batch, Policy, ScheduleContext, SimSeq
from resources.sim.policies.priority import decode_step, prefill_step


class VLLMv0Policy(Policy):
    name = "vllm-v0"
    register_at_schedule = False
    enable_chunked_prefill = False

    def schedule(
        self, waiting: deque[SimSeq], running: list[SimSeq], ctx: ScheduleContext
    ) -> Batch:
        return prefill_step(waiting, running, ctx) or decode_step(waiting, running, ctx)
