"""The engine contract (`resources.engine`): declared properties, one place for run totals,
config models that hold the registries' names, and the policy / waiting-queue bases."""

from __future__ import annotations

import inspect
from collections import deque
from typing import get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resources.configs import DType, OpenAIEngineConfig, VLLMEngineConfig
from resources.engine import EngineWrapper, GpuRental, LLMEngine, Request, Response, RunStats
from resources.openai.engine import OpenAIEngine
from resources.openai.wire import SERVER_STYLES
from resources.response_cache import EngineKey
from resources.sim import config as sim_config
from resources.sim.cost_model import TIMING_PROFILES
from resources.sim.engine import SimulatedEngine
from resources.sim.policies import POLICIES, PREEMPTION_ORDERS, Policy, WaitingQueue
from resources.sim.policies.priority import RelQueryQueue
from resources.sim.profiles import HARDWARE, MODELS, USAGES
from resources.vllm_engine import VLLMEngine

DECLARED = [n for n, v in vars(LLMEngine).items() if isinstance(v, property)]


class Complete(LLMEngine):
    """Answers everything the contract asks, none of it the base's default."""

    name, model, hardware = "complete", "m-1", "cpu"
    max_model_len, enable_prefix_caching, temperature, max_tokens = 99, True, 0.7, 5
    honours_priority, gpu_rental = True, GpuRental("H200", 2)

    def count_tokens(self, text: str) -> int:
        return 3 * len(text)

    def run(self, relquery_id, requests):
        raise NotImplementedError


@pytest.mark.parametrize("missing", ["name", "model", "hardware", "run"])
def test_an_engine_missing_a_required_member_cannot_be_built(missing: str) -> None:
    members = {"name": "x", "model": "m", "hardware": "h", "run": lambda self, q, r: None}
    del members[missing]
    partial = type("Partial", (LLMEngine,), members)
    with pytest.raises(TypeError, match=f"abstract method.*{missing}"):
        partial()


def test_the_defaults_are_documented_and_safe() -> None:
    class Minimal(LLMEngine):
        name, model, hardware = "x", "m", "h"

        def run(self, relquery_id, requests):
            raise NotImplementedError

    engine = Minimal()
    assert (engine.max_model_len, engine.enable_prefix_caching, engine.max_tokens) == (
        None, None, None)  # fmt: skip
    assert (engine.temperature, engine.honours_priority, engine.gpu_rental) == (0.0, False, None)
    assert engine.count_tokens("Hello, world") > 0
    for name in DECLARED + ["count_tokens", "run", "close"]:
        assert inspect.getdoc(getattr(LLMEngine, name)), f"LLMEngine.{name} has no docstring"


def test_a_wrapper_passes_every_declared_property_through() -> None:
    inner = Complete()
    wrapper = EngineWrapper(inner)
    for name in DECLARED:
        assert getattr(wrapper, name) == getattr(inner, name), name
    assert wrapper.count_tokens("abcd") == 12


def test_each_engine_answers_the_contract_from_its_config() -> None:
    sim = SimulatedEngine("H200", "llama-3-70b", enable_prefix_caching=False)
    assert (sim.model, sim.hardware, sim.max_model_len) == ("llama-3-70b", "2xH200", 8192)
    assert sim.gpu_rental == GpuRental("H200", 2) and sim.enable_prefix_caching is False
    assert not sim.honours_priority and sim.count_tokens("a b c") == len(
        sim.tokenizer.encode("a b c")
    )
    vllm = VLLMEngine("org/m", scheduling_policy="priority", temperature=0.2, hardware="L4")
    assert (vllm.model, vllm.hardware, vllm.temperature) == ("org/m", "L4", 0.2)
    assert vllm.honours_priority and vllm.max_model_len is None and vllm.gpu_rental is None
    http = OpenAIEngine("http://h/v1", "srv", send_priority=True, max_tokens=7, probe=False)
    assert (http.model, http.hardware, http.max_tokens, http.honours_priority) == (
        "srv", "remote", 7, True)  # fmt: skip
    assert http.max_model_len is None and http.enable_prefix_caching is None
    assert EngineKey.of(OpenAIEngine("http://h/v1", "m", temperature=0.3)).temperature == 0.3


def test_an_engine_takes_its_config_or_its_fields_never_both() -> None:
    config = sim_config.SimulatedEngineConfig(gpu="A100-40GB", policy="sarathi")
    assert (
        SimulatedEngine(config=config).config
        == SimulatedEngine("A100-40GB", policy="sarathi").config
    )
    with pytest.raises(TypeError, match="not both"):
        SimulatedEngine(config=config, gpu="L4")
    with pytest.raises(TypeError, match="at most 3 positional"):
        SimulatedEngine("L4", "llama-2-7b", "vllm-v1", True)
    assert VLLMEngine(config=VLLMEngineConfig(model="m")).model == "m"
    with pytest.raises(ValueError, match="needs base_url and model"):
        OpenAIEngine(config=OpenAIEngineConfig(model="m"))


@pytest.mark.parametrize(
    ("literal", "registry"),
    [
        (sim_config.GpuName, HARDWARE),
        (sim_config.ModelName, MODELS),
        (sim_config.PolicyName, POLICIES),
        (sim_config.PreemptionOrder, PREEMPTION_ORDERS),
        (sim_config.Usage, USAGES),
        (sim_config.TimingProfile, TIMING_PROFILES),
    ],
)
def test_each_closed_choice_lists_exactly_its_registry(literal, registry) -> None:
    assert sorted(get_args(literal)) == sorted(registry)


def test_every_config_field_has_a_docstring() -> None:
    models = [sim_config.SimulatedEngineConfig, VLLMEngineConfig, OpenAIEngineConfig]
    for model in models:
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no docstring"
    assert "bfloat16" in get_args(DType) and OpenAIEngineConfig().server_style in SERVER_STYLES


# -- RunStats: the one place totals are computed ------------------------------------------------

responses = st.lists(
    st.builds(
        lambda i, p, c, o, err, known: Response(
            f"r{i}", "x", p, min(c, p), o, 0.0, 0.0, "boom" if err else None, known
        ),
        st.integers(0, 999),
        st.integers(0, 500),
        st.integers(0, 500),
        st.integers(0, 50),
        st.booleans(),
        st.booleans(),
    ),  # fmt: skip
    max_size=20,
)


def _stats(rs: list[Response], t: float) -> RunStats:
    return RunStats.from_responses(
        rs, engine="e", model="m", hardware="h", engine_time_s=t, wall_time_s=2 * t
    )


@given(responses)
def test_from_responses_totals_the_answered_and_counts_the_failed(rs: list[Response]) -> None:
    stats = _stats(rs, 1.0)
    ok = [r for r in rs if r.ok]
    assert stats.n_requests == len(rs) and stats.errors == len(rs) - len(ok)
    assert stats.prompt_tokens == sum(r.prompt_tokens for r in ok)
    assert stats.cached_tokens == sum(r.cached_tokens for r in ok) <= stats.prompt_tokens
    assert stats.output_tokens == sum(r.output_tokens for r in ok)
    assert stats.cached_tokens_unknown == sum(1 for r in ok if not r.cached_tokens_known)


@given(responses, responses)
def test_adding_two_runs_is_the_run_of_both(a: list[Response], b: list[Response]) -> None:
    added = _stats(a, 1.0) + _stats(b, 2.5)
    assert added == _stats(a + b, 3.5)
    assert _stats([], 0.0) + _stats(a, 1.0) == _stats(a, 1.0)


# -- policies and the waiting queue --------------------------------------------------------------


def test_policies_declare_their_capabilities_on_the_base() -> None:
    class NoSchedule(Policy):
        name = "none"

    with pytest.raises(TypeError, match="abstract method.*schedule"):
        NoSchedule()
    for name, factory in POLICIES.items():
        policy = factory()
        assert isinstance(policy, Policy) and policy.name == name
        assert isinstance(policy.new_waiting_queue(), WaitingQueue)
        assert isinstance(policy.overhead(), dict)
    assert POLICIES["sarathi"]().token_budget == 512 and POLICIES["vllm-v1"]().token_budget is None
    assert (
        not POLICIES["vllm-v0"]().enable_chunked_prefill
        and POLICIES["vllm-v1"]().register_at_schedule
    )


def test_the_waiting_queue_base_is_what_the_engine_relies_on() -> None:
    assert isinstance(deque(), WaitingQueue) and isinstance(RelQueryQueue(), WaitingQueue)

    class NoPop(WaitingQueue):
        append = extend = appendleft = __getitem__ = __len__ = __iter__ = None  # type: ignore

    with pytest.raises(TypeError, match="abstract method.*popleft"):
        NoPop()


def test_a_policy_object_drives_the_engine_in_place_of_a_name() -> None:
    calls: list[int] = []

    class Counting(type(POLICIES["vllm-v1"]())):
        name = "counting"

        def schedule(self, waiting, running, ctx):
            calls.append(len(waiting))
            return super().schedule(waiting, running, ctx)

    engine = SimulatedEngine(policy=Counting())
    result = engine.run("q", [Request("a", "hello there", 2)])
    assert engine.policy_name == "counting" and calls and result.stats.errors == 0
