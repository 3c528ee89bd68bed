"""The optimization ladder of llm_queries_relational.txt section 7: each query lineage run once
per rung, each rung adding one optimization, on the simulated engine. Every rung is a real
`execute_in_process` of the query's job (fresh engine, so a fresh prefix cache) and logs an
MLflow run in `EXPERIMENT` tagged with the rung.

Invariants checked by `check_ladder`: dedup never adds requests; pushdown never adds rows sent
to the LLM; every rung answers the same rows (the optimizations change cost, not results).
"""

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from jobs.definitions import build_defs
from jobs.defs.benchmark_queries import BENCHMARKS
from jobs.resources import resources_for

EXPERIMENT = "llm-query-benchmarks"
RUNGS: dict[str, dict] = {
    "no_cache": {"method": "original", "dedup": False, "pushdown": False, "cache": False},
    "cache_fifo": {"method": "original", "dedup": False, "pushdown": False, "cache": True},
    "cache_psm": {"method": "column_stats", "dedup": False, "pushdown": False, "cache": True},
    "cache_ggr": {"method": "ggr", "dedup": False, "pushdown": False, "cache": True},
    "cache_ggr_dedup": {"method": "ggr", "dedup": True, "pushdown": False, "cache": True},
    "cache_ggr_dedup_pushdown": {"method": "ggr", "dedup": True, "pushdown": True, "cache": True},
}


def run_rung(
    group: str,
    rung: str,
    size: int | None = None,
    paths: Sequence[str] = (),
    gpu: str = "L4",
    model: str = "llama-2-7b",
    defs=None,
) -> dict:
    """One rung of one benchmark query (by group): totals over its LLM stages."""
    query, dataset = BENCHMARKS[group]
    switches = RUNGS[rung]
    label = Path(paths[0]).stem if paths else dataset
    defs = defs or build_defs(resources_for("sim"))
    job = defs.resolve_job_def(f"{group}_job")
    source = {"paths": list(paths)} if paths else {"size": size} if size else {}
    config = {
        "ops": {f"{dataset}_source": {"config": source}},
        "resources": {
            "options": {
                "config": {
                    "method": switches["method"],
                    "dedup": switches["dedup"],
                    "pushdown": switches["pushdown"],
                    "data_label": label,
                    "experiment": EXPERIMENT,
                    "run_tags": {"rung": rung, "benchmark": "queries"},
                }
            },
            "llm_engine": {
                "config": {"gpu": gpu, "model": model, "enable_prefix_caching": switches["cache"]}
            },
            "response_cache": {"config": {"enabled": False}},  # every rung pays in full
        },
    }
    started = time.perf_counter()
    result = job.execute_in_process(run_config=config, raise_on_error=False)
    wall = time.perf_counter() - started
    if not result.success:
        raise RuntimeError(f"{group} {rung}: the job failed (run {result.run_id})")
    stages, accounting = [], {}
    for event in result.get_asset_materialization_events():
        m = event.materialization
        meta = {k: v.value for k, v in m.metadata.items()}
        if m.asset_key.path[-1].startswith("llm_outputs"):
            stages.append(meta)
        if m.asset_key.path[-1] == "result":
            accounting = meta
    prompt = sum(s["prompt_tokens"] for s in stages)
    cached = sum(s["cached_tokens"] for s in stages)
    row = {
        "query": query,
        "dataset": label,
        "group": group,
        "rung": rung,
        "rows_in": accounting.get("rows_in", 0),
        "rows_to_llm": sum(s["rows_to_llm"] for s in stages),
        "n_requests": sum(s["n_requests"] for s in stages),
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "token_hit_rate": cached / prompt if prompt else 0.0,
        "engine_time_s": sum(s["engine_time_s"] for s in stages),
        "answered": accounting.get("answered", 0),
        "rows_passed": accounting.get("rows_passed", 0),
        "wall_s": round(wall, 2),
    }
    for key in stages[0] if stages else ():
        if key.startswith("cost_usd_"):
            row[key] = sum(s[key] for s in stages)
    return row


def run_ladder(
    groups: Sequence[str],
    size: int | None = None,
    paths: dict[str, list[str]] | None = None,
    gpu: str = "L4",
    model: str = "llama-2-7b",
    rungs: Sequence[str] = tuple(RUNGS),
    progress: Callable[[str], None] = lambda _: None,
) -> list[dict]:
    """Every rung of every query group; adds `speedup_vs_no_cache` (no_cache engine time /
    the rung's)."""
    defs = build_defs(resources_for("sim"))
    rows = []
    for group in groups:
        group_paths = (paths or {}).get(BENCHMARKS[group][1], [])
        base = None
        for rung in rungs:
            row = run_rung(group, rung, size, group_paths, gpu, model, defs)
            base = row["engine_time_s"] if rung == "no_cache" else base
            row["speedup_vs_no_cache"] = base / row["engine_time_s"] if base else None
            progress(
                f"{row['group']:<12} {row['dataset']:<18} {rung:<25} "
                f"requests {row['n_requests']:>6}  hit {row['token_hit_rate']:6.1%}  "
                f"engine {row['engine_time_s']:9.1f} s  wall {row['wall_s']:5.1f} s"
            )
            rows.append(row)
    return rows


def check_ladder(rows: Sequence[dict]) -> list[str]:
    """Violations of the ladder's invariants (empty when it is sound)."""
    problems = []
    by = {(r["group"], r["dataset"], r["rung"]): r for r in rows}
    for (group, dataset, rung), row in by.items():
        where = f"{group}/{dataset}"
        ggr = by.get((group, dataset, "cache_ggr"))
        dedup = by.get((group, dataset, "cache_ggr_dedup"))
        base = by.get((group, dataset, "no_cache"))
        if rung == "cache_ggr_dedup" and ggr and row["n_requests"] > ggr["n_requests"]:
            problems.append(f"{where}: dedup added requests")
        if rung == "cache_ggr_dedup_pushdown" and dedup:
            if row["rows_to_llm"] > dedup["rows_to_llm"]:
                problems.append(f"{where}: pushdown added rows sent to the LLM")
        if base and row["rows_passed"] != base["rows_passed"]:
            problems.append(
                f"{where}/{rung}: {row['rows_passed']} rows passed, no_cache had "
                f"{base['rows_passed']}"
            )
    return problems


def groups_for(queries: Sequence[str], datasets: Sequence[str]) -> list[str]:
    """The benchmark query groups of the given queries on the given datasets (in order)."""
    out = [g for g, (q, d) in BENCHMARKS.items() if q in queries and d in datasets]
    if not out:
        raise ValueError(f"no lineage for queries {list(queries)} on datasets {list(datasets)}")
    return out
