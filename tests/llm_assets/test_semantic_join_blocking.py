"""Semantic join, issue 25's rest: top-k blocking (`b.y IN similarity_search(a.x, k => n)` in
ON: each row of `a` paired only with its n nearest rows of `b`, by the retriever of
similarity_search) and self-joins (`{a.title}` and `{b.title}` name two arguments sharing a
column name; `a.id < b.id` in ON asks each unordered pair once).

Expected pairs come from an oracle written here (scikit-learn's TF-IDF scored directly, the
ranking and tie order done in the test), never from the code under test.
"""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_assets.pipeline.filtering import run_filtered
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.run import run_query
from llm_assets.pipeline.typecheck import check_predicates
from llm_assets.query.parts import Join, TopK
from llm_assets.sql.compiler import SQLError, compile_sql
from tests.llm_assets.answering import AnsweringEngine
from tests.llm_assets.test_semantic_join import MOVIES, REVIEWS, ReadsThePair, expected_pairs

ASK = (
    "LLM('Is the review {review} about the movie {info}? Answer yes or no.', r.review, m.info, "
    "output => 'choice(yes,no)') = 'yes'"
)
TOP_K = "m.info IN similarity_search(r.review, k => {k})"


def top_k_sql(k: int = 2, where: str = "") -> str:
    return f"SELECT r.id, m.title FROM reviews r JOIN movies m ON {TOP_K.format(k=k)} AND {ASK}" + (
        f" WHERE {where}" if where else ""
    )


def reference_pairs(queries, corpus, k: int) -> set[tuple[int, int]]:
    """(query row, corpus row) of each non-null query's k best-scoring non-null corpus rows
    (cosine of scikit-learn TF-IDF vectors, as similarity_search's retriever is defined),
    ties in row order."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    rows = [i for i, v in enumerate(corpus) if v is not None]
    if not rows:
        return set()
    vectorizer = TfidfVectorizer(sublinear_tf=True, stop_words="english")
    matrix = vectorizer.fit_transform([corpus[i] for i in rows])
    out = set()
    for qi, q in enumerate(queries):
        if q is None:
            continue
        scores = (vectorizer.transform([q]) @ matrix.T).toarray()[0]
        ranked = sorted(range(len(rows)), key=lambda j: (-round(float(scores[j]), 9), j))
        out |= {(qi, rows[j]) for j in ranked[:k]}
    return out


def candidate_pairs(frame: pd.DataFrame) -> list[tuple[int, int]]:
    return list(zip(frame["_pair_r"].tolist(), frame["_pair_m"].tolist(), strict=True))


WORDS = ["cats", "dogs", "space", "trains", "jazz", "heist"]
words = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    queries=st.lists(st.none() | st.just("") | words, min_size=1, max_size=8),
    corpus=st.lists(st.none() | words, min_size=1, max_size=8),
    k=st.integers(1, 5),
)
def test_the_candidate_pairs_are_exactly_each_rows_k_nearest(queries, corpus, k):
    reviews = pd.DataFrame({"id": [str(i) for i in range(len(queries))], "review": queries})
    movies = pd.DataFrame({"title": [f"t{i}" for i in range(len(corpus))], "info": corpus})
    frame = run_filtered(compile_sql(top_k_sql(k), "sj"), {"reviews": reviews, "movies": movies},
                         pushdown=True, max_pairs=10**6)  # fmt: skip
    pairs = candidate_pairs(frame)
    assert len(pairs) == len(set(pairs))  # no pair twice
    assert set(pairs) == reference_pairs(queries, corpus, k)
    n_corpus = sum(v is not None for v in corpus)
    assert len(pairs) == min(k, n_corpus) * sum(q is not None for q in queries)  # k x rows


def test_either_side_may_be_searched_and_the_call_may_sit_in_parentheses():
    forms = {
        TOP_K.format(k=2): TopK("m.info", "r.review", 2),
        "m.info IN (similarity_search(r.review, k => 2))": TopK("m.info", "r.review", 2),
        "r.review IN similarity_search(m.info, k => 1)": TopK("r.review", "m.info", 1),
        "m.info IN similarity_search(r.review)": TopK("m.info", "r.review", 3),  # k's default
    }
    for on, block in forms.items():
        sql = f"SELECT r.id, m.title FROM reviews r JOIN movies m ON {on} AND {ASK}"
        assert compile_sql(sql, "sj").semantic_joins[0].top_k == block
    # searching the reviews: each movie with its one nearest review, as many pairs as movies
    on = "r.review IN similarity_search(m.info, k => 1)"
    sql = f"SELECT r.id, m.title FROM reviews r JOIN movies m ON {on} AND {ASK}"
    frame = run_filtered(compile_sql(sql, "sj"), {"reviews": REVIEWS, "movies": MOVIES}, True)
    assert sorted(frame["_pair_m"]) == list(range(len(MOVIES)))


def test_the_bound_is_the_blocked_count_and_plan_shows_it(tmp_path):
    """300 x 200 rows are 60,000 pairs unblocked; k => 3 leaves 900, under max_pairs=1,000;
    899 refuses them in one line, before anything is sent."""
    from click.testing import CliRunner

    from llm_assets.cli import main

    about = [f"a film about {WORDS[i % 6]}" for i in range(300)]
    reviews = pd.DataFrame({"id": [str(i) for i in range(300)], "review": about})
    info = [f"{WORDS[i % 6]} film number {i}" for i in range(200)]
    movies = pd.DataFrame({"title": [str(i) for i in range(200)], "info": info})
    tables = {"reviews": reviews, "movies": movies}
    query = compile_sql(top_k_sql(3), "sj")
    run = run_query(query, tables, QueryOptions(max_pairs=1_000), ReadsThePair())
    assert run.accounting["rows_in"] == 900
    engine = ReadsThePair()
    with pytest.raises(ValueError) as refused:
        run_query(query, tables, QueryOptions(max_pairs=899), engine)
    message = str(refused.value)
    assert "\n" not in message and engine.sent == 0
    assert "900 candidate pairs, over max_pairs=899" in message
    assert "blocked by m.info IN similarity_search(r.review, k => 3)" in message
    assert "a smaller k" in message
    for name, frame in tables.items():
        frame.to_csv(tmp_path / f"{name}.csv", index=False)
    (tmp_path / "q.sql").write_text(top_k_sql(3))
    args = ["plan", str(tmp_path / "q.sql"), "--methods", "ggr", "--max-pairs", "1000",
            "--table", f"reviews={tmp_path / 'reviews.csv'}",
            "--table", f"movies={tmp_path / 'movies.csv'}"]  # fmt: skip
    shown = CliRunner().invoke(main, [*args, "--json"])
    assert shown.exit_code == 0, shown.output
    join = json.loads(shown.output)["semantic_join"]
    assert join["candidate_pairs"] == 900 and join["rows"]["r"] == 300  # every review
    assert join["blocking"] == {"m": "m.info IN similarity_search(r.review, k => 3)"}
    text = CliRunner().invoke(main, args).output
    assert "900 candidate pairs" in text and "m by m.info IN similarity_search" in text


def test_a_blocked_join_answers_the_pairs_its_block_keeps():
    engine = ReadsThePair()
    run = run_query(compile_sql(top_k_sql(1, "r.kind = 'Fresh'"), "sj"),
                    {"reviews": REVIEWS, "movies": MOVIES}, QueryOptions(), engine)  # fmt: skip
    fresh = REVIEWS[(REVIEWS["kind"] == "Fresh") & REVIEWS["review"].notna()]
    assert run.accounting["rows_in"] == len(fresh)  # one movie each; predicates then apply
    # each review's nearest description is its own topic's: the join finds every match
    assert set(map(tuple, run.answer[["id", "title"]].to_numpy())) == expected_pairs(fresh)
    assert engine.sent == len(fresh)


def test_the_typecheck_leaves_a_blocked_joins_two_sided_predicates_to_the_run():
    """The pairs of a top-k join exist only once retrieved: predicates over one table are
    checked on it, one over both waits for the run (red without the guard: the typecheck's
    join would read a pair relation that is not there)."""
    query = compile_sql(top_k_sql(2, "r.id < m.title AND r.kind = 'Fresh'"), "sj")
    check_predicates(query, {"reviews": REVIEWS, "movies": MOVIES})
    frame = run_filtered(query, {"reviews": REVIEWS, "movies": MOVIES}, True)
    assert (frame["id"] < frame["title"]).all() and len(frame) > 0


@pytest.mark.parametrize(
    ("on", "message"),
    [
        (TOP_K.format(k=2), "top-k blocking: one b.y IN similarity_search"),  # no LLM condition
        (f"{TOP_K.format(k=2)} AND {TOP_K.format(k=1)} AND {ASK}", "top-k blocking: one"),
        (f"m.info IN similarity_search(r.review, corpus => m.title) AND {ASK}", "no corpus =>"),
        (f"m.info IN similarity_search(m.title) AND {ASK}", "searches a source for its own"),
        (f"m.info IN similarity_search(r.review, k => 0) AND {ASK}", "k must be > 0, got 0"),
        (f"r.id = m.title AND {TOP_K.format(k=2)} AND {ASK}", "with an equi-key in the same ON"),
        ("r.id < m.title", "only equalities of two columns"),  # not a semantic join
        (f"NOT m.info IN similarity_search(r.review) AND {ASK}", "is not allowed here"),
    ],
)
def test_blocking_the_compiler_cannot_run_is_refused_in_one_line(on, message):
    with pytest.raises(SQLError, match=message) as refused:
        compile_sql(f"SELECT r.id FROM reviews r JOIN movies m ON {on}", "sj")
    assert "\n" not in str(refused.value)


def test_blocking_the_model_cannot_run_is_refused_in_one_line():
    """The model's own guards, for a query built without the compiler."""
    query = compile_sql(top_k_sql(), "sj")
    join = query.semantic_joins[0]
    with pytest.raises(ValueError, match="with an equi-key in the same ON is not supported"):
        dataclasses.replace(query, joins=(Join("r", "id", "m", "title"),))
    three = compile_sql(
        f"SELECT r.id FROM reviews r JOIN movies m ON {TOP_K.format(k=2)} AND {ASK} "
        "JOIN extra x ON x.key = m.title",
        "sj",
    )
    stray = dataclasses.replace(join, top_k=TopK("x.key", "r.review", 2))
    with pytest.raises(ValueError, match="must compare a column of 'm' with one of"):
        dataclasses.replace(three, semantic_joins=(stray,))


def test_the_blocking_columns_keep_the_files_text():
    """A column only predicates read is typed for SQL; one the blocking searches is not, so
    `7.50` is searched as written: its `50` matches `9.50` best (typed, it would be 7.5 and
    `50.00` 50.0, the nearest)."""
    movies = MOVIES.head(3).assign(code=["7.50", "50.00", "3.25"])
    reviews = REVIEWS.head(1).assign(code="9.50")
    on = "m.code IN similarity_search(r.code, k => 1)"
    sql = f"SELECT r.id, m.title FROM reviews r JOIN movies m ON {on} AND {ASK} WHERE m.code <> '5'"
    frame = run_filtered(compile_sql(sql, "sj"), {"reviews": reviews, "movies": movies}, True)
    assert candidate_pairs(frame) == [(0, 0)]


def test_an_empty_corpus_leaves_no_pair_and_a_stop_word_corpus_is_one_line():
    query = compile_sql(top_k_sql(2), "sj")
    empty = MOVIES.assign(info=None)
    assert run_filtered(query, {"reviews": REVIEWS, "movies": empty}, True).empty
    stop = MOVIES.assign(info="the and of")
    with pytest.raises(ValueError, match=r"^m.info IN similarity_search\(r.review, k => 2\): "):
        run_filtered(query, {"reviews": REVIEWS, "movies": stop}, True)


# ---- self-join ------------------------------------------------------------------------------

SAME = "Same product? {a.title} / {b.title}"
SELF = (
    f"SELECT a.id, b.id FROM products a JOIN products b ON a.id < b.id AND "
    f"LLM('{SAME}', a.title, b.title, output => 'choice(yes,no)') = 'yes'"
)


class Recording(AnsweringEngine):
    def __init__(self) -> None:
        super().__init__(self.record)
        self.prompts: list[str] = []

    def record(self, request) -> str:
        self.prompts.append(request.prompt)
        return "no"


def expected_prompt(style: str, order: list[str], a: str, b: str) -> str:
    """The prompt of one pair, built here: the template then `a.title: ...` lines in the
    plan's field order (named), or the values in the placeholders (inline)."""
    if style == "inline":
        return "Same product? " + a + " / " + b
    lines = {"a__title": "a.title: " + a, "b__title": "b.title: " + b}
    return SAME + "\n" + "\n".join(lines[c] for c in order)


def test_two_placeholders_of_one_column_name_are_told_apart():
    query = compile_sql(SELF, "em")
    assert query.llm_calls[0].field_names == ("a.title", "b.title")
    assert query.field_columns("llm_1") == {"a.title": "a__title", "b.title": "b__title"}
    with pytest.raises(SQLError, match=r"placeholder 'title'.*alias.column where two arguments"):
        compile_sql(SELF.replace("{a.title}", "{title}"), "em")


text = st.text(st.characters(blacklist_categories=("Cs", "Cc")) | st.sampled_from("\n{}"),
               max_size=12)  # fmt: skip


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    titles=st.lists(text, min_size=1, max_size=7),
    ids=st.permutations(list(range(7))),
    style=st.sampled_from(["named", "inline"]),
)
def test_a_self_join_asks_each_unordered_pair_once_with_its_values_as_written(titles, ids, style):
    products = pd.DataFrame({"id": [f"p{i}" for i in ids[: len(titles)]], "title": titles})
    engine = Recording()
    run = run_query(compile_sql(SELF, "em"), {"products": products},
                    QueryOptions(prompt_style=style), engine)  # fmt: skip
    pairs = run.base[["_pair_a", "_pair_b"]].to_numpy().tolist()
    n = len(products)
    assert sorted(tuple(sorted(p)) for p in pairs) == [(i, j) for i in range(n)
                                                       for j in range(i + 1, n)]  # fmt: skip
    stage = run.stages[0]
    prompt_of = dict(zip(stage.plan["_input_id"], stage.plan["prompt"], strict=True))
    order_of = dict(zip(stage.plan["_input_id"], stage.plan["field_order"], strict=True))
    for row in stage.deduped.to_dict("records"):
        a, b = titles[row["_pair_a"]], titles[row["_pair_b"]]
        want = expected_prompt(style, order_of[row["_input_id"]].split(","), a, b)
        assert prompt_of[row["_input_id"]] == want
    assert sorted(engine.prompts) == sorted(prompt_of.values())  # each distinct prompt once


def test_a_blocked_self_join_checks_its_one_table_predicates_and_runs_its_two_sided_ones():
    """The typecheck counts aliases, not tables: `a.id < b.id` over one table reads two
    sources, left to the run of a blocked join (red when the typecheck runs it on one)."""
    on = "b.title IN similarity_search(a.title, k => 2) AND a.id < b.id"
    query = compile_sql(SELF.replace(" ON a.id < b.id", f" ON {on}"), "em")
    products = pd.DataFrame({"id": ["p1", "p2", "p3"], "title": ["cats", "cats dogs", "dogs"]})
    check_predicates(query, {"products": products})
    frame = run_filtered(query, {"products": products}, True)
    # each row's 2 nearest include itself; a.id < b.id then keeps the pairs the smaller id
    # found: p1 finds p2; p2 finds p1 (a tie with p3, row order), p3 finds p2: both dropped
    assert list(zip(frame["a__id"], frame["b__id"], strict=True)) == [("p1", "p2")]


def test_plan_names_the_predicate_that_filters_an_unblocked_self_join(tmp_path):
    """`plan`'s blocking line: a join with no key but `a.id < b.id` is the cross product
    filtered by that predicate, not the whole cross product (it asks half the pairs)."""
    import json

    from click.testing import CliRunner

    from llm_assets.cli import main

    products = pd.DataFrame({"id": ["p1", "p2", "p3", "p4"], "title": ["a", "b", "c", "d"]})
    products.to_csv(tmp_path / "products.csv", index=False)
    (tmp_path / "q.sql").write_text(SELF)
    args = ["plan", str(tmp_path / "q.sql"), "--table", f"products={tmp_path / 'products.csv'}"]
    shown = CliRunner().invoke(main, [*args, "--methods", "ggr", "--json"])
    assert shown.exit_code == 0, shown.output
    join = json.loads(shown.output)["semantic_join"]
    assert join["candidate_pairs"] == 6  # 4 x 3 / 2
    assert join["blocking"] == {"b": 'cross product filtered by "a"."id" < "b"."id"'}
    plain = SELF.replace(" ON a.id < b.id AND ", " ON ")
    (tmp_path / "q.sql").write_text(plain)
    shown = CliRunner().invoke(main, [*args, "--methods", "ggr", "--json"])
    assert json.loads(shown.output)["semantic_join"]["blocking"] == {"b": "cross product"}
