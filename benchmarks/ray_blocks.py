"""Ray Data's default blocks against blocks cut at prefix groups and the project's own fleet
routing, over the same planned table and the same N sim servers (issue 38 item 2).

    python -m benchmarks.ray_blocks [--rows 600] [--replicas 2,4] [--concurrency 16]
        [--block-rows N] [--kill-replicas 2] [--kill-at 0.4] [--quick] [--out DIR]

The movies table (Q1 over `../shared/data/movies_small.csv`, `benchmarks.lib.fleet_tables.
plan_table`: the product's planner, dedup + GGR) is planned once; then, for each N, fresh
servers per run (cold caches): `affinity` (the fleet client, `OpenAIEngine` with N URLs),
`ray_default_auto` (Ray Data cuts the plan into as many row-count blocks as it chooses itself,
`from_items(rows)`), `ray_default` (row-count blocks, `from_items(..., override_num_blocks=k)`),
`ray_groups` (blocks cut at prefix groups) and `ray_groups_block_commit` (the same, an actor
committing to the run's ledger once per block instead of every 2 x concurrency requests), all
with one replica actor per server; the last three with the same block size (4 blocks per
replica unless `--block-rows`). One server
(`N=1`) is the hit-rate reference. Then the kill case (`benchmarks.lib.ray_bench.run_kill`).
Writes `ray_blocks.json` / `.md` under `--out` (default `benchmarks/results`; `--quick`: a
temporary folder). Exit status 1 when a run lost or failed a request.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.lib.fleet_bench import ForkServer, run_strategy
from benchmarks.lib.fleet_tables import plan_table
from benchmarks.lib.provenance import write_result
from benchmarks.lib.ray_bench import FLAGS, run_kill, run_ray
from resources.ray_executor.blocks import default_rows

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
HIT_SHARE = 0.97
"""Target: `ray_groups`' cluster hit rate >= this share of one server's."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ray_blocks",
                                description=__doc__.split("\n")[0])  # fmt: skip
    p.add_argument("--rows", type=int, default=600, help="reviews sampled from the table")
    p.add_argument("--replicas", default="2,4", help="comma-separated fleet sizes")
    p.add_argument("--concurrency", type=int, default=16, help="requests in flight per replica")
    p.add_argument("--block-rows", type=int, default=None, help="rows per Ray block")
    p.add_argument("--kill-replicas", type=int, default=2, help="fleet size of the kill case")
    p.add_argument("--kill-at", type=float, default=0.4, help="kill after this share committed")
    p.add_argument("--quick", action="store_true", help="a smoke run (120 rows, N=2)")
    p.add_argument("--out", type=Path, default=None, help="folder of ray_blocks.json/.md")
    return p


def measure(args: argparse.Namespace, work: Path) -> dict:
    from resources.ray_executor.executor import ray_cluster

    table = plan_table("movies", args.rows)
    requests = table.requests
    ns = [int(n) for n in args.replicas.split(",") if n.strip()]
    rows: list[dict] = []
    with ForkServer() as forks, ray_cluster():
        one = run_strategy(requests, 1, "affinity", log_dir=work / "one", forks=forks,
                           concurrency=args.concurrency)  # fmt: skip
        rows.append({**one.row(), "strategy": "one server"})
        for n in ns:
            fleet = run_strategy(requests, n, "affinity", log_dir=work / f"affinity{n}",
                                 forks=forks, concurrency=args.concurrency)  # fmt: skip
            row = fleet.row()
            row.update(rows_per_s_wall=round(len(requests) / fleet.wall_s, 2),
                       rows_per_s_sim=round(len(requests) / fleet.makespan_s, 2))  # fmt: skip
            rows.append(row)
            size = args.block_rows or default_rows(len(requests), n)
            for name, by, block_rows, commit in (
                ("ray_default_auto", "default", None, None),  # Ray's own block count
                ("ray_default", "default", size, None),
                ("ray_groups", "groups", size, None),
                ("ray_groups_block_commit", "groups", size, len(requests)),
            ):
                rows.append(run_ray(requests, n, by, log_dir=work / f"{name}{n}",
                                    concurrency=args.concurrency, block_rows=block_rows,
                                    commit_every=commit, name=name, forks=forks))  # fmt: skip
        kill = run_kill(requests, args.kill_replicas, log_dir=work / "kill",
                        cache_path=work / "kill.duckdb", concurrency=args.concurrency,
                        kill_at=args.kill_at, forks=forks)  # fmt: skip
    reference = rows[0]["hit_rate"]
    for row in rows:
        row["hit_share_of_one"] = round(row["hit_rate"] / reference, 4) if reference else None
    groups = [r for r in rows if r["strategy"] == "ray_groups"]
    return {
        "table": {
            "name": table.name,
            "what": table.what,
            "rows": table.rows,
            "requests": len(requests),
            "mean_prompt_tokens": round(table.mean_prompt_tokens, 1),
        },  # fmt: skip
        "sim_flags": list(FLAGS),
        "concurrency_per_replica": args.concurrency,
        "rows": rows,
        "kill": kill,
        "target": {
            "hit_share": HIT_SHARE,
            "ray_groups_min_share": min((r["hit_share_of_one"] for r in groups), default=None),
            "met": all(r["hit_share_of_one"] >= HIT_SHARE for r in groups),
        },
    }


def markdown(doc: dict) -> str:
    t = doc["table"]
    lines = [
        "# Ray Data blocks: Ray's default cut vs prefix groups vs the fleet client (issue 38)",
        "",
        f"`{doc['command']}` on {doc['machine']}, {doc['seconds']:.0f} s. {t['what']}: "
        f"{t['rows']} rows, {t['requests']} requests after dedup, {t['mean_prompt_tokens']} "
        f"prompt tokens on average. Sim servers `{' '.join(doc['sim_flags'])}`, fresh per run; "
        f"{doc['concurrency_per_replica']} requests in flight per replica. Hit rate = the "
        "servers' `prefix_cache_hits / queries`; makespan = the largest simulated busy time; "
        "rows/s (sim) = requests / makespan, rows/s (wall) = requests / client wall time "
        "(Ray's includes starting the actor pool).",
        "",
        "| N | strategy | hit rate | share of one server | makespan s | rows/s (sim) | "
        "wall s | rows/s (wall) | blocks | groups split | commit every | requests per replica "
        "| answered |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        lines.append(
            f"| {r['replicas']} | {r['strategy']} | {r['hit_rate']:.4f} | "
            f"{r['hit_share_of_one']:.3f} | {r['makespan_s']:.1f} | "
            f"{r.get('rows_per_s_sim', '')} | {r['wall_s']:.1f} | {r.get('rows_per_s_wall', '')} "
            f"| {r.get('blocks', '')} | {r.get('groups_split', '')} | "
            f"{r.get('commit_every', '')} | "
            f"{' / '.join(str(x) for x in r['per_replica_requests'])} | "
            f"{r['answered']}/{r['requests']} |"
        )
    k, target = doc["kill"], doc["target"]
    lines += [
        "",
        f"Target (ray_groups >= {target['hit_share']} x one server's hit rate): "
        f"{'met' if target['met'] else 'MISSED'} (lowest share {target['ray_groups_min_share']}).",
        "",
        f"## A replica actor killed mid-run (kill -9, N={k['replicas']})",
        "",
        f"Through the runner (`run_requests` over `RayFleetEngine`, response cache on): pid "
        f"{k['killed_pid']} killed after {k['committed_at_kill']} of {k['requests_needed']} "
        f"requests were committed; actors per replica afterwards {k['actor_pids_per_replica']}. "
        f"Rows: {k['answered']} answered, {k['failed']} failed, {k['lost']} lost. The servers "
        f"computed {k['server_computed']} requests for {k['requests_needed']} needed "
        f"({k['computed_twice']} twice: the slice in flight in the killed actor, at most "
        f"commit_every = {k['commit_every']}). The same run again over the cache sent "
        f"{k['rerun_sent']} ({k['rerun_cache_hits']} cache hits; servers at "
        f"{k['server_computed_after_rerun']}).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.quick:
        args.rows, args.replicas = 120, "2"
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ray_blocks_")))
        doc = measure(args, work)
    doc["seconds"] = round(time.perf_counter() - start, 1)
    doc["machine"] = f"{platform.machine()}, {os.cpu_count()} cores"
    out = args.out or (Path(tempfile.mkdtemp(prefix="ray_blocks_out_")) if args.quick else RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    write_result(out / "ray_blocks.json", doc)
    doc = json.loads((out / "ray_blocks.json").read_text(encoding="utf-8"))
    (out / "ray_blocks.md").write_text(markdown(doc), encoding="utf-8")
    print(markdown(doc))
    bad = [r for r in doc["rows"] if r["answered"] != r["requests"]] or doc["kill"]["lost"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
