"""Render a schedule into prompt texts (DESIGN.md section 4, "Prompt rendering").

The instruction comes first (the prefix every request shares), then the row's fields in the
schedule's order, either as `name: value` lines (`style="named"`, the model sees which field
is which) or as values only (`style="values"`, one per line; what the GGR authors' harness
scores). Cell text is inserted literally: braces or prompt-like text in a value are never
interpreted again.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from llm_assets.optimizer.schedule import Pairs, Schedule
from llm_assets.optimizer.table import EncodedTable, TableLike, column_names, encode

STYLES = ("named", "values")


TRUNCATION_MARKER = " [truncated]"


def render_row(head: str, names: Sequence[str], values: Sequence[str], style: str) -> str:
    """One prompt: `head` (the instruction, newline-terminated), then one line per field."""
    if style == "named":
        return head + "\n".join(f"{n}: {v}" for n, v in zip(names, values, strict=True))
    return head + "\n".join(values)


def fit_row(
    head: str,
    names: Sequence[str],
    values: Sequence[str],
    style: str,
    count_tokens: Callable[[str], int],
    max_tokens: int,
) -> str | None:
    """The row's prompt with its longest value cut (and marked `TRUNCATION_MARKER`) just
    enough to fit `max_tokens`; None if even an empty longest value does not fit."""
    values = list(values)
    longest = max(range(len(values)), key=lambda k: len(values[k]))
    text = values[longest]

    def prompt(keep: int) -> str:
        values[longest] = text[:keep] + TRUNCATION_MARKER
        return render_row(head, names, values, style)

    if count_tokens(prompt(0)) > max_tokens:
        return None
    lo, hi = 0, len(text)  # invariant: prompt(lo) fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(prompt(mid)) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return prompt(lo)


def render_prompts(
    table: TableLike | EncodedTable,
    schedule: Pairs | Schedule,
    instruction: str,
    style: str = "named",
) -> list[str]:
    """One prompt per scheduled row, in schedule order."""
    if style not in STYLES:
        raise ValueError(f"unknown prompt style {style!r}; expected one of {list(STYLES)}")
    sched = Schedule.from_pairs(schedule)
    enc = table if isinstance(table, EncodedTable) else encode(table, list(sched.orders[0]))
    index = {f: j for j, f in enumerate(enc.fields)}
    positions = [[index[f] for f in order] for order in sched.orders]
    head = instruction.rstrip("\n") + "\n"
    names = [[enc.fields[j] for j in cols] for cols in positions]
    codes, uniques = enc.codes, enc.uniques
    out = []
    for row, oid in zip(sched.rows.tolist(), sched.order_ids.tolist(), strict=True):
        r = codes[row]
        values = [uniques[j][r[j]] for j in positions[oid]]
        out.append(render_row(head, names[oid], values, style))
    return out


def parse_template(template: str, columns: Sequence[str]) -> tuple[str, list[str]]:
    """Split an LLM template into (instruction, fields it names, in order of first mention).

    `{field}` placeholders name columns; in the instruction they read as the bare field name
    (the values follow the instruction, in the schedule's order). `{{` and `}}` are literal
    braces. Raises ValueError naming the problem: unbalanced braces, an empty or formatted
    placeholder, a field that is not a column (listing the available ones), or no field.
    """
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"malformed template {template!r}: {exc}") from exc
    fields: list[str] = []
    text = []
    for literal, name, spec, conversion in parts:
        text.append(literal)
        if name is None:
            continue
        if not name or spec or conversion:
            raise ValueError(
                f"malformed placeholder in template {template!r}: write {{column}} with a "
                f"column name and nothing else"
            )
        if name not in columns:
            raise ValueError(
                f"template names unknown column {name!r}; available columns: {list(columns)}"
            )
        text.append(name)
        if name not in fields:
            fields.append(name)
    if not fields:
        raise ValueError(f"template {template!r} names no column; write {{column}} for each")
    return "".join(text), fields


@dataclass(frozen=True)
class PromptPlan:
    """Prompts in submission order. Invariants: `rows[k]` is the original row of prompt k;
    every original row i is answered by prompt `prompt_of_row[i]` (several rows may share
    one prompt when deduplicated)."""

    prompts: list[str]
    rows: np.ndarray
    prompt_of_row: np.ndarray
    fields: list[str]
    instruction: str


def plan_prompts(
    table: TableLike,
    template: str,
    method: str = "ggr",
    dedup: bool = False,
    style: str = "named",
    token_length=None,
) -> PromptPlan:
    """Render `template` over `table`: optional exact dedup of the inputs, then reorder rows
    and fields by `method`, then render prompts in schedule order."""
    from llm_assets.optimizer import reorder
    from llm_assets.optimizer.dedup import dedup_rows

    instruction, fields = parse_template(template, column_names(table))
    enc = encode(table, fields, token_length)
    n = enc.num_rows
    kept = np.arange(n, dtype=np.int64)
    inverse = kept
    if dedup:
        result = dedup_rows(enc)
        kept, inverse = result.distinct, result.inverse
    sub = EncodedTable(enc.fields, enc.codes[kept], enc.uniques, enc.lengths)
    schedule = reorder(sub, method=method)
    prompts = render_prompts(sub, schedule, instruction, style)
    rows = kept[schedule.rows]
    position = np.empty(len(kept), dtype=np.int64)
    position[schedule.rows] = np.arange(len(kept))
    return PromptPlan(prompts, rows, position[inverse], fields, instruction)
