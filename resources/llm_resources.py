"""Dagster resources for the LLM engines: one abstract resource, three implementations.

Each engine resource inherits its engine's pydantic config model (`resources.configs`,
`resources.sim.config`), so each parameter is declared once and every field is settable from
run config / YAML as `llm_engine: {config: {<field>: ...}}`; a value out of range fails when
the run starts with one line naming the field (a bad `Literal` choice already at launch, in
Dagster's run config validation).

Follows DESIGN.md section 8, convention 1 (`HNClient(ConfigurableResource, ABC)`): assets ask for
an `LLMEngineResource` and call `run(relquery_id, requests)`; which engine answers is decided
where resources are bound (per environment, in `jobs/`).

Invariants:
- the engine object lives in a `PrivateAttr`, created in `setup_for_execution` (once per run)
  and closed in `teardown_after_execution`; outside a Dagster run, the first `run` creates it
  and `close()` releases it;
- creating a resource never imports vLLM or loads a model (the vLLM model loads on its first
  `run`), so `dagster definitions validate` stays fast;
- one way from the environment to an engine: every resource builds its engine with
  `resources.environment.build_engine`, as `llm-assets run` does without Dagster; an OpenAI
  field left unset is read from `LLM_ASSETS_OPENAI_<FIELD>`, vLLM's model from
  `LLM_ASSETS_VLLM_MODEL`, when the engine is built (one set of one-line errors for all);
- secrets come through `dg.EnvVar`: `OpenAIEngineResource(api_key=dg.EnvVar("OPENAI_API_KEY"))`
  (or the `LLM_ASSETS_OPENAI_API_KEY` variable, read when the run starts). Dagster records
  the variable's name, not its value; a literal key in run config is refused; the engine
  never logs the key.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import dagster as dg
from pydantic import Field, PrivateAttr

from resources.configs import (
    LlamaCppEngineConfig,
    OpenAIEngineConfig,
    RayEngineConfig,
    VLLMEngineConfig,
)
from resources.engine import LLMEngine, Request, RunResult
from resources.environment import ENGINE_KINDS, build_engine, engine_settings
from resources.sim.config import SimulatedEngineConfig

__all__ = [
    "ENGINE_KINDS",
    "LLMEngineResource",
    "LlamaCppEngineResource",
    "ResponseCacheResource",
    "OpenAIEngineResource",
    "RayEngineResource",
    "SimulatedEngineResource",
    "VLLMEngineResource",
    "engine_resource",
]


class LLMEngineResource(dg.ConfigurableResource, ABC):
    """An LLM engine for assets: `run(relquery_id, requests) -> RunResult`."""

    _engine: LLMEngine | None = PrivateAttr(default=None)

    @abstractmethod
    def build_engine(self) -> LLMEngine:
        """A new engine from this resource's config (cheap: no model is loaded here)."""

    @property
    def engine(self) -> LLMEngine:
        """The engine of this run (created on first use outside a Dagster run)."""
        if self._engine is None:
            self._engine = self.build_engine()
        return self._engine

    def run(self, relquery_id: str, requests: Sequence[Request]) -> RunResult:
        """Serve one relQuery; see `resources.engine` for the invariants of the result."""
        return self.engine.run(relquery_id, requests)

    def close(self) -> None:
        """Release the engine (GPU memory, connection pools). Safe to call twice."""
        if self._engine is not None:
            engine, self._engine = self._engine, None
            engine.close()

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._engine = self.build_engine()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self.close()


class SimulatedEngineResource(LLMEngineResource, SimulatedEngineConfig):
    """The embedded simulated engine (CPU only): a vLLM-like engine on a chosen GPU and model.
    Its fields are `SimulatedEngineConfig`'s (`resources.sim.config`).

    Its prefix cache persists across `run` calls within one Dagster run (one engine per run).
    """

    def build_engine(self) -> LLMEngine:
        return build_engine("sim", SimulatedEngineConfig.of(self).model_dump())


class VLLMEngineResource(LLMEngineResource, VLLMEngineConfig):
    """In-process vLLM (`pip install -e '.[vllm]'`); the model loads on the first `run`.
    Its fields are `VLLMEngineConfig`'s (`resources.configs`); `model`, when not set in
    config or code, is read from `LLM_ASSETS_VLLM_MODEL` when the engine is built."""

    model: str | None = None  # type: ignore[assignment]
    """Weights path or model id (required: here or in LLM_ASSETS_VLLM_MODEL)."""

    def settings(self) -> VLLMEngineConfig:
        """The engine's config: fields set in config or code, else their environment
        variable, else the default (`resources.environment.engine_settings`)."""
        return engine_settings("vllm", _given(self, VLLMEngineConfig))

    def build_engine(self) -> LLMEngine:
        return build_engine("vllm", _given(self, VLLMEngineConfig))


class OpenAIEngineResource(LLMEngineResource, OpenAIEngineConfig):
    """Any OpenAI-compatible server over HTTP (vLLM, llama.cpp's llama-server, SGLang, a
    hosted API, the sim's server). Its fields are `OpenAIEngineConfig`'s
    (`resources.configs`), plus the secret `api_key`.

    Every option is optional in run config: one not set there (nor in code) is read from the
    environment variable `LLM_ASSETS_OPENAI_<OPTION>` when the run starts, else takes its
    default. So `llm_engine: {config: {max_concurrency: 4}}` needs no `base_url` or `model`
    beside it. The key: `api_key=dg.EnvVar(...)` in code, else `LLM_ASSETS_OPENAI_API_KEY`
    when set, else none (a keyless local server). A literal key in run config is refused
    when the run starts (Dagster would store it in its run database): give `{env: VAR}`.

    Time bounds (hard, wall clock): an attempt ends within `timeout_s`, a request within
    `request_deadline_s`; on a server that accepts connections and never answers, the step
    stops after about ceil(breaker_failures / max_concurrency) x timeout_s; with the breaker
    off (0), after at most ceil(requests / max_concurrency) x request_deadline_s.
    """

    api_key: str | None = Field(
        default=None,
        repr=False,
        description="Bearer key; give it as dg.EnvVar('NAME') (never a literal: Dagster stores "
        "run config). Unset: LLM_ASSETS_OPENAI_API_KEY if set, else no key.",
    )

    def settings(self) -> OpenAIEngineConfig:
        """The engine's config: fields set in config or code, else their environment
        variable, else the default (`resources.environment.engine_settings`: a URL, given as
        `base_url` or `base_urls`, and a model are required)."""
        return engine_settings("openai", _given(self, OpenAIEngineConfig))

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        from resources.openai.wire import split_url_credentials

        run = context.run
        for key, entry in ((run.run_config or {}).get("resources") or {}).items() if run else ():
            config = entry.get("config") if isinstance(entry, dict) else None
            if isinstance(config, dict) and isinstance(config.get("api_key"), str):
                raise ValueError(
                    f"resources.{key}.config.api_key is a literal key in run config, which "
                    "Dagster stores in its run database; give it as {env: VAR_NAME} "
                    "(dg.EnvVar in code) or set LLM_ASSETS_OPENAI_API_KEY"
                )
            config = config if isinstance(config, dict) else {}
            for name in ("base_url", "base_urls"):
                given = config.get(name)
                urls = given.split(",") if isinstance(given, str) else given
                if not isinstance(urls, list):
                    continue  # unset, or {env: VAR}
                if any(isinstance(u, str) and split_url_credentials(u.strip())[1:] != (None, None)
                       for u in urls):  # fmt: skip
                    raise ValueError(
                        f"resources.{key}.config.{name} carries user:password@ in run config, "
                        "which Dagster stores in its run database; give the URL as "
                        "{env: VAR_NAME} or set LLM_ASSETS_OPENAI_BASE_URL"
                    )
        super().setup_for_execution(context)

    def build_engine(self) -> LLMEngine:
        return build_engine("openai", _given(self, OpenAIEngineConfig), api_key=self.api_key)


class RayEngineResource(OpenAIEngineResource, RayEngineConfig):
    """The replicas of `OpenAIEngineResource`, each stage run by Ray Data: blocks cut at
    prefix groups, one actor per replica (`resources.ray_executor`). Its fields are
    `RayEngineConfig`'s: the OpenAI ones (read from `LLM_ASSETS_OPENAI_<OPTION>` when unset)
    plus `ray_address`, `ray_block_by`, ... (from `LLM_ASSETS_RAY_<OPTION>`)."""

    def settings(self) -> RayEngineConfig:
        return engine_settings("ray", _given(self, RayEngineConfig))

    def build_engine(self) -> LLMEngine:
        return build_engine("ray", _given(self, RayEngineConfig), api_key=self.api_key)


class LlamaCppEngineResource(LLMEngineResource, LlamaCppEngineConfig):
    """A real local model on llama.cpp's `llama-server`, which the engine starts on 127.0.0.1
    at the first request of a run and stops when the run's step ends (also a failed one:
    `teardown_after_execution`; a killed step's server is stopped by its watchdog). Its
    fields are `LlamaCppEngineConfig`'s (`resources.configs`): `model` is a bundled
    name (smollm2-135m, gemma3-270m; `make models`) or a GGUF path; a missing model or
    binary fails when the run starts, in one line. An option not set in config or code is
    read from `LLM_ASSETS_LLAMA_CPP_<OPTION>` when set."""

    def settings(self) -> LlamaCppEngineConfig:
        """The engine's config: fields set in config or code, else their environment
        variable, else the default (`resources.environment.engine_settings`)."""
        return engine_settings("llama_cpp", _given(self, LlamaCppEngineConfig))

    def build_engine(self) -> LLMEngine:
        return build_engine("llama_cpp", _given(self, LlamaCppEngineConfig))


class ResponseCacheResource(dg.ConfigurableResource):
    """The persistent response cache (`resources.response_cache`): a rerun sends only the
    prompts never answered before. Off for the simulated engine by default (jobs/resources.py),
    where re-simulating costs nothing and a planning run should report the full cost."""

    enabled: bool = Field(default=True, description="Reuse and store answers.")
    path: str | None = Field(
        default=None, description="DuckDB file; default $LLM_ASSETS_HOME/responses.duckdb."
    )

    def cache(self):
        from resources.response_cache import ResponseCache

        return ResponseCache(self.path) if self.enabled else ResponseCache.disabled()


def _given(resource: dg.ConfigurableResource, config_cls: type) -> dict:
    """The fields of `config_cls` set on `resource` in config or code (not defaulted)."""
    return resource.model_dump(include=resource.model_fields_set & config_cls.model_fields.keys())


def engine_resource(kind: str, **fields) -> LLMEngineResource:
    """The engine resource of `kind` (`ENGINE_KINDS`) with `fields` set in code: the one way
    from the environment to an engine, which the code location binds
    (`llm_assets.default_resources`) and `llm-assets run --engine KIND` builds. OpenAI
    options not in `fields` (nor in run config) come from `LLM_ASSETS_OPENAI_<OPTION>`,
    llama.cpp's from `LLM_ASSETS_LLAMA_CPP_<OPTION>`, vLLM's model from
    `LLM_ASSETS_VLLM_MODEL`, when the engine is built; the simulated engine reads no variable.

    >>> type(engine_resource("openai")).__name__
    'OpenAIEngineResource'
    """
    classes = {
        "sim": SimulatedEngineResource,
        "vllm": VLLMEngineResource,
        "openai": OpenAIEngineResource,
        "llama_cpp": LlamaCppEngineResource,
        "ray": RayEngineResource,
    }
    if kind not in classes:
        raise ValueError(f"unknown engine {kind!r}; expected one of {list(ENGINE_KINDS)}")
    return classes[kind](**fields)
