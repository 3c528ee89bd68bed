"""The Dagster engine resources, run in-process with `dg.materialize`."""

import importlib.util
import logging
import sys
from collections.abc import Iterator

import dagster as dg
import pytest

from llm_assets.output_spec import OutputSpec
from resources.engine import LLMEngine, Request
from resources.llm_resources import (
    LLMEngineResource,
    OpenAIEngineResource,
    SimulatedEngineResource,
    VLLMEngineResource,
)

MODEL = "llama-2-7b"
KEY_VAR = "LLM_ASSETS_TEST_OPENAI_KEY"
SECRET = "sk-resource-test-NEVER-SHOW-91d2"

ENGINES_SEEN: list[LLMEngine] = []


def requests() -> list[Request]:
    prefix = "Does the review recommend the film? Answer Yes or No.\n" * 4
    yes_no = OutputSpec.choice(["Yes", "No"])
    return [Request(f"r{i}", f"{prefix}Review {i}: fine.", 2, yes_no) for i in range(6)]


@dg.asset
def llm_outputs(context: dg.AssetExecutionContext, llm: LLMEngineResource) -> dg.MaterializeResult:
    """Runs one relQuery through whichever engine resource is bound."""
    ENGINES_SEEN.append(llm.engine)
    result = llm.run("test_relquery", requests())
    second = llm.run("test_relquery_again", requests())
    context.log.info("ran %d requests on %s", result.stats.n_requests, result.stats.engine)
    return dg.MaterializeResult(
        metadata={
            "n_requests": result.stats.n_requests,
            "errors": result.stats.errors,
            "engine": result.stats.engine,
            "token_hit_rate": result.stats.token_hit_rate,
            "second_hit_rate": second.stats.token_hit_rate,
            "answers": ",".join(r.text.strip() for r in result.responses),
        }
    )


def materialized_metadata(result: dg.ExecuteInProcessResult) -> dict:
    (event,) = result.asset_materializations_for_node("llm_outputs")
    return {k: v.value for k, v in event.metadata.items()}


@pytest.fixture(autouse=True)
def _clear_seen() -> Iterator[None]:
    ENGINES_SEEN.clear()
    yield
    ENGINES_SEEN.clear()


def test_the_abstract_resource_cannot_be_built() -> None:
    with pytest.raises(TypeError):
        LLMEngineResource()  # type: ignore[abstract]


def test_simulated_engine_resource_materializes_and_keeps_its_cache_within_a_run() -> None:
    result = dg.materialize([llm_outputs], resources={"llm": SimulatedEngineResource(gpu="L4")})
    assert result.success
    meta = materialized_metadata(result)
    assert meta["n_requests"] == 6 and meta["errors"] == 0 and meta["engine"] == "sim"
    assert set(meta["answers"].split(",")) <= {"Yes", "No"}
    # one engine for the whole run: the second relQuery finds the first one's blocks cached
    assert meta["second_hit_rate"] > meta["token_hit_rate"]


def test_vllm_resource_builds_lazily_and_fails_clearly_without_vllm() -> None:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed: this checks the missing-vLLM error")
    resource = VLLMEngineResource(model="facebook/opt-125m", scheduling_policy="priority")
    with dg.build_init_resource_context() as context:
        resource.setup_for_execution(context)
        assert "vllm" not in sys.modules  # set-up loads nothing
        assert "opt-125m" in repr(resource.engine)
        resource.teardown_after_execution(context)
    result = dg.materialize([llm_outputs], resources={"llm": resource}, raise_on_error=False)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert "pip install -e '.[vllm]'" in str(failure.step_failure_data.error)


def test_vllm_resource_config_errors_list_valid_values() -> None:
    with pytest.raises(ValueError, match=r"^VLLMEngineResource.scheduling_policy='random': .*"
                       r"'fcfs' or 'priority'$"):  # fmt: skip
        VLLMEngineResource(model="m", scheduling_policy="random")


@pytest.mark.parametrize(
    ("resource", "field", "value"),
    [
        (SimulatedEngineResource, "gpu_memory_utilization", 1.5),
        (SimulatedEngineResource, "max_num_seqs", 0),
        (SimulatedEngineResource, "tensor_parallel_size", 16),
        (VLLMEngineResource, "tensor_parallel_size", 0),
        (OpenAIEngineResource, "max_concurrency", 0),
        (OpenAIEngineResource, "timeout_s", -1.0),
    ],
)
def test_an_out_of_range_field_fails_with_one_line_naming_it(resource, field, value) -> None:
    extra = {"model": "m"} if resource is VLLMEngineResource else {}
    with pytest.raises(ValueError) as info:
        resource(**extra, **{field: value})
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{resource.__name__}.{field}={value!r}: ")


def test_run_config_overrides_reach_the_engine() -> None:
    config = {"llm": {"config": {"gpu": "H200", "policy": "sarathi", "max_num_seqs": 7,
                                 "preemption_order": "keep-long"}}}  # fmt: skip
    result = dg.materialize(
        [llm_outputs], resources={"llm": SimulatedEngineResource()},
        run_config={"resources": config},
    )  # fmt: skip
    assert result.success
    (engine,) = ENGINES_SEEN
    assert (engine.hardware, engine.policy_name, engine.max_num_seqs) == ("H200", "sarathi", 7)
    assert engine.preemption_order == "keep-long" and engine.max_num_batched_tokens == 512


def test_a_bad_choice_in_run_config_fails_at_launch_listing_the_valid_ones() -> None:
    config = {"resources": {"llm": {"config": {"policy": "round-robin"}}}}
    with pytest.raises(dg.DagsterInvalidConfigError) as info:
        dg.materialize([llm_outputs], resources={"llm": SimulatedEngineResource()},
                       run_config=config)  # fmt: skip
    assert "round-robin" in str(info.value) and "'relserve-v1'" in str(info.value)
    assert not ENGINES_SEEN  # refused before any step ran


def test_field_docstrings_are_the_run_config_descriptions() -> None:
    fields = SimulatedEngineResource.to_config_schema().as_field().config_type.fields
    assert fields["enable_prefix_caching"].description.startswith("Reuse KV blocks")
    assert all(f.description for f in fields.values())


def test_openai_resource_reads_the_key_from_the_environment_and_never_shows_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from resources.sim.server import ServerConfig, build_engine, serve_in_thread

    monkeypatch.setenv(KEY_VAR, SECRET)
    caplog.set_level(logging.DEBUG)
    config = ServerConfig(served_model_name=MODEL, api_key=SECRET)
    with serve_in_thread(build_engine(gpu="L4", model=MODEL), config=config) as base_url:
        resource = OpenAIEngineResource(
            base_url=base_url, model=MODEL, api_key=dg.EnvVar(KEY_VAR), max_concurrency=4
        )
        result = dg.materialize([llm_outputs], resources={"llm": resource})
    assert result.success
    meta = materialized_metadata(result)
    assert meta["n_requests"] == 6 and meta["errors"] == 0  # the server accepted the key
    assert meta["engine"] == "openai" and meta["second_hit_rate"] > 0
    (engine,) = ENGINES_SEEN
    shown = [caplog.text, repr(resource), repr(engine), str(meta)]
    shown += [str(event) for event in result.all_events]
    shown += [str(result.dagster_run.run_config)]
    assert caplog.records
    for text in shown:
        assert SECRET not in text


def test_openai_resource_without_the_key_gets_error_rows_not_a_crash() -> None:
    from resources.sim.server import ServerConfig, build_engine, serve_in_thread

    config = ServerConfig(served_model_name=MODEL, api_key=SECRET)
    with serve_in_thread(build_engine(gpu="L4", model=MODEL), config=config) as base_url:
        resource = OpenAIEngineResource(base_url=base_url, model=MODEL, max_retries=0)
        result = resource.run("q", requests()[:2])
        resource.close()
    assert result.stats.errors == 2
    assert all("HTTP 401" in (r.error or "") for r in result.responses)
