import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from llm_assets.optimizer.dedup import dedup_prompts, dedup_rows
from llm_assets.optimizer.table import render_cell


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
