"""Token hit rate of a schedule under the simulator's vLLM block cache.

Each row becomes the prompt of the GGR authors' harness, its values one per line in the
schedule's field order (`prompts.PromptFormat` style "values" with no instruction), and
is tokenized (the Llama 3 tokenizer from ../shared/tokenizers when present, else the
simulator's approximation). Rows are sent in schedule order through a `BlockPool` large
enough never to evict (16-token blocks, chained hashes, a hit never covers the last token):
the token hit rate is the share of prompt tokens served from the cache.

Tokens are computed per distinct value (with its line end) and concatenated: exact where no
pre-tokenizer piece spans a line end, which `agreement` measures on a sample of rows.

`cache_replay` is the same walk through a pool of a fixed number of blocks (a *prefix-cache
budget*): one prompt at a time, each holding the blocks of all its tokens while it is
prefilled, then freeing them to vLLM's LRU free queue, whose head is evicted when a later
prompt needs blocks. `budget_blocks` sizes such budgets as shares of a table's distinct
blocks. This is the setting in which SOLO (Li et al., "Prefix-Cache-Aware Data Reordering for
LLM-Augmented Database Analytics", ICML 2026) reports prefill throughput: once the cache
cannot hold every prefix, a row order that revisits a prefix after it was evicted pays for it
again.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from llm_assets.optimizer.schedule import Schedule
from llm_assets.optimizer.table import EncodedTable
from resources.sim.block_cache import BLOCK_SIZE, BlockPool, block_hashes
from resources.sim.tokenizer import ApproxTokenizer, load_tokenizer

LLAMA3 = Path(__file__).resolve().parents[2].parent / "shared/tokenizers/llama3_tokenizer.json"


def default_tokenizer():
    """The Llama 3 tokenizer file when present (needs `tokenizers`), else the approximation."""
    if LLAMA3.is_file():
        try:
            return load_tokenizer(LLAMA3)
        except ImportError:
            pass
    return ApproxTokenizer()


class RowTokens:
    """Token ids of scheduled rows, memoised per (field, value)."""

    def __init__(self, enc: EncodedTable, encode: Callable[[str], list[int]]):
        self.enc = enc
        self.encode = encode
        self.memo: list[dict[int, tuple[int, ...]]] = [{} for _ in enc.fields]

    def cell(self, j: int, code: int) -> tuple[int, ...]:
        ids = self.memo[j].get(code)
        if ids is None:
            ids = tuple(self.encode(self.enc.uniques[j][code] + "\n"))
            self.memo[j][code] = ids
        return ids

    def rows(self, schedule: Schedule) -> list[list[int]]:
        index = {f: j for j, f in enumerate(self.enc.fields)}
        orders = [[index[f] for f in order] for order in schedule.orders]
        codes = self.enc.codes
        out = []
        for row, oid in zip(schedule.rows.tolist(), schedule.order_ids.tolist(), strict=True):
            ids: list[int] = []
            for j in orders[oid]:
                ids.extend(self.cell(j, int(codes[row, j])))
            out.append(ids)
        return out

    def agreement(self, schedule: Schedule, sample: int = 200, seed: int = 0) -> float:
        """Share of sampled rows whose per-value tokens equal tokenizing the whole prompt."""
        rng = np.random.default_rng(seed)
        picks = rng.choice(len(schedule), size=min(sample, len(schedule)), replace=False)
        sub = Schedule(schedule.rows[picks], schedule.order_ids[picks], schedule.orders)
        index = {f: j for j, f in enumerate(self.enc.fields)}
        same = 0
        for ids, (row, fields) in zip(self.rows(sub), sub, strict=True):
            text = "".join(self.enc.cell(row, index[f]) + "\n" for f in fields)
            same += list(self.encode(text)) == ids
        return same / max(len(picks), 1)


def token_hit_rate(rows: list[list[int]]) -> float:
    """Share of the tokens of `rows` (prompts, in send order) that hit the block cache."""
    total = sum(map(len, rows))
    return cache_replay(rows) / total if total else 0.0


def blocks_needed(num_tokens: int) -> int:
    """Blocks a prompt of `num_tokens` tokens holds while it is prefilled (its last block
    may be partial)."""
    return -(-num_tokens // BLOCK_SIZE)


def cache_replay(
    rows: list[list[int]],
    cache_blocks: int | None = None,
    hashes: list[list[int]] | None = None,
) -> int:
    """Prompt tokens of `rows` (token ids, in send order) served from the prefix cache when
    they are prefilled one at a time through the simulator's `BlockPool` with `cache_blocks`
    usable blocks (None: enough never to evict).

    Each prompt, as the engine admits it (`resources.sim.policies.base.ScheduleContext.allocate`):
    looks up its longest cached prefix (never its last token), references those blocks, takes
    new ones for the rest of its tokens from the head of the free queue (evicting the least
    recently freed cached block when no never-used or hash-less block is left), keys its full
    blocks, and frees them all when its prefill ends (one output token), tail first, to the
    back of the LRU queue. `hashes`: the rows' `block_hashes`, when the caller has them.
    Raises ValueError when a prompt needs more than `cache_blocks` blocks."""
    if hashes is None:
        hashes = [block_hashes(ids) for ids in rows]
    need = [blocks_needed(len(ids)) for ids in rows]
    if cache_blocks is None:
        cache_blocks = max(1, sum(need))
    if need and max(need) > cache_blocks:
        raise ValueError(f"a prompt needs {max(need)} blocks, the budget is {cache_blocks}")
    pool = BlockPool(cache_blocks + 1)  # block 0 is vLLM's null block
    hit = 0
    for ids, keys, n in zip(rows, hashes, need, strict=True):
        found = pool.lookup(keys, len(ids))
        pool.touch(found)
        new = pool.allocate(n - len(found))
        pool.register(new, keys[len(found) :])
        pool.free(found + new)
        hit += len(found) * BLOCK_SIZE
    return hit


def budget_blocks(
    rows: list[list[int]], fractions: list[float], hashes: list[list[int]] | None = None
) -> dict:
    """Prefix-cache budgets for a table whose prompts (in some reference order) are `rows`:
    `distinct_blocks` is the number of distinct full blocks among them (what a cache must hold
    never to evict in that order), `min_blocks` the most blocks one prompt holds (a budget can
    never be smaller), and `blocks[str(f)]` = max(ceil(f x distinct_blocks), min_blocks)."""
    if hashes is None:
        hashes = [block_hashes(ids) for ids in rows]
    distinct = len({h for keys in hashes for h in keys})
    floor = max((blocks_needed(len(ids)) for ids in rows), default=1)
    blocks = {str(f): max(math.ceil(f * distinct), floor) for f in fractions}
    return {"distinct_blocks": distinct, "min_blocks": floor, "blocks": blocks}
