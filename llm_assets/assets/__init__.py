"""Dagster layer: one lineage of assets per declared LLM query (factory and component).

The asset layer knows no dataset: every query, the benchmark ones included, is declared with
`llm_query_assets` or `LLMQueryComponent`.
"""

from llm_assets.assets.component import LLMQueryComponent
from llm_assets.assets.defaults import default_resources
from llm_assets.assets.definition import LandingSpec, QueryDefinition
from llm_assets.assets.factory import lineage, llm_query_assets
from llm_assets.assets.options import QueryOptionsResource

__all__ = [
    "LLMQueryComponent",
    "LandingSpec",
    "QueryDefinition",
    "QueryOptionsResource",
    "default_resources",
    "lineage",
    "llm_query_assets",
]
