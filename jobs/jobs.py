"""Jobs over the loaded query lineages: `<query>_job` for every query group (its assets and
everything upstream), `benchmark_job` (Q1-Q5) and `products_benchmark_job` (Q1-Q4 on
Products). Each job runs in one process, so its steps share one engine and its prefix cache
spans the run, as a vLLM server's would."""

from collections.abc import Iterable

import dagster as dg

from jobs.defs.benchmark_queries import BENCHMARKS
from llm_assets.sql.syntax import case_twin

DATASETS_GROUP = "datasets"
BENCHMARK_JOBS = ("benchmark", "products_benchmark")
"""The jobs over several query groups, `<name>_job`."""
RESERVED_QUERY_NAMES = {
    DATASETS_GROUP: "the asset group of the benchmark datasets (a query there gets no job)",
    **{name: f"{name}_job is the job of the benchmark queries" for name in BENCHMARK_JOBS},
}
"""Query names this code location uses for something else, and what."""


def check_query_names(names: Iterable[str]) -> None:
    """ValueError, one line, for a query named like something of this code location
    (`RESERVED_QUERY_NAMES`), or for two queries whose names differ only in case (the
    warehouse, DuckDB, would store both lineages in one schema)."""
    names = sorted(names)
    for name in names:
        if name in RESERVED_QUERY_NAMES:
            raise ValueError(
                f"query name {name!r} is reserved in this code location: "
                f"{RESERVED_QUERY_NAMES[name]}; choose another name"
            )
    twins = case_twin(names)
    if twins is not None:
        raise ValueError(
            f"query names {twins[0]!r} and {twins[1]!r} differ only in case: the warehouse "
            "(DuckDB, case-insensitive) would store both queries' tables in one schema; "
            "rename one"
        )


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
    benchmark, products_benchmark = BENCHMARK_JOBS
    jobs.append(query_job(benchmark, "The five benchmark queries Q1-Q5 (Movies, SQuAD).", movies))
    jobs.append(query_job(products_benchmark, "Q1-Q4 on the Products dataset.", products))
    return jobs
