"""Real weights: `benchmarks.llama_cpp --model` on a tiny slice (Q4 over the first 24 rows of
movies_small.csv on Gemma 3 270M: the faster of the two bundled models at prefill, plain
completion with its BOS; the written order twice, for the floor, and GGR once), about 40 s.

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

from benchmarks.lib.llama_cpp_real import answer_agreement, problems_real, run_real  # noqa: E402
from benchmarks.lib.llama_cpp_real_report import markdown_real  # noqa: E402
from tests.conftest import shared_file  # noqa: E402

pytestmark = pytest.mark.llama_cpp
MODEL = "gemma3-270m"
ROWS = 24


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    from resources.llama_cpp.models import resolve_model

    try:
        resolve_model(MODEL)
    except (FileNotFoundError, ValueError) as exc:
        pytest.skip(f"{MODEL} is not installed: {exc}")
    movies = shared_file("data", "movies_small.csv")
    workdir = tmp_path_factory.mktemp("real")
    out = run_real([MODEL], movies, ROWS, ["q4_job"], 2, 1, workdir, repeat_only=("original",))
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
        assert len(m["cached_tokens"]) == (2 if rung == "original" else 1), rung
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
    shares = [
        ("floor", rungs["original"], rungs["original"]["rerun_agreement"]),
        ("agreement", rungs["ggr"], rungs["ggr"]["vs_original"]),
    ]
    for name, m, a in shares:
        assert a["n"] == m["requests"], name
        assert 0.0 <= a["lo"] <= a["rate"] <= a["hi"] <= 1.0, name
    assert rungs["original"]["vs_original"]["rate"] == 1.0  # itself
    assert rungs["ggr"]["rerun_agreement"] is None  # not repeated
    split = rungs["ggr"]["vs_original"]
    assert split["same_prompt"]["n"] + split["changed_prompt"]["n"] == split["n"]
    assert split["changed_prompt"]["n"] > 0  # GGR moves Q4's movie_info first
    assert rungs["ggr"]["vs_original"]["mean_abs_diff"] is not None  # Q4: numbers
    report = markdown_real(result)
    assert "agreement with written" in report and "floor (rerun)" in report
    assert "rows sent the very same prompt" in report


def test_model_shape_read_from_the_gguf_header(result):
    shape = result["models"][MODEL]["shape"]
    assert shape == {
        "architecture": "gemma3",
        "layers": 18,
        "width": 640,
        "vocab": 262144,
        "add_bos": True,
    }


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
