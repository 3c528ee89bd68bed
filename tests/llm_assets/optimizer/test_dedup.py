import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.optimizer.dedup import dedup_prompts, dedup_rows
from llm_assets.optimizer.table import encode, render_cell
from tests.llm_assets.optimizer.strategies import tables


def test_rows_map_back_to_first_occurrences():
    frame = pd.DataFrame({"a": ["x", "y", "x", "x"], "b": [1, 2, 1, 3]})
    result = dedup_rows(frame)
    assert result.distinct.tolist() == [0, 1, 3]
    assert result.inverse.tolist() == [0, 1, 0, 2]
    assert result.expand(["A", "B", "C"]) == ["A", "B", "A", "C"]
    assert result.num_duplicates == 1 and result.ratio == 0.75


def test_only_chosen_fields_count_and_nothing_is_normalised():
    frame = pd.DataFrame({"a": ["x", "x", "X "], "id": [1, 2, 3]})
    assert dedup_rows(frame, ["a"]).distinct.tolist() == [0, 2]


@given(st.lists(st.sampled_from(["p", "q", "r", "p q"]), max_size=30))
def test_prompt_dedup_invariants(prompts):
    result = dedup_prompts(prompts)
    distinct = [prompts[i] for i in result.distinct]
    assert len(set(distinct)) == len(distinct)
    assert [distinct[k] for k in result.inverse] == prompts
    assert list(result.distinct) == sorted(result.distinct)


@given(st.lists(st.tuples(st.sampled_from([None, 1, "1", True]), st.booleans()), max_size=20))
def test_row_dedup_matches_rendered_tuples(rows):
    frame = pd.DataFrame(rows, columns=["a", "b"], dtype=object)
    result = dedup_rows(frame)
    rendered = [tuple(render_cell(v) for v in row) for row in rows]
    assert len(result.distinct) == len(set(rendered))
    for i, k in enumerate(result.inverse):
        assert rendered[result.distinct[k]] == rendered[i]


@settings(max_examples=200, deadline=None)
@given(tables(max_rows=9, max_cols=3), st.booleans())
def test_the_dedup_pass_codes_the_distinct_inputs_as_coding_them_afresh(frame, reverse):
    """The dedup pass hands the later passes the distinct inputs coded (`enc`): the same
    codes, uniques and lengths as coding `inputs()` from scratch, in any field order."""
    from llm_assets.optimizer.passes import Settings, StagePlan, dedup
    from llm_assets.optimizer.prompts import PromptFormat

    fields = tuple(frame.columns)
    plan = dedup(StagePlan(frame, fields, PromptFormat.plain("Q")), Settings(null_policy="empty"))
    order = list(reversed(fields)) if reverse else list(fields)
    fresh, reused = encode(plan.inputs(), order), plan.enc.select(order)
    assert reused.fields == fresh.fields
    assert np.array_equal(reused.codes, fresh.codes)
    assert all(list(a) == list(b) for a, b in zip(reused.uniques, fresh.uniques, strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(reused.lengths, fresh.lengths, strict=True))
