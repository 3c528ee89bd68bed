"""RelServe (relserve.txt §4): the Dynamic Priority Updater and the Adaptive Batch Arranger on
vLLM v0's priority scheduler (the same code base as `static-priority`, as in the paper).

Each iteration (Fig. 6, steps 2-4):
1. the updater (`updater.DynamicPriorityUpdater`) refreshes every relQuery's priority (Eq. 8-13);
2. both queues are ordered by (priority, arrival) (`priority.RelQueryQueue`, `sort_running`);
3. the arranger (`arranger.AdaptiveBatchArranger`) forms the prefill candidate (one relQuery,
   whole prompts) and decides prefill or decode (Eq. 14-17). RelServe's "preemption" pauses
   the running relQueries' decoding (§4.3); it does not evict their KV cache. With a starvation
   threshold, an iteration with due relQueries (Eq. 13, `DynamicPriorityUpdater.due`) is a
   *start batch* instead: the first waiting request of every due relQuery, earliest deadline
   first, while the token budget lasts, evicting lower-priority running requests (recompute)
   when KV blocks or sequence slots are short (`RelServeConfig.enable_starvation_preemption`);
4. the chosen batch is formed with vLLM v0's steps (`priority.prefill_step` / `decode_step`).

5. the updater's bookkeeping for the next iteration (`DynamicPriorityUpdater.after_batch`).

Invariants: the batch is a prefill batch or a decode batch, never both; budgets, watermark and
cache are vLLM v0's (as `fcfs` and `static-priority`); policies change timing, never answers.
`overhead()` reports the wall seconds of the updater and of the arranger in the latest run, and
apart from them the ordering of both queues by priority (`queue_sort_s`: vLLM's priority
scheduler does it for `static-priority` too; relserve.txt Fig. 6 step 2 puts it in the
Scheduler, not in the DPU or the ABA).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from resources.sim.block_cache import BLOCK_SIZE
from resources.sim.policies.arranger import AdaptiveBatchArranger, ArrangerConfig
from resources.sim.policies.base import Batch, Policy, ScheduleContext, SimSeq
from resources.sim.policies.priority import RelQueryQueue, decode_step, prefill_step, sort_running
from resources.sim.policies.updater import DynamicPriorityUpdater, UpdaterConfig

__all__ = ["RelServeConfig", "RelServePolicy"]


@dataclass(frozen=True)
class RelServeConfig:
    """Settings of RelServe."""

    updater: UpdaterConfig = field(default_factory=UpdaterConfig)
    """Dynamic Priority Updater settings (sampling, reuse, starvation threshold)."""
    arranger: ArrangerConfig = field(default_factory=ArrangerConfig)
    """Adaptive Batch Arranger settings (the transitional-case arrangement)."""
    enable_starvation_preemption: bool = True
    """Let a due relQuery's first request evict lower-priority running requests when KV blocks
    or sequence slots are short (recompute, as vLLM's priority preemption)."""


class RelServePolicy(Policy):
    """RelServe (see the module docstring)."""

    name = "relserve"
    register_at_schedule = False
    enable_chunked_prefill = False

    def __init__(self, config: RelServeConfig | None = None) -> None:
        self.config = config or RelServeConfig()
        self.updater = DynamicPriorityUpdater(self.config.updater)
        self.arranger = AdaptiveBatchArranger(self.config.arranger)
        self.arranger.lookup = self.updater.lookup
        self.cases: dict[str, int] = {}
        """Arranger decisions of the latest run by case ("internal/prefill", ...)."""
        self._arranger_s = 0.0
        self._queue_s = 0.0

    def new_waiting_queue(self) -> RelQueryQueue:
        """Start a run: a fresh queue, the updater's state and the counters reset."""
        self.updater.start_run()
        self.cases = {}
        self._arranger_s = 0.0
        self._queue_s = 0.0
        return RelQueryQueue()

    def overhead(self) -> dict[str, float]:
        return {
            "updater_s": self.updater.seconds,
            "arranger_s": self._arranger_s,
            "queue_sort_s": self._queue_s,
            "num_pem": float(self.updater.num_pem),
            "num_reused": float(self.updater.num_reused),
        }

    def schedule(
        self, waiting: RelQueryQueue, running: list[SimSeq], ctx: ScheduleContext
    ) -> Batch:
        updater = self.updater
        updater.update(waiting, running, ctx)
        t0 = time.perf_counter()
        resorted = sort_running(running, waiting)
        waiting.reorder()
        t1 = time.perf_counter()
        self._queue_s += t1 - t0
        arranger = self.arranger
        due = updater.due()
        if due:
            batch = start_step(waiting, running, ctx, due, self.config.enable_starvation_preemption)
            if batch:
                self.cases["start"] = self.cases.get("start", 0) + 1
                self._arranger_s += time.perf_counter() - t1
                updater.after_batch("prefill", batch, running, ctx, True)
                return batch
        decision = arranger.decide(
            waiting, running, ctx, updater.predictors(ctx), decoding=updater.decoding
        )
        cases = self.cases
        cases[decision.key] = cases.get(decision.key, 0) + 1
        self._arranger_s += time.perf_counter() - t1
        if decision.kind == "prefill":
            assert decision.candidate is not None
            rid = decision.candidate.relquery_id
            batch = prefill_step(waiting, running, ctx, relquery_id=rid)
            kind = "prefill"
            if not batch:
                batch, kind = decode_step(waiting, running, ctx), "decode"
        else:
            batch, kind = decode_step(waiting, running, ctx), "decode"
            if not batch:
                batch, kind = prefill_step(waiting, running, ctx), "prefill"
        updater.after_batch(kind, batch, running, ctx, resorted)
        return batch


def start_step(
    waiting: RelQueryQueue,
    running: list[SimSeq],
    ctx: ScheduleContext,
    due: list[str],
    evict: bool,
) -> Batch:
    """A prefill batch of the first waiting request of each relQuery in `due` (in that order)
    while the token budget lasts. When KV blocks (with vLLM v0's watermark) or sequence slots
    are short, and `evict`, the tail of the priority-sorted `running` (lowest priority) is
    preempted by recompute, never a request of this batch. Stops at the first that cannot be
    admitted, so that a later deadline never overtakes an earlier one."""
    budget = ctx.max_num_batched_tokens
    admitted: Batch = []
    for rid in due:
        group = waiting.waiting_of(rid)
        if not group:
            continue
        seq = group[0]
        computed = ctx.lookup(seq)
        num_new = seq.num_tokens - len(computed) * BLOCK_SIZE
        if num_new > budget:
            break
        while True:
            slot = len(running) + len(admitted) < ctx.max_num_seqs
            if slot and ctx.allocate(seq, num_new, computed, use_watermark=True):
                break
            if not (evict and running):
                return _admit(admitted, running)
            victim = running.pop()
            ctx.preempt(victim)
            waiting.appendleft(victim)
            computed = ctx.lookup(seq)  # eviction may have dropped cached blocks
            num_new = seq.num_tokens - len(computed) * BLOCK_SIZE
        waiting.pop_first(rid)
        seq.record_first_hit()
        admitted.append((seq, num_new))
        budget -= num_new
    return _admit(admitted, running)


def _admit(batch: Batch, running: list[SimSeq]) -> Batch:
    running.extend(seq for seq, _ in batch)
    return batch
