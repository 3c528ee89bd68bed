"""`llm_query_assets`: one LLM-SQL query over any tables as a Dagster lineage.

    defs = llm_query_assets(
        "reviews_sentiment",
        "SELECT r.id, LLM('Is this review positive? {review}', r.review) AS positive "
        "FROM reviews r",
        sources={"reviews": "data/reviews.tsv"},      # or {"asset": "raw/reviews"}, ...
        method="ggr", null_policy="skip",
    )

The lineage (assets under key prefix and group `name`): one source asset per file or DuckDB
table (an upstream asset is read as it is, through its own IO manager), `filtered`
[`retrieved`], per LLM call `deduped` + `request_plan` and `llm_outputs`, then `result` and
`answer`, with their checks; with `landing=`, every asset is partitioned by landed file and a
sensor adds one partition and one run per new file. The asset layer knows no dataset: the
built-in benchmark queries are declared with this same function (`jobs/defs/`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg

from llm_assets.assets import builders, stage_assets
from llm_assets.assets.definition import LandingSpec, QueryDefinition
from llm_assets.assets.executor import query_executor
from llm_assets.assets.landing import landing_sensor
from llm_assets.assets.translation import TranslationArg, translate_assets
from llm_assets.assets.validation import check_sources


def lineage(
    qdef: QueryDefinition,
    translation: TranslationArg = None,
    execute: stage_assets.Execute = stage_assets.send,
) -> dg.Definitions:
    """Every asset, check and sensor of one declared query, after `check_sources` (its files
    and DuckDB tables exist, have the columns the query reads, and its predicates run on
    their types: one ValueError line otherwise); `translation` customises the assets' specs
    (`llm_assets.assets.translation`: tags, owners, kinds, automation condition, ...);
    `execute` sends each LLM stage (`stage_assets.send` by default)."""
    check_sources(qdef)
    defs: list = [
        builders.source_asset(qdef, table)
        for table, spec in sorted(qdef.sources.items())
        if not spec.asset
    ]
    defs.append(builders.filtered_asset(qdef))
    if qdef.query.retrievals:
        defs.append(builders.retrieved_asset(qdef))
    if qdef.query.semantic_joins:
        defs.append(builders.pairs_asset(qdef))
    if qdef.reorders_filters:
        defs.append(builders.filter_order_asset(qdef))
    for k, call in enumerate(qdef.query.llm_calls):
        defs += stage_assets.stage_assets(qdef, k, call, execute)
    defs += stage_assets.result_assets(qdef)
    assets = [d for d in defs if not isinstance(d, dg.AssetChecksDefinition)]
    return dg.Definitions(
        assets=translate_assets(qdef, assets, translation),
        asset_checks=[d for d in defs if isinstance(d, dg.AssetChecksDefinition)],
        sensors=[landing_sensor(qdef)] if qdef.landing else [],
        executor=query_executor(),
    )


def llm_query_assets(
    name: str,
    sql: str,
    sources: Mapping[str, Any],
    *,
    engine_key: str = "llm_engine",
    landing: LandingSpec | Mapping | str | None = None,
    description: str | None = None,
    translation: TranslationArg = None,
    label_column: str | None = None,
    **options: Any,
) -> dg.Definitions:
    """The assets, checks (and landing sensor) of query `name`: `sql` is LLM-SQL; `sources`
    maps each table in it to a path or glob, `{"asset": "a/b"}`, or `{"duckdb_table": ...,
    "database": ...}`; `options` are `QueryOptions` fields (method, dedup, pushdown,
    null_policy, context_policy, system_prompt, max_tokens, ...). Bad SQL, an unknown option,
    a missing source, a file or glob that is not there, an unknown column or a predicate that
    cannot compare a column as written raises ValueError naming it, in one line.

    `translation` customises the generated assets as a Dagster translator does: a function
    `(AssetSpec, stage) -> AssetSpec`, or a mapping of attributes set on every asset
    (`{"owners": ["team:data"], "automation_condition": dg.AutomationCondition.eager()}`);
    tags and metadata merge, other attributes replace; keys, deps, group, partitions and
    skippable cannot change (`llm_assets.assets.translation`).

    `label_column` names a source column holding each row's expected answer: the last LLM
    stage's `llm_outputs` then reports `accuracy` against it (`llm_assets.pipeline.quality`);
    it is never sent to the model. A column no source has is refused in one line."""
    qdef = QueryDefinition.build(
        name,
        sql,
        sources,
        engine_key=engine_key,
        landing=landing,
        description=description,
        label_column=label_column,
        **options,
    )
    return lineage(qdef, translation)
