"""vLLM-SP (relserve.txt §3.1 and §5.1): vLLM v0 with priority scheduling, each relQuery's
priority computed ONCE, when it arrives, from its requests' input and output token counts.

Eq. 6-7: ReqPrio(r) = L1(tok(r)) + L2(OL(r)); Prio(R) = sum over r in R of ReqPrio(r), shared by
every request of R (`resources.sim.pem.static_priority`; L1/L2 per `StaticPriorityConfig`).
tok(r) is the prompt length and OL(r) the request's output limit (`max_tokens`); neither the
prefix cache nor the progress of R is looked at, ever again.

Each iteration is vLLM v0's scheduler under `scheduling_policy="priority"`: the waiting and
running queues are ordered by (priority, arrival); whole-prompt prefills are admitted from the
head of the waiting queue (prefill first); if none could be admitted, vLLM's priority preemption
runs, then every running request decodes one token, evicting the lowest-priority running request
when blocks run out. No chunked prefill, no mixed batches: the same budgets and cache as `fcfs`.
"""

from __future__ import annotations

from dataclasses import dataclass

from resources.sim.pem import STATIC_MAPPINGS, FittedPredictors, static_priority
from resources.sim.policies.base import Batch, Policy, ScheduleContext, SimSeq
from resources.sim.policies.priority import (
    RelQueryQueue,
    decode_step,
    prefill_step,
    priority_preemption,
    sort_running,
)

__all__ = ["StaticPriorityConfig", "StaticPriorityPolicy"]


@dataclass(frozen=True)
class StaticPriorityConfig:
    """Settings of vLLM-SP."""

    mapping: str = "linear"
    """L1/L2 of Eq. 6, one of `resources.sim.pem.STATIC_MAPPINGS`."""

    def __post_init__(self) -> None:
        if self.mapping not in STATIC_MAPPINGS:
            raise ValueError(
                f"unknown mapping {self.mapping!r}; expected one of {list(STATIC_MAPPINGS)}"
            )


class StaticPriorityPolicy(Policy):
    """vLLM-SP (see the module docstring)."""

    name = "static-priority"
    register_at_schedule = False
    enable_chunked_prefill = False

    def __init__(self, config: StaticPriorityConfig | None = None) -> None:
        self.config = config or StaticPriorityConfig()
        self.predictors = FittedPredictors("static-priority")
        """Eq. 9 fitted to the engine's cost model: `self.predictors(ctx)`."""

    def new_waiting_queue(self) -> RelQueryQueue:
        return RelQueryQueue()

    def schedule(
        self, waiting: RelQueryQueue, running: list[SimSeq], ctx: ScheduleContext
    ) -> Batch:
        if waiting.new_relqueries:
            pred = self.predictors(ctx) if self.config.mapping == "linear" else None
            for rid in waiting.new_relqueries:
                members = waiting.members[rid]
                value = static_priority(
                    (s.prompt_len for s in members),
                    (s.max_tokens for s in members),
                    pred,
                    self.config.mapping,
                )
                waiting.set_priority(rid, value)
            waiting.new_relqueries.clear()
        sort_running(running, waiting)
        batch = prefill_step(waiting, running, ctx)
        if batch:
            return batch
        priority_preemption(waiting, running, ctx)
        # Preemption may leave nothing to decode; then the freed blocks admit the head.
        return decode_step(waiting, running, ctx) or prefill_step(waiting, running, ctx)
