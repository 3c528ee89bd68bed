"""Run-level switches of a query lineage: one resource, set in run config as
`resources: {options: {config: {method: ggr, dedup: true, pushdown: true}}}`.

Prefix caching is a property of the engine, so it is switched on the engine resource:
`resources: {llm_engine: {config: {enable_prefix_caching: false}}}` (the "No Cache" rung).
"""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from llm_assets.assets.retrieval import RETRIEVERS
from llm_assets.assets.stages import CONTEXT_POLICIES, NULL_POLICIES
from llm_assets.optimizer import METHODS
from llm_assets.optimizer.prompts import STYLES


class QueryOptions(dg.ConfigurableResource):
    """How a query's LLM stages are optimised and run."""

    method: str = Field(default="ggr", description=f"Row/field reordering: one of {METHODS}.")
    dedup: bool = Field(default=True, description="Send each distinct LLM input once.")
    pushdown: bool = Field(
        default=True, description="Run non-LLM predicates before the LLM (in DuckDB)."
    )
    prompt_style: str = Field(
        default="named", description=f"Prompt rendering: one of {STYLES} (see prompts.py)."
    )
    system_prompt: str | None = Field(
        default=None,
        description="Sent before each instruction; None: the query's harness prompt "
        "(llm_assets.queries.SYSTEM_PROMPTS), '' for none.",
    )
    null_policy: str = Field(
        default="skip",
        description=f"A null in an LLM field: one of {NULL_POLICIES} (skip the row with a "
        "reason, render it empty, or fail the stage).",
    )
    context_policy: str = Field(
        default="fail",
        description=f"A prompt longer than the context window: one of {CONTEXT_POLICIES} "
        "(fail the row before sending, or cut its longest field with a marker).",
    )
    max_prompt_tokens: int | None = Field(
        default=None,
        description="Prompt token limit; None: the engine's context window minus max_tokens "
        "(when the engine knows it).",
    )
    chunk_size: int = Field(
        default=256,
        description="Requests per committed chunk: a crash loses at most one chunk of work.",
    )
    max_error_rate: float = Field(
        default=0.01, description="Fail llm_outputs when more requests than this share fail."
    )
    retriever: str = Field(default="tfidf", description=f"similarity_search: {RETRIEVERS}.")
    dataset_label: str | None = Field(
        default=None, description="Dataset name in MLflow params (default: the dataset's)."
    )
    experiment: str | None = Field(
        default=None, description="MLflow experiment (default: llm-assets-<query group>)."
    )
    run_tags: dict[str, str] = Field(
        default_factory=dict, description="Extra MLflow tags for every llm_outputs run."
    )

    def check(self) -> None:
        """Raise ValueError naming any invalid value and the accepted ones."""
        for name, value, valid in (
            ("method", self.method, METHODS),
            ("prompt_style", self.prompt_style, STYLES),
            ("null_policy", self.null_policy, NULL_POLICIES),
            ("context_policy", self.context_policy, CONTEXT_POLICIES),
            ("retriever", self.retriever, RETRIEVERS),
        ):
            if value not in valid:
                raise ValueError(f"options.{name}={value!r} is not one of {list(valid)}")
        if self.chunk_size < 1:
            raise ValueError(f"options.chunk_size={self.chunk_size} must be >= 1")
        if not 0.0 <= self.max_error_rate <= 1.0:
            raise ValueError(f"options.max_error_rate={self.max_error_rate} is not in [0, 1]")
