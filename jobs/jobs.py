"""Jobs over the loaded query lineages: `<query>_job` for every query group (its assets and
everything upstream), `benchmark_job` (Q1-Q5) and `products_benchmark_job` (Q1-Q4 on
Products). Each job runs in one process, so its steps share one engine and its prefix cache
spans the run, as a vLLM server's would."""

from collections.abc import Iterable

import dagster as dg

from jobs.defs.benchmark_queries import BENCHMARKS

DATASETS_GROUP = "datasets"


def query_job(group: str, description: str, groups: Iterable[str] | None = None):
    return dg.define_asset_job(
        name=f"{group}_job",
        selection=dg.AssetSelection.groups(*(groups or [group]))
        .upstream()
        .required_multi_asset_neighbors(),
        executor_def=dg.in_process_executor,
        description=description,
    )


def jobs_for(groups: Iterable[str]) -> list:
    """A job per query group, plus the two benchmark jobs."""
    jobs = [
        query_job(g, f"Query {g}: every stage of the lineage and its sources.")
        for g in sorted(groups)
        if g != DATASETS_GROUP
    ]
    movies = [g for g, (_, d) in BENCHMARKS.items() if d != "products"]
    products = [g for g, (_, d) in BENCHMARKS.items() if d == "products"]
    jobs.append(query_job("benchmark", "The five benchmark queries Q1-Q5 (Movies, SQuAD).", movies))
    jobs.append(query_job("products_benchmark", "Q1-Q4 on the Products dataset.", products))
    return jobs
