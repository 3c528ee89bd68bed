"""`benchmarks.quality`: the pure helpers (SQuAD scoring, Wilson intervals, agreement, the
paired comparison, the seeded sample of whole contexts, the rows-only table, the report's
checks) as properties, and one tiny real run on a bundled model (marked `llama_cpp`)."""

from __future__ import annotations

import copy
import json
import math

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks import quality
from benchmarks.lib.quality_metrics import (
    agreement,
    exact_match,
    mcnemar_p,
    normalize_answer,
    paired_difference,
    parse_rate,
    sample_contexts,
    token_f1,
    wilson,
)
from benchmarks.lib.quality_runs import rows_only_table

CONSTRUCTION = (
    "same_prompts_as_written",
    "sent_in_ggr_planned_order",
    "sent_in_ggr_run_order",
    "row_order_differs_from_written",
)
words = st.text(alphabet="abcdeThe .,!-", max_size=30)
answers = st.lists(words, min_size=1, max_size=4)


# -- SQuAD scoring -----------------------------------------------------------------------------


def test_scoring_matches_the_official_squad_examples():
    assert normalize_answer("The Norman  Conquest.") == "norman conquest"
    assert exact_match("Normandy, France", ["Normandy", "normandy, france"])
    assert not exact_match("Normandy", ["France"])
    assert not exact_match(None, ["France"])
    # "in the 10th century" vs "10th and 11th centuries": tokens in, 10th, century vs
    # 10th, and, 11th, centuries -> 1 shared: p = 1/3, r = 1/4
    assert token_f1("in the 10th century", ["10th and 11th centuries"]) == pytest.approx(
        2 * (1 / 3) * (1 / 4) / (1 / 3 + 1 / 4)
    )
    assert token_f1("France", ["the", "France"]) == 1.0
    assert token_f1(None, ["France"]) == 0.0
    assert token_f1("France", []) == 0.0


@given(words)
def test_normalising_twice_changes_nothing(text):
    assert normalize_answer(normalize_answer(text)) == normalize_answer(text)


@given(words, answers)
def test_f1_is_a_score_and_an_exact_match_scores_one(prediction, golds):
    f1 = token_f1(prediction, golds)
    assert 0.0 <= f1 <= 1.0
    if exact_match(prediction, golds):
        assert f1 == 1.0


@given(words, answers, words)
def test_another_acceptable_answer_never_lowers_a_score(prediction, golds, extra):
    assert token_f1(prediction, [*golds, extra]) >= token_f1(prediction, golds)
    assert exact_match(prediction, [*golds, extra]) >= exact_match(prediction, golds)


@given(words, words)
def test_f1_is_symmetric_and_a_prediction_matches_itself(a, b):
    assert token_f1(a, [b]) == pytest.approx(token_f1(b, [a]))
    assert token_f1(a, [a]) == 1.0 and exact_match(a, [a])


# -- intervals, agreement, paired comparison -------------------------------------------------


def test_wilson_gives_the_textbook_values():
    assert wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson(3, 2)


@given(st.integers(1, 500), st.data())
def test_wilson_holds_the_rate_narrows_with_n_and_mirrors(n, data):
    k = data.draw(st.integers(0, n))
    lo, hi = wilson(k, n)
    assert 0.0 <= lo <= k / n <= hi <= 1.0
    lo4, hi4 = wilson(4 * k, 4 * n)
    assert hi4 - lo4 < hi - lo
    mlo, mhi = wilson(n - k, n)
    assert (lo, hi) == pytest.approx((1 - mhi, 1 - mlo))


keyed = st.dictionaries(st.text(min_size=1, max_size=4), st.sampled_from(["yes", "no", None]))


@given(keyed, st.data())
def test_agreement_counts_the_rows_with_the_same_answer(reference, data):
    other = {k: data.draw(st.sampled_from(["yes", "no", None])) for k in reference}
    a = agreement(other, reference)
    assert a["same"] == sum(other[k] == reference[k] for k in reference) == a["k"]
    assert a["n"] == len(reference)
    assert sorted(a["differ"]) == sorted(k for k in reference if other[k] != reference[k])
    assert agreement(reference, other)["same"] == a["same"]
    assert agreement(reference, reference)["same"] == len(reference)
    if reference:
        assert a["rate"] == a["same"] / a["n"] and a["lo"] <= a["rate"] <= a["hi"]


def test_agreement_refuses_runs_over_different_rows():
    with pytest.raises(ValueError, match="different rows"):
        agreement({"a": "yes"}, {"b": "yes"})


def test_parse_rate_counts_answers_in_form_among_answers():
    r = parse_rate(["yes", "maybe", None, "no"], [None, "not in choice", None, None])
    assert (r["k"], r["n"]) == (2, 3)
    with pytest.raises(ValueError):
        parse_rate(["yes"], [])


@given(st.integers(0, 40), st.integers(0, 40))
def test_mcnemar_is_a_symmetric_p_value(b, c):
    p = mcnemar_p(b, c)
    assert 0.0 < p <= 1.0
    assert p == mcnemar_p(c, b)
    if b == c:
        assert p == 1.0


def test_mcnemar_gives_the_exact_binomial_values():
    assert mcnemar_p(0, 6) == pytest.approx(2 / 64)
    assert mcnemar_p(1, 9) == pytest.approx(2 * 11 / 1024)


@given(st.lists(st.tuples(st.sampled_from([0.0, 1.0]), st.sampled_from([0.0, 1.0]))))
def test_paired_difference_is_the_mean_change(pairs):
    mine, theirs = [a for a, _ in pairs], [b for _, b in pairs]
    d = paired_difference(mine, theirs)
    if pairs:
        assert d["delta"] == pytest.approx((sum(mine) - sum(theirs)) / len(pairs))
        assert d["lo"] <= d["delta"] + 1e-12 and d["delta"] <= d["hi"] + 1e-12
    better = sum(1 for a, b in pairs if a > b)
    worse = sum(1 for a, b in pairs if a < b)
    assert d["mcnemar_p"] == mcnemar_p(better, worse)


# -- the sample and the rows-only table ------------------------------------------------------


def _squad_like(sizes: list[int]) -> pd.DataFrame:
    rows = [(f"c{c}", f"q{c}-{i}") for c, n in enumerate(sizes) for i in range(n)]
    frame = pd.DataFrame(rows, columns=["context", "question"])
    frame["id"] = [f"id{i}" for i in range(len(frame))]
    return frame.sample(frac=1, random_state=1).reset_index(drop=True)  # contexts interleaved


@settings(max_examples=60)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=15), st.integers(0, 200), st.integers())
def test_the_sample_is_exact_seeded_and_made_of_whole_contexts(sizes, rows, seed):
    seed = abs(seed) % 2**32
    frame = _squad_like(sizes)
    s = sample_contexts(frame, rows, seed)
    assert len(s) == min(rows, len(frame))
    assert s["id"].is_unique and set(s["id"]) <= set(frame["id"])
    assert s.equals(sample_contexts(frame, rows, seed))
    size = frame["context"].value_counts()
    counts = s["context"].value_counts()
    partial = [c for c, n in counts.items() if n != size[c]]
    assert len(partial) <= 1  # only the last context may be cut short
    if partial:
        assert s["context"].iloc[-1] == partial[0]
    contexts = list(dict.fromkeys(s["context"]))  # each context's rows are contiguous
    runs = (s["context"] != s["context"].shift()).sum()
    assert runs == len(contexts)
    for c in contexts:  # file order inside a context
        inside = s[s["context"] == c]["id"].tolist()
        assert inside == [i for i in frame["id"] if i in set(inside)]


def test_another_seed_gives_another_sample():
    frame = _squad_like([5] * 30)
    assert not sample_contexts(frame, 20, 0).equals(sample_contexts(frame, 20, 1))


@given(st.lists(st.integers(0, 5), min_size=1, max_size=25), st.randoms(use_true_random=False))
def test_rows_only_table_sends_the_plan_order_and_keeps_every_row(inputs, rnd):
    # inputs[i]: row i's distinct input (0 = skipped, as -1); plan: the inputs in some order
    table = pd.DataFrame({"id": [f"r{i}" for i in range(len(inputs))]})
    deduped = pd.DataFrame({"id": table["id"], "_input_id": [i - 1 for i in inputs]})
    live = sorted({i - 1 for i in inputs if i > 0})
    order = list(live)
    rnd.shuffle(order)
    plan = pd.DataFrame({"position": range(len(order)), "_input_id": order})
    plan = plan.sample(frac=1, random_state=0)  # rows of the plan in any order
    out = rows_only_table(table, deduped, plan, "id")
    assert sorted(out["id"]) == sorted(table["id"])
    by_id = dict(zip(deduped["id"], deduped["_input_id"], strict=True))
    seq = [by_id[k] for k in out["id"]]
    sent = [i for i in seq if i >= 0]
    firsts = list(dict.fromkeys(sent))
    assert firsts == order  # each input's first row in plan order
    assert sent == sorted(sent, key=order.index)  # every row of an input together
    assert all(i < 0 for i in seq[len(sent) :])  # skipped rows last


def test_cached_tokens_and_prompts_follow_each_row_to_its_request():
    from benchmarks.lib.quality_runs import cached_by_key, prompts_by_key, submission_keys

    deduped = pd.DataFrame({"id": ["a", "b", "c", "d"], "_input_id": [1, 0, 1, -1]})
    outputs = pd.DataFrame({"_input_id": [1, 0], "cached_tokens": [4, 0]})
    plan = pd.DataFrame({"position": [1, 0], "_input_id": [0, 1], "prompt": ["P0", "P1"]})
    assert cached_by_key(deduped, outputs, "id") == {"a": 4, "b": 0, "c": 4}
    assert prompts_by_key(deduped, plan, "id") == {"a": "P1", "b": "P0", "c": "P1"}
    assert submission_keys(deduped, plan, "id") == ["a", "b"]  # input 1 first, then 0


# -- the report: scores, verdicts and the checks that fail a run -----------------------------


def _table() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": ["a", "b", "c", "d"],
            "context": ["x", "x", "y", "y"],
            "title": ["t", "t", "t", "t"],
            "is_impossible": ["False", "True", "False", "True"],
            "answers": [json.dumps(["Paris"]), "[]", json.dumps(["the Loire", "Loire"]), "[]"],
        }
    )


def test_accuracy_scores_each_task_against_its_labels():
    table = _table()
    choice, text = quality.TASKS["answerability"], quality.TASKS["extractive"]
    acc = quality.accuracy(choice, {"a": "yes", "b": "yes", "c": None, "d": "no"}, table)
    assert (acc["k"], acc["n"]) == (2, 4)  # b is impossible, c unanswered
    assert quality.scored_keys(text, table) == ["a", "c"]
    acc = quality.accuracy(text, {"a": "Paris.", "b": None, "c": "on the Loire river"}, table)
    assert (acc["exact_match"]["k"], acc["exact_match"]["n"]) == (1, 2)
    # "on loire river" vs "loire": p = 1/3, r = 1, F1 = 0.5
    assert acc["f1"]["mean"] == pytest.approx((1.0 + 0.5) / 2)
    assert quality.majority_baseline(choice, table)["rate"] == 0.5


def _run(answers: list, **over) -> dict:
    r = {f: None for f in quality.RUN_FIELDS} | {
        "rows": 4, "answered": 4, "skipped": 0, "failed": 0, "slots": 1, "requests": 4,
        "parse": {"rate": 1.0}, "cached_tokens_reported": True, "token_hit_rate": 0.5,
        "wall_s": 1.0, "answers": answers, "field_orders": {"question,context": 4},
    }  # fmt: skip
    return r | over


def _result(method_answers: list, floor_answers: list) -> dict:
    written = ["yes", "no", "yes", "no"]
    keys = ["a", "b", "c", "d"]
    runs = {}
    for name in quality.RUNS:
        ans = {"floor_rerun": written, "floor_slots": floor_answers}.get(name, method_answers)
        ans = written if name in ("original", "rows_only") else ans
        runs[name] = _run(ans)
        if name != "original":
            runs[name]["agreement"] = agreement(
                dict(zip(keys, ans, strict=True)), dict(zip(keys, written, strict=True))
            )
    runs["rows_only"]["construction"] = dict.fromkeys(CONSTRUCTION, True)
    runs["rows_only"]["changed_rows"] = []
    model = {
        "runs": runs,
        "floor": {f: runs[f]["agreement"] for f in quality.FLOORS},
        "verdicts": {n: quality.verdict(runs, n) for n in quality.METHODS[1:]},
    }
    task = {"kind": "choice", "models": {"m": model}}
    return {"commit": "c", "command": "x", "data": {"rows": 4}, "engine": {}, "tasks": {"t": task}}


def test_a_method_is_beyond_the_floor_only_when_it_changed_more_rows():
    r = _result(["no", "no", "yes", "no"], ["no", "no", "yes", "no"])  # 1 changed each
    v = r["tasks"]["t"]["models"]["m"]["verdicts"]["ggr"]
    assert v["changed"] == 1 and v["floor_changed"] == {"floor_rerun": 0, "floor_slots": 1}
    assert v["beyond_rerun"] and not v["beyond_floor"]
    line = quality.verdict_line("t", "m", r["tasks"]["t"]["models"]["m"], 4)
    assert "moving fields changed answers beyond the rerun floor, though fewer than 4" in line
    r = _result(["no", "yes", "no", "no"], ["no", "no", "yes", "no"])  # 3 vs 1
    v = r["tasks"]["t"]["models"]["m"]["verdicts"]
    assert v["ggr"]["beyond_floor"] and v["rows_only"]["changed"] == 0
    assert not v["rows_only"]["beyond_rerun"] and not v["ggr"]["intervals_disjoint"]
    line = quality.verdict_line("t", "m", r["tasks"]["t"]["models"]["m"], 4)
    assert "moving rows alone changed no answer beyond the floor" in line
    assert "moving fields changed answers beyond the floor" in line


def test_changed_rows_name_each_differing_row_with_its_cache_reuse():
    from benchmarks.lib.quality_runs import RunRecord

    def rec(answers, cached):
        return RunRecord(answers=answers, figures={}, prompts={}, sent_keys=[], cached=cached)

    written = rec({"a": "x", "b": "y", "c": None}, {"a": 5, "b": 7, "c": 0})
    moved = rec({"a": "x", "b": "z", "c": "w"}, {"a": 5, "b": 9, "c": 3})
    out = quality.changed_rows(moved, written, ["a", "b", "c"])
    assert [c["id"] for c in out] == ["b", "c"]
    assert out[0] == {"id": "b", "written": "y", "answer": "z", "cached_tokens_written": 7,
                      "cached_tokens": 9}  # fmt: skip
    assert quality.changed_rows(written, written, ["a", "b", "c"]) == []


def test_the_checks_fail_a_corrupted_result():
    good = _result(["yes", "no", "yes", "no"], ["yes", "no", "yes", "no"])
    assert quality.problems(good) == []
    cases = {
        "missing field": lambda r: r["tasks"]["t"]["models"]["m"]["runs"]["ggr"].pop("parse"),
        "of 4": lambda r: r["tasks"]["t"]["models"]["m"]["runs"]["ggr"].update(answered=3),
        "parse rate": lambda r: r["tasks"]["t"]["models"]["m"]["runs"]["ggr"].update(
            parse={"rate": 0.75}
        ),
        "failed": lambda r: r["tasks"]["t"]["models"]["m"]["runs"]["ggr"].update(
            answered=3, failed=1
        ),
        "did not report": lambda r: r["tasks"]["t"]["models"]["m"]["runs"]["ggr"].update(
            cached_tokens_reported=False
        ),
        "rows_only": lambda r: r["tasks"]["t"]["models"]["m"]["runs"]["rows_only"].update(
            construction=dict.fromkeys(CONSTRUCTION, True) | {"same_prompts_as_written": False}
        ),
    }
    for words_, corrupt in cases.items():
        bad = copy.deepcopy(good)
        corrupt(bad)
        found = quality.problems(bad)
        assert any(words_ in line for line in found), (words_, found)


def test_the_markdown_names_the_commit_command_and_every_run():
    r = _result(["no", "no", "yes", "no"], ["yes", "no", "yes", "no"])
    r |= {
        "commit": "0123456789abcdef", "modified": [], "started_utc": "s", "finished_utc": "f",
        "wall_s": 1.0,
        "data": {"file": "f.csv", "seed": 0, "rows": 4, "contexts": 2, "titles": 1,
                 "answerable": 2},
        "engine": {"llama_cpp_python": "v", "temperature": 0.0, "slots": 1, "floor_slots": 4,
                   "threads": 1, "prompt_style": "named"},
    }  # fmt: skip
    entry = r["tasks"]["t"]
    entry |= {"sql": "LLM('{q}', output => 'choice(yes,no)')", "what": "w",
              "majority_baseline": None}  # fmt: skip
    for run_ in entry["models"]["m"]["runs"].values():
        run_ |= {"accuracy": {"k": 1, "n": 4, "rate": 0.25, "lo": 0.0, "hi": 0.7},
                 "first_prompt": "p", "versus_written": None}  # fmt: skip
    text = quality.markdown(r, "x.png")
    assert "0123456789ab" in text and "`x`" in text and "![quality](x.png)" in text
    assert "rendered" not in text
    # method answers ["no", "no", "yes", "no"]: 25% yes; written (and rows_only) 50%
    assert "answers 'yes': original 50%, rows_only 50%, column_stats 25%, ggr 25%" in text
    assert "rendered from its JSON by `--render` at commit `fedcba987654`" in quality.markdown(
        r | {"rendered_at": "fedcba9876543210"}
    )
    for name in quality.RUNS:
        assert f"| m | {name}:" in text


# -- one tiny real run ---------------------------------------------------------------------------


@pytest.mark.llama_cpp
def test_a_tiny_real_run_accounts_for_every_row_and_meets_its_floor(tmp_path):
    from resources.llama_cpp.binary import server_binary
    from resources.llama_cpp.models import resolve_model
    from tests.conftest import shared_file

    shared_file("data", "squad_v2_dev_half.csv")
    if server_binary() is None:
        pytest.skip("llama-server is not built (make llama-server)")
    try:
        resolve_model("gemma3-270m")
    except (FileNotFoundError, ValueError) as exc:
        pytest.skip(f"gemma3-270m is not installed (make models): {exc}")
    out = tmp_path / "quality.json"
    code = quality.main(
        ["--rows", "16", "--models", "gemma3-270m", "--tasks", "answerability",
         "--json", str(out), "--no-plot"]
    )  # fmt: skip
    result = json.loads(out.read_text())
    assert quality.missing_fields(result) == []
    assert quality.problems(result) == [] and code == 0
    assert out.with_suffix(".md").exists()
    m = result["tasks"]["answerability"]["models"]["gemma3-270m"]
    for name, r in m["runs"].items():
        assert r["answered"] + r["skipped"] + r["failed"] == 16 == r["rows"], name
        assert r["parse"]["rate"] == 1.0 and r["parse"]["n"] == 16, name
        assert len(r["answers"]) == 16 and set(r["answers"]) <= {"yes", "no"}, name
        assert len(r["cached_tokens_by_row"]) == 16, name
        assert sum(r["cached_tokens_by_row"]) <= r["cached_tokens"], name
    assert m["runs"]["rows_only"]["construction"] == dict.fromkeys(CONSTRUCTION, True)
    assert m["runs"]["rows_only"]["agreement"]["same"] == m["floor"]["floor_rerun"]["same"]
    assert "original" in m["runs"]["rows_only"]["same_prompts_as"]
    assert m["runs"]["ggr"]["field_orders"] == {"context,question": 16}
    assert not math.isnan(m["runs"]["ggr"]["token_hit_rate"])
