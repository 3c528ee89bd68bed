"""Dagster resources for the LLM engines: one abstract resource, three implementations.

Each engine resource inherits its engine's pydantic config model (`resources.engine_config`,
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
- secrets come through `dg.EnvVar`: `OpenAIEngineResource(api_key=dg.EnvVar("OPENAI_API_KEY"))`
  (or the `LLM_ASSETS_OPENAI_API_KEY` variable, read when the run starts). Dagster records
  the variable's name, not its value; a literal key in run config is refused; the engine
  never logs the key.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Annotated

import dagster as dg
from pydantic import Field, PrivateAttr, TypeAdapter, ValidationError

from resources.engine import LLMEngine, Request, RunResult
from resources.engine_config import OpenAIEngineConfig, VLLMEngineConfig
from resources.sim.config import SimulatedEngineConfig

__all__ = [
    "LLMEngineResource",
    "ResponseCacheResource",
    "OpenAIEngineResource",
    "SimulatedEngineResource",
    "VLLMEngineResource",
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
        from resources.sim.engine import SimulatedEngine

        return SimulatedEngine(config=SimulatedEngineConfig.of(self))


class VLLMEngineResource(LLMEngineResource, VLLMEngineConfig):
    """In-process vLLM (`pip install -e '.[vllm]'`); the model loads on the first `run`.
    Its fields are `VLLMEngineConfig`'s (`resources.engine_config`)."""

    def build_engine(self) -> LLMEngine:
        from resources.vllm_engine import VLLMEngine

        return VLLMEngine(config=VLLMEngineConfig.of(self))


OPENAI_ENV_PREFIX = "LLM_ASSETS_OPENAI_"
"""Every option of `OpenAIEngineResource` left unset in config is read from
`LLM_ASSETS_OPENAI_<OPTION>` (e.g. `LLM_ASSETS_OPENAI_MAX_CONCURRENCY`) when the run starts."""


class OpenAIEngineResource(LLMEngineResource, OpenAIEngineConfig):
    """Any OpenAI-compatible server over HTTP (vLLM, llama.cpp's llama-server, SGLang, a
    hosted API, the sim's server). Its fields are `OpenAIEngineConfig`'s
    (`resources.engine_config`), plus the secret `api_key`.

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
        variable, else the default. ValueError names a missing URL/model or a bad variable."""
        fields = OpenAIEngineConfig.model_fields
        values = self.model_dump(include=self.model_fields_set & fields.keys())
        env = {name: os.environ.get(OPENAI_ENV_PREFIX + name.upper()) for name in fields}
        env = {n: raw for n, raw in env.items() if raw not in (None, "") and n not in values}
        for name in ("base_url", "model"):
            if not values.get(name) and name not in env:
                raise ValueError(
                    f"OpenAIEngineResource needs {name}: set it in config or in "
                    f"{OPENAI_ENV_PREFIX}{name.upper()}"
                )
        for name, raw in env.items():
            field = fields[name]
            try:  # the field's type and bounds, so that a bad variable is named
                kind = field.annotation
                adapter = TypeAdapter(Annotated[kind, *field.metadata] if field.metadata else kind)
                values[name] = adapter.validate_python(raw)
            except ValidationError as e:
                var = OPENAI_ENV_PREFIX + name.upper()
                raise ValueError(f"{var}={raw!r}: {e.errors()[0]['msg']}") from None
        return OpenAIEngineConfig(**values)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        from resources.openai_wire import split_url_credentials

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
        from resources.openai_engine import OpenAIEngine

        key = self.api_key or os.environ.get(OPENAI_ENV_PREFIX + "API_KEY") or None
        return OpenAIEngine(config=self.settings(), api_key=key)


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
