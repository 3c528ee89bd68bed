"""SimulatedEngine end to end: records, invariants, errors, determinism, progress (threads:
`test_engine_threads`)."""

from __future__ import annotations

import pytest

from llm_assets.optimizer.cost import self_hosted_usd
from llm_assets.output_spec import OutputSpec
from resources.engine import GpuRental, Request
from resources.sim import SimulatedEngine
from tests.resources.sim.helpers import IntTokenizer, prompt, req

REVIEW = "Rate the movie from this review. The acting was wonderful and the plot was gripping."


def test_run_returns_one_response_per_request_in_order() -> None:
    eng = SimulatedEngine()
    specs = [OutputSpec.choice(["Yes", "No"]), OutputSpec.number(1, 5), OutputSpec.text()]
    requests = [Request(str(i), f"{REVIEW} #{i}", 8, specs[i % 3]) for i in range(30)]
    result = eng.run("q1", requests)
    assert [r.id for r in result.responses] == [r.id for r in requests]
    stats = result.stats
    assert stats.engine == "sim" and stats.model == "llama-2-7b" and stats.hardware == "L4"
    assert stats.n_requests == 30 and stats.errors == 0
    assert stats.prompt_tokens == sum(r.prompt_tokens for r in result.responses)
    assert stats.engine_time_s == max(r.finish_s for r in result.responses)
    for request, response in zip(requests, result.responses, strict=True):
        assert response.cached_tokens <= response.prompt_tokens
        assert request.output.violation(response.text) is None
        if request.output.kind == "text":
            assert response.text.startswith("[sim]") and response.output_tokens == 8
        else:
            assert 1 <= response.output_tokens <= 8


def test_simulated_time_is_deterministic() -> None:
    requests = [Request(str(i), f"{REVIEW} {i % 7}", 4) for i in range(200)]
    a = SimulatedEngine().run("q", requests)
    b = SimulatedEngine().run("q", requests)
    assert a.responses == b.responses
    assert a.stats.engine_time_s == b.stats.engine_time_s


def test_prefix_cache_makes_a_run_faster() -> None:
    requests = [Request(str(i), f"{REVIEW * 20} {i}", 4) for i in range(100)]
    cold = SimulatedEngine(enable_prefix_caching=False).run("q", requests).stats
    warm = SimulatedEngine(enable_prefix_caching=True).run("q", requests).stats
    assert cold.cached_tokens == 0 and warm.token_hit_rate > 0.8
    assert warm.engine_time_s < cold.engine_time_s


def test_too_long_prompt_comes_back_as_an_error_row() -> None:
    eng = SimulatedEngine(tokenizer=IntTokenizer())
    result = eng.run("q", [req("ok", prompt(range(10))), req("long", prompt(range(5000)))])
    ok, long = result.responses
    assert ok.ok and not long.ok and "4096" in long.error
    assert result.stats.errors == 1 and result.stats.prompt_tokens == 10


def test_v0_rejects_prompts_above_the_token_budget() -> None:
    eng = SimulatedEngine(policy="vllm-v0", tokenizer=IntTokenizer(), max_num_batched_tokens=64)
    result = eng.run("q", [req("a", prompt(range(100)))])
    assert "max_num_batched_tokens" in result.responses[0].error


def test_progress_reports_completion() -> None:
    calls: list[tuple[int, int]] = []
    SimulatedEngine().run(
        "q",
        [Request(str(i), REVIEW, 2) for i in range(50)],
        progress=lambda d, t: calls.append((d, t)),
    )
    assert calls and calls[-1] == (50, 50)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_tensor_parallel_deployment_prices_all_gpus() -> None:
    eng = SimulatedEngine(gpu="A100-40GB", model="llama-3-70b")
    assert eng.hardware == "4xA100-40GB" and eng.deployment.num_gpus == 4
    assert eng.gpu_rental == GpuRental("A100-40GB", 4)
    rental = eng.gpu_rental
    assert self_hosted_usd(3600.0, rental.gpu, rental.num_gpus) == pytest.approx(4 * 1.29)


def test_empty_run() -> None:
    result = SimulatedEngine().run("q", [])
    assert result.responses == [] and result.stats.engine_time_s == 0.0


def test_the_cyclic_gc_is_paused_during_a_run_and_restored_after() -> None:
    """`paused_gc`: off while the simulation runs, back as it was after (also on error)."""
    import gc

    import pytest

    from resources.sim.step_loop import paused_gc

    seen = []
    check = paused_gc(lambda: seen.append(gc.isenabled()))
    assert gc.isenabled()
    check()
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        check()
        assert not gc.isenabled()  # it was off: it stays off
    finally:
        gc.enable()

    @paused_gc
    def fails() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        fails()
    assert gc.isenabled()
