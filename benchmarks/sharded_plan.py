"""Sharded planning (issue 38 item 3): the hit-rate cost of planning a stage in K shards
against one process, and the time and memory per worker at 30M rows.

    python -m benchmarks.sharded_plan [--sizes 1000000,10000000] [--shards 2,4,8]
        [--big-rows 30000000] [--big-shards 8] [--json benchmarks/results/sharded_plan.json]

Table: `benchmarks.lib.sharded_bench` (the loader's seeded 6-column table in 1M-row pieces;
the loader query's LLM fields). Each run is a fresh child process:
- one process: `optimize(plan, Settings(), (skip_nulls, dedup, reorder_inputs))`;
- K shards: `optimize_sharded(plan, Settings(), K, rules=those, map_fn=Ray tasks)` on a
  local Ray cluster of 2 CPUs (`resources.ray_executor.planning.map_on_ray`; each task a
  fresh worker, its wall time and `getrusage` peak recorded).
Per run: `char_hit_rate` of the plan (the reorder benchmarks' measure: each distinct input's
cells in its field order, rows in schedule order, into a character trie), requests, wall
seconds, the driver's peak RSS and each task's. At `--big-rows` only sharded planning runs,
from shard files (`sharded_bench.write_shards`, `plan_from_files`): the driver never holds
the table; no hit rate there (that needs every input coded in one process). Then the
projection to 100M-1B rows on N machines (`sharded_bench.projection`: its formula and
inputs are in the JSON). Writes JSON and markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.lib.provenance import write_result

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_JSON = ROOT / "benchmarks" / "results" / "sharded_plan.json"
PROJECT_ROWS = (100_000_000, 300_000_000, 1_000_000_000)
PROJECT_MACHINES = (1, 4, 16, 64)
CORES = 2
MAX_SHARD_ROWS_IN_MEMORY = 1_500_000
"""In-memory runs with larger shards are skipped: the driver holds the table and two tasks
run at once, which at 10M rows and K < 8 would pass the 14 GiB this benchmark may use."""


def child(spec: dict) -> dict:
    """One measured run (in a fresh process): spec has `pieces`, `shards` (1: one process),
    or `big` (files path)."""
    from benchmarks.lib import sharded_bench as sb

    if spec.get("big"):
        from llm_assets.optimizer.shards import shard_key

        pieces = [Path(p) for p in spec["pieces"]]
        folder = Path(spec["big"])
        key = shard_key(sb.read_table(pieces[:1]), list(sb.FIELDS))
        cut = sb.write_shards(pieces, folder, key, spec["shards"])
        out = sb.plan_from_files(folder, spec["shards"], spec["rows"])
        return {**out, "key": key, "cut_seconds": cut["seconds"],
                "driver_peak_rss_mb": round(sb.peak_rss_mb(), 1)}  # fmt: skip
    from llm_assets.optimizer.metrics import char_hit_rate
    from llm_assets.optimizer.passes import Settings, optimize
    from llm_assets.optimizer.passes.sharded import optimize_sharded
    from llm_assets.optimizer.shards import shard_key

    table = sb.read_table([Path(p) for p in spec["pieces"]])
    loaded_mb = sb.peak_rss_mb()
    plan, stats = sb.stage(table), []
    started = time.perf_counter()
    if spec["shards"] == 1:
        planned, key = optimize(plan, Settings(), sb.RULES), None
    else:
        key = shard_key(table, list(sb.FIELDS))
        planned = optimize_sharded(plan, Settings(), spec["shards"], sb.RULES,
                                   sb.measured_map(stats), key=key)  # fmt: skip
    seconds = time.perf_counter() - started
    return {
        "rows": len(table),
        "shards": spec["shards"],
        "key": key,
        "requests": len(planned.schedule),
        "plan_seconds": round(seconds, 1),
        "char_hit_rate": round(char_hit_rate(planned.enc, planned.schedule), 5),
        "driver_peak_rss_mb": round(sb.peak_rss_mb(), 1),
        "driver_rss_after_load_mb": round(loaded_mb, 1),
        "tasks": stats,
    }


def run_child(spec: dict) -> dict:
    command = [sys.executable, "-m", "benchmarks.sharded_plan", "--child", json.dumps(spec)]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"run {spec} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps({k: v for k, v in result.items() if k != "tasks"}), flush=True)
    return result


def markdown(doc: dict) -> str:
    lines = ["# Sharded planning (issue 38 item 3)", "", doc["summary"], "",
             *(f"Not run: {s}." for s in doc["skipped"]), "",
             "## Hit rate: K shards against one process (measured)", "",
             "| rows | K | key | requests | char hit rate | vs one process | plan wall s | "
             "driver peak MB | worker peak MB (max) | worker s (max) |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for run in doc["runs"]:
        base = next(r for r in doc["runs"] if r["rows"] == run["rows"] and r["shards"] == 1)
        tasks = run["tasks"]
        lines.append(
            f"| {run['rows']:,} | {run['shards']} | {run['key'] or ''} | {run['requests']:,} "
            f"| {run['char_hit_rate']:.4f} | {run['char_hit_rate'] - base['char_hit_rate']:+.4f} "
            f"| {run['plan_seconds']} | {run['driver_peak_rss_mb']:,.0f} "
            f"| {max((t['peak_rss_mb'] for t in tasks), default=0):,.0f} "
            f"| {max((t['seconds'] for t in tasks), default=0)} |"
        )
    big = doc.get("big")
    if big:
        tasks = big["tasks"]
        lines += ["", f"## {big['rows']:,} rows, K = {big['shards']} (measured)", "",
                  big["note"], "",
                  f"Cut into shard files: {big['cut_seconds']} s; planning the shards "
                  f"(Ray tasks, 2 at a time): {big['plan_seconds']} s; merge: "
                  f"{big['merge_seconds']} s; requests {big['requests']:,}; driver peak "
                  f"{big['driver_peak_rss_mb']:,.0f} MB.", "",
                  "| shard | rows | s | peak RSS MB |", "|---|---|---|---|"]  # fmt: skip
        lines += [f"| {i} | {t['rows']:,} | {t['seconds']} | {t['peak_rss_mb']:,.0f} |"
                  for i, t in enumerate(tasks)]  # fmt: skip
    proj = doc.get("projection")
    if proj:
        lines += ["", "## Projection to 100M-1B rows on N machines (PROJECTED)", "",
                  proj["formula"], "",
                  f"Measured inputs: time per task = {proj['time_per_task_s']['per_million_rows']}"
                  f" s per million rows + {proj['time_per_task_s']['fixed']} s; peak per task = "
                  f"{proj['peak_per_task_mb']['per_million_rows']} MB per million rows + "
                  f"{proj['peak_per_task_mb']['fixed']} MB (lines through every measured task); "
                  f"cut {proj['shard_s_per_row'] * 1e6:.2f} s and merge "
                  f"{proj['merge_s_per_row'] * 1e6:.2f} s per million rows; "
                  f"{proj['cores_per_machine']} cores per machine.", "",
                  "| rows | machines | shards | waves | wall s | worker peak MB | "
                  "driver merged plan GB |", "|---|---|---|---|---|---|---|"]  # fmt: skip
        lines += [f"| {r['rows']:,} | {r['machines']} | {r['shards']} | {r['waves']} | "
                  f"{r['wall_s']:,} | {r['worker_peak_mb']:,} | {r['driver_plan_gb']} |"
                  for r in proj["rows"]]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--shards", default="2,4,8")
    parser.add_argument("--big-rows", type=int, default=30_000_000)
    parser.add_argument("--big-shards", type=int, default=8)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--child")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    from benchmarks.lib import sharded_bench as sb

    sizes = [int(s) for s in args.sizes.split(",") if s]
    ks = [int(k) for k in args.shards.split(",") if k]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sharded-plan-") as tmp:
        pieces = sb.write_pieces(Path(tmp), max([*sizes, args.big_rows]))
        generated_s = round(time.perf_counter() - started, 1)
        runs, skipped = [], []
        for rows in sizes:
            used = [str(p) for p in pieces[: -(-rows // sb.PIECE_ROWS)]]
            for k in [1, *ks]:
                if k > 1 and rows / k > MAX_SHARD_ROWS_IN_MEMORY:
                    skipped.append(f"{rows:,} rows, K = {k}: shards over "
                                   f"{MAX_SHARD_ROWS_IN_MEMORY:,} rows (memory cap)")  # fmt: skip
                    continue
                runs.append(run_child({"pieces": used, "shards": k}))
        big = None
        if args.big_rows:
            folder = Path(tmp) / "shards"
            folder.mkdir()
            used = [str(p) for p in pieces[: -(-args.big_rows // sb.PIECE_ROWS)]]
            big = run_child({"pieces": used, "shards": args.big_shards, "big": str(folder),
                             "rows": args.big_rows})  # fmt: skip
            big["rows"] = args.big_rows
            top = max(r["driver_peak_rss_mb"] for r in runs if r["shards"] == 1)
            big["note"] = (
                f"Only sharded: the one-process plan peaked at {top:,.0f} MB at "
                f"{max(sizes):,} rows (table included), so {args.big_rows:,} rows would need "
                f"about {top * args.big_rows / max(sizes) / 1e3:,.0f} GB, over the 14 GiB this "
                "benchmark may use on this shared machine; the driver here holds no table."
            )
    tasks = [t for r in runs for t in r["tasks"]] + (big["tasks"] if big else [])
    proj = None
    if big:
        proj = sb.projection(
            tasks,
            big["merge_seconds"] / big["rows"],
            big["cut_seconds"] / big["rows"],
            max(t["rows"] for t in big["tasks"]),
            CORES,
            PROJECT_ROWS,
            PROJECT_MACHINES,
        )
        proj["formula"] = sb.projection.__doc__.split("\n\n", 1)[1].strip()
    worst = {}
    for r in runs:
        base = next(b for b in runs if b["rows"] == r["rows"] and b["shards"] == 1)
        worst[r["rows"]] = min(
            worst.get(r["rows"], 0.0), r["char_hit_rate"] - base["char_hit_rate"]
        )
    summary = (
        "Largest hit-rate change of sharding against one process: "
        + ", ".join(f"{rows:,} rows {d:+.4f}" for rows, d in worst.items())
        + "."
    )
    doc = {"summary": summary, "skipped": skipped, "generated_s": generated_s, "runs": runs,
           "big": big, "projection": proj, "wall_s": round(time.perf_counter() - started, 1),
           "load_average": os.getloadavg()}  # fmt: skip
    write_result(args.json, doc)
    args.json.with_suffix(".md").write_text(markdown(doc), encoding="utf-8")
    print(summary)


if __name__ == "__main__":
    main()
