"""Run-level overrides of a query's declared options: the `options` resource.

A query declares its options (component YAML `options:`, factory keywords); a run may
override any of them for every query it runs, in run config:
`resources: {options: {config: {method: original, dedup: false}}}` (the benchmark ladder does).
Unset fields (None) keep the declared value. Values are checked against the same
`QueryOptions` model when a step starts, so a bad one fails the first step naming the field
and the accepted values.

Prefix caching is a property of the engine: `resources: {llm_engine: {config:
{enable_prefix_caching: false}}}` (the "No Cache" rung).
"""

from __future__ import annotations

import dagster as dg
from pydantic import Field

from llm_assets.pipeline.options import QueryOptions


class QueryOptionsResource(dg.ConfigurableResource):
    """Overrides for every query of a run (None: the query's declared value)."""

    method: str | None = Field(None, description="Row/field reordering.")
    dedup: bool | None = Field(None, description="Send each distinct LLM input once.")
    pushdown: bool | None = Field(None, description="Run non-LLM predicates before the LLM.")
    prompt_style: str | None = Field(None, description="Prompt rendering.")
    null_policy: str | None = Field(None, description="A null in an LLM field.")
    context_policy: str | None = Field(None, description="A prompt longer than the context window.")
    max_tokens: int | None = Field(None, description="Generation limit per request.")
    chunk_size: int | None = Field(None, description="Requests per committed chunk.")
    max_error_rate: float | None = Field(
        None, description="Fail llm_outputs above this share of failed requests."
    )
    data_label: str | None = Field(
        None, description="Data label in MLflow (default: each source's file, table or asset)."
    )
    experiment: str | None = Field(
        None, description="MLflow experiment (default: llm-assets-<query name>)."
    )
    run_tags: dict[str, str] = Field(
        default_factory=dict, description="Extra MLflow tags for every llm_outputs run."
    )

    def apply(self, declared: QueryOptions) -> QueryOptions:
        """The declared options with this run's overrides."""
        overrides = self.model_dump(
            include=set(QueryOptions.model_fields) & set(type(self).model_fields)
        )
        return declared.merged(overrides)
