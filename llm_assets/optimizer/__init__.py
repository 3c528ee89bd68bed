"""Pure optimizer passes: reorder rows and fields for prefix caching, dedup, metrics.

`reorder(table, fields, method)` is the one entry point the CLI, assets and benchmarks use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from llm_assets.optimizer.column_stats import column_stats_schedule
from llm_assets.optimizer.ggr import GGRConfig, ggr_schedule
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
) -> Schedule:
    """Schedule for `table` over `fields` (all columns by default) by `method`:
    `original` (file order, fields as given), `column_stats`, or `ggr`."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {list(METHODS)}")
    enc = table if isinstance(table, EncodedTable) else encode(table, fields, token_length)
    if method == "original":
        return Schedule.fixed(np.arange(enc.num_rows, dtype=np.int64), enc.fields)
    if method == "column_stats":
        return column_stats_schedule(enc)
    return ggr_schedule(enc, config=config)
