"""How one LLM query is optimised and run: a pydantic model shared by the Dagster component,
the Python factory, run config and the CLI (one definition, one validation).

Invalid values fail when the model is built (at definition load or launch), with pydantic's
message naming the field and the accepted values:

>>> QueryOptions(method="fastest")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
pydantic_core._pydantic_core.ValidationError: 1 validation error for QueryOptions
method
  Input should be 'original', 'column_stats' or 'ggr' ...
>>> QueryOptions().merged({"dedup": False, "method": None}).dedup
False
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from llm_assets.optimizer.passes.plan import (
    CONTEXT_POLICIES,
    NULL_POLICIES,
    ContextPolicy,
    NullPolicy,
)

Method = Literal["original", "column_stats", "ggr"]
PromptStyle = Literal["named", "values", "inline"]
Retriever = Literal["tfidf", "embedding"]

__all__ = [
    "CONTEXT_POLICIES",
    "NULL_POLICIES",
    "ContextPolicy",
    "Method",
    "NullPolicy",
    "PromptStyle",
    "QueryOptions",
    "Retriever",
]


class QueryOptions(BaseModel):
    """Optimisation and run switches of one query (every field has a safe default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Method = Field("ggr", description="Row/field reordering of each LLM stage's prompts.")
    reorder_fields: bool = Field(
        True,
        description="Let the reordering move fields within a prompt; False: the written order "
        "in every prompt, only rows reordered (prompts unchanged).",
    )
    field_order_guard: float | None = Field(
        None,
        description="Before a stage whose fields the reordering moves, answer a small seeded "
        "sample in the written and the planned field order; keep the planned one only when "
        "the 95% lower bound of their agreement is at least this share (None: off).",
    )
    guard_sample: int = Field(
        48, description="Distinct inputs the field-order guard answers in both orders."
    )
    dedup: bool = Field(True, description="Send each distinct LLM input once.")
    pushdown: bool = Field(True, description="Run non-LLM predicates before the LLM (in DuckDB).")
    prompt_style: PromptStyle = Field(
        "named",
        description="named: your template word for word, then the values as `name: value` "
        "lines in the order that shares the most cache; values: values only; inline: values "
        "in the template's placeholders (only rows are reordered).",
    )
    system_prompt: str = Field("", description="Sent before each instruction ('' for none).")
    null_policy: NullPolicy = Field(
        "skip",
        description="A null in an LLM field: skip the row with a reason, render it empty, "
        "or fail the stage.",
    )
    context_policy: ContextPolicy = Field(
        "fail",
        description="A prompt longer than the context window: fail the row before sending, "
        "or cut its longest field with a marker.",
    )
    max_tokens: int | None = Field(
        None, description="Generation limit per request (None: the one the SQL implies)."
    )
    max_prompt_tokens: int | None = Field(
        None,
        description="Prompt token limit (None: the engine's context window minus max_tokens).",
    )
    chunk_size: int = Field(
        256, description="Requests per committed chunk: a crash loses at most one chunk."
    )
    max_pairs: int = Field(
        100_000,
        description="A semantic join (an LLM predicate in JOIN ON) with more candidate pairs "
        "is refused before anything is sent.",
    )
    max_error_rate: float = Field(
        0.01, description="Fail llm_outputs when a larger share of requests fail."
    )
    min_parse_rate: float = Field(
        0.9,
        description="The `parse_rate_at_least` check of each LLM stage fails when a smaller "
        "share of its answers is in the output spec's allowed form (answers: requests that "
        "did not fail).",
    )
    retriever: Retriever = Field("tfidf", description="Index behind similarity_search.")
    num_plan_shards: int = Field(
        1,
        description="Plan each LLM stage in this many shards, cut on the field GGR puts "
        "first so no prefix group spans two, as parallel Ray tasks (1: in this process; "
        "needs the ray extra; cluster: LLM_ASSETS_RAY_ADDRESS, else a local one).",
    )
    order_llm_filters: bool = Field(
        True,
        description="Run several LLM predicates cheapest first (cost / (1 - selectivity), "
        "selectivity from a small sample).",
    )

    # Bounds are checked by validators, not Field(ge=...): Dagster's component schema
    # (Resolvable) cannot carry annotated constraints.
    @field_validator("max_tokens", "max_prompt_tokens", "chunk_size", "max_pairs", "guard_sample")
    @classmethod
    def _positive(cls, value: int | None, info) -> int | None:
        if value is not None and value < 1:
            raise ValueError(f"{info.field_name} must be >= 1, got {value}")
        return value

    @field_validator("num_plan_shards")
    @classmethod
    def _shards(cls, value: int) -> int:
        from llm_assets.optimizer.shards import check_num_shards

        return check_num_shards(value)

    @field_validator("max_error_rate", "min_parse_rate", "field_order_guard")
    @classmethod
    def _share(cls, value: float | None, info) -> float | None:
        if value is not None and not 0.0 <= value <= 1.0:
            raise ValueError(f"{info.field_name} must be in [0, 1], got {value}")
        return value

    def merged(self, overrides: Mapping[str, Any]) -> QueryOptions:
        """These options with every non-None value of `overrides` applied (validated)."""
        values = {k: v for k, v in overrides.items() if v is not None}
        return QueryOptions.model_validate({**self.model_dump(), **values})
