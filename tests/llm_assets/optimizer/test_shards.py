"""Sharded planning (`optimizer.shards`, `optimizer.passes.sharded`): no group of rows sharing
the key's value spans two shards, every row lands in one shard, the hash is the same in every
process, and the merged plan holds exactly the input rows and answers as the one-process plan.
Each property has a negative twin: the same check on a sharding or a merge broken on purpose
(rows cut by row index, a shard's rows dropped) fails."""

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.optimizer.passes import Settings, StagePlan, optimize
from llm_assets.optimizer.passes import sharded as sharded_module
from llm_assets.optimizer.passes.sharded import merge_parts, optimize_sharded
from llm_assets.optimizer.prompts import PromptFormat, parse
from llm_assets.optimizer.schedule import validate_schedule
from llm_assets.optimizer.shards import (
    MAX_SHARDS,
    assign_shards,
    check_num_shards,
    shard_key,
    shard_positions,
    shard_rows,
    stable_hash,
)
from llm_assets.optimizer.table import render_cell
from tests.conftest import ROOT
from tests.llm_assets.optimizer.strategies import tables

K = st.integers(min_value=1, max_value=8)
PREFIX = st.one_of(st.none(), st.integers(min_value=1, max_value=3))


def spanning_groups(keys: list[str], shards: np.ndarray) -> list[str]:
    """Key values whose rows are in more than one shard (empty: the sharding is sound)."""
    seen: dict[str, set[int]] = {}
    for key, shard in zip(keys, shards.tolist(), strict=True):
        seen.setdefault(key, set()).add(shard)
    return [key for key, where in seen.items() if len(where) > 1]


def lands_once(shards: np.ndarray, num_shards: int, n: int) -> bool:
    """Every row in exactly one shard: one shard number per row, in range, and the
    positions per shard partition the rows."""
    positions = shard_positions(shards, num_shards)
    every = np.sort(np.concatenate(positions)) if positions else np.zeros(0, int)
    in_range = len(shards) == n and bool(((shards >= 0) & (shards < num_shards)).all())
    return in_range and np.array_equal(every, np.arange(n))


@settings(max_examples=150, deadline=None)
@given(table=tables(max_rows=12), num_shards=K, prefix=PREFIX)
def test_no_group_spans_two_shards_and_every_row_lands_once(table, num_shards, prefix):
    key = shard_key(table, list(table.columns))
    shards = shard_rows(table, key, num_shards, prefix)
    keys = [render_cell(v)[:prefix] if prefix else render_cell(v) for v in table[key]]
    assert spanning_groups(keys, shards) == []
    assert lands_once(shards, num_shards, len(table))


def test_the_checks_fail_on_a_sharding_by_row_index():
    """Negative twin: shard by row position (what a naive split does) and the group check
    goes red; drop a row and the landing check does."""
    table = pd.DataFrame({"genre": ["drama"] * 4 + ["noir"] * 4})
    by_index = np.arange(len(table)) % 2
    assert spanning_groups(table["genre"].tolist(), by_index) == ["drama", "noir"]
    assert not lands_once(by_index[:-1], 2, len(table))
    assert not lands_once(np.full(len(table), 2), 2, len(table))  # out of range


def test_the_key_is_the_head_of_ggrs_leftover_order():
    """A long repeated description beats a short code and an id (what GGR sorts on first)."""
    table = pd.DataFrame(
        {
            "id": [str(i) for i in range(6)],
            "code": ["a", "b", "a", "b", "a", "b"],
            "info": ["a long shared movie description"] * 3 + ["another long description"] * 3,
        }
    )
    assert shard_key(table, ["id", "code", "info"]) == "info"


def test_the_hash_is_the_same_in_every_process():
    """Not Python's salted hash: another interpreter with another PYTHONHASHSEED agrees."""
    values = ["drama", "", "caf\u00e9", "\ud800lone", "a\x00b"]
    script = (
        "from llm_assets.optimizer.shards import assign_shards, stable_hash\n"
        f"print(stable_hash({values!r}).tolist(), assign_shards({values!r}, 1000).tolist())"
    )
    here = f"{stable_hash(values).tolist()} {assign_shards(values, 1000).tolist()}"
    for seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                             text=True, check=True)  # fmt: skip
        assert out.stdout.strip() == here
    assert len(set(stable_hash(values).tolist())) == len(values)


@pytest.mark.parametrize("bad", [0, -1, MAX_SHARDS + 1, 2.5, True, "4", None])
def test_a_bad_shard_count_is_one_line_naming_it(bad):
    with pytest.raises(ValueError, match=f"from 1 to {MAX_SHARDS}, got {bad!r}"):
        check_num_shards(bad)


# ---- the merged plan -------------------------------------------------------------------


def stage(table: pd.DataFrame) -> StagePlan:
    fields = list(table.columns)
    template = "Rate " + " ".join(f"{{{f}}}" for f in fields)
    return StagePlan(table, tuple(fields), PromptFormat(parse(template, fields)))


def row_inputs(plan: StagePlan) -> list[tuple | None]:
    """Per row, the values of the input it is answered by (None: skipped), from the plan's
    coded inputs: what the row is sent as."""
    if plan.enc is None:  # nothing sent
        return [None] * plan.n_rows
    index = [plan.enc.fields.index(f) for f in plan.fields]
    return [
        None if i < 0 else tuple(plan.enc.cell(i, j) for j in index) for i in plan.ids().tolist()
    ]


def row_prompts(plan: StagePlan) -> list[str | None]:
    """Per row, the prompt that answers it (None: skipped)."""
    if not plan.prompts:
        return [None] * plan.n_rows
    by_input = {row: plan.prompts[k] for k, (row, _) in enumerate(plan.schedule)}
    return [by_input.get(i) for i in plan.ids().tolist()]


def expected_inputs(table: pd.DataFrame, skip) -> list[tuple | None]:
    return [
        None if skip[i] is not None else tuple(render_cell(v) for v in table.iloc[i])
        for i in range(len(table))
    ]


def check_merged(table: pd.DataFrame, num_shards: int) -> None:
    """The sharded plan holds exactly the input rows (each answered by an input equal to it,
    skipped rows as in one process), as many distinct inputs as one process dedups to, a
    valid schedule over them, and the same prompt per row when fields keep their order."""
    plan, fixed = stage(table), Settings(reorder_fields=False)
    one = optimize(plan, fixed)
    many = optimize_sharded(plan, fixed, num_shards)
    assert list(many.skipped()) == list(one.skipped())
    assert row_inputs(many) == expected_inputs(table, one.skipped())
    assert len(many.prompts) == len(one.prompts)
    if many.prompts:
        validate_schedule(many.schedule, many.enc.num_rows, many.enc.fields)
    assert row_prompts(many) == row_prompts(one)
    reordered = optimize_sharded(plan, Settings(), num_shards)  # fields free to move
    assert row_inputs(reordered) == expected_inputs(table, one.skipped())


@settings(max_examples=80, deadline=None)
@given(table=tables(max_rows=14), num_shards=K)
def test_the_merged_plan_holds_exactly_the_rows_and_answers_as_one_process(table, num_shards):
    check_merged(table, num_shards)


def test_the_merged_plan_check_fails_when_rows_are_sharded_by_index(monkeypatch):
    """Negative twin: shard by row index and duplicates land in two shards, so the merged
    plan sends one input twice (more prompts than one process) and the check goes red."""
    table = pd.DataFrame({"genre": ["drama", "drama", "noir", "noir"], "age": ["9"] * 4})
    check_merged(table, 2)
    monkeypatch.setattr(sharded_module, "shard_rows",
                        lambda t, key, k, prefix=None: np.arange(len(t)) % k)  # fmt: skip
    with pytest.raises(AssertionError):
        check_merged(table, 2)


def test_a_merge_missing_or_repeating_a_row_is_refused():
    table = pd.DataFrame({"genre": ["drama", "anime", "noir", "anime"]})
    plan, parts = stage(table), []
    sharded_module.optimize_sharded(plan, Settings(), 2, map_fn=lambda f, xs: parts.extend(
        map(f, xs)) or parts)  # fmt: skip
    skip, ids, schedule = merge_parts(len(table), parts)
    assert skip is None and sorted(schedule.rows.tolist()) == [0, 1, 2]
    with pytest.raises(ValueError, match="miss 1 of 4 rows"):
        merge_parts(len(table), [parts[0], type(parts[1])(parts[1].positions[:-1],
                    parts[1].input_ids[:-1], None, None)])  # fmt: skip
    with pytest.raises(ValueError, match="a row is in two shards"):
        merge_parts(len(table), [parts[0], parts[0], *parts[1:]])


def test_a_planned_stage_is_refused():
    plan = optimize(stage(pd.DataFrame({"genre": ["drama"]})), Settings())
    with pytest.raises(ValueError, match="before dedup and reorder"):
        optimize_sharded(plan, Settings(), 2)
