"""`GET /metrics`: Prometheus text exposition (format 0.0.4) with vLLM's own metric names.

What was checked, and where: vLLM's `PrometheusStatLogger` in `vllm/v1/metrics/loggers.py`
(vllm-project/vllm, commit 005a810bc40f, the V1 engine with `engine_indexes`) declares each
metric below with `prometheus_client`, label names `["model_name", "engine"]` (values: the
served model name and the engine index, "0" for a single engine); `prometheus_client` writes
a Counter `vllm:x` as the sample `vllm:x_total` under `# TYPE vllm:x_total counter`. Meanings,
from the same file and `vllm/v1/core/kv_cache_manager.py` / `vllm/v1/metrics/stats.py`:

- `vllm:prefix_cache_queries` / `vllm:prefix_cache_hits` (Counters, TOKENS): at a new
  request's first scheduling, `PrefixCacheStats.record` adds `request.num_tokens` (its prompt)
  to queries and the tokens found in the local prefix cache to hits; a preempted request's
  second lookup goes to separate `preempted_*` fields, and no lookup (so nothing counted)
  happens when prefix caching is off. The hit is the request's `num_cached_tokens`, what
  `usage.prompt_tokens_details.cached_tokens` reports.
- `vllm:prompt_tokens` / `vllm:generation_tokens` (Counters): a request's whole prompt (cached
  tokens included) once it starts generating, and every generated token.
- `vllm:num_requests_running` / `vllm:num_requests_waiting` (Gauges): requests in the batch
  being executed / queued for it.
- `vllm:kv_cache_usage_perc` (Gauge): `BlockPool.get_usage()`, a FRACTION in [0, 1] despite the
  name ("1 means 100 percent usage"): 1 - free blocks / usable blocks, cached blocks no
  running request holds counting as free.

Here (invariants, exact, never sampled): over every completion call answered 200,
`prefix_cache_hits_total` = the sum of `usage.prompt_tokens_details.cached_tokens` returned
(counted also when `--disable-prompt-tokens-details` hides it), `prompt_tokens_total` = the sum
of `usage.prompt_tokens`, `generation_tokens_total` = the sum of `usage.completion_tokens`, and
`prefix_cache_queries_total` = `prompt_tokens_total` when the engine caches prefixes, 0 when it
does not (as vLLM: no lookup, no query). Calls that fail or draw an injected fault count
nothing. The running / waiting gauges are the batcher's (`BatcherLoad`), in requests, not
HTTP calls; KV use is read after each batch, so it is 0.0 between batches of the simulated
engine (it frees every block of a finished batch), as an idle vLLM reports.

Two counters are the simulator's own, under `llm_assets_sim:` (no vLLM server has them):
`llm_assets_sim:engine_time_seconds_total`, the simulated engine seconds (`RunStats.
engine_time_s`) summed over every batch run; batches run one at a time, so this is the
replica's busy time on the simulated clock (its makespan when it never idled), and
`llm_assets_sim:requests_total`, the engine requests (one per prompt) counted above.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Literal

from resources.engine import Response
from resources.sim.server.batcher import BatcherLoad

__all__ = ["CONTENT_TYPE", "METRICS", "ServedTotals", "render"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""Prometheus text exposition 0.0.4 (what `prometheus_client` serves)."""

MetricType = Literal["counter", "gauge"]

METRICS: dict[str, tuple[MetricType, str]] = {
    "vllm:num_requests_running": ("gauge", "Number of requests in model execution batches."),
    "vllm:num_requests_waiting": ("gauge", "Number of requests waiting to be processed."),
    "vllm:kv_cache_usage_perc": ("gauge", "KV-cache usage. 1 means 100 percent usage."),
    "vllm:prefix_cache_queries_total": (
        "counter",
        "Prefix cache queries, in terms of number of queried tokens.",
    ),
    "vllm:prefix_cache_hits_total": (
        "counter",
        "Prefix cache hits, in terms of number of cached tokens.",
    ),
    "vllm:prompt_tokens_total": ("counter", "Number of prefill tokens processed."),
    "vllm:generation_tokens_total": ("counter", "Number of generation tokens processed."),
    "llm_assets_sim:engine_time_seconds_total": (
        "counter",
        "Simulated engine seconds summed over every batch run (not a vLLM metric).",
    ),
    "llm_assets_sim:requests_total": (
        "counter",
        "Engine requests (one per prompt) answered with usage (not a vLLM metric).",
    ),
}
"""Exposed sample name -> (Prometheus type, HELP text); vLLM's HELP texts are vLLM's own."""


class ServedTotals:
    """Token totals of the replies sent, added by many handler threads (one lock)."""

    def __init__(self, prefix_caching: bool) -> None:
        self.prefix_caching = prefix_caching
        """Whether queries are counted (vLLM looks nothing up without prefix caching)."""
        self._lock = threading.Lock()
        self._counts = {"requests": 0, "prompt": 0, "cached": 0, "generation": 0}

    def add(self, responses: Sequence[Response], completion_tokens: int) -> None:
        """Count one call's answered responses and the completion tokens its usage reports."""
        with self._lock:
            self._counts["requests"] += len(responses)
            self._counts["prompt"] += sum(r.prompt_tokens for r in responses)
            self._counts["cached"] += sum(r.cached_tokens for r in responses)
            self._counts["generation"] += completion_tokens

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


def _label_value(value: str) -> str:
    """Escaped as the text format requires (backslash, double quote, line feed)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(model_name: str, totals: ServedTotals, load: BatcherLoad) -> str:
    """The `/metrics` body: HELP, TYPE and one sample per metric, labelled as vLLM labels."""
    counts = totals.snapshot()
    values = {
        "vllm:num_requests_running": load.running,
        "vllm:num_requests_waiting": load.waiting,
        "vllm:kv_cache_usage_perc": load.kv_cache_usage,
        "vllm:prefix_cache_queries_total": counts["prompt"] if totals.prefix_caching else 0,
        "vllm:prefix_cache_hits_total": counts["cached"],
        "vllm:prompt_tokens_total": counts["prompt"],
        "vllm:generation_tokens_total": counts["generation"],
        "llm_assets_sim:engine_time_seconds_total": load.engine_time_s,
        "llm_assets_sim:requests_total": counts["requests"],
    }
    labels = f'{{model_name="{_label_value(model_name)}",engine="0"}}'
    lines = []
    for name, (kind, help_text) in METRICS.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        lines.append(f"{name}{labels} {float(values[name])!r}")
    return "\n".join(lines) + "\n"
