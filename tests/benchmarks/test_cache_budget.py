"""The fixed prefix-cache budget metric of `benchmarks.reorder` (`benchmarks.lib.tokens`):
prompts prefilled one at a time through the simulator's block pool holding K blocks."""

import pandas as pd
import pytest

from benchmarks.lib.tokens import RowTokens, budget_blocks, cache_replay
from llm_assets.optimizer import encode, reorder
from llm_assets.optimizer.metrics import row_strings
from resources.engine import Request
from resources.sim import SimulatedEngine
from resources.sim.tokenizer import ApproxTokenizer

GROUPS, PER_GROUP = 30, 8


def interleaved_table() -> pd.DataFrame:
    """30 long documents, each asked about by 8 rows, the rows in file order cycling through
    the documents: every document comes back only after the 29 others."""
    words = [f"w{k}" for k in range(400)]
    docs = [
        " ".join(words[(7 * g + j) % 400] for j in range(60)) + f" doc{g}" for g in range(GROUPS)
    ]
    return pd.DataFrame(
        {
            "doc": [docs[i % GROUPS] for i in range(GROUPS * PER_GROUP)],
            "question": [f"question number {i}" for i in range(GROUPS * PER_GROUP)],
        }
    )


@pytest.fixture(scope="module")
def prompts() -> dict[str, list[list[int]]]:
    enc = encode(interleaved_table())
    tokens = RowTokens(enc, ApproxTokenizer().encode)
    return {m: tokens.rows(reorder(enc, method=m)) for m in ("original", "ggr")}


def hit_rate(rows: list[list[int]], blocks: int | None) -> float:
    return cache_replay(rows, blocks) / sum(map(len, rows))


def test_a_budget_never_beats_the_unbounded_cache_and_a_huge_one_equals_it(prompts):
    budgets = budget_blocks(prompts["original"], [0.01, 0.1, 0.5])
    assert budgets["blocks"]["0.01"] == budgets["min_blocks"]  # the floor: one prompt fits
    for rows in prompts.values():
        unbounded = cache_replay(rows)
        for blocks in [*budgets["blocks"].values(), budgets["distinct_blocks"] // 4]:
            assert cache_replay(rows, blocks) <= unbounded
        assert cache_replay(rows, 10 * sum(map(len, rows))) == unbounded


def test_eviction_makes_order_matter(prompts):
    """Without eviction file order reuses every document as GGR does; with a budget of a few
    prompts, LRU has evicted a document before it comes back, so only GGR (each document's
    rows together) keeps its hits."""
    original, ggr = prompts["original"], prompts["ggr"]
    assert hit_rate(original, None) == pytest.approx(hit_rate(ggr, None), abs=0.01)
    small = budget_blocks(original, [0.05])["blocks"]["0.05"]
    assert hit_rate(original, small) < 0.05
    assert hit_rate(ggr, small) == pytest.approx(hit_rate(ggr, None), abs=1e-9)
    assert hit_rate(ggr, small) > 0.5


def test_lru_evicts_the_least_recently_freed_block_tail_first():
    """Prompts of 33 tokens hold 3 blocks (2 full). With 4 blocks, b's third block evicts the
    least recently freed cached block: a's tail (blocks are freed tail first), so a then hits
    its first block only; with 6 blocks nothing is evicted."""
    a, b = list(range(33)), list(range(1000, 1033))
    assert cache_replay([a, b, a], 4) == 16
    assert cache_replay([a, b, a], 6) == 32
    # b again hits 32 and needs only a block for its last token (the hash-less one it
    # freed), so a's first block survives: a hits 16
    assert cache_replay([a, b, b, a], 4) == 32 + 16
    with pytest.raises(ValueError, match="needs 3 blocks"):
        cache_replay([a], 2)


def test_replay_counts_what_the_engine_serves_one_request_at_a_time(prompts):
    """The same count as the simulated engine with `max_num_seqs=1` and K usable blocks
    (plus vLLM's null block), on rendered prompts and the engine's own tokenizer."""
    enc = encode(interleaved_table())
    tokenizer = ApproxTokenizer()
    for method in ("original", "ggr"):
        texts = [t + "\n" for t in row_strings(enc, reorder(enc, method=method), sep="\n")]
        rows = [tokenizer.encode(t) for t in texts]
        for blocks in (budget_blocks(rows, [0.05])["blocks"]["0.05"], 200):
            engine = SimulatedEngine(
                "L4",
                "llama-2-7b",
                "vllm-v1",
                tokenizer=tokenizer,
                num_gpu_blocks_override=blocks + 1,
                max_num_seqs=1,
            )
            result = engine.run(
                "q", [Request(id=str(i), prompt=t, max_tokens=1) for i, t in enumerate(texts)]
            )
            assert result.stats.cached_tokens == cache_replay(rows, blocks)
