"""VLLMEngine: the pure parts without vLLM (stand-in outputs with vLLM's attribute names), and
one GPU integration test that runs only where vLLM imports and a CUDA GPU is present."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

from llm_assets.output_spec import OutputSpec
from resources.engine import Request, Response
from resources.structured_outputs import number_regex, structured_outputs_for
from resources.vllm_engine import (
    SCHEDULING_POLICIES,
    VLLMEngine,
    response_from_output,
    sampling_kwargs,
)


@dataclass
class CompletionOutput:
    """Stand-in for vllm.outputs.CompletionOutput (same attribute names)."""

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str | None = "stop"
    index: int = 0


@dataclass
class RequestMetrics:
    """Stand-in for vLLM v0's RequestMetrics (epoch seconds)."""

    arrival_time: float
    first_token_time: float | None
    finished_time: float | None


@dataclass
class RequestOutput:
    """Stand-in for vllm.outputs.RequestOutput (same attribute names)."""

    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)
    num_cached_tokens: int | None = 0
    metrics: Any = None
    finished: bool = True


# -- number_regex / structured outputs ----------------------------------------------------------


@pytest.mark.parametrize(("lo", "hi"), [(0, 5), (1, 10), (0, 0), (3, 99)])
def test_number_regex_enforces_small_integer_ranges_exactly(lo: int, hi: int) -> None:
    pattern = number_regex(lo, hi)
    for value in range(lo, hi + 1):
        assert re.fullmatch(pattern, str(value)), (pattern, value)
    assert re.fullmatch(pattern, f"{hi}.0")
    for outside in (lo - 1, hi + 1, hi + 10):
        if outside >= 0:
            assert not re.fullmatch(pattern, str(outside)), (pattern, outside)
    assert not re.fullmatch(pattern, f"{hi}.5")
    if hi > lo:
        assert re.fullmatch(pattern, f"{lo}.25")
    assert not re.fullmatch(pattern, "abc")


@pytest.mark.parametrize(("lo", "hi"), [(0.5, 2.5), (-3, 3), (0, 1000)])
def test_number_regex_falls_back_to_a_generic_number(lo: float, hi: float) -> None:
    pattern = number_regex(lo, hi)
    assert re.fullmatch(pattern, "2")
    assert re.fullmatch(pattern, "1.5")
    assert not re.fullmatch(pattern, "two")
    assert bool(re.fullmatch(pattern, "-1")) == (lo < 0)


def test_number_regex_rejects_an_empty_range() -> None:
    with pytest.raises(ValueError, match="lo=3 hi=1"):
        number_regex(3, 1)


def test_structured_outputs_for_each_kind() -> None:
    assert structured_outputs_for(OutputSpec.text()) is None
    assert structured_outputs_for(OutputSpec.choice(["Yes", "No"])) == {"choice": ["Yes", "No"]}
    assert structured_outputs_for(OutputSpec.regex(r"[A-Z]+")) == {"regex": r"[A-Z]+"}
    assert structured_outputs_for(OutputSpec.number(0, 5)) == {"regex": number_regex(0, 5)}
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert structured_outputs_for(OutputSpec.json(schema)) == {"json": schema}
    assert structured_outputs_for(OutputSpec.json()) == {"json_object": True}


def test_sampling_kwargs_is_greedy_with_limits_and_structure() -> None:
    req = Request("r1", "p", max_tokens=3, output=OutputSpec.choice(["A", "B"]))
    assert sampling_kwargs(req) == {
        "max_tokens": 3,
        "temperature": 0.0,
        "structured_outputs": {"choice": ["A", "B"]},
    }
    assert "structured_outputs" not in sampling_kwargs(Request("r2", "p"))
    with pytest.raises(ValueError, match="'r3'.*max_tokens must be >= 1, got 0"):
        sampling_kwargs(Request("r3", "p", max_tokens=0))


# -- RequestOutput -> Response ------------------------------------------------------------------


def test_response_from_output_reads_vllm_attributes() -> None:
    out = RequestOutput(
        "0",
        prompt_token_ids=list(range(40)),
        outputs=[CompletionOutput(" Yes", (11, 12))],
        num_cached_tokens=32,
        metrics=RequestMetrics(arrival_time=100.0, first_token_time=100.5, finished_time=101.25),
    )
    resp = response_from_output(Request("a", "p"), out, run_start_epoch=100.0, fallback_s=9.0)
    assert resp == Response("a", " Yes", 40, 32, 2, 0.5, 1.25)
    assert resp.ok


def test_response_from_output_clips_and_defaults_cached_tokens() -> None:
    req = Request("a", "p")
    no_cache = RequestOutput("0", [1, 2, 3], [CompletionOutput("x", (5,))], None)
    assert response_from_output(req, no_cache).cached_tokens == 0
    over = RequestOutput("0", [1, 2, 3], [CompletionOutput("x", (5,))], 16)
    assert response_from_output(req, over).cached_tokens == 3


def test_response_from_output_without_metrics_uses_the_fallback_time() -> None:
    out = RequestOutput("0", [1], [CompletionOutput("x", (5,))], metrics=object())
    resp = response_from_output(Request("a", "p"), out, run_start_epoch=5.0, fallback_s=2.5)
    assert (resp.ttft_s, resp.finish_s) == (2.5, 2.5)


def test_response_from_output_marks_missing_or_aborted_completions() -> None:
    empty = response_from_output(Request("a", "p"), RequestOutput("0", [1, 2], []))
    assert empty.error and "no completion" in empty.error
    assert empty.prompt_tokens == 2
    aborted = RequestOutput("0", [1], [CompletionOutput("", (), finish_reason="abort")])
    assert "abort" in (response_from_output(Request("b", "p"), aborted).error or "")


# -- VLLMEngine without vLLM -----------------------------------------------------------------


def test_engine_validates_config_and_names_valid_values() -> None:
    with pytest.raises(ValueError, match=r"scheduling_policy='lifo'.*'fcfs' or 'priority'"):
        VLLMEngine("m", scheduling_policy="lifo")
    with pytest.raises(ValueError, match="gpu_memory_utilization.*1.5"):
        VLLMEngine("m", gpu_memory_utilization=1.5)
    with pytest.raises(ValueError, match="tensor_parallel_size.*0"):
        VLLMEngine("m", tensor_parallel_size=0)
    assert SCHEDULING_POLICIES == ("fcfs", "priority")


def test_engine_builds_llm_kwargs_without_importing_vllm() -> None:
    engine = VLLMEngine("facebook/opt-125m", scheduling_policy="priority", max_model_len=2048)
    kwargs = engine.llm_kwargs()
    assert kwargs["model"] == "facebook/opt-125m"
    assert kwargs["enable_prefix_caching"] is True
    assert kwargs["scheduling_policy"] == "priority"
    assert kwargs["max_model_len"] == 2048
    assert "max_model_len" not in VLLMEngine("m").llm_kwargs()
    assert "loaded=False" in repr(engine)
    engine.close()  # nothing loaded: a no-op, twice
    engine.close()


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_run_without_vllm_names_the_install_command() -> None:
    engine = VLLMEngine("m")
    with pytest.raises(ImportError, match=re.escape("pip install -e '.[vllm]'")):
        engine.run("q", [Request("a", "p")])
    assert "vllm" not in sys.modules


@dataclass
class StructuredOutputsParams:
    """Stand-in for vllm.sampling_params.StructuredOutputsParams."""

    choice: list[str] | None = None
    regex: str | None = None
    json: Any = None
    json_object: bool | None = None


@dataclass
class SamplingParams:
    """Stand-in for vllm.SamplingParams (the fields this engine sets)."""

    max_tokens: int = 16
    temperature: float = 1.0
    structured_outputs: StructuredOutputsParams | None = None


class StandInLLM:
    """Stand-in for vllm.LLM.generate: records the call, answers one output per prompt."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def generate(self, prompts: list[str], **kwargs: Any) -> list[RequestOutput]:
        self.calls.append({"prompts": prompts, **kwargs})
        return [
            RequestOutput(
                str(i), list(range(len(p))), [CompletionOutput("Yes", (1, 2))], len(p) // 2
            )
            for i, p in enumerate(prompts)
        ]


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_run_builds_sampling_params_and_passes_priority_only_under_priority(policy: str) -> None:
    llm = StandInLLM()
    engine = VLLMEngine.from_llm(
        llm,
        "m",
        scheduling_policy=policy,
        sampling_params_cls=SamplingParams,
        structured_outputs_cls=StructuredOutputsParams,
        hardware="H100",
    )
    requests = [
        Request("a", "p" * 10, 3, OutputSpec.choice(["Yes", "No"]), priority=1),
        Request("b", "q" * 20, 5, OutputSpec.text(), priority=0),
    ]
    result = engine.run("rq", requests)
    (call,) = llm.calls
    assert call["prompts"] == ["p" * 10, "q" * 20]
    assert call["sampling_params"] == [
        SamplingParams(3, 0.0, StructuredOutputsParams(choice=["Yes", "No"])),
        SamplingParams(5, 0.0, None),
    ]
    assert ("priority" in call) == (policy == "priority")
    if policy == "priority":
        assert call["priority"] == [1, 0]
    assert [r.id for r in result.responses] == ["a", "b"]
    assert [(r.prompt_tokens, r.cached_tokens) for r in result.responses] == [(10, 5), (20, 10)]
    stats = result.stats
    assert (stats.engine, stats.model, stats.hardware, stats.n_requests) == ("vllm", "m", "H100", 2)
    assert stats.prompt_tokens == 30 and stats.cached_tokens == 15
    assert engine.run("empty", []).stats.n_requests == 0


# -- integration: real vLLM on a CUDA GPU -------------------------------------------------------


def _gpu_skip_reason() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (pip install -e '.[vllm]')"
    try:
        import torch
    except ImportError:
        return "torch is not importable"
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    return None


@pytest.mark.gpu
def test_vllm_engine_on_gpu_caches_shared_prefixes_and_honours_outputs() -> None:
    reason = _gpu_skip_reason()
    if reason:
        pytest.skip(reason)
    model = os.environ.get("LLM_ASSETS_VLLM_TEST_MODEL", "facebook/opt-125m")
    engine = VLLMEngine(
        model, scheduling_policy="priority", gpu_memory_utilization=0.3, max_model_len=1024
    )
    instruction = "Decide whether the following movie review is positive. " * 12
    requests = [
        Request(
            f"r{i}",
            f"{instruction}\nReview {i}: a fine film.\nAnswer:",
            max_tokens=4,
            output=OutputSpec.choice(["Yes", "No"]),
            priority=i % 2,
        )
        for i in range(6)
    ]
    try:
        first = engine.run("q1", requests)
        second = engine.run("q2", requests)
    finally:
        engine.close()
    assert [r.id for r in first.responses] == [r.id for r in requests]
    assert all(r.ok and r.text.strip() in {"Yes", "No"} for r in first.responses)
    assert first.stats.prompt_tokens > 6 * 100
    assert second.stats.cached_tokens > first.stats.cached_tokens
    assert second.stats.token_hit_rate > 0.5
    assert first.stats.engine == "vllm" and first.stats.engine_time_s > 0
