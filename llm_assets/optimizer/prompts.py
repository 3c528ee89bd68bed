"""Render a schedule into prompt texts (DESIGN.md section 4, "Prompt rendering").

The instruction comes first (the prefix every request shares), then the row's fields in the
schedule's order, either as `name: value` lines (`style="named"`, the model sees which field
is which) or as values only (`style="values"`, one per line; what the GGR authors' harness
scores). Cell text is inserted literally: braces or prompt-like text in a value are never
interpreted again.
"""

from __future__ import annotations

from llm_assets.optimizer.schedule import Pairs, Schedule
from llm_assets.optimizer.table import EncodedTable, TableLike, encode

STYLES = ("named", "values")


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
    out = []
    codes, uniques, names = enc.codes, enc.uniques, enc.fields
    for row, oid in zip(sched.rows.tolist(), sched.order_ids.tolist(), strict=True):
        r = codes[row]
        if style == "named":
            lines = [f"{names[j]}: {uniques[j][r[j]]}" for j in positions[oid]]
        else:
            lines = [uniques[j][r[j]] for j in positions[oid]]
        out.append(head + "\n".join(lines))
    return out
