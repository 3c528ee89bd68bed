"""Jobs: one per query lineage (`q1_job`, ..., `q4_products_job`), plus `benchmark_job` (the
five benchmark queries Q1-Q5) and `products_benchmark_job` (Q1-Q4 on Products). Each job
selects its groups and the source tables upstream, and runs in one process (the steps share
one engine, so its prefix cache spans the run, as a vLLM server's would)."""

import dagster as dg

from llm_assets.assets import QUERY_SPECS


def _job(name: str, groups: list[str], description: str):
    return dg.define_asset_job(
        name=name,
        selection=dg.AssetSelection.groups(*groups).upstream(),
        executor_def=dg.in_process_executor,
        description=description,
    )


QUERY_JOBS = {
    spec.group: _job(
        f"{spec.group}_job",
        [spec.group],
        f"{spec.query_name.upper()} on {spec.dataset}: every stage of the lineage.",
    )
    for spec in QUERY_SPECS
}
benchmark_job = _job(
    "benchmark_job",
    [s.group for s in QUERY_SPECS if s.dataset != "products"],
    "The five benchmark queries Q1-Q5 (Movies, SQuAD).",
)
products_benchmark_job = _job(
    "products_benchmark_job",
    [s.group for s in QUERY_SPECS if s.dataset == "products"],
    "Q1-Q4 on the Products dataset.",
)
ALL_JOBS = [*QUERY_JOBS.values(), benchmark_job, products_benchmark_job]
