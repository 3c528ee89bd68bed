"""Real weights: `benchmarks.llama_cpp --model` on a tiny slice (Q4 over the first 24 rows of
movies_small.csv, SmolLM2-135M-Instruct through its chat template, written order and GGR,
each twice).

Skipped (one line) unless the binary is built (`make llama-server`) and the model installed
(`make models`). What is asserted does not depend on timing: the project's cached-token count
equals the server's counter, every row of the join has exactly one status, the server's own
token ids have as many tokens as each request's reported prompt and predict each request's
cached tokens exactly (one slot), agreement (split by whether the row's prompt changed) and
the determinism floor are reported as shares in [0, 1], and the report names them.
"""

import pytest

from benchmarks.lib.llama_cpp_build import server_binary

BINARY = server_binary()
if BINARY is None:
    pytest.skip("llama-server is not built (make llama-server)", allow_module_level=True)

from benchmarks.lib.llama_cpp_real import (  # noqa: E402
    answer_agreement,
    markdown_real,
    problems_real,
    run_real,
)
from tests.conftest import shared_file  # noqa: E402

pytestmark = pytest.mark.llama_cpp
MODEL = "smollm2-135m"
ROWS = 24


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    from resources.llama_cpp.models import resolve_model

    try:
        resolve_model(MODEL)
    except (FileNotFoundError, ValueError) as exc:
        pytest.skip(f"{MODEL} is not installed: {exc}")
    movies = shared_file("data", "movies_small.csv")
    out = run_real([MODEL], movies, ROWS, ["q4_job"], 2, 1, tmp_path_factory.mktemp("real"))
    out["command"] = "test"
    return out


def _rungs(result):
    return result["models"][MODEL]["jobs"]["q4_job"]["rungs"]


def test_no_problem_found(result):
    assert problems_real(result) == []
    assert set(_rungs(result)) == {"original", "ggr"}  # no duplicates, no predicate in Q4


def test_project_count_equals_the_server_counter(result):
    for rung, m in _rungs(result).items():
        assert m["cached_tokens"] == m["server_cached_tokens"], rung
        assert len(m["cached_tokens"]) == 2, rung
    assert _rungs(result)["ggr"]["cached_tokens"][0] > 0


def test_every_row_accounted_for(result):
    for rung, m in _rungs(result).items():
        assert sum(m["statuses"].values()) == ROWS, rung
        assert m["statuses"].get("failed", 0) == 0, rung
        assert m["statuses"]["answered"] == m["requests"] > 0, rung


def test_server_token_ids_predict_every_request(result):
    for rung, m in _rungs(result).items():
        assert m["server_ids_count_equal"] == m["requests"], rung
        assert m["one_slot_rule"]["requests_equal"] == m["requests"], rung


def test_agreement_and_floor_reported_in_unit_interval(result):
    rungs = _rungs(result)
    for rung, m in rungs.items():
        for name in ("rerun_agreement", "vs_original"):
            a = m[name]
            assert a["n"] == m["requests"], (rung, name)
            assert 0.0 <= a["lo"] <= a["rate"] <= a["hi"] <= 1.0, (rung, name)
    assert rungs["original"]["vs_original"]["rate"] == 1.0  # itself
    split = rungs["ggr"]["vs_original"]
    assert split["same_prompt"]["n"] + split["changed_prompt"]["n"] == split["n"]
    assert split["changed_prompt"]["n"] > 0  # GGR moves Q4's movie_info first
    assert rungs["ggr"]["vs_original"]["mean_abs_diff"] is not None  # Q4: numbers
    report = markdown_real(result)
    assert "agreement with written" in report and "floor (rerun)" in report
    assert "rows sent the very same prompt" in report


def test_answer_agreement_compares_numbers_and_rows_answered_in_both():
    reference = {0: "4", 1: "2.0", 2: None, 3: "3"}
    answers = {0: "4.0", 1: "2.5", 2: "1", 3: "three"}
    a = answer_agreement(answers, reference, numeric=True)
    assert (a["k"], a["n"], a["only_one"]) == (1, 3, 1)
    assert a["mean_abs_diff"] == pytest.approx(0.25)
    assert answer_agreement(answers, reference, numeric=False)["k"] == 0
    prompts = {0: "p0", 1: "p1", 2: "p2", 3: "moved"}
    split = answer_agreement(answers, reference, True, prompts, {0: "p0", 1: "p1", 3: "p3"})
    assert (split["same_prompt"]["k"], split["same_prompt"]["n"]) == (1, 2)
    assert (split["changed_prompt"]["k"], split["changed_prompt"]["n"]) == (0, 1)
