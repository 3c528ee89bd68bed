"""One stage planned in shards (issue 38 item 3): the rows are cut on the field GGR puts
first (`optimizer.shards`), the rules that decide which rows are sent, which share a request
and in what order (nulls, dedup, reorder: every rule before `render`) run on each shard on
its own, in parallel where `map_fn` runs them so (`resources.ray_executor.planning`: Ray
tasks), and the shards' plans are merged; the rules from `render` on (prompts, context fit)
run on the merged plan, as in one process.

>>> import pandas as pd
>>> from llm_assets.optimizer.passes import RULES, Settings, StagePlan, optimize
>>> from llm_assets.optimizer.prompts import PromptFormat, parse
>>> fmt = PromptFormat(parse("Kids? {genre} {age}", ["genre", "age"]))
>>> table = pd.DataFrame({"genre": ["drama", "anime", "drama", "noir"],
...                       "age": ["9", "9", "9", "12"]})
>>> plan = StagePlan(table, ("genre", "age"), fmt)
>>> fixed = Settings(reorder_fields=False)  # each prompt's fields as written
>>> sharded = optimize_sharded(plan, fixed, num_shards=2)
>>> sharded.input_ids.tolist(), len(sharded.prompts)
([0, 1, 0, 2], 3)
>>> sorted(sharded.prompts) == sorted(optimize(plan, fixed).prompts)
True

Invariants:
- every input row is in exactly one shard and keeps its values: the merged plan's
  `input_ids`, `skip` and prompts are those of the rows given (no row lost, added or
  altered); `input_ids` are numbered in first-occurrence order over the whole table, as
  `StagePlan` requires, and skipped rows carry their shard's reason;
- dedup per shard is the whole table's dedup: equal inputs hold the same key value, so they
  are in one shard (`optimizer.shards`);
- the merged schedule is the shards' schedules one after another (shard 0 first), each
  unchanged and contiguous.

What merging costs in prefix hits: each row keeps every hit it earns against the earlier
rows of its own shard's plan (they are earlier in the merged plan too, and a prefix cache
only gains from more earlier rows). Lost are at most the hits between rows of different
shards. Those rows hold different values of the key, the field the prompts' rows were sorted
on first, so what they share is at most the instruction (cached once for all) and a partial
prefix of the key's text; in a bounded (LRU) cache only the rows at the K - 1 seams between
consecutive shard plans are near enough to share even that. Apart from the merge, GGR's own
choices on a shard's rows can differ from its choices on the whole table where its pieces
(`GGRConfig.chunk_rows`, cut from the rows sorted on that same key first) are cut at other
rows; `benchmarks.sharded_plan` measures the sum of both against the one-process plan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from llm_assets.optimizer.passes.plan import Settings, StagePlan
from llm_assets.optimizer.passes.render import render
from llm_assets.optimizer.schedule import Schedule
from llm_assets.optimizer.shards import (
    check_num_shards,
    shard_key,
    shard_positions,
    shard_rows,
)
from llm_assets.optimizer.table import encode

MapFn = Callable[[Callable, Iterable], Iterable]
"""`map`'s signature: how the shards are planned (in turn, or as parallel tasks)."""

__all__ = ["ShardPlan", "merge_parts", "merge_shards", "optimize_sharded", "plan_shard",
           "split_rules"]  # fmt: skip


@dataclass(frozen=True)
class ShardPlan:
    """What planning one shard returns: arrays over its rows, no table and no prompts.
    Invariant: `input_ids[i]` is the shard's distinct input of its i-th row (numbered in
    first-occurrence order within the shard, -1 when skipped) and `schedule` orders those
    inputs."""

    positions: np.ndarray
    """The shard's rows: their positions in the whole stage's table, ascending."""
    input_ids: np.ndarray
    skip: np.ndarray | None
    """Object array per row: None or why it is not sent; None when no row is skipped."""
    schedule: Schedule | None


def split_rules(rules: Sequence) -> tuple[tuple, tuple]:
    """(the rules each shard runs: every one before `render`; the rest, run on the merged
    plan). Without `render`, every rule runs on the shards."""
    rules = tuple(rules)
    at = rules.index(render) if render in rules else len(rules)
    return rules[:at], rules[at:]


def plan_shard(
    shard: StagePlan, settings: Settings, rules: Sequence, positions: np.ndarray
) -> ShardPlan:
    """`rules` (before `render`, `split_rules`) over one shard's plan; `positions` are its
    rows' positions in the whole table (`ShardPlan.positions`)."""
    if len(positions) != shard.n_rows:
        raise ValueError(f"{len(positions)} positions for a shard of {shard.n_rows} rows")
    for rule in rules:
        shard = rule(shard, settings)
    skip = shard.skipped()
    return ShardPlan(
        np.asarray(positions, dtype=np.int64),
        shard.ids(),
        skip if not shard.live().all() else None,
        shard.schedule,
    )


def _plan_one(item: tuple[StagePlan, np.ndarray], settings: Settings, rules) -> ShardPlan:
    return plan_shard(item[0], settings, rules, item[1])


def merge_parts(num_rows: int, parts: Sequence[ShardPlan]):
    """(skip or None, input_ids, schedule or None) of the whole table of `num_rows` rows from
    its shards' plans, which must partition its rows. Input ids are renumbered in order of
    first occurrence over the table; the schedule is the shards' schedules in turn."""
    seen = np.zeros(num_rows, dtype=bool)
    for part in parts:
        if seen[part.positions].any() or len(np.unique(part.positions)) != len(part.positions):
            raise ValueError("shard plans overlap: a row is in two shards")
        seen[part.positions] = True
    if not seen.all():
        raise ValueError(f"shard plans miss {int((~seen).sum())} of {num_rows} rows")
    firsts = []  # per part: the table position of each of its inputs' first row
    for part in parts:
        live = part.input_ids >= 0
        ids = part.input_ids[live]
        running = np.maximum.accumulate(ids) if len(ids) else ids
        first = np.flatnonzero(np.r_[True, running[1:] > running[:-1]]) if len(ids) else ids
        firsts.append(part.positions[live][first])
    rank = np.empty(sum(map(len, firsts)), dtype=np.int64)
    rank[np.argsort(np.concatenate(firsts) if firsts else rank, kind="stable")] = np.arange(
        len(rank)
    )
    input_ids = np.full(num_rows, -1, dtype=np.int64)
    skip = None
    rows, order_ids, orders, at = [], [], {}, 0
    for part, first in zip(parts, firsts, strict=True):
        global_id = rank[at : at + len(first)]
        at += len(first)
        live = part.input_ids >= 0
        input_ids[part.positions[live]] = global_id[part.input_ids[live]]
        if part.skip is not None:
            skip = np.full(num_rows, None, dtype=object) if skip is None else skip
            skip[part.positions] = part.skip
        if part.schedule is not None:
            remap = np.array([orders.setdefault(o, len(orders)) for o in part.schedule.orders])
            rows.append(global_id[part.schedule.rows])
            order_ids.append(remap[part.schedule.order_ids].astype(np.int32))
    schedule = None
    if rows:
        used = {p.schedule.method_used for p in parts if p.schedule is not None}
        schedule = Schedule(np.concatenate(rows), np.concatenate(order_ids), tuple(orders),
                            ",".join(sorted(u for u in used if u)))  # fmt: skip
    return skip, input_ids, schedule


def merge_shards(plan: StagePlan, parts: Sequence[ShardPlan]) -> StagePlan:
    """`plan` with its shards' plans merged (`merge_parts`) and, when they were scheduled,
    `enc`: the distinct inputs coded in id order, in the field order the prompts read them
    (what the reorder pass leaves for `render`)."""
    skip, input_ids, schedule = merge_parts(plan.n_rows, parts)
    merged = replace(plan, skip=skip if skip is not None else plan.skip, input_ids=input_ids,
                     schedule=schedule, enc=None)  # fmt: skip
    if schedule is not None:
        order = plan.fmt.column_order(list(plan.fields)) if plan.fmt else list(plan.fields)
        merged = replace(merged, enc=encode(merged.inputs(), order))
    return merged


def optimize_sharded(
    plan: StagePlan,
    settings: Settings,
    num_shards: int,
    rules: Sequence | None = None,
    map_fn: MapFn = map,
    key: str | None = None,
    prefix_chars: int | None = None,
) -> StagePlan:
    """`plan` rewritten by `rules` (default `passes.RULES`) with the rows cut into
    `num_shards` shards on `key` (default `shard_key`: the field GGR puts first; with
    `prefix_chars`, on its first characters), the rules before `render` run per shard by
    `map_fn` (`map`: in turn, here; a Ray map: in parallel tasks), the results merged
    (`merge_shards`) and the other rules run on the merged plan. Shards without rows are not
    planned. The shards' settings carry no token counter (the rules they run count no
    tokens), so `map_fn` may ship them to other processes."""
    from llm_assets.optimizer.passes import RULES

    num_shards = check_num_shards(num_shards)
    if plan.input_ids is not None or plan.schedule is not None:
        raise ValueError("optimize_sharded plans a stage from its rows: give it a plan "
                         "before dedup and reorder")  # fmt: skip
    before, after = split_rules(RULES if rules is None else rules)
    if plan.n_rows == 0 or not plan.fields:
        positions = [np.arange(plan.n_rows)]
    else:
        key = key or shard_key(plan.table, plan.fields)
        shards = shard_rows(plan.table, key, num_shards, prefix_chars)
        positions = [p for p in shard_positions(shards, num_shards) if len(p)]
    items = [(_shard(plan, p), p) for p in positions]
    task = partial(_plan_one, settings=replace(settings, count_tokens=None), rules=before)
    merged = merge_shards(plan, list(map_fn(task, items)))
    for rule in after:
        merged = rule(merged, settings)
    return merged


def _shard(plan: StagePlan, positions: np.ndarray) -> StagePlan:
    """The plan of the rows at `positions` alone (its table re-indexed from 0)."""
    return StagePlan(
        plan.table.iloc[positions].reset_index(drop=True),
        plan.fields,
        plan.fmt,
        row_ids=plan.row_ids[positions] if plan.row_ids is not None else positions,
        skip=plan.skip[positions] if plan.skip is not None else None,
    )
