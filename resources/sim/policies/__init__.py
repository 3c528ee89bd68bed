"""Scheduling policies for the simulated engine, one module each, behind one seam (`base`).

`get_policy(name)` returns a fresh policy; `POLICIES` lists the names.
"""

from __future__ import annotations

from collections.abc import Callable

from resources.sim.policies.base import Batch, Policy, ScheduleContext, SimSeq
from resources.sim.policies.vllm_v0 import VLLMv0Policy
from resources.sim.policies.vllm_v1 import VLLMv1Policy

__all__ = [
    "POLICIES",
    "Batch",
    "Policy",
    "ScheduleContext",
    "SimSeq",
    "VLLMv0Policy",
    "VLLMv1Policy",
    "get_policy",
    "register_policy",
]

POLICIES: dict[str, Callable[[], Policy]] = {
    "vllm-v0": VLLMv0Policy,
    "vllm-v1": VLLMv1Policy,
}
"""Policy factories by name; later policies (static priority, RelServe) register here."""


def register_policy(name: str, factory: Callable[[], Policy]) -> None:
    """Add a policy under `name` (ValueError if the name is taken)."""
    if name in POLICIES:
        raise ValueError(f"policy {name!r} is already registered")
    POLICIES[name] = factory


def get_policy(name: str | Policy) -> Policy:
    """A policy instance by name (or the instance itself); ValueError lists the valid names."""
    if not isinstance(name, str):
        return name
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; expected one of {sorted(POLICIES)}") from None
