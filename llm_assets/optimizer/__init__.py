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

from llm_assets.optimizer import cell_hits
from llm_assets.optimizer.cell_hits import CellTexts, fixed_order_hit_rates, schedule_hit_rate
from llm_assets.optimizer.column_stats import column_stats_schedule, field_order
from llm_assets.optimizer.ggr import GGRConfig, ggr_schedule
from llm_assets.optimizer.metrics import row_strings, token_hit_rate
from llm_assets.optimizer.prompts import PromptFormat, render_prompts
from llm_assets.optimizer.quickgreedy import quick_greedy
from llm_assets.optimizer.schedule import Schedule, validate_schedule
from llm_assets.optimizer.table import EncodedTable, TableLike, encode

METHODS = ("original", "column_stats", "ggr")
AUTHORS_CELLS = 400
"""The safety net also scores the authors' QuickGreedy (`quickgreedy`) on tables of at most
this many cells (rows x fields): there the port costs about the greedy's CPU or less.
Measured on the six shapes of `benchmarks.lib.shapes`, 3 seeds each, median of 5, port /
greedy CPU: 0.23-0.46 at 10 rows, 0.27-0.89 at 25 rows (100-400 cells), 0.60-1.26 at 50 rows
(200-800 cells), 0.45-2.32 at 100 rows; at most 400 cells 0.23-1.18 (claims, 100 x 4)."""

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
    fmt: PromptFormat | None = None,
) -> Schedule:
    """Schedule for `table` over `fields` (all columns by default) by `method`:
    `original` (file order, fields as given), `column_stats`, or `ggr`.

    `ggr` never does worse than the other two: it scores the greedy's schedule, file order
    and column statistics, and on tables of at most `AUTHORS_CELLS` cells the authors'
    QuickGreedy (`quickgreedy`, method_used "authors_ggr"), and returns the best (ties to
    the greedy), naming it in `method_used`. The score is the char hit rate, or with
    `tokenizer` (text -> token ids) the token hit rate in whole `block_size`-token blocks
    (the engine's KV block size, given with the tokenizer) of the rows rendered one value per
    line, or with `fmt` as the prompts `fmt` renders (`render_prompts`, the texts sent); the
    greedy then also weighs values by their token counts, unless `table` is already encoded
    (`token_length` alone only does that). So with `tokenizer`, `block_size` and `fmt` the
    engine's own, the schedule returned has a token hit rate, as an unbounded prefix cache of
    that engine counts it (`metrics.token_hit_rate`), at least file order's; the char hit
    rate does not promise that (a char-better order can share fewer whole blocks).

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
    if enc.num_rows * len(enc.fields) <= AUTHORS_CELLS:
        candidates["authors_ggr"] = lambda: quick_greedy(enc)
    if tokenizer is None:
        return _best_by_char_rate(enc, candidates)
    memo: dict[str, Sequence[int]] = {}  # candidates share most texts: tokenize each once
    tokenizer = _memoised(tokenizer, memo)
    best, best_score = None, -1.0
    for name in ("ggr", "column_stats", "original", "authors_ggr"):
        if name not in candidates:
            continue
        schedule = candidates[name]()
        score = _hit_rate(enc, schedule, tokenizer, block_size, fmt)
        if score > best_score:
            best, best_score = replace(schedule, method_used=name), score
    return best


def _best_by_char_rate(enc: EncodedTable, candidates: dict) -> Schedule:
    """The candidate of best char hit rate, ties to the greedy, then column statistics, then
    file order, then the authors' QuickGreedy (where `candidates` has it). The rate of a
    fixed-order candidate depends only on each row's field order, so those two are scored
    from their field orders alone, on cells gathered once (`fixed_order_hit_rates`; file
    order only where it differs from column statistics' order, else it ties and loses), and
    only the winner's rows are ordered; the two schedules are scored whole."""
    greedy = candidates["ggr"]()
    names, orders = ["column_stats"], [field_order(enc)]
    if orders[0] != list(range(len(enc.fields))):
        names.append("original")
        orders.append(list(range(len(enc.fields))))
    cells = CellTexts(enc) if enc.num_rows >= cell_hits.CELL_ROWS else None
    best, best_score = "ggr", schedule_hit_rate(enc, greedy, cells)
    for name, score in zip(names, fixed_order_hit_rates(enc, orders, cells), strict=True):
        if score > best_score:
            best, best_score = name, score
    kept = greedy
    if "authors_ggr" in candidates:
        authors = candidates["authors_ggr"]()
        if schedule_hit_rate(enc, authors, cells) > best_score:
            best, kept = "authors_ggr", authors
    if best in ("column_stats", "original"):
        kept = candidates[best]()
    return replace(kept, method_used=best)


def _memoised(tokenizer, memo: dict) -> Callable[[str], Sequence[int]]:
    def ids(text: str) -> Sequence[int]:
        got = memo.get(text)
        if got is None:
            got = memo[text] = tokenizer(text)
        return got

    return ids


def _hit_rate(enc: EncodedTable, schedule: Schedule, tokenizer, block_size, fmt) -> float:
    """Token hit rate of `schedule` (its prompts under `fmt`, else one value per line): it
    depends on the row order (a row whose every block an earlier row holds hits all but its
    last), so each candidate is scored whole."""
    if fmt is None:
        texts = row_strings(enc, schedule, sep="\n")
    else:
        texts = render_prompts(enc, schedule, fmt)
    return token_hit_rate(texts, tokenizer, block_size)
