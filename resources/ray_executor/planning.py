"""Planning in parallel Ray tasks: `map_on_ray(fn, items)` is `map(fn, items)` with each call a
Ray task, which `llm_assets.optimizer.passes.sharded.optimize_sharded` takes as its `map_fn`
to plan a stage's shards in parallel (`QueryOptions.num_plan_shards`, `llm-assets plan
--shards K`).

Invariants: the results come back in the order of `items`, one per item (a task that fails
raises here, after Ray's own retries of a dead worker: no shard is dropped); each task runs
in a fresh worker process (`max_calls=1`), so a worker's memory is one shard's, released
when the task ends; Ray is imported only when `map_on_ray` is called, and the cluster is
`ray_cluster`'s (a local one unless `address` names one or this process already joined one).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from resources.ray_executor.executor import LOCAL_CPUS, import_ray, ray_cluster

ADDRESS_ENV = "LLM_ASSETS_RAY_ADDRESS"
"""The cluster to plan on (as the Ray engine reads it); unset: a local one for the call."""

__all__ = ["ADDRESS_ENV", "map_on_ray"]


def map_on_ray(
    fn: Callable,
    items: Iterable,
    *,
    address: str | None = None,
    num_cpus: int = LOCAL_CPUS,
    memory_bytes: int | None = None,
) -> list:
    """`[fn(item) for item in items]`, each call a Ray task (one CPU; `memory_bytes`, when
    given, reserved per task so Ray runs no more tasks at once than fit) on the cluster at
    `address` (default `$LLM_ASSETS_RAY_ADDRESS`, else a local one of `num_cpus` CPUs)."""
    ray = import_ray()
    items = list(items)
    if not items:
        return []
    address = address or os.environ.get(ADDRESS_ENV) or None
    with ray_cluster(address, num_cpus=num_cpus):
        options = {"num_cpus": 1, "max_calls": 1}
        if memory_bytes:
            options["memory"] = int(memory_bytes)
        task = ray.remote(**options)(_call)
        return ray.get([task.remote(fn, item) for item in items])


def _call(fn: Callable, item):
    """One task: `fn(item)` (`fn` may be any picklable callable, a `partial` included)."""
    return fn(item)
