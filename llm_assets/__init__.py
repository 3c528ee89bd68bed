"""llm-assets: LLM queries over relational tables as Dagster assets, made cheaper before any
token is generated (filter pushdown, exact dedup, GGR reordering, prefix caching).

`LLMQueryComponent` (for `dg` and `defs.yaml`) and `llm_query_assets` (a Python factory)
declare a query, `default_resources()` gives the resources its assets need (engine from
`LLM_ASSETS_ENGINE`, sim by default); `llm_assets.pipeline.run.run_query` runs one outside
Dagster. These names are loaded on first use (PEP 562), so importing a pure module such as
`llm_assets.sql.compiler` does not import Dagster, and `resources` can import the pure modules
without a cycle.
"""

__all__ = ["LLMQueryComponent", "default_resources", "llm_query_assets"]


def __getattr__(name: str):
    if name in __all__:
        import llm_assets.assets as assets

        return getattr(assets, name)
    raise AttributeError(f"module 'llm_assets' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
