"""Token hit rate of a schedule under the simulator's vLLM block cache.

Each row becomes the prompt of the GGR authors' harness, its values one per line in the
schedule's field order (`prompts.PromptFormat` style "values" with no instruction), and
is tokenized (the Llama 3 tokenizer from ../shared/tokenizers when present, else the
simulator's approximation). Rows are sent in schedule order through a `BlockPool` large
enough never to evict (16-token blocks, chained hashes, a hit never covers the last token):
the token hit rate is the share of prompt tokens served from the cache.

Tokens are computed per distinct value (with its line end) and concatenated: exact where no
pre-tokenizer piece spans a line end, which `agreement` measures on a sample of rows.
"""

from __future__ import annotations

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
    hashes = [block_hashes(ids) for ids in rows]
    pool = BlockPool(max(1, sum(map(len, hashes))))
    hit = total = 0
    for ids, keys in zip(rows, hashes, strict=True):
        found = pool.lookup(keys, len(ids))
        pool.touch(found)
        new = pool.allocate(len(keys) - len(found))
        pool.register(new, keys[len(found) :])
        pool.free(found + new)
        hit += len(found) * BLOCK_SIZE
        total += len(ids)
    return hit / total if total else 0.0
