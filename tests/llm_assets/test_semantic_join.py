"""Semantic join (issue 25): an LLM predicate in JOIN ON. The candidate pairs are the join
without it (a cross product, or the equi-join of the ON's ordinary conjuncts), counted and
bounded by `max_pairs` before anything is sent; each pair is a row of the query, answered,
failed or skipped; the join's rows are the pairs answered 'yes'.

Expected values come from the tables, never from the code under test: the engine answers
'yes' exactly when the review names the movie's topic, which the test reads itself.
"""

from __future__ import annotations

import time

import dagster as dg
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.resources import resources_for
from llm_assets import llm_query_assets
from llm_assets.assets.checks import pair_problems
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.run import run_query
from llm_assets.query.render import pre_llm_sql
from llm_assets.sql.compiler import SQLError, compile_sql
from resources.llm_resources import LLMEngineResource
from tests.llm_assets.answering import AnsweringEngine

TOPICS = ["cats", "dogs", "space", "trains"]
REVIEWS = pd.DataFrame(
    {
        "id": [str(i) for i in range(10)],
        "review": [f"review {i}: a film about {TOPICS[i % 3]}" for i in range(9)] + [None],
        "kind": ["Fresh", "Rotten"] * 5,
    }
)
MOVIES = pd.DataFrame(
    {
        "title": [t.title() for t in TOPICS],
        "topic": TOPICS,
        "info": [f"A long description of a film about {t}. " * 6 for t in TOPICS],
    }
)
JOIN = (
    "LLM('Is the review {review} about the movie {info}? Answer yes or no.', r.review, m.info, "
    "output => 'choice(yes,no)') = 'yes'"
)
SQL = f"SELECT r.id, m.title FROM reviews r JOIN movies m ON {JOIN}"


def answer(request) -> str:
    """'yes' when the review's topic is the movie's (read from the prompt's field lines)."""
    lines = request.prompt.splitlines()
    review = next(line for line in lines if line.startswith("review:"))
    info = next(line for line in lines if line.startswith("info:"))
    return "yes" if f"about {review.rsplit(' ', 1)[-1]}." in info else "no"


def ReadsThePair() -> AnsweringEngine:  # noqa: N802 - reads as the engine it builds
    return AnsweringEngine(answer)


class ReadsThePairResource(LLMEngineResource):
    def build_engine(self):
        return ReadsThePair()


def expected_pairs(reviews: pd.DataFrame) -> set[tuple[str, str]]:
    """(review id, title) of the pairs whose topics match, read from the tables."""
    return {
        (r.id, m.title)
        for r in reviews.itertuples()
        if isinstance(r.review, str)
        for m in MOVIES.itertuples()
        if r.review.endswith(m.topic)
    }


def test_the_compiler_reads_an_llm_predicate_in_on_as_a_semantic_join():
    query = compile_sql(SQL, "sj")
    assert [(j.alias, j.call_name) for j in query.semantic_joins] == [("m", "llm_1")]
    assert "CROSS JOIN" in pre_llm_sql(query, True)
    blocked = compile_sql(SQL.replace("ON LLM", "ON r.id = m.title AND LLM"), "sj")
    assert "CROSS JOIN" not in pre_llm_sql(blocked, True)
    with pytest.raises(SQLError, match="must read a column of 'm' and one of"):
        compile_sql("SELECT r.id FROM reviews r JOIN movies m ON LLM('{review}', r.review) = 'y'")
    with pytest.raises(SQLError, match="or ON LLM.*for a semantic join"):
        compile_sql("SELECT r.id FROM reviews r, movies m")


def test_every_candidate_pair_is_a_row_and_the_join_is_the_pairs_answered_yes():
    engine = ReadsThePair()
    run = run_query(compile_sql(SQL, "sj"), {"reviews": REVIEWS, "movies": MOVIES},
                    QueryOptions(), engine)  # fmt: skip
    counts = run.accounting
    assert counts["rows_in"] == len(REVIEWS) * len(MOVIES)  # every candidate pair
    assert counts["answered"] + counts["skipped"] + counts["failed"] == counts["rows_in"]
    assert counts["skipped"] == len(MOVIES)  # the null review's pairs, with the reason
    assert set(run.result.loc[run.result["status"] == "skipped", "reason"]) == {
        "null in LLM field 'review'"
    }
    assert set(map(tuple, run.answer[["id", "title"]].to_numpy())) == expected_pairs(REVIEWS)
    assert engine.sent == (len(REVIEWS) - 1) * len(MOVIES)  # no pair twice, none skipped sent


def test_a_where_filter_and_an_equi_key_shrink_the_candidate_pairs():
    fresh = run_query(
        compile_sql(SQL + " WHERE r.kind = 'Fresh'", "sj"),
        {"reviews": REVIEWS, "movies": MOVIES},
        QueryOptions(),
        ReadsThePair(),
    )
    assert fresh.accounting["rows_in"] == (REVIEWS["kind"] == "Fresh").sum() * len(MOVIES)
    keep = REVIEWS[REVIEWS["kind"] == "Fresh"]
    assert set(map(tuple, fresh.answer[["id", "title"]].to_numpy())) == expected_pairs(keep)
    reviews = REVIEWS.assign(topic=[TOPICS[i % 3] for i in range(10)])
    blocked = run_query(
        compile_sql(SQL.replace("ON LLM", "ON r.topic = m.topic AND LLM"), "sj"),
        {"reviews": reviews, "movies": MOVIES},
        QueryOptions(),
        ReadsThePair(),
    )
    assert blocked.accounting["rows_in"] == len(REVIEWS)  # one movie per review's topic
    assert set(map(tuple, blocked.answer[["id", "title"]].to_numpy())) == expected_pairs(REVIEWS)


def test_a_join_over_max_pairs_is_refused_in_one_line_before_anything_is_sent():
    """(`benchmarks.semantic_join` times the refusal of tens of thousands x thousands rows.)"""
    reviews = pd.DataFrame({"id": range(300), "review": ["a film about cats"] * 300,
                            "kind": ["Fresh"] * 300})  # fmt: skip
    movies = pd.DataFrame({"title": range(200), "topic": ["cats"] * 200,
                           "info": ["about cats."] * 200})  # fmt: skip
    engine = ReadsThePair()
    started = time.perf_counter()
    with pytest.raises(ValueError) as refused:
        run_query(compile_sql(SQL, "sj"), {"reviews": reviews, "movies": movies},
                  QueryOptions(max_pairs=10_000), engine)  # fmt: skip
    assert time.perf_counter() - started < 10
    message = str(refused.value)
    assert "\n" not in message and engine.sent == 0
    assert "60,000 candidate pairs" in message and "max_pairs=10,000" in message
    assert "reviews (300 rows)" in message and "movies (200 rows)" in message
    allowed = QueryOptions(max_pairs=len(REVIEWS) * len(MOVIES))
    run = run_query(compile_sql(SQL, "sj"), {"reviews": REVIEWS, "movies": MOVIES}, allowed,
                    ReadsThePair())  # fmt: skip
    assert run.accounting["rows_in"] == allowed.max_pairs


@settings(max_examples=25, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3)), min_size=1, max_size=12),
    bound=st.integers(1, 15),
)
def test_pair_checks_find_a_repeated_pair_and_a_count_over_the_bound(rows, bound):
    query = compile_sql(SQL, "sj")
    pairs = pd.DataFrame(rows, columns=["_pair_r", "_pair_m"])
    problems = pair_problems(pairs, query, bound)
    assert bool(problems["pairs_within_bound"]) == (len(pairs) > bound)
    assert bool(problems["no_duplicate_pair"]) == pairs.duplicated().any()


def test_the_factory_lineage_has_a_checked_pairs_asset_and_answers_as_run_query(tmp_path):
    reviews, movies = tmp_path / "reviews.csv", tmp_path / "movies.csv"
    REVIEWS.to_csv(reviews, index=False)
    MOVIES.to_csv(movies, index=False)
    defs = llm_query_assets("sj", SQL, {"reviews": str(reviews), "movies": str(movies)})
    resources = {**resources_for("sim"), "llm_engine": ReadsThePairResource()}
    result = dg.materialize(
        [a for a in defs.assets if isinstance(a, dg.AssetsDefinition)], resources=resources
    )
    assert result.success
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["pairs_within_bound"] and checks["no_duplicate_pair"]
    assert len(result.output_for_node("sj__pairs")) == len(REVIEWS) * len(MOVIES)
    answer = result.output_for_node("sj__answer")
    tables = {"reviews": pd.read_csv(reviews, dtype=str), "movies": pd.read_csv(movies, dtype=str)}
    direct = run_query(compile_sql(SQL, "sj"), tables, QueryOptions(), ReadsThePair())
    key = ["id", "title"]
    assert (
        answer.sort_values(key)
        .reset_index(drop=True)
        .equals(direct.answer.sort_values(key).reset_index(drop=True))
    )


def test_plan_shows_the_candidate_pairs_and_the_side_that_forms_the_prefix(tmp_path):
    """`llm-assets plan` (in process, as the console script runs it) prints the pair count,
    each side's rows and, per method, whose fields open the prompts; over `--max-pairs` it
    stops with the one-line refusal."""
    import json

    from click.testing import CliRunner

    from llm_assets.cli import main

    REVIEWS.to_csv(tmp_path / "reviews.csv", index=False)
    MOVIES.to_csv(tmp_path / "movies.csv", index=False)
    (tmp_path / "q.sql").write_text(SQL)
    tables = ["--table", f"reviews={tmp_path / 'reviews.csv'}",
              "--table", f"movies={tmp_path / 'movies.csv'}"]  # fmt: skip
    args = ["plan", str(tmp_path / "q.sql"), *tables, "--methods", "original,ggr"]
    shown = CliRunner().invoke(main, [*args, "--json"])
    assert shown.exit_code == 0, shown.output
    join = json.loads(shown.output)["semantic_join"]
    assert join["candidate_pairs"] == len(REVIEWS) * len(MOVIES)
    assert join["rows"] == {"r": len(REVIEWS), "m": len(MOVIES)}
    # GGR opens every prompt with the long movie description; file order with the review
    assert join["prefix_side"]["ggr"]["m"] == max(join["prefix_side"]["ggr"].values())
    assert "candidate pairs" in CliRunner().invoke(main, args).output
    refused = CliRunner().invoke(main, [*args, "--max-pairs", "10"])
    assert refused.exit_code != 0 and "over max_pairs=10" in refused.output


def test_a_semantic_join_the_model_cannot_run_is_refused_in_one_line():
    """The model's own guards, for a query built without the compiler: the join's call must
    be filtered, and a semantic join does not combine with similarity_search; max_pairs >= 1."""
    import dataclasses

    from pydantic import ValidationError

    from llm_assets.query.parts import Retrieval

    query = compile_sql(SQL, "sj")
    with pytest.raises(ValueError, match="is not a filtered LLM call of the query"):
        dataclasses.replace(query, llm_filters=())
    retrieval = Retrieval("context", "r.review", 2, "m.info")
    with pytest.raises(ValueError, match="with similarity_search as an LLM argument is not"):
        dataclasses.replace(query, retrievals=(retrieval,))
    with pytest.raises(ValidationError, match="max_pairs must be >= 1"):
        QueryOptions(max_pairs=0)
