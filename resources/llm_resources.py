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
- secrets come through `dg.EnvVar`: `OpenAIEngineResource(api_key=dg.EnvVar("OPENAI_API_KEY"))`.
  Dagster records the variable's name, not its value, and the engine never logs the key.
"""

from __future__ import annotations

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


class OpenAIEngineResource(LLMEngineResource):
    """Any OpenAI-compatible server over HTTP (vLLM or SGLang server, hosted API, the sim's)."""

    base_url: str = Field(description="API base URL ending in /v1, e.g. http://127.0.0.1:8000/v1.")
    model: str = Field(description="Model name the server serves (sent as `model`).")
    api_key: str | None = Field(
        default=None,
        repr=False,
        description="Bearer key; give it as dg.EnvVar('NAME') so only the variable's name is "
        "stored. Never logged.",
    )
    max_concurrency: int = Field(default=16, description="Most requests in flight at once.")
    timeout_s: float = Field(default=60.0, description="Per-request timeout in seconds.")
    max_retries: int = Field(
        default=5, description="Retries after the first attempt on 429/5xx/timeouts/conn errors."
    )
    send_priority: bool = Field(
        default=False,
        description="Send each request's `priority` (vLLM accepts it only under priority "
        "scheduling).",
    )
    use_chat: bool = Field(
        default=False, description="Use /chat/completions with one user message per prompt."
    )
    structured_output_style: str = Field(
        default="structured_outputs",
        description="How output constraints are sent: 'structured_outputs' (vLLM >= 0.10), "
        "'guided' (older guided_* fields) or 'none' (hosted APIs without them).",
    )
    send_relquery_header: bool = Field(
        default=False, description="Send the relQuery id as an X-Relquery-Id header."
    )

    def build_engine(self) -> LLMEngine:
        from resources.openai_engine import OpenAIEngine

        return OpenAIEngine(
            base_url=self.base_url,
            model=self.model,
            api_key=self.api_key,
            max_concurrency=self.max_concurrency,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            send_priority=self.send_priority,
            use_chat=self.use_chat,
            structured_output_style=self.structured_output_style,
            send_relquery_header=self.send_relquery_header,
        )


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
