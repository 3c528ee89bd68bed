"""Dagster assets: the source tables and one lineage per benchmark query and dataset."""

from llm_assets.assets.factory import DATASET_TABLES, QuerySpec, query_assets, source_assets

# (group, query, dataset): the five benchmark queries, then the Products variants of Q1-Q4.
QUERY_SPECS: tuple[QuerySpec, ...] = (
    QuerySpec("q1", "q1", "movies"),
    QuerySpec("q2", "q2", "movies"),
    QuerySpec("q3", "q3", "movies"),
    QuerySpec("q4", "q4", "movies"),
    QuerySpec("q5", "q5", "squad"),
    QuerySpec("q1_products", "q1", "products"),
    QuerySpec("q2_products", "q2", "products"),
    QuerySpec("q3_products", "q3", "products"),
    QuerySpec("q4_products", "q4", "products"),
)
SPECS_BY_GROUP = {s.group: s for s in QUERY_SPECS}


def all_assets() -> list:
    """Source assets of every dataset and every query lineage, with their checks."""
    defs: list = [source_assets(d) for d in DATASET_TABLES]
    for spec in QUERY_SPECS:
        defs += query_assets(spec)
    return defs


__all__ = [
    "QUERY_SPECS",
    "SPECS_BY_GROUP",
    "QuerySpec",
    "all_assets",
    "query_assets",
    "source_assets",
]
