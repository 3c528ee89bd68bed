"""One query over a fleet of sim servers: the project's affinity planner against vllm-router.

    python -m benchmarks.fleet [--rows 600] [--tables movies,rag,products,claims]
        [--replicas 1,2,4,8] [--strategies round_robin,cache_aware,consistent_hash,affinity]
        [--concurrency 16] [--kv-blocks 984] [--batch-window-ms 250] [--quick] [--out DIR]

Each table is planned once by the product's planner (dedup + GGR), then the same requests go
through every strategy over N = 1, 2, 4, 8 fresh `python -m resources.sim.server` processes
(`benchmarks.lib.fleet_bench`, which says what each table, strategy and measure is). Writes
`fleet.json` (`rows`: table, replicas, strategy, hit_rate, makespan_s, speedup_vs_one, balance,
...), `fleet.md` and `fleet.png` under `--out` (default `benchmarks/results`; with `--quick`,
a small smoke run, a temporary folder). Exit status 1 when a run failed or lost a request.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.lib.fleet_bench import (
    KV_BLOCKS,
    STRATEGIES,
    WINDOW_MS,
    ForkServer,
    run_strategy,
)
from benchmarks.lib.fleet_tables import TABLES, build_tables
from benchmarks.lib.provenance import write_result
from benchmarks.lib.vllm_router import router_binary

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
HIT_SHARE = 0.97
"""Target: affinity's cluster hit rate at N = 2, 4 and 8 >= this share of the one-server rate."""
SPEEDUP_SHARE = 0.9
"""Target: affinity's makespan speed-up at N = 4 >= this share of N."""
SPEEDUP_MIN_REQUESTS = 400
"""The speed-up target applies to tables of at least this many requests (issue 34). With
`concurrency` requests in flight per replica and batches run to completion, a table of n
requests needs ceil(n / c) rounds on one server and ceil(n / 4c) at N = 4, which bounds the
speed-up (`round_bound`); the report gives the bound beside each figure."""


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.fleet", description=__doc__.split("\n")[0]
    )
    p.add_argument("--rows", type=int, default=600, help="rows per table (RAG: questions)")
    p.add_argument("--tables", default=",".join(TABLES), help="comma-separated table names")
    p.add_argument("--replicas", default="1,2,4,8", help="comma-separated fleet sizes")
    p.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated")
    p.add_argument("--concurrency", type=int, default=16, help="requests in flight per replica")
    p.add_argument("--kv-blocks", type=int, default=KV_BLOCKS, help="KV blocks per replica")
    p.add_argument("--batch-window-ms", type=float, default=WINDOW_MS, help="sim batch window")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--no-fork",
        action="store_true",
        help="start each server as `python -m resources.sim.server` (~1.5 s of imports each) "
        "instead of forking a pre-imported parent",
    )
    p.add_argument("--quick", action="store_true", help="a small smoke run (60 rows, N=1,2)")
    p.add_argument("--out", type=Path, default=None, help="folder of fleet.json/.md/.png")
    return p


def measure(args: argparse.Namespace, log_dir: Path) -> dict:
    """Every (table, N, strategy) run; the JSON document."""
    names, ns, strategies = (
        _csv(args.tables),
        [int(n) for n in _csv(args.replicas)],
        (_csv(args.strategies)),
    )
    for name in strategies:
        if name not in STRATEGIES:
            raise SystemExit(f"unknown strategy {name!r}; expected some of {list(STRATEGIES)}")
    if any(s != "affinity" for s in strategies) and any(n > 1 for n in ns) and not router_binary():
        raise SystemExit("vllm-router is not installed (make vllm-router)")
    if 1 not in ns:
        ns = [1, *ns]  # speed-ups are against one server
    started = time.perf_counter()
    tables = build_tables(args.rows, names, seed=args.seed)
    rows: list[dict] = []
    failed: list[str] = []
    with contextlib.ExitStack() as stack:
        forks = None if args.no_fork else stack.enter_context(ForkServer())
        _measure_tables(args, tables, ns, strategies, log_dir, forks, rows, failed)
    return {
        "benchmark": "fleet",
        "command": " ".join(["python -m benchmarks.fleet", *sys.argv[1:]]),
        "config": {
            "rows": args.rows,
            "replicas": sorted(ns),
            "strategies": strategies,
            "concurrency_per_replica": args.concurrency,
            "kv_blocks_per_replica": args.kv_blocks,
            "batch_window_ms": args.batch_window_ms,
            "gpu": "L4",
            "model": "llama-2-7b",
            "seed": args.seed,
            "servers": "python -m resources.sim.server" if args.no_fork else "forked",
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        },
        "tables": {
            name: {
                "what": t.what,
                "rows": t.rows,
                "requests": len(t.requests),
                "mean_prompt_tokens": round(t.mean_prompt_tokens, 1),
                "max_tokens": t.requests[0].max_tokens,
            }
            for name, t in tables.items()
        },  # fmt: skip
        "rows": rows,
        "failed": failed,
        "wall_s": round(time.perf_counter() - started, 1),
    }


def _measure_tables(args, tables, ns, strategies, log_dir, forks, rows, failed) -> None:
    for name, table in tables.items():
        one = None
        for n in sorted(ns):
            for strategy in strategies if n > 1 else ["single"]:
                tag = f"{name} N={n} {strategy}"
                t0 = time.perf_counter()
                try:
                    m = run_strategy(
                        table.requests,
                        n,
                        "affinity" if strategy == "single" else strategy,
                        log_dir=log_dir / f"{name}-{n}-{strategy}",
                        concurrency=args.concurrency,
                        kv_blocks=args.kv_blocks,
                        window_ms=args.batch_window_ms,
                        forks=forks,
                    )
                except Exception as exc:  # record it, go on with the other runs
                    failed.append(f"{tag}: {type(exc).__name__}: {exc}")
                    print(f"FAILED {tag}: {exc}", file=sys.stderr, flush=True)
                    continue
                row = {"table": name, **m.row()}
                if m.answered != m.requests:
                    failed.append(f"{tag}: {m.requests - m.answered} requests not answered")
                if n == 1:
                    one = row
                    for s in strategies:  # one server: every strategy is this run
                        rows.append({**row, "strategy": s, "shared_single_run": True})
                else:
                    rows.append(row)
                print(
                    f"{tag}: hit {row['hit_rate']:.3f} makespan {row['makespan_s']:.1f}s "
                    f"balance {row['balance']:.2f} answered {m.answered}/{m.requests} "
                    f"({time.perf_counter() - t0:.0f}s)",
                    file=sys.stderr,
                    flush=True,
                )
        for row in rows:
            if row["table"] == name:
                ok = one is not None and row["makespan_s"] > 0
                speedup = one["makespan_s"] / row["makespan_s"] if ok else None
                row["speedup_vs_one"] = round(speedup, 3) if speedup else None
                row["single_hit_rate"] = one["hit_rate"] if one else None


KV_AWARE = """\
## vllm-router `kv_aware`: not measured, and why

vllm-router 0.1.17 (the pinned wheel; `vllm-router --help` and the strings of its
`vllm_router_rs` extension) routes `kv_aware` on the blocks each worker reports through vLLM's
KV events. What it needs of every worker, and what the sim server lacks:

1. **A ZMQ publisher of KV events** (`tcp://HOST:PORT`, given per worker with
   `--kv-event-source WORKER_URL=ENDPOINT`, or discovered through `GET /kv_event_sources`;
   `--kv-event-replay-source` for the replay socket): msgpack batches `[timestamp, events,
   rank?]` of tagged `BlockStored` (block hashes, parent hash, token ids, block size),
   `BlockRemoved` (hashes) and `AllBlocksCleared`. The sim's block pool
   (`resources/sim/block_cache.py`) has the moments (register, evict, reset) but no
   publisher, and neither `pyzmq` nor `msgpack` is installed here.
2. **Hashes the router can reproduce**: the router hashes the request's token ids per block
   in a `hash_mode` it knows (vLLM's chained hashes) and matches them against the stored
   ones. The sim keys blocks by Python's `hash((parent, tuple(tokens)))`, which no router
   reproduces: the events would have to carry vLLM-compatible hashes (a second key per block).
3. **The request's tokens at the router**: `POST /tokenize` or `/v1/completions/render` on the
   worker (the sim answers neither: 404), or a `tokenizer.json` the router loads
   (`VLLM_ROUTER_TOKENIZER`); the sim's default tokenizer is an approximation with no file.
4. **Model and block-size metadata**: `GET /get_server_info` (`vllm_config...cache_config.
   block_size`) or, for static sources, `--kv-event-block-size 16 --kv-event-model MODEL`.

Without 1-3 `kv_aware` has no events and degrades to its load term, which the benchmark
would report as `kv_aware` while measuring something else: it is left out rather than
mislabelled. `power_of_two` is measured as the router runs it against the sim: the worker
load endpoint it polls (`GET /get_load`, see `benchmarks/lib/vllm_router.py`) answers 404.
"""


def _row(table: str, n: int, strategy: str, rows: list[dict]) -> dict | None:
    found = (r for r in rows if (r["table"], r["replicas"], r["strategy"]) == (table, n, strategy))
    return next(found, None)


def targets(doc: dict) -> list[dict]:
    """The issue's targets, one check per (target, table): met, and the figures."""
    rows, checks = doc["rows"], []
    ns = doc["config"]["replicas"]
    conc = doc["config"].get("concurrency_per_replica", 16)
    for table in doc["tables"]:
        single = _row(table, 1, doc["config"]["strategies"][-1], rows)
        if single is None:
            continue
        for n in (2, 4, 8):
            a = _row(table, n, "affinity", rows)
            if a is None:
                continue
            need = HIT_SHARE * single["hit_rate"]
            checks.append({
                "target": f"affinity hit rate at N={n} >= {HIT_SHARE} x one server",
                "table": table, "met": a["hit_rate"] >= need,
                "figures": f"{a['hit_rate']:.4f} vs {need:.4f} "
                           f"(= {HIT_SHARE} x {single['hit_rate']:.4f})",
            })  # fmt: skip
        a4 = _row(table, 4, "affinity", rows)
        requests = single["requests"]
        if a4 is not None and a4["speedup_vs_one"] is not None:
            need = SPEEDUP_SHARE * 4
            bound = round_bound(requests, conc, 4)
            small = requests < SPEEDUP_MIN_REQUESTS
            checks.append({
                "target": f"affinity speed-up at N=4 >= {need:.1f}"
                          + (f" (n/a: {requests} < {SPEEDUP_MIN_REQUESTS} requests)" if small
                             else ""),
                "table": table, "met": a4["speedup_vs_one"] >= need, "applies": not small,
                "figures": f"{a4['speedup_vs_one']:.2f}x ({single['makespan_s']:.1f} s -> "
                           f"{a4['makespan_s']:.1f} s, balance {a4['balance']:.2f}; round bound "
                           f"{bound:.2f}x)",
            })  # fmt: skip
        for n in [n for n in ns if n >= 4]:
            a = _row(table, n, "affinity", rows)
            for policy in [s for s in doc["config"]["strategies"] if s != "affinity"]:
                c = _row(table, n, policy, rows)
                if a is None or c is None:
                    continue
                checks.append({
                    "target": f"affinity >= {policy} at N={n} (hit rate and makespan)",
                    "table": table,
                    "met": a["hit_rate"] >= c["hit_rate"] and a["makespan_s"] <= c["makespan_s"],
                    "figures": f"hit {a['hit_rate']:.4f} vs {c['hit_rate']:.4f}; makespan "
                               f"{a['makespan_s']:.1f} s vs {c['makespan_s']:.1f} s",
                })  # fmt: skip
    return checks


def round_bound(requests: int, concurrency: int, n: int) -> float:
    """The speed-up at N = n that rounds of `concurrency` requests per replica allow."""
    return math.ceil(requests / concurrency) / math.ceil(requests / (concurrency * n))


def _md_table(header: list[str], body: list[list]) -> list[str]:
    line = lambda cells: "| " + " | ".join(str(c) for c in cells) + " |"  # noqa: E731
    return [line(header), "|" + "---|" * len(header), *(line(r) for r in body), ""]


def markdown(doc: dict, checks: list[dict]) -> str:
    cfg = doc["config"]
    lines = [
        "# One query over a fleet of sim servers (issues 20, 34)",
        "",
        f"`{doc['command']}` on {cfg['machine']}, {doc['wall_s'] / 60:.1f} min. Simulated "
        f"{cfg['gpu']} + {cfg['model']} per replica, KV cache {cfg['kv_blocks_per_replica']} "
        f"blocks of 16 tokens ({cfg['kv_blocks_per_replica'] * 16:,} tokens, what vLLM derives "
        "for this GPU and model at gpu_memory_utilization 0.9), sim batch window "
        f"{cfg['batch_window_ms']:g} ms. Every (table, N, strategy) run starts N fresh server "
        "processes (cold prefix caches).",
        "",
        "Client: the project's `OpenAIEngine`, one `run` of the whole plan. Concurrency is the "
        f"same for every strategy: {cfg['concurrency_per_replica']} requests in flight per "
        "replica (`affinity`: `max_concurrency` "
        f"{cfg['concurrency_per_replica']} per URL; the vllm-router strategies: one URL with "
        f"`max_concurrency` {cfg['concurrency_per_replica']} x N). The sim server runs each "
        "batch of coalesced requests to completion on its simulated clock, so the makespan "
        "depends on how many requests are in flight at once, and a strategy that spreads a "
        "round of requests unevenly over the replicas pays more batches.",
        "",
        "Measures, from each server's own `/metrics` after the run: hit rate = sum of "
        "`vllm:prefix_cache_hits_total` / sum of `vllm:prefix_cache_queries_total`; makespan = "
        "the largest `llm_assets_sim:engine_time_seconds_total` (a replica's busy time on the "
        "simulated clock); speed-up = the one-server makespan of the same table / makespan; "
        "balance = max / mean of the replicas' prompt + generation tokens. At N = 1 every "
        "strategy is the same single server run (no router).",
        "",
        "## Tables",
        "",
    ]
    lines += _md_table(
        ["table", "what", "rows", "requests (after dedup)", "mean prompt tokens", "max_tokens"],
        [
            [n, t["what"], t["rows"], t["requests"], t["mean_prompt_tokens"], t["max_tokens"]]
            for n, t in doc["tables"].items()
        ],  # fmt: skip
    )
    lines += ["## Results", ""]
    for table in doc["tables"]:
        body = []
        for r in [r for r in doc["rows"] if r["table"] == table]:
            if r["replicas"] == 1 and r["strategy"] != doc["config"]["strategies"][-1]:
                continue
            body.append([
                r["replicas"], "(one server)" if r["replicas"] == 1 else r["strategy"],
                f"{r['hit_rate']:.4f}", f"{r['makespan_s']:.1f}",
                f"{r['speedup_vs_one']:.2f}" if r.get("speedup_vs_one") else "-",
                f"{r['balance']:.2f}", f"{r['request_balance']:.2f}",
                f"{r['answered']}/{r['requests']}",
                " / ".join(f"{s:.1f}" for s in r["per_replica_engine_s"]),
                " / ".join(str(k) for k in r["per_replica_requests"]), f"{r['wall_s']:.1f}",
            ])  # fmt: skip
        lines += [f"### {table}", ""]
        lines += _md_table(
            ["N", "strategy", "hit rate", "makespan s", "speed-up", "balance (tokens)",
             "balance (requests)", "answered", "engine s per replica", "requests per replica",
             "client wall s"],
            body,
        )  # fmt: skip
    lines += [
        "## Reading the figures",
        "",
        "- Each replica's simulated time is close to (rounds it needs) x (one round's time): "
        "with a fixed number of requests in flight and a 16-token output budget, a round "
        "costs its 16 decode iterations plus the prefill of its uncached prompt tokens. A "
        "higher hit rate shortens the prefill part only, so on the decode-bound tables "
        "(movies, claims) strategies with very different hit rates can have close makespans, "
        "and a replica holding a few more requests than the others needs a whole extra round "
        "(the request balance column).",
        "- The window matters for the router strategies: below about 250 ms their makespans "
        "were up to 1.7x longer from batches cut by arrival jitter (see `WINDOW_MS` in "
        "`benchmarks/lib/fleet_bench.py`); at 250 ms and above the figures settle.",
        "- N = 1 rows are one run; the router strategies at N = 1 would put a router in front of "
        "the one server and change nothing it computes.",
        "- Affinity plans in KV blocks of the sim's tokenizer and in predicted seconds "
        "(`resources/openai/placement.py`): on critics (a critic and a publisher, about 50 "
        "characters, before each review) the rows of a critic share one or two blocks beyond the "
        "instruction and stay together; on factcheck and claims nothing completes a block beyond "
        "the instruction, so every row is its own group and splitting them loses no hit.",
        "- On the tables where nothing is shared beyond the instruction (claims, factcheck) every "
        "strategy has the same hit rate and the makespans differ only by how the sim's static "
        "batches are cut. The router strategies do not cap a replica's requests in flight (the "
        "client caps the total at 16 x N for every strategy, and at 16 per replica for "
        "affinity): a replica may run more than 16 requests per batch, which shortens a "
        "decode-bound round's share per request.",
        "- Work stealing compares predicted seconds from the moment the thief is idle in WALL "
        "time; the sim servers run their batches at once in wall time, so a thief that is idle "
        "first in wall time is not ahead on its simulated clock, and a steal can add a round "
        "there (per-replica requests of affinity at N = 8 range over a few requests around the "
        "plan's balanced shares: see the requests-per-replica column).",
        "",
    ]
    lines += [KV_AWARE, "## Targets (issue 34)", ""]
    lines += _md_table(
        ["target", "table", "met", "figures"],
        [[c["target"], c["table"], "yes" if c["met"] else "**no**", c["figures"]] for c in checks],
    )
    applies = [c for c in checks if c.get("applies", True)]
    met = sum(c["met"] for c in applies)
    lines += [f"{met} of {len(applies)} applicable checks met.", ""]
    if doc["failed"]:
        lines += ["## Failed runs", "", *(f"- {f}" for f in doc["failed"]), ""]
    return "\n".join(lines)


def plot(doc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tables = list(doc["tables"])
    strategies = doc["config"]["strategies"]
    ns = doc["config"]["replicas"]
    fig, axes = plt.subplots(2, len(tables), figsize=(4 * len(tables), 7), squeeze=False)
    for k, table in enumerate(tables):
        top, bottom = axes[0][k], axes[1][k]
        top.plot(ns, ns, ":", color="grey", label="ideal (N)")
        top.plot(ns, [SPEEDUP_SHARE * n for n in ns], "--", color="lightgrey", label="0.9 N")
        for s in strategies:
            pts = [_row(table, n, s, doc["rows"]) for n in ns]
            xs = [n for n, r in zip(ns, pts, strict=True) if r and r.get("speedup_vs_one")]
            top.plot(xs, [r["speedup_vs_one"] for r in pts if r and r.get("speedup_vs_one")],
                     "o-", label=s)  # fmt: skip
            bottom.plot(xs, [r["hit_rate"] for r in pts if r and r.get("speedup_vs_one")],
                        "o-", label=s)  # fmt: skip
        single = _row(table, 1, strategies[-1], doc["rows"])
        if single:
            bottom.axhline(HIT_SHARE * single["hit_rate"], ls="--", color="lightgrey",
                           label="0.97 x one server")  # fmt: skip
        top.set_title(table)
        top.set_xscale("log", base=2)
        bottom.set_xscale("log", base=2)
        for ax in (top, bottom):
            ax.set_xticks(ns, [str(n) for n in ns])
            ax.grid(alpha=0.3)
        bottom.set_xlabel("replicas N")
        if k == 0:
            top.set_ylabel("makespan speed-up vs one server")
            bottom.set_ylabel("cluster prefix-cache hit rate")
    axes[0][0].legend(fontsize=8)
    axes[1][0].legend(fontsize=8)
    fig.suptitle("Fleet of simulated L4 + Llama-2-7B replicas: affinity vs vllm-router")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.quick:
        args.rows = min(args.rows, 60)
        args.replicas = "1,2"
        args.strategies = "round_robin,affinity"
    out = args.out or (Path(tempfile.mkdtemp(prefix="fleet-quick-")) if args.quick else RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="fleet-logs-") as logs:
        doc = measure(args, Path(logs))
    doc["targets"] = targets(doc)
    write_result((out / "fleet.json"), doc, indent=1)
    (out / "fleet.md").write_text(markdown(doc, doc["targets"]))
    plot(doc, out / "fleet.png")
    print(f"wrote {out / 'fleet.json'}, fleet.md, fleet.png ({doc['wall_s']:.0f} s)")
    return 1 if doc["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
