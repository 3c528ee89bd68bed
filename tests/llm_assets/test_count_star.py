"""COUNT(*) counts what SQL counts (issue 35 item 2): an aggregate over LLM outputs reads every
row the WHERE keeps. A row whose LLM input is empty (skipped) or whose request failed
contributes NULL to the LLM aggregate (AVG, SUM, MIN, MAX and COUNT(LLM(...)) ignore it, as SQL
ignores NULL) and is counted by COUNT(*), with or without GROUP BY. A row skipped for an empty
input to an LLM *filter* is not kept: `NULL = 'yes'` is not true in SQL.

Expected values come from the input table, never from the code under test.
"""

from __future__ import annotations

import re

import dagster as dg
import pandas as pd
import pytest

from jobs.resources import resources_for
from llm_assets import llm_query_assets
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.run import run_query
from llm_assets.sql.compiler import compile_sql
from resources.llm_resources import LLMEngineResource
from tests.llm_assets.answering import AnsweringEngine

STARS = "LLM('Stars between 1 and 5 for {review}', r.review, output => 'number(1,5)')"
ABOUT_FILM = "LLM('Is {review} about a movie?', r.review, output => 'choice(yes,no)') = 'yes'"
# 10 rows, 4 with an empty review (null: the LLM input is empty, the row is skipped)
TABLE = pd.DataFrame(
    {
        "id": [str(i) for i in range(1, 11)],
        "genre": ["drama", "drama", "comedy", "comedy", "drama", "comedy", "drama", None, "x", "x"],
        "rating": ["5", "1", "4", "2", "3", "5", "1", "4", "2", "3"],
        "review": [
            "stars=5 a film",
            None,
            "stars=4 a book",
            None,
            "stars=3 a film",
            None,
            "stars=1 a film",
            "stars=2 a book",
            None,
            "stars=4 a film",
        ],
    }
)


def answer(request) -> str:
    if request.output.kind == "number":
        return re.search(r"stars=(\d)", request.prompt).group(1)
    return "yes" if "film" in request.prompt else "no"


class Answering(LLMEngineResource):
    def build_engine(self):
        return AnsweringEngine(answer)


def kept(where_rating: bool) -> pd.DataFrame:
    """The rows the WHERE keeps, read from the table: `CAST(r.rating AS INT) >= 2`."""
    return TABLE[TABLE["rating"].astype(int) >= 2] if where_rating else TABLE


def stars(rows: pd.DataFrame) -> list[int]:
    return [int(re.search(r"stars=(\d)", r).group(1)) for r in rows["review"].dropna()]


WHERE = " WHERE CAST(r.rating AS INT) >= 2"


@pytest.mark.parametrize("where_rating", [False, True])
def test_count_star_counts_every_row_the_where_keeps_beside_an_llm_average(where_rating):
    sql = f"SELECT AVG({STARS}) AS s, COUNT(*) AS n FROM reviews r" + WHERE * where_rating
    engine = AnsweringEngine(answer)
    run = run_query(compile_sql(sql, name="q"), {"reviews": TABLE}, QueryOptions(), engine)
    rows = kept(where_rating)
    assert rows["review"].isna().any()  # the table has empty LLM inputs among the kept rows
    assert run.answer.to_dict("records") == [
        {"s": pytest.approx(sum(stars(rows)) / len(stars(rows))), "n": len(rows)}
    ]
    assert engine.sent == len(set(rows["review"].dropna()))  # the empty ones are not sent


def test_count_star_and_count_of_the_llm_output_differ_by_the_skipped_rows():
    sql = f"SELECT COUNT(*) AS n, COUNT({STARS}) AS answered, SUM({STARS}) AS total FROM reviews r"
    with pytest.raises(ValueError):  # two aggregates of LLM calls stay refused
        compile_sql(sql, name="q")
    sql = f"SELECT COUNT(*) AS n, COUNT({STARS}) AS answered FROM reviews r"
    run = run_query(
        compile_sql(sql, name="q"), {"reviews": TABLE}, QueryOptions(), AnsweringEngine(answer)
    )
    assert run.answer[["n", "answered"]].to_dict("records") == [
        {"n": len(TABLE), "answered": int(TABLE["review"].notna().sum())}
    ]


def test_count_star_with_group_by_counts_each_groups_kept_rows():
    sql = (
        f"SELECT r.genre, COUNT(*) AS n, MIN({STARS}) AS low FROM reviews r{WHERE} GROUP BY r.genre"
    )
    run = run_query(
        compile_sql(sql, name="q"), {"reviews": TABLE}, QueryOptions(), AnsweringEngine(answer)
    )
    rows = kept(True)
    want = {}
    for genre, group in rows.groupby("genre", dropna=False):
        values = stars(group)
        want[None if pd.isna(genre) else genre] = (len(group), min(values) if values else None)
    got = {
        (None if pd.isna(r["genre"]) else r["genre"]): (
            int(r["n"]),
            None if pd.isna(r["low"]) else int(r["low"]),
        )
        for r in run.answer.to_dict("records")
    }
    assert got == want
    assert want["x"] == (2, 4) and want["comedy"] == (3, 4)  # a group holding an empty review


def test_a_row_skipped_by_an_llm_filter_is_not_counted():
    """`WHERE LLM(...) = 'yes'` on an empty review is NULL = 'yes': the WHERE drops the row."""
    sql = f"SELECT COUNT(*) AS n, AVG({STARS}) AS s FROM reviews r WHERE {ABOUT_FILM}"
    run = run_query(
        compile_sql(sql, name="q"), {"reviews": TABLE}, QueryOptions(), AnsweringEngine(answer)
    )
    films = TABLE[TABLE["review"].fillna("").str.contains("film")]
    assert int(run.answer["n"].iloc[0]) == len(films)
    assert run.answer["s"].iloc[0] == pytest.approx(sum(stars(films)) / len(films))


def test_the_factory_counts_the_same_rows(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    path = tmp_path / "reviews.csv"
    TABLE.to_csv(path, index=False)
    sql = f"SELECT AVG({STARS}) AS s, COUNT(*) AS n FROM reviews r{WHERE}"
    defs = llm_query_assets("q", sql, sources={"reviews": str(path)})
    resources = {**resources_for("sim"), "llm_engine": Answering()}
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=resources)
    assert result.success
    answer_frame = result.asset_value(dg.AssetKey(["q", "answer"]))
    rows = kept(True)
    assert int(answer_frame["n"].iloc[0]) == len(rows) == 8
    assert answer_frame["s"].iloc[0] == pytest.approx(sum(stars(rows)) / len(stars(rows)))
