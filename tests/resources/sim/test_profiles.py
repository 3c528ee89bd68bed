"""Profiles: KV capacity from the datasheet rule, tensor-parallel choice, error messages."""

from __future__ import annotations

import pytest

from resources.sim import SimulatedEngine
from resources.sim.profiles import MODELS, resolve_deployment


def test_kv_capacity_follows_vllm_rule() -> None:
    dep = resolve_deployment("L4", "llama-2-7b")
    model = MODELS["llama-2-7b"]
    assert model.kv_bytes_per_token == 2 * 32 * 32 * 128 * 2
    expected = int((23_034 * 2**20 * 0.9 - 6.738e9 * 2) / model.kv_bytes_per_token) // 16
    assert dep.num_kv_blocks == expected
    assert (
        resolve_deployment("L4", "llama-2-7b", gpu_memory_utilization=0.8).num_kv_blocks < expected
    )


def test_gqa_model_gets_more_kv_blocks() -> None:
    assert (
        resolve_deployment("H100-80GB", "llama-3-8b").num_kv_blocks
        > resolve_deployment("H100-80GB", "llama-2-7b").num_kv_blocks
    )


def test_default_tensor_parallel_for_70b() -> None:
    assert resolve_deployment("A100-40GB", "llama-3-70b").tensor_parallel_size == 4
    assert resolve_deployment("H200", "llama-3-70b").tensor_parallel_size == 2
    with pytest.raises(ValueError, match="raise tensor_parallel_size"):
        resolve_deployment("A100-40GB", "llama-3-70b", tensor_parallel_size=2)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"gpu": "V100"}, r"gpu='V100': .*'L4'.*'A100-40GB'.*'H100-80GB'.*'H200'"),
        (
            {"model": "gpt-5"},
            r"model='gpt-5': .*'llama-2-7b'.*'llama-3-8b'.*'opt-13b'.*'llama-3-70b'",
        ),
        ({"policy": "lifo"}, r"policy='lifo': .*'vllm-v0'"),
    ],
)
def test_unknown_names_list_valid_ones(kwargs: dict, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        SimulatedEngine(**kwargs)
