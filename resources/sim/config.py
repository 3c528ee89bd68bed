"""`SimulatedEngineConfig`: every parameter of the simulated engine, declared once.

`SimulatedEngine(config=...)` (or the same fields as keywords, `gpu`, `model` and `policy` also
positionally) and `SimulatedEngineResource` (which inherits this model, so each field is
settable from Dagster run config) both read it. The closed choices are `Literal`s kept equal to
the registries they name (`profiles.HARDWARE`, `profiles.MODELS`, `policies.POLICIES`,
`cost_model.TIMING_PROFILES`, ...; a test holds each pair equal).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from resources.configs import EngineConfig

__all__ = [
    "GpuName",
    "ModelName",
    "PolicyName",
    "PreemptionOrder",
    "SimulatedEngineConfig",
    "TimingProfile",
    "Usage",
]

GpuName = Literal["L4", "A100-40GB", "H100-80GB", "H200"]
"""GPU profiles (`resources.sim.profiles.HARDWARE`)."""
ModelName = Literal["llama-2-7b", "llama-3-8b", "opt-13b", "llama-3-70b"]
"""Model profiles (`resources.sim.profiles.MODELS`)."""
PolicyName = Literal[
    "vllm-v0", "vllm-v1", "fcfs", "sarathi", "static-priority", "relserve", "relserve-v1"
]
"""Scheduling policies (`resources.sim.policies.POLICIES`)."""
PreemptionOrder = Literal["recent", "keep-long"]
"""`resources.sim.policies.PREEMPTION_ORDERS`."""
Usage = Literal["offline", "serve"]
"""`resources.sim.profiles.USAGES`."""
TimingProfile = Literal["vllm-2024", "vllm-2026"]
"""`resources.sim.cost_model.TIMING_PROFILES`."""


class SimulatedEngineConfig(EngineConfig):
    """The simulated vLLM engine: a GPU and model profile, a policy, vLLM's batch limits."""

    gpu: GpuName = "L4"
    """Simulated GPU profile."""
    model: ModelName = "llama-2-7b"
    """Simulated model profile."""
    policy: PolicyName = "vllm-v1"
    """Scheduling policy."""
    enable_prefix_caching: bool = True
    """Reuse KV blocks of shared prompt prefixes, as vLLM does."""
    max_num_seqs: int | None = Field(default=None, ge=1)
    """Most sequences in one batch; None takes vLLM's default for the GPU and usage."""
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    """Token budget per iteration; None takes vLLM's default (or the policy's own budget)."""
    gpu_memory_utilization: float = Field(default=0.9, gt=0.0, le=1.0)
    """Share of GPU memory for weights + KV cache, in (0, 1]."""
    tensor_parallel_size: int | None = Field(default=None, ge=1, le=8)
    """GPUs to shard across (1, 2, 4 or 8); None picks the fewest that hold one max-length
    sequence. (Not a `Literal`: Dagster config has no optional enum.)"""
    tokenizer: str | None = None
    """Path of a tokenizer.json / tiktoken file; None uses the built-in approximate Llama 3
    tokenizer."""
    num_gpu_blocks_override: int | None = Field(default=None, ge=2)
    """KV cache capacity in blocks instead of the derived one (vLLM's flag; block 0 is vLLM's
    null block)."""
    preemption_order: PreemptionOrder = "recent"
    """Running request evicted when KV blocks run out: the most recent (vLLM) or the shortest
    ("keep-long", InferMax section 6)."""
    usage: Usage = "offline"
    """vLLM's default batch budgets of the `LLM` class ("offline") or of `vllm serve`."""
    timing: TimingProfile = "vllm-2024"
    """Timing profile of the cost model: the early-2024 vLLM both papers ran, or today's
    (`cost_model.TIMING_PROFILES`)."""

    @classmethod
    def positional(cls) -> tuple[str, ...]:
        return ("gpu", "model", "policy")
