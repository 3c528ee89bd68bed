"""Scheduling policies for the simulated engine, one module each, behind one seam (`base`).

`get_policy(name)` returns a fresh policy; `POLICIES` lists the names:

- `fcfs` / `vllm-v0`: vLLM v0, FCFS, prefill first, whole prompts;
- `vllm-v1`: vLLM v1, decode first, chunked prefill (8,192-token budget);
- `sarathi`: Sarathi-Serve, decode first, chunked prefill with a fixed 512-token budget;
- `static-priority`: vLLM-SP, relQuery priority from Eq. 6-7 computed once at arrival;
- `relserve`: RelServe's Dynamic Priority Updater and Adaptive Batch Arranger;
- `relserve-v1`: RelServe's priorities on vLLM v1's batch formation (mixed, chunked).

The preemption order ("recent" or InferMax's "keep-long") is an engine option usable with any
of them (`SimulatedEngine(preemption_order=...)`).
"""

from __future__ import annotations

from collections.abc import Callable

from resources.sim.policies.base import (
    PREEMPTION_ORDERS,
    Batch,
    Policy,
    ScheduleContext,
    SimSeq,
    WaitingQueue,
)
from resources.sim.policies.fcfs import FCFSPolicy
from resources.sim.policies.relserve import RelServeConfig, RelServePolicy
from resources.sim.policies.relserve_v1 import RelServeV1Policy
from resources.sim.policies.sarathi import SarathiPolicy
from resources.sim.policies.static_priority import StaticPriorityConfig, StaticPriorityPolicy
from resources.sim.policies.vllm_v0 import VLLMv0Policy
from resources.sim.policies.vllm_v1 import VLLMv1Policy

__all__ = [
    "POLICIES",
    "PREEMPTION_ORDERS",
    "Batch",
    "FCFSPolicy",
    "Policy",
    "RelServeConfig",
    "RelServePolicy",
    "RelServeV1Policy",
    "SarathiPolicy",
    "ScheduleContext",
    "SimSeq",
    "StaticPriorityConfig",
    "StaticPriorityPolicy",
    "VLLMv0Policy",
    "VLLMv1Policy",
    "WaitingQueue",
    "get_policy",
]

POLICIES: dict[str, Callable[[], Policy]] = {
    "vllm-v0": VLLMv0Policy,
    "vllm-v1": VLLMv1Policy,
    "fcfs": FCFSPolicy,
    "sarathi": SarathiPolicy,
    "static-priority": StaticPriorityPolicy,
    "relserve": RelServePolicy,
    "relserve-v1": RelServeV1Policy,
}
"""Policy factories by name (closed: `resources.sim.config.PolicyName` lists the same names; a
policy of one's own is passed to the engine as an object)."""


def get_policy(name: str | Policy) -> Policy:
    """A policy instance by name (or the instance itself); ValueError lists the valid names."""
    if not isinstance(name, str):
        return name
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; expected one of {sorted(POLICIES)}") from None
