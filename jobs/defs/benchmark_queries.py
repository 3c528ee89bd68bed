"""The benchmark queries Q1-Q5 (Movies, SQuAD) and Q1-Q4 on Products, declared with the same
factory as any user's query, over the benchmark datasets' assets (read-only)."""

import dagster as dg

from jobs.datasets import DATASET_ASSETS
from llm_assets import llm_query_assets
from llm_assets.benchmark_queries import QUERIES, SYSTEM_PROMPTS, TABLES, pairs


def group_name(query: str, dataset: str) -> str:
    """`q1` for the five benchmark queries, `q1_products` for the Products variants."""
    return query if dataset != "products" else f"{query}_{dataset}"


BENCHMARKS: dict[str, tuple[str, str]] = {group_name(q, d): (q, d) for q, d in pairs()}
"""Query group -> (benchmark query, dataset)."""

defs = dg.Definitions.merge(
    dg.Definitions(assets=DATASET_ASSETS),
    *(
        llm_query_assets(
            group,
            QUERIES[query][dataset],
            sources={table: {"asset": f"{dataset}/{table}"} for table in TABLES[dataset]},
            system_prompt=SYSTEM_PROMPTS[query][dataset],
            description=f"Benchmark {query.upper()} on {dataset}.",
        )
        for group, (query, dataset) in BENCHMARKS.items()
    ),
)
