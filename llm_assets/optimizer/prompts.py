"""Render a schedule into prompt texts (DESIGN.md section 4, "Prompt rendering").

A prompt is the system prompt (if any), then the user's template, then the row's values. Three
styles, all sending every value exactly as it is in the table (braces or prompt-like text in a
value are never interpreted again):

- `named` (the default): the template word for word, placeholders included (`{genre}` stays
  `{genre}` and refers to the `genre:` line below), then one `name: value` line per field in
  the order the schedule chose. Rows and fields are reordered for the prefix cache.
- `values`: the same with values only, one per line (what the GGR authors' harness scores).
- `inline`: the template with each value in its placeholder's place, exactly as written.
  Fields cannot move, so only rows are reordered (sorted in the template's field order: a
  depth-first order of the prompts' trie, the most neighbour sharing a fixed order allows).

>>> fmt = PromptFormat(parse("Is {genre} a fit for {age}?", ["genre", "age"]), "named")
>>> print(fmt.render(["age", "genre"], ["kids", "drama"]))
Is {genre} a fit for {age}?
age: kids
genre: drama
>>> PromptFormat(fmt.template, "inline").render(["age", "genre"], ["kids", "drama"])
'Is drama a fit for kids?'
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from llm_assets.optimizer.schedule import Pairs, Schedule
from llm_assets.optimizer.table import TRANSIENT, EncodedTable, TableLike, encode

STYLES = ("named", "values", "inline")

TRUNCATION_MARKER = " [truncated]"


@dataclass(frozen=True)
class Template:
    """A parsed LLM template. Invariant: `len(pieces) == len(slots) + 1`; the prompt text is
    pieces[0], slot 0, pieces[1], ..., with `{{`/`}}` already read as literal braces."""

    pieces: tuple[str, ...]
    slots: tuple[str, ...]

    @property
    def fields(self) -> list[str]:
        """The fields the template names, in order of first mention."""
        return list(dict.fromkeys(self.slots))

    def as_written(self) -> str:
        """The template with each placeholder shown as `{name}`."""
        return self.fill({s: f"{{{s}}}" for s in self.slots})

    def fill(self, values: Mapping[str, str]) -> str:
        """The template with each placeholder replaced by `values[name]`, inserted literally."""
        out = [self.pieces[0]]
        for slot, piece in zip(self.slots, self.pieces[1:], strict=True):
            out += [values[slot], piece]
        return "".join(out)


def parse(template: str, columns: Sequence[str]) -> Template:
    """Parse an LLM template whose `{field}` placeholders name `columns`.

    Raises ValueError naming the problem: unbalanced braces, an empty or formatted
    placeholder, a field that is not a column (listing the available ones), or no field.
    """
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"malformed template {template!r}: {exc}") from exc
    pieces, slots = [""], []
    for literal, name, spec, conversion in parts:
        pieces[-1] += literal
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
        slots.append(name)
        pieces.append("")
    if not slots:
        raise ValueError(f"template {template!r} names no column; write {{column}} for each")
    return Template(tuple(pieces), tuple(slots))


@dataclass(frozen=True)
class PromptFormat:
    """How one LLM call's prompts read: `system` (if any) on its own line, then the template
    in `style` (see the module docstring).

    `columns` maps a placeholder to the table columns holding its values, in order, when they
    are not the one column of the same name (a retrieval's `context` -> `context_1`, ...).
    In `named` style a single-column placeholder's line is labelled by the placeholder."""

    template: Template
    style: str = "named"
    system: str = ""
    columns: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise ValueError(f"unknown prompt style {self.style!r}; expected one of {list(STYLES)}")

    @classmethod
    def plain(cls, instruction: str, style: str = "named") -> PromptFormat:
        """An instruction without placeholders, before the field block."""
        return cls(Template((instruction,), ()), style)

    @property
    def reorders_fields(self) -> bool:
        """False for `inline`: the template fixes where each value goes."""
        return self.style != "inline"

    def column_order(self, columns: Sequence[str]) -> list[str]:
        """The field order to encode `columns` in: as given, or for `inline` the order the
        template reads them (ValueError, one line, if it does not name one of them)."""
        if self.reorders_fields:
            return list(columns)
        ordered = [c for s in self.template.fields for c in self.columns.get(s, (s,))]
        missing = [c for c in columns if c not in ordered]
        if missing:
            raise ValueError(
                f"prompt_style 'inline' sends only what the template names, and it does not "
                f"name {missing}: add a placeholder for each, or use prompt_style 'named'"
            )
        return [c for c in ordered if c in columns]

    def _head(self) -> str:
        instruction = self.template.as_written()
        if self.system:
            instruction = f"{self.system}\n{instruction}"
        return instruction.rstrip("\n") + "\n"

    def layout(self, names: Sequence[str]) -> list[str | int]:
        """A prompt for a row whose columns `names` hold its values, as pieces: a str is sent
        as written, an int k is the value of `names[k]`. `render` joins them; `render_prompts`
        joins them for many rows at once."""
        if self.style == "inline":
            index = {n: k for k, n in enumerate(names)}
            template = self.template
            out: list[str | int] = [f"{self.system}\n" if self.system else "", template.pieces[0]]
            for slot, piece in zip(template.slots, template.pieces[1:], strict=True):
                for m, column in enumerate(self.columns.get(slot, (slot,))):
                    out += ["\n"] if m else []
                    out.append(index[column])
                out.append(piece)
            return out
        out = [self._head()]
        labels = {cols[0]: s for s, cols in self.columns.items() if len(cols) == 1}
        for k, n in enumerate(names):
            line = "" if self.style == "values" else f"{labels.get(n, n)}: "
            out += [("\n" if k else "") + line, k]
        return out

    def render(self, names: Sequence[str], values: Sequence[str]) -> str:
        """One prompt for a row whose columns `names` hold `values`, in the schedule's order."""
        return "".join(p if isinstance(p, str) else values[p] for p in self.layout(names))


def fit_row(
    fmt: PromptFormat,
    names: Sequence[str],
    values: Sequence[str],
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
        return fmt.render(names, values)

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


RENDER_CHUNK = 1 << 20
"""Rows `render_prompts` joins at once in Arrow (bounds the joined buffer it holds)."""


def render_prompts(
    table: TableLike | EncodedTable, schedule: Pairs | Schedule, fmt: PromptFormat
) -> list[str]:
    """One prompt per scheduled row, in schedule order: each field order's `layout` joined
    column-wise in Arrow, `RENDER_CHUNK` rows at a time (no Python per row); a value Arrow
    cannot hold (a lone surrogate: not UTF-8) renders the rows one by one in Python, as
    `PromptFormat.render` does."""
    import pyarrow as pa

    sched = Schedule.from_pairs(schedule)
    enc = table if isinstance(table, EncodedTable) else encode(table, list(sched.orders[0]))
    index = {f: j for j, f in enumerate(enc.fields)}
    positions = [[index[f] for f in order] for order in sched.orders]
    try:
        return _render_arrow(enc, sched, fmt, positions)
    except (pa.ArrowException, UnicodeEncodeError):
        return _render_rows(enc, sched, fmt, positions)


def _render_arrow(enc, sched: Schedule, fmt: PromptFormat, positions) -> list[str]:
    """`render_prompts` in Arrow. A field with few distinct values (at most a quarter of the
    rows) goes to Arrow once and is taken from there; the values of any other field go to
    Arrow one chunk at a time (holding all of a mostly distinct column there took ~0.75 GB
    more at 10M rows)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    string = pa.large_string()
    few = len(sched.rows) // 4
    once = [
        pa.array(u, type=string, memory_pool=TRANSIENT) if len(u) <= few else None
        for u in enc.uniques
    ]

    def values(j: int, codes: np.ndarray):
        if once[j] is not None:
            return pc.take(once[j], codes, memory_pool=TRANSIENT)
        return pa.array(enc.uniques[j][codes], type=string, memory_pool=TRANSIENT)

    rows, order_ids = sched.rows, sched.order_ids
    out = np.empty(len(rows), dtype=object)
    for oid, cols in enumerate(positions):
        layout = fmt.layout([enc.fields[j] for j in cols])
        where = np.flatnonzero(order_ids == oid)
        for start in range(0, len(where), RENDER_CHUNK):
            at = where[start : start + RENDER_CHUNK]
            codes = enc.codes[rows[at]]
            parts = [
                pa.scalar(p, string) if isinstance(p, str) else values(cols[p], codes[:, cols[p]])
                for p in layout
            ]
            joined = pc.binary_join_element_wise(
                *parts, pa.scalar("", string), memory_pool=TRANSIENT
            )
            out[at] = joined.to_numpy(zero_copy_only=False)
    return out.tolist()


def _render_rows(enc, sched: Schedule, fmt: PromptFormat, positions) -> list[str]:
    """`render_prompts` one row at a time in Python."""
    names = [[enc.fields[j] for j in cols] for cols in positions]
    codes, uniques = enc.codes, enc.uniques
    out = []
    for row, oid in zip(sched.rows.tolist(), sched.order_ids.tolist(), strict=True):
        r = codes[row]
        values = [uniques[j][r[j]] for j in positions[oid]]
        out.append(fmt.render(names[oid], values))
    return out
