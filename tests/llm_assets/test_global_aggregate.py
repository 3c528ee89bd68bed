"""An aggregate without GROUP BY (issue 21, item 2): `SELECT AVG(LLM(...)) FROM t` answers one
row, `COUNT(*)` may stand beside an LLM aggregate (or alone), and an aggregate form that stays
unsupported is refused when the definitions load, before a request is sent.

Expected values never come from the code under test: either from the input table (an engine
that answers the number written in each review) or from the `result` frame's answers.
"""

from __future__ import annotations

import json
import math
import re

import dagster as dg
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.resources import resources_for
from llm_assets import llm_query_assets
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.results import answer_records, run_answer
from llm_assets.pipeline.rows import INPUT
from llm_assets.pipeline.run import run_query
from llm_assets.sql.compiler import SQLError, compile_sql
from resources.llm_resources import LLMEngineResource
from resources.sim.engine import SimulatedEngine
from tests.llm_assets.answering import AnsweringEngine

STARS = "LLM('Stars between 1 and 5 for {review}', r.review, output => 'number(1,5)')"
ABOUT_FILM = "LLM('Is {review} about a movie?', r.review, output => 'choice(Yes,No)') = 'Yes'"
# 9 rows; reviews 2 and 7 are duplicates (one request, two rows); row 5's review is null
TABLE = pd.DataFrame(
    {
        "id": list(range(1, 10)),
        "rating": [5, 1, 4, 2, 3, 5, 1, 4, 2],
        "review": [
            "stars=5 a film to love",
            "stars=1 dull film",
            "stars=4 good book",
            "stars=2 weak film",
            None,
            "stars=5 best film ever",
            "stars=1 dull film",
            "stars=3 fine book",
            "stars=2 weak plot, film",
        ],
    }
)


def answer(request) -> str:
    """A number output answers the `stars=N` written in the review, a Yes/No choice whether
    the review mentions a film."""
    if request.output.kind == "number":
        return re.search(r"stars=(\d)", request.prompt).group(1)
    return "Yes" if "film" in request.prompt else "No"


def ReadsTheReview() -> AnsweringEngine:  # noqa: N802 - reads as the engine it builds
    return AnsweringEngine(answer)


class ReadsTheReviewResource(LLMEngineResource):
    def build_engine(self):
        return ReadsTheReview()


def expected(function: str, values: list[float]) -> float | int | None:
    """SQL's value of `function` over `values` (null over no value, COUNT 0)."""
    if function == "COUNT":
        return len(values)
    if not values:
        return None
    return {"AVG": sum(values) / len(values), "SUM": sum(values), "MIN": min(values)}.get(
        function, max(values)
    )


def same(value, want) -> bool:
    if want is None:
        return value is None or (isinstance(value, float) and math.isnan(value))
    return value == pytest.approx(want)


def table_rows(where_rating: int | None, film_only: bool) -> pd.DataFrame:
    """The rows of TABLE the WHERE keeps, which the aggregate reads (issue 35 item 2), read
    from the table itself: the non-LLM predicate, the LLM filter (a null review is not kept
    by it: NULL = 'Yes' is not true). Without the filter a null review is kept: COUNT(*)
    counts it, its stars are NULL (`stars_of` leaves it out)."""
    rows = TABLE
    if where_rating is not None:
        rows = rows[rows["rating"] >= where_rating]
    if film_only:
        rows = rows[rows["review"].fillna("").str.contains("film")]
    return rows


def stars_of(rows: pd.DataFrame) -> list[float]:
    return [float(re.search(r"stars=(\d)", r).group(1)) for r in rows["review"].dropna()]


def where_clause(where_rating: int | None, film_only: bool) -> str:
    conjuncts = ([f"r.rating >= {where_rating}"] if where_rating is not None else []) + (
        [ABOUT_FILM] if film_only else []
    )
    return f" WHERE {' AND '.join(conjuncts)}" if conjuncts else ""


# ---- the pipeline path (`run_query`, what `llm-assets run` calls) ------------------------------


@pytest.mark.parametrize("function", ["AVG", "SUM", "MIN", "MAX", "COUNT"])
@pytest.mark.parametrize(("where_rating", "film_only"), [(None, False), (2, False), (2, True)])
@pytest.mark.parametrize("count_star", [False, True])
def test_an_llm_aggregate_without_group_by_answers_one_row(
    function, where_rating, film_only, count_star
):
    sql = (
        f"SELECT {function}({STARS}) AS value{', COUNT(*) AS n' * count_star} FROM reviews r"
        f"{where_clause(where_rating, film_only)}"
    )
    engine = ReadsTheReview()
    run = run_query(compile_sql(sql, name="q"), {"reviews": TABLE}, QueryOptions(), engine)
    rows = table_rows(where_rating, film_only)
    assert list(run.answer.columns) == ["value", "n"][: 1 + count_star]
    assert len(run.answer) == 1
    assert same(run.answer["value"].iloc[0], expected(function, stars_of(rows))), rows
    if count_star:
        assert run.answer["n"].iloc[0] == len(rows)
    assert engine.sent > 0


def test_the_aggregate_agrees_with_the_result_frame_on_the_simulated_engine():
    """The plain simulated engine: the expected values are read from `result`'s answers."""
    sql = f"SELECT COUNT(*) AS n, AVG({STARS}) AS avg_stars FROM reviews r WHERE r.rating >= 2"
    run = run_query(
        compile_sql(sql, name="q"), {"reviews": TABLE}, QueryOptions(), SimulatedEngine()
    )
    kept = run.result[run.result["passed"]]
    reached = kept[kept["status"] == "answered"]
    call = run.stages[0].call.name
    answers = [float(a) for a in reached[call]]
    assert len(run.answer) == 1
    assert run.answer["n"].iloc[0] == len(kept) == 7  # 7 ratings >= 2, one a null review
    assert len(answers) == 6 and kept.loc[kept["status"] == "skipped", call].isna().all()
    assert run.answer["avg_stars"].iloc[0] == pytest.approx(sum(answers) / len(answers))
    # and the result frame accounts for llm_outputs' answers row by row
    outputs = run.stages[0].outputs.dropna(subset=["answer"])
    assert set(outputs["answer"].astype(float)) == set(answers)


def test_count_star_alone_counts_the_rows_an_llm_filter_keeps():
    sql = f"SELECT COUNT(*) AS films FROM reviews r WHERE {ABOUT_FILM}"
    run = run_query(
        compile_sql(sql, name="q"), {"reviews": TABLE}, QueryOptions(), ReadsTheReview()
    )
    assert run.answer.to_dict("records") == [{"films": len(table_rows(None, True))}]


def test_count_star_beside_an_llm_aggregate_with_group_by():
    sql = f"SELECT r.rating, COUNT(*) AS n, MAX({STARS}) AS best FROM reviews r GROUP BY r.rating"
    run = run_query(
        compile_sql(sql, name="q"), {"reviews": TABLE}, QueryOptions(), ReadsTheReview()
    )
    rows = table_rows(None, False)
    want = [  # rating 3 holds only the null review: counted, its MAX is NULL
        {"rating": rating, "n": len(group), "best": max(stars_of(group), default=None)}
        for rating, group in sorted(rows.groupby("rating"), key=lambda kv: kv[0])
    ]
    got = [
        {
            "rating": int(r["rating"]),
            "n": int(r["n"]),
            "best": None if pd.isna(r["best"]) else float(r["best"]),
        }
        for r in run.answer.to_dict("records")
    ]
    assert got == want and {"rating": 3, "n": 1, "best": None} in want


def test_no_row_reaching_the_aggregate_still_answers_one_row_and_sends_nothing():
    sql = f"SELECT COUNT(*) AS n, SUM({STARS}) AS total FROM reviews r WHERE r.rating > 9"
    engine = ReadsTheReview()
    run = run_query(compile_sql(sql, name="q"), {"reviews": TABLE}, QueryOptions(), engine)
    assert engine.sent == 0
    assert len(run.answer) == 1
    assert run.answer["n"].iloc[0] == 0 and same(run.answer["total"].iloc[0], None)


# ---- the Dagster path (the factory, materialized) ----------------------------------------------


@pytest.fixture
def reviews(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    path = tmp_path / "reviews.csv"
    TABLE.to_csv(path, index=False)
    return path


def materialize(sql: str, path, engine=None):
    defs = llm_query_assets("q", sql, sources={"reviews": str(path)})
    resources = resources_for("sim")
    if engine is not None:
        resources = {**resources, "llm_engine": engine}
    result = dg.materialize(list(defs.assets) + list(defs.asset_checks), resources=resources)
    assert result.success
    return result


@pytest.mark.parametrize(("where_rating", "film_only"), [(None, False), (3, True)])
def test_the_answer_asset_holds_one_row(reviews, where_rating, film_only):
    sql = (
        f"SELECT AVG({STARS}) AS avg_stars, COUNT(*) AS n FROM reviews r"
        f"{where_clause(where_rating, film_only)}"
    )
    result = materialize(sql, reviews, ReadsTheReviewResource())
    answer = result.asset_value(dg.AssetKey(["q", "answer"]))
    rows = table_rows(where_rating, film_only)
    assert len(answer) == 1
    assert answer["avg_stars"].iloc[0] == pytest.approx(expected("AVG", stars_of(rows)))
    assert answer["n"].iloc[0] == len(rows)


def test_the_answer_asset_agrees_with_llm_outputs_on_the_simulated_engine(reviews):
    sql = f"SELECT SUM({STARS}) AS total, COUNT(*) AS n FROM reviews r"
    result = materialize(sql, reviews)
    outputs = result.asset_value(dg.AssetKey(["q", "llm_outputs"]))
    dedup = result.asset_value(dg.AssetKey(["q", "deduped"]))
    res = result.asset_value(dg.AssetKey(["q", "result"]))
    kept = res[res["passed"]]  # every row: the null review too (COUNT(*) counts it)
    # expected from llm_outputs: each answered request counts once per row that shares it
    by_input = dict(zip(outputs[INPUT], outputs["answer"].astype(float), strict=True))
    per_row = [by_input[i] for i in dedup.loc[dedup[INPUT] >= 0, INPUT]]
    answer = result.asset_value(dg.AssetKey(["q", "answer"]))
    assert len(answer) == 1
    assert answer["total"].iloc[0] == pytest.approx(sum(per_row))
    assert answer["n"].iloc[0] == len(kept) == len(TABLE) == 9 and len(per_row) == 8


# ---- what stays unsupported is refused at definition time --------------------------------------


@pytest.mark.parametrize(
    ("select", "fragment"),
    [
        (f"SELECT r.id, AVG({STARS}) FROM reviews r", "add GROUP BY r.id"),
        (
            f"SELECT {STARS}, COUNT(*) FROM reviews r",
            "without GROUP BY the projection may hold only the aggregates ['count_star']",
        ),
        (
            f"SELECT MIN({STARS}) AS lo, MAX({STARS}) AS hi FROM reviews r",
            "only one aggregate per query reads an LLM call",
        ),
        ("SELECT AVG(r.rating) FROM reviews r", "COUNT(*) are supported"),
        (f"SELECT COUNT(DISTINCT {STARS}) FROM reviews r", "COUNT(*) are supported"),
        (f"SELECT AVG({STARS}) + 1 FROM reviews r", "COUNT(*) are supported"),
        ("SELECT COUNT(r.id) FROM reviews r", "COUNT(*) are supported"),
    ],
)
def test_an_unsupported_aggregate_is_one_line_at_definition_time(reviews, select, fragment):
    with pytest.raises(SQLError) as err:
        llm_query_assets("q", select, sources={"reviews": str(reviews)})
    message = str(err.value)
    assert fragment in message and "\n" not in message, message


# ---- the aggregate over a result frame, against plain Python -----------------------------------

ANSWER = st.one_of(
    st.integers(-50, 50).map(str),
    st.floats(-100, 100, allow_nan=False).map(lambda x: f" {x}\n"),
    st.sampled_from(["", "n/a", "three", "nan", "inf"]),
)


def number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.sampled_from(["a", "b", None]), ANSWER, st.booleans(), st.booleans()),
        max_size=12,
    ),
    function=st.sampled_from(["AVG", "SUM", "MIN", "MAX", "COUNT"]),
    grouped=st.booleans(),
)
def test_run_answer_matches_sql_semantics(rows, function, grouped):
    group_by = " GROUP BY r.g" if grouped else ""
    head = "r.g, " if grouped else ""
    query = compile_sql(
        f"SELECT {head}{function}(LLM('Score {{v}}', r.v)) AS value, COUNT(*) AS n "
        f"FROM t r{group_by}",
        name="q",
    )
    call = query.llm_calls[0].name
    result = pd.DataFrame(  # as `run_result` makes it: a failed row has no answer
        {
            "g": [g for g, _, _, _ in rows],
            call: [a if ok else None for _, a, _, ok in rows],
            "passed": pd.Series([p for _, _, p, _ in rows], dtype=bool),
            "status": ["answered" if ok else "failed" for _, _, _, ok in rows],
        }
    )
    answer = run_answer(result, query)
    reached = [(g, a if ok else None) for g, a, passed, ok in rows if passed]  # WHERE keeps
    keys = sorted({g for g, _ in reached}, key=lambda g: (g is None, g or "")) if grouped else [0]
    assert len(answer) == len(keys)
    for i, key in enumerate(keys):
        answers = [a for g, a in reached if not grouped or g == key]
        if function == "COUNT":  # COUNT(LLM(...)) counts answers, COUNT(*) rows
            want = len([a for a in answers if a is not None])
        else:
            values = [x for a in answers if a is not None and (x := number(a)) is not None]
            want = expected(function, values)
        record = answer.iloc[i]
        if grouped:
            assert (
                (record["g"] is None or record["g"] != record["g"])
                if key is None
                else (record["g"] == key)
            )
        assert same(record["value"], want), (record, answers)
        assert record["n"] == len(answers)


# ---- what a run summary shows (`llm-assets run` prints these records) --------------------------


def test_the_answer_records_a_summary_prints_are_json():
    sql = f"SELECT COUNT(*) AS n, AVG({STARS}) AS avg_stars FROM reviews r"
    run = run_query(
        compile_sql(sql, name="q"), {"reviews": TABLE}, QueryOptions(), ReadsTheReview()
    )
    rows = table_rows(None, False)
    records = json.loads(json.dumps(answer_records(run.answer)))
    assert records == [
        {"n": len(rows), "avg_stars": pytest.approx(expected("AVG", stars_of(rows)))}
    ]
    empty = run_query(
        compile_sql(f"{sql} WHERE r.rating > 9", name="q"),
        {"reviews": TABLE},
        QueryOptions(),
        ReadsTheReview(),
    )
    assert json.loads(json.dumps(answer_records(empty.answer))) == [{"n": 0, "avg_stars": None}]
    grouped = pd.DataFrame({"g": ["a", None, "c"], "v": [1.5, float("nan"), 2.0]})
    assert answer_records(grouped, limit=2) == [
        {"g": "a", "v": 1.5},
        {"g": None, "v": None},
    ]
