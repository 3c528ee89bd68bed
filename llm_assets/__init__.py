"""llm-assets: LLM queries over relational tables as Dagster assets, made cheaper before any
token is generated (filter pushdown, exact dedup, GGR reordering, prefix caching).

`LLMQueryComponent` (for `dg` and `defs.yaml`) and `llm_query_assets` (a Python factory)
declare a query; `llm_assets.pipeline.run.run_query` runs one outside Dagster.
"""

from llm_assets.assets import LLMQueryComponent, llm_query_assets

__all__ = ["LLMQueryComponent", "llm_query_assets"]
