"""What the optimizer passes rewrite: one LLM stage's plan (`StagePlan`) and the settings they
read (`Settings`). Both are immutable; a pass returns a new plan (`dataclasses.replace`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from llm_assets.optimizer.prompts import PromptFormat
from llm_assets.optimizer.schedule import Schedule
from llm_assets.optimizer.table import EncodedTable

NullPolicy = Literal["skip", "empty", "fail"]
ContextPolicy = Literal["fail", "truncate"]
NULL_POLICIES: tuple[str, ...] = NullPolicy.__args__
CONTEXT_POLICIES: tuple[str, ...] = ContextPolicy.__args__


@dataclass(frozen=True)
class Settings:
    """The knobs of the passes (the query's options that concern one stage)."""

    method: str = "ggr"
    """Row/field order: `original`, `column_stats` or `ggr` (`optimizer.reorder`)."""
    reorder_fields: bool = True
    """False: every prompt keeps the fields in the written order; only rows move."""
    dedup: bool = True
    """One request per distinct input (exact match on every field)."""
    null_policy: str = "skip"
    """A null in a field: `skip` the row (with a reason), send it `empty`, or `fail`."""
    max_prompt_tokens: int | None = None
    """The context window minus the output budget; None: no check."""
    count_tokens: Callable[[str], int] | None = None
    """The engine's token counter (with `max_prompt_tokens`)."""
    tokens_within_chars: bool = False
    """`count_tokens(text) <= len(text)` for every text (the engine's promise): a prompt of at
    most `max_prompt_tokens` characters fits without being counted."""
    tokenize: Callable[[str], Sequence[int]] | None = None
    """The engine's token ids (with `block_size`): the reorder pass then picks among its
    candidate orders by the token hit rate of the prompts as sent, in whole blocks, the unit
    the engine's prefix cache counts; None: by char hit rate."""
    block_size: int | None = None
    """Tokens per KV block of the engine's prefix cache (with `tokenize`)."""
    context_policy: str = "fail"
    """A prompt over `max_prompt_tokens`: `fail` it, or `truncate` its longest field."""

    def __post_init__(self) -> None:
        if self.null_policy not in NULL_POLICIES:
            raise ValueError(
                f"unknown null policy {self.null_policy!r}; expected one of {NULL_POLICIES}"
            )
        if self.context_policy not in CONTEXT_POLICIES:
            raise ValueError(
                f"unknown context policy {self.context_policy!r}; expected one of "
                f"{CONTEXT_POLICIES}"
            )


@dataclass(frozen=True)
class StagePlan:
    """One LLM stage: its input rows and, as the passes fill them in, which rows are skipped,
    which share a request, the order requests go in, and their prompts.

    Invariants: `table` has one row per input row (positional; `row_ids` are the caller's
    numbers for them, used in messages); `skip[i]` is None or why row i is not sent;
    `input_ids[i]` is row i's distinct input (0..n-1 in order of first occurrence), -1 when
    skipped; `enc` holds the distinct inputs in id order (row k is input k) and `schedule`
    orders them; `prompts`, `truncated` and `errors` follow the schedule."""

    table: pd.DataFrame
    fields: tuple[str, ...]
    fmt: PromptFormat | None
    """How the prompts read (None for the passes before the prompts: nulls, dedup)."""
    row_ids: np.ndarray | None = None
    skip: np.ndarray | None = None
    """Object array, one entry per row: None, or why the row is not sent."""
    input_ids: np.ndarray | None = None
    enc: EncodedTable | None = None
    schedule: Schedule | None = None
    prompts: tuple[str, ...] | None = None
    truncated: tuple[bool, ...] | None = None
    errors: tuple[str | None, ...] | None = field(default=None)

    @property
    def n_rows(self) -> int:
        return len(self.table)

    def row_id(self, i: int) -> int:
        return int(self.row_ids[i]) if self.row_ids is not None else i

    def skipped(self) -> np.ndarray:
        """Per row, why it is not sent (None: sent); nothing skipped before a pass says so."""
        return self.skip if self.skip is not None else np.full(self.n_rows, None, dtype=object)

    def live(self) -> np.ndarray:
        """Per row, True when it is sent (no skip reason); vectorised, no per-row Python."""
        return pd.isna(self.skipped())

    def ids(self) -> np.ndarray:
        """Per row, its distinct input id (-1: skipped); without dedup, one input per row."""
        if self.input_ids is not None:
            return self.input_ids
        live = self.live()
        ids = np.full(self.n_rows, -1, dtype=np.int64)
        ids[live] = np.arange(int(live.sum()))
        return ids

    def inputs(self) -> pd.DataFrame:
        """The distinct inputs' field values, input k in row k (its first row's values)."""
        ids = self.ids()
        live = np.flatnonzero(ids >= 0)
        _, first = np.unique(ids[live], return_index=True)
        return self.table.iloc[live[first]][list(self.fields)].reset_index(drop=True)
