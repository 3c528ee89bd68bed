"""The quality figures' pure functions (`llm_assets.pipeline.quality`): parse rate, the Wilson
interval (held to scipy's), SQuAD's token F1, label matching and accuracy, and the label
column's resolution and rows."""

import json
import string

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest

from llm_assets.output_spec import OutputSpec
from llm_assets.pipeline.filtering import run_filtered
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.quality import (
    LABEL,
    acceptable_answers,
    answer_matches,
    label_accuracy,
    normalize_answer,
    parse_rate,
    parse_rate_problems,
    resolve_label,
    stage_quality,
    token_f1,
    wilson_interval,
    with_labels,
)
from llm_assets.pipeline.rows import INPUT, ROW
from llm_assets.pipeline.run import run_query
from llm_assets.sql.compiler import compile_sql
from tests.llm_assets.answering import AnsweringEngine

# ---- parse rate ---------------------------------------------------------------------------

# one llm_outputs row: (failed?, answer in form?)
ROWS = st.lists(st.tuples(st.booleans(), st.booleans()), max_size=40)


def outputs(rows) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "error": ["HTTP 503" if failed else None for failed, _ in rows],
            "violation": [None if ok else "answer 'x' is not one of ['a']" for _, ok in rows],
        },
        dtype=object,
    )


@given(ROWS, ROWS)
def test_parse_rate_is_in_form_answers_over_answers_and_failed_requests_count_for_nothing(a, b):
    answers = [ok for failed, ok in a if not failed]
    rate = parse_rate(outputs(a))
    if not answers:
        assert rate is None
    else:
        assert rate == sum(answers) / len(answers) and 0 <= rate <= 1
    # a failed request, in form or not, changes nothing
    assert parse_rate(outputs([*a, (True, False), (True, True)])) == rate
    # several stages: the answers of all of them pooled
    pooled = answers + [ok for failed, ok in b if not failed]
    both = parse_rate(outputs(a), outputs(b))
    assert both == (sum(pooled) / len(pooled) if pooled else None)


@given(ROWS, st.floats(0, 1))
def test_the_check_fails_exactly_below_the_minimum(rows, minimum):
    rate = parse_rate(outputs(rows))
    problems = parse_rate_problems(outputs(rows), minimum)
    assert bool(problems) == (rate is not None and rate < minimum)
    if problems:
        assert f"min_parse_rate {minimum:g}" in problems[0]
        assert "is not one of" in problems[0]  # the first violation, as an example


def test_parse_rate_reads_the_violation_computed_against_the_spec():
    spec = OutputSpec.choice(["yes", "no"])
    answers = ["yes", "no", "maybe", " yes "]
    frame = pd.DataFrame(
        {"error": [None] * 4, "violation": [spec.violation(a) for a in answers]}, dtype=object
    )
    assert parse_rate(frame) == 0.75


# ---- Wilson interval --------------------------------------------------------------------------


@given(st.integers(1, 5_000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_interval_equals_scipys_and_holds_the_proportion(kn):
    k, n = kn
    lo, hi = wilson_interval(k, n)
    reference = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert lo == pytest.approx(reference.low, abs=1e-9)
    assert hi == pytest.approx(reference.high, abs=1e-9)
    assert 0 <= lo <= k / n <= hi <= 1


@given(st.integers(1, 200), st.integers(2, 50))
def test_wilson_interval_narrows_with_more_data_at_the_same_proportion(n, factor):
    k = n // 3
    lo, hi = wilson_interval(k, n)
    lo2, hi2 = wilson_interval(k * factor, n * factor)
    assert hi2 - lo2 < hi - lo


def test_wilson_interval_of_nothing_is_none():
    assert wilson_interval(0, 0) is None


# ---- SQuAD token F1 ---------------------------------------------------------------------------

WORDS = st.text(alphabet=string.ascii_letters + string.punctuation + " ", max_size=30)


@given(WORDS, WORDS)
def test_token_f1_is_a_symmetric_score_in_0_1(a, b):
    f1 = token_f1(a, b)
    assert 0.0 <= f1 <= 1.0
    assert f1 == pytest.approx(token_f1(b, a))


@given(WORDS)
def test_token_f1_ignores_case_punctuation_and_articles(text):
    assert token_f1(text, text) == 1.0
    noisy = f"The {text.upper()}!!"
    assert token_f1(noisy, text) == 1.0
    assert normalize_answer(noisy) == normalize_answer(text)


@given(st.lists(st.sampled_from(["paris", "france", "rome", "city", "old"]), min_size=1))
def test_token_f1_counts_shared_tokens(tokens):
    gold = " ".join(tokens)
    half = " ".join(tokens[: max(1, len(tokens) // 2)])
    shared = len(half.split())
    precision, recall = 1.0, shared / len(tokens)
    assert token_f1(half, gold) == pytest.approx(2 * precision * recall / (precision + recall))
    assert token_f1("zebra", gold) == 0.0


def test_token_f1_on_squad_examples():
    assert token_f1("the 10th century", "10th century") == 1.0
    assert token_f1("in the 10th and 11th centuries", "10th and 11th centuries") == pytest.approx(
        2 * (4 / 5) * 1 / (4 / 5 + 1)
    )
    assert token_f1("", "") == 1.0 and token_f1("", "France") == 0.0


# ---- labels and accuracy ------------------------------------------------------------------------


def test_acceptable_answers_reads_json_lists_and_leaves_other_text_alone():
    assert acceptable_answers('["France", "france"]') == ["France", "france"]
    assert acceptable_answers("[]") == [""]  # SQuAD v2: no answer
    assert acceptable_answers(["a", 1]) == ["a", "1"]
    assert acceptable_answers("[not json") == ["[not json"]
    assert acceptable_answers('{"a": 1}') == ['{"a": 1}']
    assert acceptable_answers(3) == ["3"]
    for null in (None, float("nan"), pd.NA):
        assert acceptable_answers(null) is None


def test_answers_match_exactly_but_for_blanks_and_a_choices_case():
    choice, text = OutputSpec.choice(["Yes", "No"]), OutputSpec.text()
    assert answer_matches(" yes\n", "Yes", choice)
    assert not answer_matches("yes", "Yes", text) and answer_matches(" Yes ", "Yes", text)
    number = OutputSpec.number(0, 5)
    assert answer_matches("3", "3.0", number) and not answer_matches("3", "4", number)
    assert answer_matches("n/a", "n/a", number)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["Yes", "No", "yes", None, "maybe"]),
            st.sampled_from(["Yes", "no", None, '["No", "Yes"]', "[]"]),
        ),
        max_size=30,
    )
)
@settings(max_examples=200)
def test_label_accuracy_counts_answered_labelled_rows(pairs):
    spec = OutputSpec.choice(["Yes", "No"])
    answers, labels = zip(*pairs, strict=True) if pairs else ((), ())
    got = label_accuracy(answers, labels, spec)
    counted = [(a, json.loads(g) if g.startswith("[") else [g]) for a, g in pairs if a and g]
    correct = sum(any(a.lower() == g.lower() for g in gs or [""]) for a, gs in counted)
    assert got["n_labelled"] == len(counted)
    if counted:
        assert got["accuracy"] == correct / len(counted)
        assert got["accuracy_ci95"] == list(wilson_interval(correct, len(counted)))
    else:
        assert got["accuracy"] is None and got["accuracy_ci95"] is None
    assert "f1" not in got  # a choice output has no F1


def test_text_accuracy_takes_the_best_of_the_acceptable_answers():
    answers = ["France", "the 10th century", "Rollo", None]
    labels = ['["France", "France"]', '["10th century", "the first half"]', "[]", "x"]
    got = label_accuracy(answers, labels, OutputSpec.text())
    assert got["n_labelled"] == 3  # the unanswered row does not count
    assert got["accuracy"] == pytest.approx(1 / 3)  # "the 10th century" is not exact
    assert got["f1"] == pytest.approx((1 + 1 + 0) / 3)


# ---- the label column ------------------------------------------------------------------------

ONE = compile_sql("SELECT LLM('Answer {question}', t.question) AS a FROM t", name="q")
JOIN = compile_sql(
    "SELECT LLM('Same? {review} {title}', r.review, m.title, output => 'choice(y,n)') AS s "
    "FROM reviews r JOIN movies m ON r.movie = m.id",
    name="j",
)


def test_a_label_column_that_is_not_there_is_one_line_naming_the_tables_columns():
    with pytest.raises(ValueError) as error:
        resolve_label(ONE, {"t": ["question", "answers"]}, "answer")
    message = str(error.value)
    assert "\n" not in message
    assert "'answer'" in message and "table 't'" in message and "question, answers" in message
    columns = {"reviews": ["review", "movie", "gold"], "movies": ["id", "title", "gold"]}
    with pytest.raises(ValueError, match=r"in sources r, m: name one, as r\.gold or m\.gold"):
        resolve_label(JOIN, columns, "gold")
    assert resolve_label(JOIN, columns, "m.gold") == ("m", "gold")
    assert resolve_label(JOIN, {**columns, "movies": ["id", "title"]}, "gold") == ("r", "gold")
    with pytest.raises(ValueError, match="any source table"):
        resolve_label(JOIN, columns, "x.gold")


def test_labels_follow_their_source_rows_through_the_join_and_the_predicates():
    reviews = pd.DataFrame({"review": ["r0", "r1", "r2"], "movie": [2, 1, 2], "gold": list("abc")})
    movies = pa.table({"id": [1, 2], "title": ["one", "two"], "gold": [["x", "y"], None]})
    tables = {"reviews": reviews, "movies": movies}
    base = run_filtered(JOIN, tables, pushdown=True, source_rows=True)
    labels = with_labels(JOIN, tables, base, "r.gold")
    by_review = dict(zip(labels["review"], labels[LABEL], strict=True))
    assert by_review == {"r0": "a", "r1": "b", "r2": "c"}
    labels = with_labels(JOIN, tables, base, "m.gold")
    by_movie = dict(zip(labels["review"], labels[LABEL], strict=True))
    assert by_movie == {"r0": None, "r1": '["x", "y"]', "r2": None}
    assert LABEL not in base  # a new frame: filtered itself is not changed
    unlabelled = run_filtered(JOIN, tables, pushdown=True)
    assert list(with_labels(JOIN, tables, base, "r.gold").columns) == [*unlabelled, LABEL]


def test_stage_accuracy_is_per_row_through_dedup():
    deduped = pd.DataFrame(
        {ROW: [0, 1, 2, 3], INPUT: [0, 0, 1, -1], LABEL: ["yes", "no", "no", "yes"]}
    )
    outs = pd.DataFrame(
        {INPUT: [0, 1], "answer": ["yes", None], "error": [None, "HTTP 503"], "violation": None}
    )
    spec = OutputSpec.choice(["yes", "no"])
    got = stage_quality(deduped, outs, spec, labelled=True)
    # rows 0 and 1 share request 0 ("yes"); row 2's request failed; row 3 was skipped
    assert got["parse_rate"] == 1.0 and got["n_labelled"] == 2 and got["accuracy"] == 0.5
    assert stage_quality(deduped, outs, spec, labelled=False) == {"parse_rate": 1.0}


def test_run_query_carries_the_label_to_the_result_and_never_into_a_prompt():
    prompts = []

    def answer(request):
        prompts.append(request.prompt)
        return "yes" if "good" in request.prompt else "no"

    table = pd.DataFrame({"review": ["good", "bad", "good"], "gold": ["yes", "SECRET", "YES"]})
    query = compile_sql(
        "SELECT LLM('Positive? {review}', t.review, output => 'choice(yes,no)') AS v FROM t", "q"
    )
    run = run_query(query, {"t": table}, QueryOptions(), AnsweringEngine(answer), label="gold")
    assert run.result[LABEL].tolist() == ["yes", "SECRET", "YES"]
    assert len(prompts) == 2 and not [p for p in prompts if "SECRET" in p or "gold" in p]
    last = run.stages[-1]
    got = stage_quality(last.deduped, last.outputs, last.call.output, labelled=True)
    assert got["n_labelled"] == 3 and got["accuracy"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="label column 'answer' is not a column of table 't'"):
        run_query(query, {"t": table}, QueryOptions(), AnsweringEngine(answer), label="answer")
    assert len(prompts) == 2  # refused before anything was sent


@pytest.mark.parametrize("value", [-0.1, 1.5])
def test_min_parse_rate_is_a_share(value):
    with pytest.raises(ValueError, match=f"min_parse_rate must be in \\[0, 1\\], got {value}"):
        QueryOptions(min_parse_rate=value)
    assert QueryOptions().min_parse_rate == 0.9
