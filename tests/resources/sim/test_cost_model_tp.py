"""The tensor-parallel all-reduce term of the cost model: its size, and its effect on runs."""

from __future__ import annotations

import dataclasses

import pytest

from resources.engine import Request
from resources.sim import SimulatedEngine
from resources.sim.cost_model import DEFAULT_EFFICIENCY, coefficients_from_profile
from resources.sim.profiles import resolve_deployment


def allreduce_s_per_token(deployment, efficiency=DEFAULT_EFFICIENCY) -> float:
    """The term's value from the model's own numbers: two ring all-reduces of the hidden state
    (fp16) per layer, each moving 2 (p - 1) / p of it over one GPU's link."""
    hw, mp, p = deployment.hardware, deployment.model, deployment.tensor_parallel_size
    per_token = 2 * mp.num_layers * mp.hidden_size * 2
    return per_token * 2 * (p - 1) / p / (hw.interconnect_bandwidth * efficiency.interconnect)


def test_llama_70b_on_4_a100_pays_19_microseconds_of_all_reduce_per_token() -> None:
    dep = resolve_deployment("A100-40GB", "llama-3-70b")
    assert dep.tensor_parallel_size == 4
    a = coefficients_from_profile(dep).a
    compute = 2 * dep.model.matmul_params / (4 * 312e12 * DEFAULT_EFFICIENCY.matmul)
    # 80 layers x 2 x 8192 x 2 bytes = 2.62 MB a token; x 1.5 (ring, p = 4); / (300 GB/s x 0.7)
    assert a - compute == pytest.approx(2.62144e6 * 1.5 / 210e9, rel=1e-9)
    assert a - compute == pytest.approx(allreduce_s_per_token(dep), rel=1e-9)
    assert 0.05 * compute < a - compute < 0.1 * compute  # about 7% of the cost of a token


def test_the_term_follows_the_interconnect_and_the_gpu_count() -> None:
    slow_link = dataclasses.replace(DEFAULT_EFFICIENCY, interconnect=0.35)
    for tp in (2, 4, 8):
        dep = resolve_deployment("H100-80GB", "llama-3-70b", tensor_parallel_size=tp)
        fast = coefficients_from_profile(dep).a
        slow = coefficients_from_profile(dep, slow_link).a
        # halving the link efficiency doubles exactly the all-reduce part of `a`
        assert slow - fast == pytest.approx(allreduce_s_per_token(dep), rel=1e-9)
    single = resolve_deployment("H100-80GB", "llama-2-7b", tensor_parallel_size=1)
    assert coefficients_from_profile(single, slow_link) == coefficients_from_profile(single)


def test_a_slower_interconnect_slows_a_tensor_parallel_run_only() -> None:
    requests = [Request(str(i), f"Summarize review {i}: it was fine.", 16) for i in range(64)]
    slow_link = dataclasses.replace(DEFAULT_EFFICIENCY, interconnect=0.35)

    def makespan(gpu: str, model: str, efficiency) -> float:
        engine = SimulatedEngine(gpu, model, efficiency=efficiency)
        return engine.run("q", requests).stats.engine_time_s

    assert makespan("A100-40GB", "llama-3-70b", slow_link) > 1.01 * makespan(
        "A100-40GB", "llama-3-70b", DEFAULT_EFFICIENCY
    )
    assert makespan("L4", "llama-2-7b", slow_link) == makespan(
        "L4", "llama-2-7b", DEFAULT_EFFICIENCY
    )
