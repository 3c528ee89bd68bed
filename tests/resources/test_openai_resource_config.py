"""Issue 13's config defects and issue 11's literal key: `OpenAIEngineResource` in real
Dagster runs (`dg.materialize`) against a real server on 127.0.0.1."""

from __future__ import annotations

import dagster as dg
import pytest

from benchmarks.lib.hostile import HostileServer, Reply, completion_body
from resources.engine import Request
from resources.llm_resources import LLMEngineResource, OpenAIEngineResource

KEY = "sk-run-config-literal-5e1f0a9b"
ENV = ("BASE_URL", "MODEL", "API_KEY", "MAX_CONCURRENCY", "MAX_TOKENS", "TIMEOUT_S")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(f"LLM_ASSETS_OPENAI_{name}", raising=False)


@dg.asset
def answers(llm_engine: LLMEngineResource) -> dg.MaterializeResult:
    result = llm_engine.run("q", [Request(f"r{i}", f"prompt {i}", max_tokens=3) for i in range(3)])
    return dg.MaterializeResult(metadata={"errors": result.stats.errors})


def server() -> HostileServer:
    def script(method: str, path: str, body: dict) -> Reply:
        if method == "GET":
            return Reply(404, {})
        return Reply(body=completion_body())

    return HostileServer(script)


def test_one_option_in_run_config_with_url_and_model_from_the_environment(monkeypatch) -> None:
    with server() as srv:
        monkeypatch.setenv("LLM_ASSETS_OPENAI_BASE_URL", srv.url)
        monkeypatch.setenv("LLM_ASSETS_OPENAI_MODEL", "tiny")
        monkeypatch.setenv("LLM_ASSETS_OPENAI_TIMEOUT_S", "7.5")
        resource = OpenAIEngineResource()
        config = {"resources": {"llm_engine": {"config": {"max_concurrency": 2, "max_tokens": 9}}}}
        result = dg.materialize([answers], resources={"llm_engine": resource}, run_config=config)
        posts = [s for s in srv.seen if s[0] == "POST"]
    assert result.success
    assert len(posts) == 3
    assert all(s[3]["model"] == "tiny" and s[3]["max_tokens"] == 9 for s in posts)
    assert all("authorization" not in s[2] for s in posts)  # a keyless server needs no key
    settings = OpenAIEngineResource(base_url="http://h/v1", model="m").settings()
    assert settings.timeout_s == 7.5


def test_a_bad_environment_value_is_named(monkeypatch) -> None:
    monkeypatch.setenv("LLM_ASSETS_OPENAI_MAX_CONCURRENCY", "lots")
    with pytest.raises(
        ValueError, match="^LLM_ASSETS_OPENAI_MAX_CONCURRENCY='lots': Input should be a valid int"
    ):
        OpenAIEngineResource(base_url="http://h/v1", model="m").settings()
    with pytest.raises(ValueError, match="needs base_url.*LLM_ASSETS_OPENAI_BASE_URL"):
        OpenAIEngineResource(model="m").settings()


def test_the_key_comes_from_the_environment_when_not_configured(monkeypatch) -> None:
    with server() as srv:
        monkeypatch.setenv("LLM_ASSETS_OPENAI_API_KEY", KEY)
        resource = OpenAIEngineResource(base_url=srv.url, model="m")
        result = dg.materialize([answers], resources={"llm_engine": resource})
        posts = [s for s in srv.seen if s[0] == "POST"]
    assert result.success
    assert posts and all(s[2]["authorization"] == f"Bearer {KEY}" for s in posts)


def test_a_literal_key_in_run_config_is_refused() -> None:
    with server() as srv:
        resource = OpenAIEngineResource(base_url=srv.url, model="m")
        config = {"resources": {"llm_engine": {"config": {"api_key": KEY}}}}
        result = dg.materialize(
            [answers], resources={"llm_engine": resource}, run_config=config, raise_on_error=False
        )
        assert srv.calls == 0
    assert not result.success
    failure = next(e for e in result.all_events if e.is_failure)
    text = str(failure.event_specific_data)
    assert "literal key in run config" in text and "{env: VAR_NAME}" in text
    assert KEY not in text


def test_an_env_var_key_in_run_config_is_accepted(monkeypatch) -> None:
    monkeypatch.setenv("MY_TEST_KEY_VAR", KEY)
    with server() as srv:
        # run config replaces values set in code (Dagster's rule), so URL and model come
        # from the environment, as jobs/resources.py binds them
        monkeypatch.setenv("LLM_ASSETS_OPENAI_BASE_URL", srv.url)
        monkeypatch.setenv("LLM_ASSETS_OPENAI_MODEL", "m")
        resource = OpenAIEngineResource()
        config = {"resources": {"llm_engine": {"config": {"api_key": {"env": "MY_TEST_KEY_VAR"}}}}}
        result = dg.materialize([answers], resources={"llm_engine": resource}, run_config=config)
        posts = [s for s in srv.seen if s[0] == "POST"]
    assert result.success and posts[0][2]["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize("where", ["base_url", "second of base_url", "base_urls"])
def test_url_credentials_in_run_config_are_refused(where: str) -> None:
    with server() as srv:
        resource = OpenAIEngineResource(model="m")
        url = srv.url.replace("http://", "http://alice:pw-5e1f0a9b77@")
        urls = {
            "base_url": {"base_url": url},
            "second of base_url": {"base_url": f"{srv.url},{url}"},
            "base_urls": {"base_urls": [srv.url, url]},
        }[where]
        config = {"resources": {"llm_engine": {"config": {**urls, "model": "m"}}}}
        result = dg.materialize(
            [answers], resources={"llm_engine": resource}, run_config=config, raise_on_error=False
        )
        assert srv.calls == 0
    failure = next(e for e in result.all_events if e.is_failure)
    text = str(failure.event_specific_data)
    assert "carries user:password@" in text and "pw-5e1f0a9b77" not in text
