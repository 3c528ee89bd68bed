"""Exact prefix-cache hit counts through the engine, on hand-made token sequences."""

from __future__ import annotations

import pytest

from resources.sim import SimulatedEngine
from tests.resources.sim.helpers import IntTokenizer, prompt, req


def engine(policy: str = "vllm-v1", **kw) -> SimulatedEngine:
    return SimulatedEngine("L4", "llama-2-7b", policy, tokenizer=IntTokenizer(), **kw)


def hits(eng: SimulatedEngine, prompts: list[str]) -> list[int]:
    result = eng.run("q", [req(str(i), p) for i, p in enumerate(prompts)])
    assert result.stats.cached_tokens == sum(r.cached_tokens for r in result.responses)
    return [r.cached_tokens for r in result.responses]


def test_shared_prefix_shorter_than_a_block_gives_no_hit() -> None:
    eng = engine()
    assert hits(eng, [prompt(range(10), range(100, 130))]) == [0]
    assert hits(eng, [prompt(range(10), range(200, 230))]) == [0]


def test_shared_full_blocks_hit_across_runs() -> None:
    eng = engine()
    assert hits(eng, [prompt(range(40))]) == [0]
    # same first 35 tokens: two full blocks (32 tokens) are shared
    assert hits(eng, [prompt(range(35), range(500, 520))]) == [32]


def test_identical_prompt_recomputes_its_last_block() -> None:
    eng = engine()
    hits(eng, [prompt(range(32))])
    assert hits(eng, [prompt(range(32))]) == [16]  # 32 tokens: at most 31 may hit
    hits(eng, [prompt(range(33))])
    assert hits(eng, [prompt(range(33))]) == [32]


def test_a_request_never_hits_its_own_blocks() -> None:
    eng = engine()
    # one 16-token block repeated: chained keys differ, so nothing hits on first sight
    assert hits(eng, [prompt(range(16), range(16), range(16), [7])]) == [0]


def test_cache_persists_across_runs_until_reset() -> None:
    eng = engine()
    hits(eng, [prompt(range(48), [1])])
    assert hits(eng, [prompt(range(48), [2])]) == [48]
    eng.reset_cache()
    assert hits(eng, [prompt(range(48), [3])]) == [0]


def test_disabled_cache_gives_zero_hits() -> None:
    eng = engine(enable_prefix_caching=False)
    hits(eng, [prompt(range(64))])
    assert hits(eng, [prompt(range(64)), prompt(range(64))]) == [0, 0]
    assert eng.cache_stats()["num_cached_blocks"] == 0


@pytest.mark.parametrize(("policy", "expected"), [("vllm-v1", [0, 32]), ("vllm-v0", [0, 0])])
def test_same_step_hits(policy: str, expected: list[int]) -> None:
    """vLLM v1 keys blocks when scheduled (a later request of the same step hits them);
    vLLM v0 marks them computed only after the step."""
    eng = engine(policy)
    assert hits(eng, [prompt(range(40)), prompt(range(40), [9])]) == expected


def test_lru_eviction_through_the_engine() -> None:
    # 4 blocks in all; each prompt of 33 tokens holds 3 blocks while it runs
    eng = engine(num_gpu_blocks_override=4)
    a, b = prompt(range(33)), prompt(range(1000, 1033))
    hits(eng, [a])  # a's 2 full blocks cached, free
    hits(eng, [b])  # b takes the 2 never-used blocks... and evicts LRU blocks of a
    assert hits(eng, [b]) == [32]
    assert hits(eng, [a]) == [0]


def test_blocks_held_by_a_running_request_are_not_evicted() -> None:
    eng = engine(num_gpu_blocks_override=8)
    shared = range(32)
    result = eng.run(
        "q",
        [
            req("long", prompt(shared, [1]), max_tokens=16),  # holds its blocks while decoding
            req("short", prompt(range(900, 933))),
            req("late", prompt(range(700, 733))),  # must wait, then reuse free blocks only
        ],
    )
    assert [r.cached_tokens for r in result.responses] == [0, 0, 0]
    assert eng.last_run_info["num_preemptions"] == 0
    assert hits(eng, [prompt(shared, [5])]) == [32]
