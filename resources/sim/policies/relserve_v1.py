"""`relserve-v1`: RelServe's relQuery priorities on vLLM v1's batch formation (not in the paper).

Why: on the small workloads of benchmarks/results/scheduler.md ("Gap to the optimum") the
policies on vLLM v0's batches (fcfs, static-priority, relserve: whole-prompt prefill batches
and decode batches, never mixed) are further from the optimum than vLLM v1's mixed, chunked
batches, whose iterations, like the optimum's time steps, carry prefill and decode work
together; on the large workloads RelServe's shortest-remaining-first order is what cuts the
mean. `vllm-v1` mixes batches but serves in arrival order. This policy is both: vLLM v1 under
`scheduling_policy="priority"`:

1. the Dynamic Priority Updater (`updater.DynamicPriorityUpdater`: PEM with prefix sharing
   sampled from the real cache, Eq. 12 reuse, the starvation threshold and the tail rule)
   sets every relQuery's priority;
2. both queues are ordered by (priority, tiebreak) (`priority.RelQueryQueue`, `sort_running`),
   so the lowest-priority running request is the preemption victim, as in vLLM v1's priority
   mode;
3. due relQueries (starvation threshold) get room first: lower-priority running requests are
   preempted until the first request of each fits (`make_room`);
4. the batch is vLLM v1's (`vllm_v1.v1_step`): every running request's next tokens (decodes and
   prompt chunks) within the 8,192-token budget, then chunks of waiting prompts in priority
   order.

Invariants: those of `vllm-v1` (budget, slots, blocks); policies change timing, never answers.
"""

from __future__ import annotations

from resources.sim.policies.base import Batch, Policy, ScheduleContext, SimSeq
from resources.sim.policies.priority import RelQueryQueue, fits, sort_running
from resources.sim.policies.updater import DynamicPriorityUpdater, UpdaterConfig
from resources.sim.policies.vllm_v1 import v1_step

__all__ = ["DEFAULT_TAIL_DEADLINE_S", "RelServeV1Policy", "make_room"]

DEFAULT_TAIL_DEADLINE_S = 40.0
"""Default `UpdaterConfig.tail_deadline_s` of this policy (chosen from benchmarks.scheduler's
sweep: the lowest mean whose p99 stays at or below FCFS's at the highest load)."""


class RelServeV1Policy(Policy):
    """RelServe priorities on vLLM v1 (see the module docstring)."""

    name = "relserve-v1"

    def __init__(self, config: UpdaterConfig | None = None) -> None:
        self.updater = DynamicPriorityUpdater(
            config or UpdaterConfig(tail_deadline_s=DEFAULT_TAIL_DEADLINE_S)
        )

    def new_waiting_queue(self) -> RelQueryQueue:
        self.updater.start_run()
        return RelQueryQueue()

    def overhead(self) -> dict[str, float]:
        return {"updater_s": self.updater.seconds, "num_pem": float(self.updater.num_pem)}

    def schedule(
        self, waiting: RelQueryQueue, running: list[SimSeq], ctx: ScheduleContext
    ) -> Batch:
        self.updater.update(waiting, running, ctx)
        sort_running(running, waiting)
        waiting.reorder()
        due = self.updater.due()
        if due:
            make_room(waiting, running, ctx, due)
        return v1_step(waiting, running, ctx)


def make_room(
    waiting: RelQueryQueue, running: list[SimSeq], ctx: ScheduleContext, due: list[str]
) -> int:
    """Preempt the tail of the priority-sorted `running` (recompute) until the first waiting
    request of every relQuery in `due` would fit the free blocks and sequence slots together
    (or nothing is left to preempt); returns the requests preempted."""
    count = 0
    heads = [waiting.waiting_of(rid)[0] for rid in due if waiting.waiting_of(rid)]
    while running:
        free = ctx.pool.num_free - ctx.watermark_blocks
        touched: set[int] = set()
        fit = len(running) + len(heads) <= ctx.max_num_seqs
        for seq in heads:
            if not fit:
                break
            need = fits(ctx, seq, free, touched)
            fit = need >= 0
            free -= max(need, 0)
        if fit:
            break
        victim = running.pop()
        ctx.preempt(victim)
        waiting.appendleft(victim)
        count += 1
    return count
