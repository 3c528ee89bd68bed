"""Pure optimizer: reorder rows and fields for prefix caching, dedup, prompts, metrics.

One LLM stage is planned by the rules of `optimizer.passes` (`optimize(plan, settings,
rules=RULES)`: nulls, dedup, reorder, render, context fit), which the pipeline, the CLI and
the benchmarks all use; `reorder(table, fields, method)` is the row/field order those rules
(and the reorder benchmarks) call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from llm_assets.optimizer.column_stats import column_stats_schedule
from llm_assets.optimizer.ggr import GGRConfig, ggr_schedule
from llm_assets.optimizer.metrics import char_hit_rate, row_strings, token_hit_rate
from llm_assets.optimizer.schedule import Schedule, validate_schedule
from llm_assets.optimizer.table import EncodedTable, TableLike, encode

METHODS = ("original", "column_stats", "ggr")

__all__ = [
    "METHODS",
    "EncodedTable",
    "GGRConfig",
    "Schedule",
    "encode",
    "reorder",
    "validate_schedule",
]


def reorder(
    table: TableLike | EncodedTable,
    fields: Sequence[str] | None = None,
    method: str = "ggr",
    config: GGRConfig | None = None,
    token_length: Callable[[str], int] | None = None,
    tokenizer: Callable[[str], Sequence[int]] | None = None,
    fixed_fields: bool = False,
    block_size: int | None = None,
) -> Schedule:
    """Schedule for `table` over `fields` (all columns by default) by `method`:
    `original` (file order, fields as given), `column_stats`, or `ggr`.

    `ggr` never does worse than the other two: it scores the greedy's schedule, file order
    and column statistics and returns the best (ties to the greedy), naming it in
    `method_used`. The score is the char hit rate, or with `tokenizer` (text -> token ids)
    the token hit rate in whole `block_size`-token blocks (the engine's KV block size, given
    with the tokenizer) of the rows rendered one value per line; the greedy then also weighs
    values by their token counts, unless `table` is already encoded (`token_length` alone
    only does that).

    With `fixed_fields` every row keeps the fields in the order given: `original` is file
    order, the other methods sort the rows by their values in that order (method_used
    "sorted"), a depth-first order of the rows' prefix trie, which no other row order beats
    on neighbour prefix sharing when fields cannot move."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {list(METHODS)}")
    if tokenizer is not None and block_size is None:
        raise ValueError("a tokenizer needs the engine's block_size (tokens per KV block)")
    if tokenizer is not None and token_length is None:
        token_length = lambda text: len(tokenizer(text))  # noqa: E731
    enc = table if isinstance(table, EncodedTable) else encode(table, fields, token_length)
    if fixed_fields:
        if method == "original":
            return replace(Schedule.fixed(np.arange(enc.num_rows), enc.fields), method_used=method)
        rows = np.lexsort(enc.codes.T[::-1]) if enc.fields else np.arange(enc.num_rows)
        return replace(Schedule.fixed(rows, enc.fields), method_used="sorted")
    candidates = {
        "original": lambda: Schedule.fixed(np.arange(enc.num_rows, dtype=np.int64), enc.fields),
        "column_stats": lambda: column_stats_schedule(enc),
        "ggr": lambda: ggr_schedule(enc, config=config),
    }
    if method != "ggr":
        return replace(candidates[method](), method_used=method)
    best, best_score = None, -1.0
    for name in ("ggr", "column_stats", "original"):
        schedule = candidates[name]()
        score = _hit_rate(enc, schedule, tokenizer, block_size)
        if score > best_score:
            best, best_score = replace(schedule, method_used=name), score
    return best


def _hit_rate(enc: EncodedTable, schedule: Schedule, tokenizer, block_size) -> float:
    if tokenizer is None:
        return char_hit_rate(enc, schedule)
    return token_hit_rate(row_strings(enc, schedule, sep="\n"), tokenizer, block_size)
