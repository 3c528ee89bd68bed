"""The prompt a model receives reads as the user wrote the template (issue 21 item 6):
`named` keeps the template word for word (placeholders included) before the field block,
`inline` puts each value in its placeholder's place and reorders rows only."""

import itertools
import os
from dataclasses import dataclass

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.optimizer import reorder
from llm_assets.optimizer.prompts import PromptFormat, parse, render_prompts
from llm_assets.optimizer.table import encode
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.plan import first_prompt, plan_stage
from llm_assets.pipeline.run import run_query
from llm_assets.sql.compiler import compile_sql
from resources.sim.engine import SimulatedEngine

TEMPLATE = "Given the movie genre {genre} and synopsis {synopsis}, is it for kids?"
VALUE = st.text(max_size=12)


ENGINE = SimulatedEngine()
INPUT, ROW = "_input_id", "_row"
"""The columns the planner keys rows and prompts by (`deduped` and the request plan)."""


def frame(rows):
    return pd.DataFrame(rows, columns=["genre", "synopsis"])


@dataclass(frozen=True)
class Planned:
    """The product's plan of one LLM call: `prompts` in submission order, `rows[k]` the first
    table row prompt k answers, `prompt_of_row[i]` the prompt answering table row i."""

    prompts: list[str]
    rows: list[int]
    prompt_of_row: list[str]


def planned(table, template, method="ggr", dedup=False, style="named") -> Planned:
    """`template` over `table` through the product's one planner (`plan_stage`: dedup, null
    policy, GGR, rendering, context fit), as `SELECT LLM(template, t.<fields>) FROM t`."""
    fields = ", ".join(f"t.{f}" for f in parse(template, list(table.columns)).fields)
    query = compile_sql(f"SELECT LLM('{template}', {fields}) FROM t", name="t")
    options = QueryOptions(method=method, dedup=dedup, prompt_style=style)
    rows = table.assign(**{ROW: range(len(table))})
    deduped, plan = plan_stage(query, query.llm_calls[0], rows, options, ENGINE, "t:llm")
    prompt_of = dict(zip(plan[INPUT], plan["prompt"], strict=True))
    first_row = deduped.drop_duplicates(INPUT).set_index(INPUT)[ROW]
    return Planned(
        list(plan["prompt"]),
        [int(first_row[i]) for i in plan[INPUT]],
        [prompt_of[i] for i in deduped[INPUT]],
    )


def test_named_style_keeps_the_template_as_written():
    plan = planned(frame([["Drama", "A long day."]]), TEMPLATE)
    assert plan.prompts[0].splitlines()[0] == TEMPLATE  # not "...genre genre and synopsis..."
    assert "genre: Drama" in plan.prompts[0] and "synopsis: A long day." in plan.prompts[0]


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(VALUE, VALUE), min_size=1, max_size=8))
def test_inline_puts_every_value_in_its_place_exactly(rows):
    plan = planned(frame(rows), TEMPLATE, style="inline")
    for row, (genre, synopsis) in enumerate(rows):
        expected = f"Given the movie genre {genre} and synopsis {synopsis}, is it for kids?"
        assert plan.prompt_of_row[row] == expected


def test_plan_maps_every_row_to_its_prompt():
    table = pd.DataFrame(
        {
            "movie_info": ["m1", "m2", "m1", "m1"],
            "review": ["good", "bad", "good", "meh"],
            "id": [1, 2, 3, 4],
        }
    )
    for dedup in (False, True):
        plan = planned(table, "Rate {review} given {movie_info}", dedup=dedup)
        assert len(plan.prompts) == (3 if dedup else 4)
        for row in range(4):
            prompt = plan.prompt_of_row[row]
            assert f"review: {table.review[row]}" in prompt
            assert f"movie_info: {table.movie_info[row]}" in prompt
        assert sorted(plan.rows) == ([0, 1, 3] if dedup else [0, 1, 2, 3])


def neighbour_sharing(prompts: list[str]) -> int:
    return sum(len(os.path.commonprefix(pair)) for pair in itertools.pairwise(prompts))


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.sampled_from(["a", "ab", "b", ""]), st.sampled_from(["x", "xy", "z"])),
        min_size=1,
        max_size=6,
    ),
    method=st.sampled_from(["ggr", "column_stats"]),
)
def test_inline_row_order_shares_as_much_as_any_order(rows, method):
    """Fields cannot move inline; the sorted row order is a depth-first order of the prompts'
    trie, so no permutation of the rows shares more with its neighbours (brute force)."""
    table = frame(rows)
    fmt = PromptFormat(parse(TEMPLATE, ["genre", "synopsis"]), "inline")
    schedule = reorder(encode(table, ["genre", "synopsis"]), method=method, fixed_fields=True)
    assert all(order == ["genre", "synopsis"] for _, order in schedule)
    assert sorted(schedule.rows.tolist()) == list(range(len(rows)))
    chosen = neighbour_sharing(render_prompts(table, schedule, fmt))
    everyone = [fmt.template.fill({"genre": g, "synopsis": s}) for g, s in rows]
    best = max(neighbour_sharing(list(p)) for p in itertools.permutations(everyone))
    assert chosen == best


def test_inline_original_keeps_file_order():
    rows = [["b", "x"], ["a", "y"], ["b", "z"]]
    plan = planned(frame(rows), TEMPLATE, method="original", style="inline")
    assert plan.rows == [0, 1, 2]


def test_inline_refuses_a_field_the_template_does_not_name():
    fmt = PromptFormat(parse("Is {genre} for kids?", ["genre", "synopsis"]), "inline")
    with pytest.raises(ValueError, match=r"does not name \['synopsis'\].*prompt_style 'named'"):
        fmt.column_order(["genre", "synopsis"])


def test_unknown_style_is_one_line():
    with pytest.raises(ValueError, match="unknown prompt style 'fancy'"):
        PromptFormat.plain("x", "fancy")


SQL = (
    "SELECT m.title, LLM('Is a {genre} movie about {plot} for kids?', m.genre, m.plot) AS kids "
    "FROM movies m"
)
MOVIES = pd.DataFrame(
    {
        "title": ["A", "B", "C", "D"],
        "genre": ["Drama", "Comedy", "Drama", "Horror"],
        "plot": ["{genre} a day", "laughs", "tears", "fear"],
    }
)


@pytest.mark.parametrize("style", ["named", "inline"])
def test_the_sent_prompts_read_as_written_end_to_end(style):
    query = compile_sql(SQL, name="kids")
    run = run_query(query, {"movies": MOVIES}, QueryOptions(prompt_style=style), SimulatedEngine())
    plan = run.stages[0].plan
    assert run.accounting["answered"] == len(MOVIES)
    sent = set(plan["prompt"])
    for genre, plot in zip(MOVIES["genre"], MOVIES["plot"], strict=True):
        if style == "inline":
            assert f"Is a {genre} movie about {plot} for kids?" in sent
        else:
            assert any(
                p.startswith("Is a {genre} movie about {plot} for kids?\n")
                and f"genre: {genre}" in p.splitlines()
                and f"plot: {plot}" in p.splitlines()
                for p in sent
            )
    assert first_prompt(plan) == plan["prompt"].iloc[0]


def test_named_lines_are_labelled_by_the_placeholder_not_the_column():
    """Two tables with a `genre` column: the staged column is `m__genre`, and the prompt
    still says `genre:`, as the template's `{genre}` does."""
    sql = (
        "SELECT r.genre, LLM('For kids? {genre} {plot}', m.genre, m.plot) AS k "
        "FROM movies m JOIN reviews r ON m.title = r.title"
    )
    query = compile_sql(sql, name="clash")
    reviews = pd.DataFrame({"title": ["A", "B"], "genre": ["x", "y"]})
    run = run_query(
        query, {"movies": MOVIES, "reviews": reviews}, QueryOptions(), SimulatedEngine()
    )
    assert "m__genre" in run.stages[0].deduped.columns
    lines = run.stages[0].plan["prompt"].iloc[0].splitlines()
    assert any(line.startswith("genre: ") for line in lines), lines
    assert not any(line.startswith("m__genre") for line in lines), lines
