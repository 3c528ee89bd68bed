"""What an `llm_outputs` materialization records: Dagster metadata and one MLflow run.

Params, metrics and tags are built here from explicit values only (no config dumps), so an
API key in an engine resource can never reach MLflow or the metadata.
"""

from llm_assets.optimizer.cost import PRICING, cost_usd, token_cost_usd
from resources.engine import RunStats


def engine_costs(engine_resource, engine, stats: RunStats) -> dict[str, float]:
    """`cost_usd_<pricing>` per hosted pricing, plus self-hosted GPU rental for the sim."""
    gpu = getattr(engine_resource, "gpu", None)
    deployment = getattr(engine, "deployment", None)
    if gpu is not None and deployment is not None:
        return cost_usd(
            stats.prompt_tokens,
            stats.cached_tokens,
            stats.output_tokens,
            stats.engine_time_s,
            gpu=gpu,
            n_gpus=deployment.num_gpus,
        )
    return {
        f"cost_usd_{name}": token_cost_usd(
            p, stats.prompt_tokens, stats.cached_tokens, stats.output_tokens
        )
        for name, p in PRICING.items()
    }


def log_llm_run(
    context, spec, options, engine_resource, tracker, stats: RunStats, extra: dict
) -> dict:
    """Log one MLflow run for this materialization; return the Dagster metadata."""
    engine = engine_resource.engine
    costs = engine_costs(engine_resource, engine, stats)
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
    if unknown:  # the server did not report cached tokens: unknown, not 0%
        del metrics["token_hit_rate"], metrics["cached_tokens"]
    params = {
        "query": spec.query_name,
        "group": spec.group,
        "dataset": options.dataset_label or spec.dataset,
        "rows": extra.get("rows_in"),
        "method": options.method,
        "dedup": options.dedup,
        "pushdown": options.pushdown,
        "prefix_cache": getattr(engine, "enable_prefix_caching", "n/a"),
        "engine": stats.engine,
        "model": stats.model,
        "hardware": stats.hardware,
    }
    tags = {
        "dagster_run_id": context.run_id,
        "asset_key": context.asset_key.to_user_string(),
        "engine": stats.engine,
        "cached_tokens": "unknown" if unknown else "reported",
        **options.run_tags,
    }
    url = tracker.log_run(
        options.experiment or f"llm-assets-{spec.group}",
        f"{context.asset_key.to_user_string()} {context.run_id[:8]}",
        params,
        metrics,
        tags,
    )
    meta = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in metrics.items()}
    meta |= {
        f"param_{k}": str(v)
        for k, v in params.items()
        if k in ("method", "dedup", "pushdown", "prefix_cache", "engine", "model", "hardware")
    }
    if unknown:
        meta["token_hit_rate"] = meta["cached_tokens"] = "unknown (not reported by the server)"
    if url:
        meta["mlflow_run"] = url
    return meta
