"""Harness of `benchmarks.sharded_plan`: the seeded table in pieces, one run (one process or
K shards on Ray) with its hit rate and memory, the 30M-row run from shard files, and the
projection to larger tables.

The table is `benchmarks.loader.plan_table` (the seeded 6-column table of the 10M-row
`llm-assets plan` figure), made in pieces of `PIECE_ROWS` rows (piece i: seed i), so any size
is built without holding one generator's arrays for all of it; 1M rows is exactly
`plan_table(1_000_000, seed=0)`. The stage planned is the loader query's LLM call (`product`,
`category`, `review`; its `rating` filter is not applied: every row is planned).
"""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.loader import plan_table
from llm_assets.optimizer.passes import Settings, StagePlan, dedup, reorder_inputs, skip_nulls
from llm_assets.optimizer.passes.sharded import merge_parts, plan_shard
from llm_assets.optimizer.prompts import PromptFormat, parse

PIECE_ROWS = 1_000_000
FIELDS = ("product", "category", "review")
TEMPLATE = "Is this review of {product} ({category}) positive? {review}"
RULES = (skip_nulls, dedup, reorder_inputs)
"""The rules that plan (which rows, which share a request, their order): what the shards
run; rendering is left out on both sides (its cost does not depend on sharding)."""


def stage(table: pd.DataFrame) -> StagePlan:
    fmt = PromptFormat(parse(TEMPLATE, list(FIELDS)))
    return StagePlan(table, FIELDS, fmt)


def write_pieces(folder: Path, rows: int) -> list[Path]:
    """The table of `rows` rows as Parquet pieces of the LLM fields (and `row`: the global
    row number) in `folder`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = []
    for i, start in enumerate(range(0, rows, PIECE_ROWS)):
        n = min(PIECE_ROWS, rows - start)
        piece = plan_table(n, seed=i).select(list(FIELDS))
        piece = piece.append_column("row", pa.array(np.arange(start, start + n)))
        paths.append(folder / f"piece{i:04d}.parquet")
        pq.write_table(piece, paths[-1])
    return paths


def read_table(paths: Sequence[Path]) -> pd.DataFrame:
    import pyarrow.parquet as pq

    frames = [pq.read_table(p, columns=list(FIELDS)).to_pandas() for p in paths]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def peak_rss_mb() -> float:
    """This process's lifetime peak RSS (`getrusage`, kB on Linux)."""
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return usage / (1e6 if sys.platform == "darwin" else 1e3)


def measured(fn: Callable, item) -> tuple:
    """`fn(item)` in a Ray task (a fresh worker: `map_on_ray` sets `max_calls=1`), with its
    wall seconds and the worker's peak RSS (MB, `getrusage`: the process ran this one task,
    so its lifetime peak is the task's) and the shard's rows."""
    started = time.perf_counter()
    result = fn(item)
    rows = len(result.positions) if hasattr(result, "positions") else None
    return result, {"rows": rows, "seconds": round(time.perf_counter() - started, 2),
                    "peak_rss_mb": round(peak_rss_mb(), 1)}  # fmt: skip


def measured_map(stats: list) -> Callable:
    """A `map_fn` for `optimize_sharded`: `map_on_ray` with each task `measured`; the tasks'
    figures are appended to `stats`."""
    from resources.ray_executor.planning import map_on_ray

    def run(fn, items):
        out = map_on_ray(partial(measured, fn), items)
        stats.extend(s for _, s in out)
        return [r for r, _ in out]

    return run


# ---- 30M rows and more: shards written as files, planned by tasks that read them ---------


def write_shards(pieces: Sequence[Path], folder: Path, key: str, num_shards: int) -> dict:
    """Each piece's rows cut into `num_shards` shard files (`shard_rows` on `key`, the same
    function the in-memory path uses): shard s is the files `s{s:03d}-*.parquet`. Seconds
    and the peak RSS of this process."""
    import pyarrow.parquet as pq

    from llm_assets.optimizer.shards import shard_positions, shard_rows

    started = time.perf_counter()
    for i, path in enumerate(pieces):
        piece = pq.read_table(path)
        shards = shard_rows(piece, key, num_shards)
        for s, at in enumerate(shard_positions(shards, num_shards)):
            if len(at):
                pq.write_table(piece.take(at), folder / f"s{s:03d}-{i:04d}.parquet")
    return {"seconds": round(time.perf_counter() - started, 1)}


def plan_shard_files(item: tuple[list[str], Settings]):
    """One task: read a shard's files and plan it (`plan_shard`, the in-memory path's own
    function); positions are the rows' global numbers."""
    import pyarrow.parquet as pq

    paths, settings = item
    table = pd.concat([pq.read_table(p).to_pandas() for p in paths], ignore_index=True)
    positions = table.pop("row").to_numpy()
    order = np.argsort(positions, kind="stable")  # ascending, as `ShardPlan` says
    table, positions = table.iloc[order].reset_index(drop=True), positions[order]
    return plan_shard(stage(table), settings, RULES, positions)


def plan_from_files(folder: Path, num_shards: int, rows: int) -> dict:
    """Plan the shard files of `folder` as Ray tasks and merge them (`merge_parts`): the
    driver's wall time and peak, each task's figures, and a check that every row is planned."""
    stats: list = []
    items = []
    for s in range(num_shards):
        paths = sorted(str(p) for p in folder.glob(f"s{s:03d}-*.parquet"))
        if paths:
            items.append((paths, Settings()))
    started = time.perf_counter()
    parts = measured_map(stats)(plan_shard_files, items)
    planned = time.perf_counter()
    _, input_ids, schedule = merge_parts(rows, parts)
    merged = time.perf_counter()
    assert len(np.unique(schedule.rows)) == len(schedule) == int(input_ids.max()) + 1
    return {
        "shards": len(items),
        "plan_seconds": round(planned - started, 1),
        "merge_seconds": round(merged - planned, 1),
        "requests": len(schedule),
        "tasks": stats,
    }


# ---- projection -------------------------------------------------------------------------


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line through the points."""
    slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return float(slope), float(intercept)


def projection(tasks: Sequence[dict], merge_s_per_row: float, shard_s_per_row: float,
               shard_rows: int, cores: int, sizes: Sequence[int],
               machines: Sequence[int]) -> dict:  # fmt: skip
    """Projected wall time and per-worker peak for each table size and machine count, from
    lines fitted to the measured tasks (seconds and peak RSS against shard rows):

        K = ceil(R / shard_rows) shards; per-worker peak = mem(shard_rows);
        wall(R, N) = R / N x shard_s_per_row (each machine cuts its slice into shard files)
                     + ceil(K / (N x cores)) x time(shard_rows) (waves of tasks)
                     + R x merge_s_per_row (the driver merges the shard plans).

    Projected, not measured: the machines are assumed like this one per core, the shard
    files on storage every machine reads, and the driver able to hold the merged plan
    (about 20 bytes per row: rows, input ids, field orders)."""
    t_slope, t_icpt = fit_line([t["rows"] for t in tasks], [t["seconds"] for t in tasks])
    m_slope, m_icpt = fit_line([t["rows"] for t in tasks], [t["peak_rss_mb"] for t in tasks])
    task_s = t_slope * shard_rows + t_icpt
    rows_out = []
    for total in sizes:
        k = -(-total // shard_rows)
        for n in machines:
            waves = -(-k // (n * cores))
            wall = total / n * shard_s_per_row + waves * task_s + total * merge_s_per_row
            rows_out.append({"rows": total, "machines": n, "shards": k, "waves": waves,
                             "wall_s": round(wall), "worker_peak_mb": round(
                                 m_slope * shard_rows + m_icpt),
                             "driver_plan_gb": round(total * 20 / 1e9, 1)})  # fmt: skip
    return {
        "time_per_task_s": {
            "per_million_rows": round(t_slope * 1e6, 2),
            "fixed": round(t_icpt, 2),
        },  # fmt: skip
        "peak_per_task_mb": {
            "per_million_rows": round(m_slope * 1e6, 1),
            "fixed": round(m_icpt, 1),
        },  # fmt: skip
        "shard_rows": shard_rows,
        "cores_per_machine": cores,
        "merge_s_per_row": merge_s_per_row,
        "shard_s_per_row": shard_s_per_row,
        "rows": rows_out,
    }
