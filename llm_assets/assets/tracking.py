"""What an `llm_outputs` materialization records: Dagster metadata and one MLflow run.

Params, metrics and tags are built here from explicit values only (no config dumps), so an
API key in an engine resource can never reach MLflow or the metadata.

Two times, never confused: `engine_time_s` is the engine's makespan (SIMULATED seconds on the
sim engine: what the GPU would take; measured on the others) and decides the self-hosted cost;
`wall_time_s` is how long this step took on this machine (for the sim, the time to simulate).
"""

from __future__ import annotations

import re

from llm_assets.assets.definition import partitions_label
from llm_assets.pipeline.pricing import engine_costs
from llm_assets.pipeline.quality import SIM_NOTE
from resources.engine import RunStats


def table_columns(metrics) -> list[str]:
    """The metrics MLflow's runs table shows: hit rate, engine time, each cost (self-hosted
    first), requests, parse rate and accuracy; those a run lacks (an unknown hit rate, no
    label) left out."""
    costs = [k for k in metrics if k.startswith("cost_usd_")]
    costs.sort(key=lambda k: "self_hosted" not in k)
    shown = ("token_hit_rate", "engine_time_s", *costs, "n_requests", "parse_rate", "accuracy")
    return [k for k in shown if k in metrics]


def short_data_label(data: str) -> str:
    """`data` for a run name: each path cut to its file name, one table's name dropped.

    >>> short_data_label("reviews=/home/me/data/reviews.tsv")
    'reviews.tsv'
    >>> short_data_label("a=duckdb:/srv/w.duckdb:items, b=asset:shop/orders")
    'a=duckdb:w.duckdb:items, b=asset:shop/orders'
    """
    parts = []
    for part in data.split(", "):
        table, sep, label = part.partition("=") if "=" in part else ("", "", part)
        if not label.startswith("asset:"):  # an asset key's "/" is no directory
            label = re.sub(r"[^\s+:=,]*/", "", label)
        parts.append((table, sep, label))
    if len(parts) == 1:
        return parts[0][2]
    return ", ".join("".join(p) for p in parts)


def run_name(options, call_asset: str, data: str) -> str:
    """`ggr dedup pushdown · q1/llm_outputs · reviews.tsv`: the switches first (they tell two
    runs of one stage apart, even where the UI cuts the name), then the stage and the data,
    file names only (no absolute path)."""
    switches = [options.method]
    switches += ["dedup"] if options.dedup else ["no-dedup"]
    switches += ["pushdown"] if options.pushdown else ["no-pushdown"]
    return f"{' '.join(switches)} · {call_asset} · {short_data_label(data)}"


def log_llm_run(context, qdef, options, engine_resource, stats: RunStats, extra, data) -> dict:
    """Log one MLflow run for this materialization; return the Dagster metadata."""
    run_options = context.resources.options
    tracker = context.resources.tracker
    engine = engine_resource.engine
    data = run_options.data_label or data
    costs = engine_costs(engine, stats)
    prefix_cache = engine.enable_prefix_caching
    unknown = stats.cached_tokens_unknown > 0
    if unknown:  # no cached count: full-price hosted costs are only an upper bound
        costs = {f"{k}_upper_bound": v for k, v in costs.items()}
    metrics = {
        "engine_time_s": stats.engine_time_s,
        "token_hit_rate": stats.token_hit_rate,
        "prompt_tokens": stats.prompt_tokens,
        "cached_tokens": stats.cached_tokens,
        "output_tokens": stats.output_tokens,
        "n_requests": stats.n_requests,
        **extra,
        **costs,
    }
    asset = context.asset_key.to_user_string()
    if unknown:  # the server did not report cached tokens: unknown, not 0%
        del metrics["token_hit_rate"], metrics["cached_tokens"]
    params = {
        "query": qdef.name,
        "data": data,
        "method": options.method,
        "dedup": options.dedup,
        "pushdown": options.pushdown,
        "prefix_cache": "n/a" if prefix_cache is None else prefix_cache,
        "engine": stats.engine,
        "model": stats.model,
        "hardware": stats.hardware,
    }
    tags = {
        "dagster_run_id": context.run.run_id,
        "asset_key": asset,
        "engine": stats.engine,
        "cached_tokens": "unknown" if unknown else "reported",
        # the sim's answers are placeholders: its parse rate and accuracy are no model's
        **({"quality_note": SIM_NOTE} if stats.engine == "sim" else {}),
        **(
            {"partition": partitions_label(context.partition_keys)}
            if context.has_partition_key or context.has_partition_key_range
            else {}
        ),
        **run_options.run_tags,
    }
    links = tracker.log_run(
        run_options.experiment or f"llm-assets-{qdef.name}",
        run_name(options, asset, data),
        params,
        metrics,
        tags,
        columns=table_columns(metrics),
    )
    meta = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in metrics.items()}
    meta |= {f"param_{k}": str(v) for k, v in params.items() if k != "query"}
    if unknown:
        meta["token_hit_rate"] = meta["cached_tokens"] = "unknown (not reported by the server)"
    if links:
        meta["mlflow_run"] = links.run
        meta["mlflow_runs_table"] = links.table
    return meta
