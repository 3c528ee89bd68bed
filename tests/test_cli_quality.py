"""`llm-assets run`'s `quality` object, run as a user would (a real subprocess): the parse rate
overall and per LLM stage, accuracy against `--label-column` with its Wilson interval, the
sim's answers marked as placeholders, and a label column that is not there refused in one
line before anything is sent."""

import json

import pandas as pd
import pytest

from llm_assets.pipeline.quality import LABEL, SIM_NOTE, wilson_interval
from tests.test_cli import assert_one_line_error, run

CHOICE = (
    "SELECT t.id, LLM('Is this review positive? {review}', t.review, "
    "output => 'choice(yes,no)') AS verdict FROM t"
)
TWO_STAGES = (
    "SELECT t.id, LLM('The film in {review}', t.review) AS film FROM t "
    "WHERE LLM('Is this review positive? {review}', t.review) = 'Yes'"
)
REVIEWS = [f"review {i}" for i in range(8)]


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def summary(*args) -> dict:
    proc = run("run", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_run_reports_accuracy_against_a_label_column_and_says_the_sim_is_no_model(tmp_path):
    sql = write(tmp_path, "q.sql", CHOICE)
    table = tmp_path / "t.csv"
    pd.DataFrame({"id": range(8), "review": REVIEWS}).to_csv(table, index=False)
    out = tmp_path / "first.csv"
    first = summary(str(sql), "--table", f"t={table}", "--out", str(out))
    quality = first["quality"]
    assert quality["engine"] == "sim" and quality["note"] == SIM_NOTE
    assert quality["parse_rate"] == 1.0  # the sim's placeholders are yes or no
    assert quality["stages"] == [{"llm_call": "verdict", "answers": 8, "parse_rate": 1.0}]
    assert quality["label_column"] is None and quality["accuracy"] is None
    # labels: the sim's own answer for rows 0-3 (row 1 in upper case: a choice ignores case),
    # the other answer for rows 4-5, none for 6-7
    answers = pd.read_csv(out).set_index("id")["verdict"]
    flip = {"yes": "no", "no": "yes"}
    gold = [answers[0], answers[1].upper(), answers[2], answers[3], flip[answers[4]]]
    gold += [flip[answers[5]], None, None]
    pd.DataFrame({"id": range(8), "review": REVIEWS, "gold": gold}).to_csv(table, index=False)
    labelled = summary(str(sql), "--table", f"t={table}", "--label-column", "gold")["quality"]
    assert labelled["label_column"] == "gold" and labelled["labelled_call"] == "verdict"
    assert labelled["n_labelled"] == 6 and labelled["accuracy"] == round(4 / 6, 6)
    assert labelled["accuracy_ci95"] == [round(x, 6) for x in wilson_interval(4, 6)]
    assert "f1" not in labelled and labelled["note"] == SIM_NOTE


def test_several_stages_report_each_parse_rate_and_the_last_ones_accuracy_and_f1(tmp_path):
    sql = write(tmp_path, "q.sql", TWO_STAGES)
    table = write(tmp_path, "t.csv", "id,review,gold\n1,good,\n2,bad,x\n3,fine,\n4,great,y\n")
    out = tmp_path / "o.csv"
    args = ["--table", f"t={table}", "--label-column", "t.gold", "--out", str(out)]
    quality = summary(str(sql), *args)["quality"]
    result = pd.read_csv(out)
    reached = int((result["film"].notna() & result[LABEL].notna()).sum())  # labels in result
    first, last = quality["stages"]
    assert first == {"llm_call": "llm_1", "answers": 4, "parse_rate": 1.0}
    assert last["llm_call"] == "film" and last["parse_rate"] == 1.0  # text: any answer
    assert quality["parse_rate"] == 1.0 and quality["labelled_call"] == "film"
    # the sim's text is "[sim] ...": labelled rows the filter kept count, and match nothing
    assert quality["n_labelled"] == reached and quality["engine"] == "sim"
    if reached:
        assert quality["accuracy"] == 0.0 and quality["f1"] == 0.0
    else:
        assert quality["accuracy"] is None and quality["f1"] is None


@pytest.mark.parametrize(
    ("label", "facts"),
    [
        ("answer", ["label column 'answer' is not a column of table 't'", "id, review, gold"]),
        ("x.gold", ["label column 'x.gold'"]),
    ],
)
def test_a_label_column_that_is_not_there_is_one_line_exit_2(tmp_path, label, facts):
    sql = write(tmp_path, "q.sql", CHOICE)
    table = write(tmp_path, "t.csv", "id,review,gold\n1,good,yes\n")
    proc = run("run", str(sql), "--table", f"t={table}", "--label-column", label)
    assert_one_line_error(proc, *facts)
