"""The one way from settings and the environment to an engine, without Dagster: the Dagster
engine resources (`resources.llm_resources`) and `llm-assets run` / `plan` both build engines
here, so a variable means the same in both and the CLI never imports Dagster.

A field given in code or run config wins; an OpenAI or llama.cpp field left unset is read from
`LLM_ASSETS_OPENAI_<FIELD>` / `LLM_ASSETS_LLAMA_CPP_<FIELD>`, vLLM's model from
`LLM_ASSETS_VLLM_MODEL`, when the engine is built (`settings_from_env`: one set of one-line
errors for all); the simulated engine reads no variable. Nothing here imports vLLM or loads a
model.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from typing import Annotated, Any

from pydantic import TypeAdapter, ValidationError

from resources.configs import (
    EngineConfig,
    LlamaCppEngineConfig,
    OpenAIEngineConfig,
    RayEngineConfig,
    VLLMEngineConfig,
)
from resources.engine import LLMEngine
from resources.sim.config import SimulatedEngineConfig

__all__ = [
    "ENGINE_KINDS",
    "LLAMA_CPP_ENV_PREFIX",
    "OPENAI_ENV_PREFIX",
    "RAY_ENV_PREFIX",
    "VLLM_ENV_PREFIX",
    "build_engine",
    "engine_settings",
    "settings_from_env",
]

ENGINE_KINDS = ("sim", "vllm", "openai", "llama_cpp", "ray")
"""The engines `build_engine` builds: `LLM_ASSETS_ENGINE` and `llm-assets run --engine`."""

VLLM_ENV_PREFIX = "LLM_ASSETS_VLLM_"
"""vLLM's `model` left unset in config is read from `LLM_ASSETS_VLLM_MODEL` when the engine is
built. (Only the model: Dagster fills in the default of a choice field such as
`scheduling_policy`, so a variable could never override it.)"""

OPENAI_ENV_PREFIX = "LLM_ASSETS_OPENAI_"
"""Every OpenAI option left unset in config is read from `LLM_ASSETS_OPENAI_<OPTION>` (e.g.
`LLM_ASSETS_OPENAI_MAX_CONCURRENCY`) when the run starts; the key from `..._API_KEY`."""

RAY_ENV_PREFIX = "LLM_ASSETS_"
"""The Ray engine's own options left unset are read from `LLM_ASSETS_RAY_<OPTION>` (its fields
are `ray_address`, `ray_block_by`, ...: `LLM_ASSETS_RAY_ADDRESS`, `LLM_ASSETS_RAY_BLOCK_BY`);
its replicas' client options from `LLM_ASSETS_OPENAI_<OPTION>`, as the OpenAI engine's."""

LLAMA_CPP_ENV_PREFIX = "LLM_ASSETS_LLAMA_CPP_"
"""Every llama.cpp option left unset in config is read from `LLM_ASSETS_LLAMA_CPP_<OPTION>`
(e.g. `LLM_ASSETS_LLAMA_CPP_MODEL=gemma3-270m`)."""


def settings_from_env(
    config_cls: type[EngineConfig],
    given: dict,
    prefix: str,
    required: dict[str, tuple[str, ...]],
    from_env: Collection[str] | None = None,
) -> EngineConfig:
    """`config_cls` from the field values `given` (set in config or code); every other field
    (of `from_env`, default all) from its environment variable `<prefix><FIELD>` when that is
    set and not empty, else its default. `required` maps a field to the fields any one of
    which satisfies it.

    ValueError, one line: the required fields given nowhere, with the variables to set, or a
    variable whose value its field refuses (`LLM_ASSETS_OPENAI_MAX_CONCURRENCY='lots': Input
    should be a valid integer, ...`); a field value out of range as `EngineConfig` says it."""
    fields = config_cls.model_fields
    values = dict(given)
    env = {name: os.environ.get(prefix + name.upper()) for name in from_env or fields}
    env = {n: raw for n, raw in env.items() if raw not in (None, "") and n not in values}
    missing = [
        name
        for name, satisfied_by in required.items()
        if not any(values.get(n) or n in env for n in (name, *satisfied_by))
    ]
    if missing:
        what = " and ".join(missing)
        variables = " and ".join(prefix + name.upper() for name in missing)
        engine = prefix.removeprefix("LLM_ASSETS_").removesuffix("_").lower()
        raise ValueError(
            f"the {engine} engine needs {what}: set {variables} (or {what} in the "
            "resource's config)"
        )
    for name, raw in env.items():
        field = fields[name]
        try:  # the field's type and bounds, so that a bad variable is named
            kind = field.annotation
            adapter = TypeAdapter(Annotated[kind, *field.metadata] if field.metadata else kind)
            values[name] = adapter.validate_python(raw)
        except ValidationError as e:
            raise ValueError(f"{prefix}{name.upper()}={raw!r}: {e.errors()[0]['msg']}") from None
    return config_cls(**values)


def engine_settings(kind: str, given: Mapping[str, Any]) -> EngineConfig:
    """The config of engine `kind` from the fields `given` (set in code or run config), the
    environment and the defaults. ValueError, one line: an unknown kind, a required field
    given nowhere, a bad variable or a value out of range."""
    if kind == "sim":
        return SimulatedEngineConfig(**given)
    if kind == "vllm":
        return settings_from_env(VLLMEngineConfig, dict(given), VLLM_ENV_PREFIX, {"model": ()},
                                 ["model"])  # fmt: skip
    if kind == "openai":
        required = {"base_url": ("base_urls",), "model": ()}
        return settings_from_env(OpenAIEngineConfig, dict(given), OPENAI_ENV_PREFIX, required)
    if kind == "llama_cpp":
        return settings_from_env(LlamaCppEngineConfig, dict(given), LLAMA_CPP_ENV_PREFIX, {})
    if kind == "ray":
        ray_fields = RayEngineConfig.ray_fields()
        own = settings_from_env(RayEngineConfig, dict(given), RAY_ENV_PREFIX, {}, ray_fields)
        given = {**given, **{f: getattr(own, f) for f in ray_fields}}
        required = {"base_url": ("base_urls",), "model": ()}
        openai_fields = [f for f in RayEngineConfig.model_fields if f not in ray_fields]
        return settings_from_env(RayEngineConfig, given, OPENAI_ENV_PREFIX, required,
                                 openai_fields)  # fmt: skip
    raise ValueError(f"unknown engine {kind!r}; expected one of {list(ENGINE_KINDS)}")


def build_engine(kind: str, given: Mapping[str, Any], api_key: str | None = None) -> LLMEngine:
    """A new engine of `kind` (`engine_settings`); an OpenAI engine's key is `api_key`, else
    `LLM_ASSETS_OPENAI_API_KEY` when set, else none. Cheap: no model is loaded here."""
    settings = engine_settings(kind, given)
    if kind == "sim":
        from resources.sim.engine import SimulatedEngine

        return SimulatedEngine(config=settings)
    if kind == "vllm":
        from resources.vllm_engine import VLLMEngine

        return VLLMEngine(config=settings)
    if kind == "openai":
        from resources.openai.engine import OpenAIEngine

        key = api_key or os.environ.get(OPENAI_ENV_PREFIX + "API_KEY") or None
        return OpenAIEngine(config=settings, api_key=key)
    if kind == "ray":
        from resources.ray_executor.engine import RayFleetEngine

        key = api_key or os.environ.get(OPENAI_ENV_PREFIX + "API_KEY") or None
        return RayFleetEngine(config=settings, api_key=key)
    from resources.llama_cpp.engine import LlamaCppEngine

    return LlamaCppEngine(config=settings)
