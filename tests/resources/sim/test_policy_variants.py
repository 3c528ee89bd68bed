"""The registry's new names (fcfs, sarathi, static-priority, relserve) and keep-long eviction."""

from __future__ import annotations

import pytest

from resources.sim import SimulatedEngine
from resources.sim.policies import POLICIES, get_policy
from resources.sim.policies.sarathi import SarathiPolicy
from tests.resources.sim.helpers import IntTokenizer, prompt, req


def test_registry_names_and_errors() -> None:
    assert {"fcfs", "vllm-v0", "vllm-v1", "sarathi", "static-priority", "relserve"} <= set(POLICIES)
    with pytest.raises(ValueError, match=r"'sjf'.*fcfs.*relserve.*sarathi.*static-priority"):
        get_policy("sjf")
    with pytest.raises(ValueError, match="token_budget must be >= 1, got 0"):
        SarathiPolicy(0)


def test_fcfs_admits_whole_prompts_in_order_and_sarathi_has_its_budget() -> None:
    requests = [req(str(i), prompt(range(i * 100, i * 100 + 300)), 4) for i in range(20)]
    fcfs = SimulatedEngine("A100-40GB", "opt-13b", "fcfs", tokenizer=IntTokenizer())
    assert fcfs.policy_name == "fcfs" and fcfs.max_num_batched_tokens == 2048
    assert not fcfs.enable_chunked_prefill
    ttft = [r.ttft_s for r in fcfs.run("q", requests).responses]
    # vLLM v0: prefills first, whole prompts in submission order, 2048 // 300 = 6 per batch
    assert ttft == sorted(ttft)
    assert [ttft.count(t) for t in sorted(set(ttft))] == [6, 6, 6, 2]
    sarathi = SimulatedEngine("A100-40GB", "opt-13b", "sarathi", tokenizer=IntTokenizer())
    assert sarathi.max_num_batched_tokens == 512 and sarathi.enable_chunked_prefill
    v1 = SimulatedEngine("A100-40GB", "opt-13b", "vllm-v1", tokenizer=IntTokenizer())
    assert v1.max_num_batched_tokens == 8192
    explicit = SimulatedEngine("L4", "llama-2-7b", "sarathi", max_num_batched_tokens=1024)
    assert explicit.max_num_batched_tokens == 1024


@pytest.mark.parametrize(
    "policy", ["fcfs", "vllm-v1", "sarathi", "static-priority", "relserve", "relserve-v1"]
)
def test_keep_long_evicts_the_shortest_and_everything_completes(policy: str) -> None:
    requests = [
        req(str(i), prompt(range(i * 1000, i * 1000 + 20 + 30 * (i % 3))), max_tokens=40)
        for i in range(8)
    ]
    out = {}
    for order in ("recent", "keep-long"):
        eng = SimulatedEngine(
            "L4",
            "llama-2-7b",
            policy,
            tokenizer=IntTokenizer(),
            num_gpu_blocks_override=16,
            preemption_order=order,
        )
        res = eng.run("q", requests)
        assert all(r.ok and r.output_tokens == 40 for r in res.responses)
        out[order] = (res, eng.last_run_info["num_preemptions"])
    assert out["keep-long"][1] > 0
    # answers never change, only timing
    assert [r.text for r in out["recent"][0].responses] == [
        r.text for r in out["keep-long"][0].responses
    ]


def test_unknown_preemption_order_lists_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"'longest'.*recent.*keep-long"):
        SimulatedEngine(preemption_order="longest")
