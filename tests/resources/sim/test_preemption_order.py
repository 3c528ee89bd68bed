"""WHO is preempted: "keep-long" evicts the running request with the fewest computed tokens,
"recent" (vLLM) the most recently admitted one, under every policy.

Two requests with the same output length, the short one submitted first, share a KV cache too
small for both to finish: exactly one preemption. The victim frees its blocks, the survivor
runs to the end, and only then is the victim recomputed: the survivor finishes first.
"""

from __future__ import annotations

import pytest

from resources.sim import SimulatedEngine
from tests.resources.sim.helpers import IntTokenizer, prompt, req

POLICIES = ["fcfs", "vllm-v1", "sarathi", "static-priority", "relserve", "relserve-v1"]
# 20 + 60 and 100 + 60 tokens need 5 + 10 blocks at the end; 12 usable blocks hold both
# prompts (2 + 7 blocks) but not both outputs.
REQUESTS = [req("short", prompt(range(20)), 60), req("long", prompt(range(1000, 1100)), 60)]


def run(policy: str, order: str) -> tuple[str, str]:
    """(victim, survivor) of one run, after checking there was exactly one preemption."""
    engine = SimulatedEngine(
        "L4",
        "llama-2-7b",
        policy,
        tokenizer=IntTokenizer(),
        num_gpu_blocks_override=13,
        preemption_order=order,
    )
    responses = engine.run("q", REQUESTS).responses
    assert engine.last_run_info["num_preemptions"] == 1
    assert all(r.ok and r.output_tokens == 60 for r in responses)
    first, last = sorted(responses, key=lambda r: r.finish_s)
    assert first.finish_s < last.finish_s
    return last.id, first.id


@pytest.mark.parametrize("policy", POLICIES)
def test_keep_long_preempts_the_shortest_running_request(policy: str) -> None:
    assert run(policy, "keep-long") == ("short", "long")


@pytest.mark.parametrize("policy", POLICIES)
def test_recent_preempts_the_last_admitted_request(policy: str) -> None:
    assert run(policy, "recent") == ("long", "short")
