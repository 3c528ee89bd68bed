"""The fix a predicate type error suggests says how many rows it keeps, and keeps them (issue
35, item 3: on ratings like `3/5` it suggested `TRY_CAST(r.rating AS DOUBLE) >= 2`, which kept
25 rows of 2,000 where the README's `split_part` form keeps 1,757). Expected counts come from
the table, computed here; the suggested SQL is then run and keeps exactly what it said."""

import random
import re

import pandas as pd
import pytest

from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.run import run_query
from llm_assets.pipeline.typecheck import PredicateTypeError, check_predicates
from llm_assets.sql.compiler import compile_sql
from resources.sim.engine import SimulatedEngine

SQL = "SELECT r.id, LLM('Positive? {review}', r.review) AS s FROM reviews r WHERE r.rating >= 2"


def reviews(ratings: list[str]) -> pd.DataFrame:
    n = len(ratings)
    return pd.DataFrame(
        {"id": [str(i) for i in range(n)], "review": [f"r{i}" for i in range(n)], "rating": ratings}
    )


def number(text: str, split: bool) -> float | None:
    head = text.split("/", 1)[0] if split else text
    try:
        return float(head)
    except ValueError:
        return None


def at_least_2(ratings: list[str], split: bool) -> int:
    return sum(1 for r in ratings if (v := number(r, split)) is not None and v >= 2)


def refusal(table: pd.DataFrame) -> str:
    with pytest.raises(PredicateTypeError) as refused:
        check_predicates(compile_sql(SQL, name="q"), {"reviews": table})
    message = str(refused.value)
    assert "\n" not in message
    return message


def kept_by(fix: str, table: pd.DataFrame) -> int:
    """Rows the suggested predicate keeps in a real run (pushed down: the others skipped)."""
    sql = SQL.replace("r.rating >= 2", fix)
    run = run_query(compile_sql(sql, name="q"), {"reviews": table}, QueryOptions(),
                    SimulatedEngine())  # fmt: skip
    return int(run.result["reason"].isna().sum())


def test_on_scores_out_of_5_the_fix_reads_the_score_and_says_what_it_keeps():
    rng = random.Random(35)
    ratings = [f"{rng.randint(0, 5)}/5" for _ in range(1_960)] + ["4", "1.5"] * 10
    ratings += ["N/A"] * 20
    rng.shuffle(ratings)
    table = reviews(ratings)
    message = refusal(table)
    fix = re.search(r"write (.+?) instead", message).group(1)
    assert fix == "TRY_CAST(SPLIT_PART(r.rating, '/', 1) AS DOUBLE) >= 2", message
    split, plain = at_least_2(ratings, True), at_least_2(ratings, False)
    assert plain == 10 and split > 1_000  # the bare cast would keep only the plain numbers
    assert f"true on {split:,} of 2,000 rows" in message, message
    assert f"TRY_CAST(r.rating AS DOUBLE) >= 2 would be true on {plain:,}" in message, message
    assert kept_by(fix, table) == split


def test_on_numbers_with_an_na_the_plain_cast_is_suggested_with_its_count():
    ratings = ["3", "1", "N/A", "2.5", "4", "0"]
    message = refusal(reviews(ratings))
    fix = re.search(r"write (.+?) instead", message).group(1)
    assert fix == "TRY_CAST(r.rating AS DOUBLE) >= 2", message
    assert "true on 3 of 6 rows" in message and "would be" not in message, message
    assert kept_by(fix, reviews(ratings)) == at_least_2(ratings, False) == 3


def test_when_no_value_reads_as_a_number_it_says_so():
    message = refusal(reviews(["good", "bad", "fine"]))
    assert "true on 0 of 3 rows" in message and "take the number out of the text" in message
