"""`benchmarks.gpu_validation --dry-run`: everything up to the CUDA call (model directory,
Q1 workloads in original and GGR order, the simulator's predictions) runs without a GPU."""

from __future__ import annotations

import json

import pytest

from benchmarks import gpu_validation as gv
from benchmarks.vllm_conformance import MOVIES, TOKENIZER


@pytest.mark.skipif(
    not (MOVIES.exists() and TOKENIZER.exists()), reason="../shared data or tokenizer absent"
)
def test_dry_run_writes_the_plan_and_the_simulated_predictions(tmp_path) -> None:
    out = tmp_path / "plan.json"
    assert gv.main(["--dry-run", "--rows", "20", "--concurrency", "1,4", "--json", str(out)]) == 0
    plan = json.loads(out.read_text())
    # the product's planner: 4 of the first 20 reviews are empty, skipped by the null policy
    assert plan["dry_run"] and plan["q1_requests"] == {"original": 16, "ggr": 16}
    assert plan["model_dir_files"] == ["config.json", "tokenizer.json", "tokenizer_config.json"]
    sim = plan["simulated"]
    for timing in ("vllm-2024", "vllm-2026"):
        assert set(sim[timing]) == {"1", "4"}
    # today's vLLM decodes faster than the papers' (smaller step overhead)
    assert sim["vllm-2026"]["1"]["tpot_ms_p50"] < sim["vllm-2024"]["1"]["tpot_ms_p50"]
    assert sim["q1_cached_tokens"]["ggr"] >= sim["q1_cached_tokens"]["original"]


def test_bad_concurrency_is_a_one_line_error(capsys) -> None:
    with pytest.raises(SystemExit):
        gv.main(["--dry-run", "--concurrency", "1,x"])
    assert "--concurrency '1,x'" in capsys.readouterr().err
