"""Batch formation of vllm-v0 and vllm-v1 on a hand-made case, and preemption by recompute."""

from __future__ import annotations

from collections import deque

import pytest

from resources.sim import SimulatedEngine
from resources.sim.block_cache import BlockPool
from resources.sim.policies import ScheduleContext, SimSeq, get_policy
from tests.resources.sim.helpers import IntTokenizer, prompt, req


def decoding(index: int, ctx: ScheduleContext, prompt_len: int = 20) -> SimSeq:
    """A running sequence whose prompt is computed and which has generated one token."""
    seq = SimSeq(index, f"r{index}", prompt_len, [], num_output=5)
    assert ctx.allocate(seq, prompt_len)
    seq.num_computed = prompt_len
    seq.generated = 1
    seq.num_tokens = prompt_len + 1
    return seq


def setup(budget: int) -> tuple[ScheduleContext, list[SimSeq], deque[SimSeq]]:
    ctx = ScheduleContext(BlockPool(64), max_num_seqs=8, max_num_batched_tokens=budget)
    running = [decoding(0, ctx), decoding(1, ctx)]
    waiting = deque([SimSeq(2, "w2", 30, [], 5), SimSeq(3, "w3", 30, [], 5)])
    return ctx, running, waiting


def shape(batch) -> list[tuple[str, int]]:
    return [(seq.request_id, n) for seq, n in batch]


def test_v0_prefill_first_whole_prompts_no_decodes() -> None:
    ctx, running, waiting = setup(budget=40)
    batch = get_policy("vllm-v0").schedule(waiting, running, ctx)
    # w2 (30 tokens) fits the budget whole; w3 does not (no chunking); decodes wait
    assert shape(batch) == [("w2", 30)]
    assert [s.request_id for s in running] == ["r0", "r1", "w2"]
    assert [s.request_id for s in waiting] == ["w3"]


def test_v0_decodes_when_no_prefill_fits() -> None:
    ctx, running, waiting = setup(budget=20)
    batch = get_policy("vllm-v0").schedule(waiting, running, ctx)
    assert shape(batch) == [("r0", 1), ("r1", 1)]


def test_v1_decodes_first_then_chunked_prefill() -> None:
    ctx, running, waiting = setup(budget=40)
    batch = get_policy("vllm-v1").schedule(waiting, running, ctx)
    # 2 decode tokens, then w2 whole (30), then w3 chunked to the remaining 8
    assert shape(batch) == [("r0", 1), ("r1", 1), ("w2", 30), ("w3", 8)]
    assert not waiting


def test_v1_respects_max_num_seqs() -> None:
    ctx, running, waiting = setup(budget=1000)
    ctx.max_num_seqs = 3
    batch = get_policy("vllm-v1").schedule(waiting, running, ctx)
    assert shape(batch) == [("r0", 1), ("r1", 1), ("w2", 30)]


def test_unknown_policy_lists_valid_names() -> None:
    with pytest.raises(ValueError, match=r"'fifo'.*vllm-v0.*vllm-v1"):
        get_policy("fifo")


@pytest.mark.parametrize("policy", ["vllm-v0", "vllm-v1"])
def test_preemption_when_capacity_is_tiny_and_everything_completes(policy: str) -> None:
    eng = SimulatedEngine(
        "L4", "llama-2-7b", policy, tokenizer=IntTokenizer(), num_gpu_blocks_override=10
    )
    requests = [req(str(i), prompt(range(i * 100, i * 100 + 20)), max_tokens=40) for i in range(6)]
    result = eng.run("q", requests)
    assert eng.last_run_info["num_preemptions"] > 0
    assert all(r.ok and r.output_tokens == 40 for r in result.responses)
    assert all(0 < r.ttft_s <= r.finish_s <= result.stats.engine_time_s for r in result.responses)
    assert eng.cache_stats()["num_free_blocks"] == 9  # everything but the null block returned
