import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.optimizer.dedup import dedup_prompts, dedup_rows
from llm_assets.optimizer.table import encode, factorize_strings, render_cell, resolve_fields


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, ""),
        (float("nan"), ""),
        (pd.NA, ""),
        (True, "True"),
        (np.bool_(False), "False"),
        (3, "3"),
        (np.int64(-7), "-7"),
        (2.5, "2.5"),
        (3.0, "3.0"),
        ("{name} }{", "{name} }{"),
        (b"bytes", "\\x6279746573"),  # binary as hex, never decoded (issue 36)
        ([1, 2], "[1,2]"),  # nested values are compact JSON
    ],
)
def test_render_cell_rules(value, text):
    assert render_cell(value) == text


def test_pandas_and_arrow_encode_the_same():
    frame = pd.DataFrame(
        {"s": ["b", None, "a", "b"], "i": [1, 2, 2, 1], "f": [0.5, math.nan, 0.5, 1.0]}
    )
    arrow = pa.table({"s": ["b", None, "a", "b"], "i": [1, 2, 2, 1], "f": [0.5, None, 0.5, 1.0]})
    a, b = encode(frame), encode(arrow)
    assert a.fields == b.fields == ("s", "i", "f")
    for j in range(3):
        assert [a.cell(r, j) for r in range(4)] == [b.cell(r, j) for r in range(4)]
    assert [a.cell(r, 0) for r in range(4)] == ["b", "", "a", "b"]
    assert [a.cell(r, 2) for r in range(4)] == ["0.5", "", "0.5", "1.0"]


def test_codes_follow_string_order_and_lengths():
    enc = encode(pd.DataFrame({"x": ["pear", "apple", "fig", "apple"]}))
    assert list(enc.uniques[0]) == ["apple", "fig", "pear"]
    assert enc.codes[:, 0].tolist() == [2, 0, 1, 0]
    assert enc.lengths[0].tolist() == [5, 3, 4]


def test_token_lengths_replace_characters():
    enc = encode(pd.DataFrame({"x": ["a b c", "d"]}), token_length=lambda s: len(s.split()))
    assert sorted(enc.lengths[0].tolist()) == [1, 3]


def test_unknown_field_names_the_available_columns():
    with pytest.raises(KeyError, match=r"unknown field\(s\) \['nope'\]; available columns"):
        resolve_fields(pd.DataFrame({"a": [1]}), ["a", "nope"])


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(
        st.text(
            alphabet=st.sampled_from(
                ["a", "b", "\x00", "é", "\U0001f600", "\ud800", "\udfff", "\uffff"]
            ),
            max_size=4,
        ),
        max_size=12,
    ),  # fmt: skip
    sort=st.booleans(),
)
def test_factorize_strings_keeps_values_that_differ_after_a_nul(values, sort):
    """pandas' hash table stops at NUL ('a\\x00b' == 'a\\x00c' there) and takes strings
    with different lone surrogates for one ('\\ud800a' == '\\ud800b'); codes must not. Codes
    follow first occurrence, or Python's sort order with `sort`."""
    array = np.empty(len(values), dtype=object)
    array[:] = values
    codes, uniques = factorize_strings(array, sort=sort)
    assert [uniques[c] for c in codes] == values
    assert len(uniques) == len(set(values))
    assert list(uniques) == (sorted(set(values)) if sort else list(dict.fromkeys(values)))


def test_rows_that_differ_after_a_nul_are_not_deduplicated():
    frame = pd.DataFrame({"v": ["a\x00b", "a\x00c", "a\x00b"]})
    assert dedup_rows(frame, ["v"]).inverse.tolist() == [0, 1, 0]
    surrogates = pd.DataFrame({"v": ["\ud800a", "\ud800b", "\ud800a"]})
    assert dedup_rows(surrogates, ["v"]).inverse.tolist() == [0, 1, 0]
    assert dedup_prompts(["x\x00y", "x\x00z"]).inverse.tolist() == [0, 1]


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(
        st.one_of(
            st.none(),
            st.lists(st.integers(-5, 5), max_size=4),  # (pandas makes ints with nulls floats)
        ),
        min_size=1,
        max_size=6,
    )
)
def test_nested_cells_render_as_the_same_json_from_arrow_and_pandas(values):
    """Issue 22 item 10: a Parquet list reached the prompt as numpy text (`[1 2]`) through
    pandas and as Python text through Arrow; both are compact JSON now."""
    import json

    table = pa.table({"v": pa.array(values, type=pa.list_(pa.int64()))})
    from_arrow = encode(table, ["v"])
    from_pandas = encode(table.to_pandas(), ["v"])
    arrow_cells = [from_arrow.cell(i, 0) for i in range(len(values))]
    assert arrow_cells == [from_pandas.cell(i, 0) for i in range(len(values))]
    for cell, value in zip(arrow_cells, values, strict=True):
        assert cell == ("" if value is None else json.dumps(value, separators=(",", ":")))


def test_a_struct_cell_is_compact_json_with_text_as_written():
    table = pa.table({"s": pa.array([{"x": 1.5, "y": "é {b}"}])})
    assert render_cell(table.column("s").to_pylist()[0]) == '{"x":1.5,"y":"é {b}"}'


def test_select_reorders_every_field_and_refuses_a_subset():
    enc = encode(pd.DataFrame({"a": ["x", "y"], "b": ["1", "1"]}))
    swapped = enc.select(["b", "a"])
    assert swapped.fields == ("b", "a") and swapped.cell(1, 1) == "y" == enc.cell(1, 0)
    with pytest.raises(ValueError, match=r"select needs every field of \['a', 'b'\]"):
        enc.select(["a"])


def test_object_array_keeps_each_element_whole():
    from llm_assets.optimizer.table import object_array

    for values in (["ab", "cd"], [("a", "b"), ("c", "d")], [None, "x"], []):
        out = object_array(values)
        assert out.dtype == object and out.shape == (len(values),)
        assert out.tolist() == list(values)
