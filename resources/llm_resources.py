"""Dagster resources for the LLM engines: one abstract resource, three implementations.

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

import dagster as dg
from pydantic import Field, PrivateAttr

from resources.engine import LLMEngine, Request, RunResult

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


class SimulatedEngineResource(LLMEngineResource):
    """The embedded simulated engine (CPU only): a vLLM-like engine on a chosen GPU and model.

    Its prefix cache persists across `run` calls within one Dagster run (one engine per run).
    """

    gpu: str = Field(default="L4", description="Simulated GPU profile, e.g. L4, A100-80GB, H100.")
    model: str = Field(default="llama-2-7b", description="Simulated model profile.")
    policy: str = Field(
        default="vllm-v1",
        description="Scheduling policy (resources.sim.policies.POLICIES: vllm-v0, vllm-v1, ...).",
    )
    enable_prefix_caching: bool = Field(
        default=True, description="Reuse KV blocks of shared prompt prefixes, as vLLM does."
    )
    max_num_seqs: int = Field(default=256, description="Most sequences in one batch (vLLM's).")
    max_num_batched_tokens: int | None = Field(
        default=None, description="Token budget per iteration; None takes vLLM's default."
    )
    gpu_memory_utilization: float = Field(
        default=0.9, description="Share of GPU memory for weights + KV cache, in (0, 1]."
    )
    tensor_parallel_size: int | None = Field(
        default=None, description="GPUs to shard across; None lets the profile decide."
    )
    tokenizer: str | None = Field(
        default=None,
        description="Path of a tokenizer.json / tiktoken file; None uses the built-in "
        "approximate Llama 3 tokenizer.",
    )

    def build_engine(self) -> LLMEngine:
        from resources.sim.engine import SimulatedEngine

        return SimulatedEngine(
            gpu=self.gpu,
            model=self.model,
            policy=self.policy,
            enable_prefix_caching=self.enable_prefix_caching,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            gpu_memory_utilization=self.gpu_memory_utilization,
            tensor_parallel_size=self.tensor_parallel_size,
            tokenizer=self.tokenizer,
        )


class VLLMEngineResource(LLMEngineResource):
    """In-process vLLM (`pip install -e '.[vllm]'`); the model loads on the first `run`."""

    model: str = Field(description="Hugging Face model id or local path of the weights.")
    enable_prefix_caching: bool = Field(
        default=True, description="vLLM automatic prefix caching (shared-prefix KV reuse)."
    )
    scheduling_policy: str = Field(
        default="fcfs",
        description="vLLM scheduling policy: 'fcfs' or 'priority' (then request priorities "
        "are passed to LLM.generate).",
    )
    gpu_memory_utilization: float = Field(
        default=0.9, description="Share of GPU memory vLLM may use, in (0, 1]."
    )
    max_model_len: int | None = Field(
        default=None, description="Context length limit; None keeps the model's own."
    )
    tensor_parallel_size: int = Field(default=1, description="GPUs to shard the model across.")
    dtype: str = Field(default="auto", description="Weights dtype, e.g. auto, float16, bfloat16.")
    seed: int = Field(default=0, description="Random seed of the vLLM engine.")

    def build_engine(self) -> LLMEngine:
        from resources.vllm_engine import VLLMEngine

        return VLLMEngine(
            model=self.model,
            enable_prefix_caching=self.enable_prefix_caching,
            scheduling_policy=self.scheduling_policy,
            gpu_memory_utilization=self.gpu_memory_utilization,
            max_model_len=self.max_model_len,
            tensor_parallel_size=self.tensor_parallel_size,
            dtype=self.dtype,
            seed=self.seed,
        )


OPENAI_ENV_PREFIX = "LLM_ASSETS_OPENAI_"
"""Every option of `OpenAIEngineResource` left unset in config is read from
`LLM_ASSETS_OPENAI_<OPTION>` (e.g. `LLM_ASSETS_OPENAI_MAX_CONCURRENCY`) when the run starts."""


def _env_option(name: str, kind: type, raw: str):
    var = OPENAI_ENV_PREFIX + name.upper()
    if kind is bool:
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{var}={raw!r} is not a boolean (expected true/false/1/0)")
    try:
        return kind(raw)
    except ValueError:
        kind_name = "an integer" if kind is int else "a number"
        raise ValueError(f"{var}={raw!r} is not {kind_name}") from None


_OPENAI_TUNING: dict[str, type] = {
    "max_concurrency": int, "timeout_s": float, "request_deadline_s": float,
    "max_retries": int, "breaker_failures": int, "server_style": str, "max_tokens": int,
    "prefix_affinity": bool, "send_priority": bool, "use_chat": bool,
    "send_relquery_header": bool,
}  # fmt: skip
"""Tuning options of `OpenAIEngineResource` and how their environment variables parse."""


class OpenAIEngineResource(LLMEngineResource):
    """Any OpenAI-compatible server over HTTP (vLLM, llama.cpp's llama-server, SGLang, a
    hosted API, the sim's server).

    Every option is optional in run config: one left unset is read from the environment
    variable `LLM_ASSETS_OPENAI_<OPTION>` when the run starts, else takes the engine's default
    (`resources.openai_engine`). So `llm_engine: {config: {max_concurrency: 4}}` needs no
    `base_url` or `model` beside it. The key: `api_key=dg.EnvVar(...)` in code, else
    `LLM_ASSETS_OPENAI_API_KEY` when set, else none (a keyless local server). A literal key
    in run config is refused when the run starts (Dagster would store it in its run
    database): give `{env: VAR}` instead.

    Time bounds (hard, wall clock): an attempt ends within `timeout_s`, a request within
    `request_deadline_s`; on a server that accepts connections and never answers, the step
    stops after about ceil(breaker_failures / max_concurrency) x timeout_s; with the breaker
    off (0), after at most ceil(requests / max_concurrency) x request_deadline_s.
    """

    base_url: str | None = Field(
        default=None,
        repr=False,
        description="API base URL ending in /v1 (env LLM_ASSETS_OPENAI_BASE_URL).",
    )
    model: str | None = Field(
        default=None, description="Model name the server serves (env LLM_ASSETS_OPENAI_MODEL)."
    )
    api_key: str | None = Field(
        default=None,
        repr=False,
        description="Bearer key; give it as dg.EnvVar('NAME') (never a literal: Dagster stores "
        "run config). Unset: LLM_ASSETS_OPENAI_API_KEY if set, else no key.",
    )
    max_concurrency: int | None = Field(default=None, description="Requests in flight (16).")
    timeout_s: float | None = Field(
        default=None, description="Hard wall-clock limit of one attempt, body included (60)."
    )
    request_deadline_s: float | None = Field(
        default=None,
        description="Hard wall-clock limit of one request across attempts and backoffs (300).",
    )
    max_retries: int | None = Field(
        default=None, description="Retries after the first attempt on 429/5xx/timeouts (5)."
    )
    breaker_failures: int | None = Field(
        default=None,
        description="Stop after this many consecutive connection failures or timeouts "
        "(8; 0: never).",
    )
    server_style: str | None = Field(
        default=None,
        description="How output constraints are sent: auto (ask the server), vllm, "
        "vllm-guided, llamacpp, openai or none (auto).",
    )
    max_tokens: int | None = Field(
        default=None, description="Output budget of every request of this run (the query's)."
    )
    prefix_affinity: bool | None = Field(
        default=None,
        description="Serve each prefix group in order on one worker, so parallel server "
        "slots do not undo GGR (true).",
    )
    send_priority: bool | None = Field(
        default=None,
        description="Send each request's priority (vLLM under priority scheduling) (false).",
    )
    use_chat: bool | None = Field(
        default=None, description="Use /chat/completions, one user message per prompt (false)."
    )
    send_relquery_header: bool | None = Field(
        default=None, description="Send the relQuery id as an X-Relquery-Id header (false)."
    )

    def settings(self) -> dict:
        """The engine's keyword arguments: config, else environment, else engine defaults
        (the key excluded). ValueError names a missing URL/model or a bad variable."""
        out: dict = {}
        for name in ("base_url", "model"):
            value = getattr(self, name) or os.environ.get(OPENAI_ENV_PREFIX + name.upper())
            if not value:
                raise ValueError(
                    f"OpenAIEngineResource needs {name}: set it in config or in "
                    f"{OPENAI_ENV_PREFIX}{name.upper()}"
                )
            out[name] = value
        for name, kind in _OPENAI_TUNING.items():
            value = getattr(self, name)
            raw = os.environ.get(OPENAI_ENV_PREFIX + name.upper())
            if value is None and raw not in (None, ""):
                value = _env_option(name, kind, raw)
            if value is not None:
                out[name] = value
        return out

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
            url = config.get("base_url") if isinstance(config, dict) else None
            if isinstance(url, str) and split_url_credentials(url)[1:] != (None, None):
                raise ValueError(
                    f"resources.{key}.config.base_url carries user:password@ in run config, "
                    "which Dagster stores in its run database; give the URL as {env: VAR_NAME} "
                    "or set LLM_ASSETS_OPENAI_BASE_URL"
                )
        super().setup_for_execution(context)

    def build_engine(self) -> LLMEngine:
        from resources.openai_engine import OpenAIEngine

        key = self.api_key or os.environ.get(OPENAI_ENV_PREFIX + "API_KEY") or None
        return OpenAIEngine(api_key=key, **self.settings())


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
