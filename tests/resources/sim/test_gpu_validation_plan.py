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


def test_step_shape_tells_decodes_from_prefill_chunks() -> None:
    from types import SimpleNamespace as NS

    output = NS(
        scheduled_new_reqs=[NS(req_id="0-abcdefgh", num_computed_tokens=0)],
        scheduled_cached_reqs=NS(req_ids=["1", "2"], num_computed_tokens=[300, 512]),
        num_scheduled_tokens={"0-abcdefgh": 256, "1": 1, "2": 200},
    )
    # request 1 has computed its 300-token prompt: a decode; request 2 is a later chunk
    prefill, decode = gv.step_shape(output, {"0": 400, "1": 300, "2": 900})
    assert prefill == [[256, 0], [200, 512]] and decode == [300]


@pytest.mark.skipif(not TOKENIZER.exists(), reason="../shared tokenizer absent")
def test_a_measured_run_is_fitted_and_compared_with_the_simulator(tmp_path) -> None:
    """--export, then a --measure's JSON (its steps timed by known coefficients), then
    --measured: the fit recovers the coefficients and the table compares every C."""
    from resources.sim.cost_model import BatchShape, CostCoefficients

    assert gv.main(["--export", str(tmp_path), "--rows", "20", "--concurrency", "1,4"]) == 0
    requests = json.loads((tmp_path / "requests.json").read_text())
    assert (tmp_path / "model" / "config.json").exists()
    assert requests["sweep"]["4"] == [list(x) for x in gv.sweep_lengths(4)]
    truth = CostCoefficients(a=2e-6, b=4e-8, d=2e-7, e=3e-4, f=4e-3)
    steps = []
    for i in range(40):
        prefill = [[16 + 37 * i % 500, 64 * (i % 3)]] * (i % 4)
        decode = [100 + 13 * k for k in range(i % 9)]
        shape = BatchShape(prefill=tuple(map(tuple, prefill)), decode=tuple(decode))
        steps.append([prefill, decode, truth.time(shape)])
    summary = {"ttft_ms_p50": 20.0, "tpot_ms_p50": 5.0, "output_tok_per_s": 500.0}
    summary |= {"prompt_tokens": 1000, "cached_tokens": 100}
    measured = {
        "command": "python -m benchmarks.gpu_validation --measure DIR",
        "vllm_version": "0.0-test", "torch_version": "0", "device_name": "NVIDIA H200",
        "startup_s": 1.0, "requests": requests, "steps": steps,
        "measured": {"sweep": {"1": summary, "4": summary}, "num_steps": len(steps),
                     "q1": {"original": summary, "ggr": summary}},
    }  # fmt: skip
    (tmp_path / "measured.json").write_text(json.dumps(measured))
    out = tmp_path / "result.json"
    assert gv.main(["--measured", str(tmp_path / "measured.json"), "--gpu", "H200",
                    "--json", str(out)]) == 0  # fmt: skip
    result = json.loads(out.read_text())
    for name, value in truth.__dict__.items():
        assert result["fitted_coefficients"][name] == pytest.approx(value, rel=1e-6)
    assert set(result["simulated"]["fitted"]) == {"1", "4"}
    assert result["gpu_profile"] == "H200" and result["device_name"] == "NVIDIA H200"
    table = out.with_suffix(".md").read_text()
    assert "| 1 | 20.0 | 5.00 | 500 |" in table and "| 4 | 20.0 |" in table
    assert "| ggr | 16 | 1,000 | 100 |" in table
