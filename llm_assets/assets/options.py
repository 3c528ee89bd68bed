"""Run-level overrides of a query's declared options: the `options` resource.

A query declares its options (component YAML `options:`, factory keywords); a run may
override any of them for every query it runs, in run config:
`resources: {options: {config: {method: original, dedup: false}}}` (the benchmark ladder does).
Unset fields (None) keep the declared value. Values are checked against the same
`QueryOptions` model (its `Literal`s and bounds) when the resource is built, in code or when
the run starts, so a bad one fails before any query runs with one line naming the field and
the accepted values (Dagster run config has no optional enum, so the choices are checked here,
not in the run config schema).

Prefix caching is a property of the engine: `resources: {llm_engine: {config:
{enable_prefix_caching: false}}}` (the "No Cache" rung).
"""

from __future__ import annotations

from typing import Any

import dagster as dg
from pydantic import Field, ValidationError

from llm_assets.pipeline.options import QueryOptions
from resources.configs import config_error


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
    min_parse_rate: float | None = Field(
        None, description="The parse_rate_at_least check fails below this share of answers."
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

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        try:
            QueryOptions().merged(self.overrides())
        except ValidationError as e:
            raise ValueError(config_error(type(self).__name__, e)) from None

    def overrides(self) -> dict[str, Any]:
        """The `QueryOptions` fields this run sets (None: keep the declared value)."""
        return self.model_dump(
            include=set(QueryOptions.model_fields) & set(type(self).model_fields)
        )

    def apply(self, declared: QueryOptions) -> QueryOptions:
        """The declared options with this run's overrides."""
        return declared.merged(self.overrides())
