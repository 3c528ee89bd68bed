"""Reordering benchmark: hit rates and time of each method on real and synthetic tables.

    python -m benchmarks.reorder [--sizes 28000,1000000] [--repeat 3] [--quick] [--jobs 1]
                                 [--json benchmarks/results/reorder.json] [--budget-only]

Tables: every CSV in ../shared/data (all columns; skipped when absent), the seeded shapes of
`benchmarks.lib.shapes` (the tables GGR lost on in issues 14 and 24) and seeded skewed 10-column
tables at each of `--sizes`. Methods: `original` (file order), `column_stats`, `authors_ggr`
(our port of the authors' QuickGreedy, `llm_assets.optimizer.quickgreedy`; `authors_ggr_merge` also
with a hand-written column merge where the table has exact functional dependencies) and
`ggr` (the product's `reorder`, safety net included; `method_used` says which candidate won).

Per method: `seconds` (median over `--repeat` runs of encode + reorder, file reading excluded;
one run on tables above 100k rows) and `cpu_seconds` (the same runs' CPU time; wall minus CPU
is time spent waiting for a core; `load_average` is this machine's 1-minute load when each
table started and ended: the cores are shared with other tenants, whose load it does not
show, so equal runs vary by tens of percent), `char_hit_rate`, `token_hit_rate`
(`benchmarks.lib.tokens`: the simulator's block cache, Llama 3 tokenizer when present; skipped
above `--token-rows` rows) and `phc`; the authors' port is skipped above `--authors-rows`.
Per table: the upper bounds of `optimizer.bound` and GGR / bound. Each table runs in a
fresh subprocess, so `max_rss_mb` is the peak memory of loading it and running everything
on it. Writes JSON and a markdown table next to it.

Fixed prefix-cache budget (where token hit rates are computed): SOLO (Li et al., ICML 2026,
"Prefix-Cache-Aware Data Reordering for LLM-Augmented Database Analytics") reports prefill
throughput under a fixed prefix-cache budget, where eviction makes row order matter more.
Here each method's prompts are prefilled one at a time, in schedule order, through the
simulator's `BlockPool` (16-token blocks, chained hashes, vLLM's LRU free queue) holding K
blocks (`benchmarks.lib.tokens.cache_replay`; the engine itself with `max_num_seqs=1` and K
blocks gives the same counts, `tests/benchmarks/test_cache_budget.py`). K is a share
(`BUDGET_FRACTIONS`) of the table's distinct blocks in file order, at least the blocks of its
longest prompt (`cache_budget` per table). Per method `budget_token_hit_rate` (cached prompt
tokens / prompt tokens) and `budget_prefill_tokens` (prompt tokens computed; prefill time
is about proportional to them when prefill is compute-bound, so their ratio between two
methods is the inverse of their prefill-throughput ratio) at each K, beside the unbounded
`token_hit_rate` / `prefill_tokens`. `--budget-only` measures only that (each method run
once, untimed) into `reorder_budget.json` and `.md`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.lib.provenance import write_result

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
SHAPE_ROWS = {
    "claims": 20_000,
    "reviews": 54_000,
    "critics16": 20_000,
    "movie_info12": 20_000,
    "claims_rows": 10_000,
    "rt_movies": 1_560,
}
# Hand-written merges of exact functional dependencies, as the authors' harness is given them.
AUTHORS_MERGE = {
    "movie_info12": [["movie_title", "genres", "directors", "original_release_date", "runtime"]],
    "movies_small": [["rotten_tomatoes_link", "movie_title", "movie_info"]],
}
# Prefix-cache budgets, as shares of a table's distinct blocks in file order.
BUDGET_FRACTIONS = [0.01, 0.1]
# ../shared/data/README.md: the authors' own implementation on this data, 2-core machine.
PUBLISHED = {
    "movies_small": {"char_hit_rate": 0.759, "seconds": 0.22},
    "contributions": {"char_hit_rate": 0.539, "seconds": 27.5},
}


def table_specs(shape_rows: dict[str, int], sizes: Sequence[int]) -> list[str]:
    """The tables `load` reads, in the benchmark's order: every shared CSV that is present,
    the shapes at `shape_rows`, the synthetic tables at `sizes`."""
    return (
        [f"csv:{p}" for p in sorted(SHARED_DATA.glob("*.csv"))]
        + [f"shape:{name}:{rows}" for name, rows in shape_rows.items()]
        + [f"synthetic:{rows}" for rows in sizes]
    )


def load(spec: str):
    import pandas as pd

    from benchmarks.lib.shapes import SHAPES
    from llm_assets.data.skewed import skewed_table

    kind, _, arg = spec.partition(":")
    if kind == "csv":
        return Path(arg).stem, pd.read_csv(arg, dtype=str, keep_default_na=False)
    if kind == "shape":
        name, _, rows = arg.partition(":")
        return f"{name}_{int(rows)}", SHAPES[name](int(rows), seed=0)
    return f"synthetic_{int(arg)}x10", skewed_table(int(arg), 10, seed=0)


def timed(run, repeat: int):
    """(last result, median wall seconds, median CPU seconds of this process) over `repeat`
    runs."""
    walls, cpus, result = [], [], None
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = run()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return result, round(statistics.median(walls), 4), round(statistics.median(cpus), 4)


def cache_metrics(rows: list[list[int]], budgets: dict) -> dict:
    """Token hit rate and prefill tokens of prompts `rows` (in send order) with an unbounded
    cache and with each budget of `budgets` (`benchmarks.lib.tokens.budget_blocks`)."""
    from benchmarks.lib.tokens import cache_replay
    from resources.sim.block_cache import block_hashes

    hashes = [block_hashes(ids) for ids in rows]
    total = sum(map(len, rows))
    out: dict = {}
    hit = cache_replay(rows, None, hashes)
    out["token_hit_rate"] = round(hit / total, 4) if total else 0.0
    out["prefill_tokens"] = total - hit
    out["budget_token_hit_rate"], out["budget_prefill_tokens"] = {}, {}
    for key, blocks in budgets["blocks"].items():
        hit = cache_replay(rows, blocks, hashes)
        out["budget_token_hit_rate"][key] = round(hit / total, 4) if total else 0.0
        out["budget_prefill_tokens"][key] = total - hit
    return out


def measure(
    spec: str, repeat: int, token_rows: int, authors_rows: int, budget_only: bool = False
) -> dict:
    """Run in a child process: load one table, time every method, compute metrics
    (`budget_only`: each method once, untimed, token and cache-budget metrics only)."""
    from benchmarks.lib.tokens import RowTokens, budget_blocks, default_tokenizer
    from llm_assets.optimizer import encode, reorder
    from llm_assets.optimizer.bound import char_hit_upper_bound, phc_upper_bound
    from llm_assets.optimizer.metrics import char_hit_rate, phc
    from llm_assets.optimizer.quickgreedy import quick_greedy

    load_average = os.getloadavg()[0]
    name, table = load(spec)
    base = name.rsplit("_", 1)[0] if spec.startswith("shape:") else name
    enc = encode(table)
    slow = enc.num_rows > 100_000
    runs = {
        "original": lambda: reorder(encode(table), method="original"),
        "column_stats": lambda: reorder(encode(table), method="column_stats"),
        "authors_ggr": lambda: quick_greedy(encode(table)),
        "ggr": lambda: reorder(encode(table), method="ggr"),
    }
    if enc.num_rows > authors_rows:
        del runs["authors_ggr"]
    if base in AUTHORS_MERGE:
        runs["authors_ggr_merge"] = lambda: quick_greedy(encode(table), AUTHORS_MERGE[base])
    tokens = RowTokens(enc, default_tokenizer().encode) if enc.num_rows <= token_rows else None
    budgets = None
    if tokens is not None:
        file_order = tokens.rows(reorder(enc, method="original"))
        budgets = budget_blocks(file_order, BUDGET_FRACTIONS)
        budgets["prompt_tokens"] = sum(map(len, file_order))
        del file_order
    if budget_only and budgets is None:
        raise SystemExit(f"{spec}: more than --token-rows rows, no token metrics")
    methods = {}
    for method, run in runs.items():
        schedule, seconds, cpu_seconds = timed(run, 1 if slow or budget_only else repeat)
        m = {} if budget_only else {"seconds": seconds, "cpu_seconds": cpu_seconds}
        m["char_hit_rate"] = round(char_hit_rate(enc, schedule), 4)
        if tokens is not None:
            m |= cache_metrics(tokens.rows(schedule), budgets)
        if budget_only:
            if method == "ggr":
                m["method_used"] = schedule.method_used
            methods[method] = m
            continue
        m["phc"] = phc(enc, schedule)
        if method == "ggr":
            m["method_used"] = schedule.method_used
            if tokens is not None:
                m["token_agreement"] = tokens.agreement(schedule)
        methods[method] = m
    rows, cols = enc.codes.shape
    if budget_only:
        return {
            "table": name,
            "rows": rows,
            "columns": cols,
            "methods": methods,
            "cache_budget": budgets,
        }
    bound = {"char_hit_rate": round(char_hit_upper_bound(enc), 4), "phc": phc_upper_bound(enc)}
    ggr = methods["ggr"]
    others = [m["char_hit_rate"] for k, m in methods.items() if k != "ggr"]
    result = {
        "table": name,
        "rows": rows,
        "columns": cols,
        "methods": methods,
        "bound": bound,
        "ggr_over_bound": {
            "char_hit_rate": round(ggr["char_hit_rate"] / bound["char_hit_rate"], 4)
            if bound["char_hit_rate"]
            else None,
            "phc": round(ggr["phc"] / bound["phc"], 4) if bound["phc"] else None,
        },
        "ggr_never_loses": ggr["char_hit_rate"] >= max(others),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "load_average": [round(load_average, 2), round(os.getloadavg()[0], 2)],
    }
    if budgets is not None:
        result["cache_budget"] = budgets
    return result


def run_child(
    spec: str, repeat: int, token_rows: int, authors_rows: int, budget_only: bool = False
) -> dict:
    command = [sys.executable, "-m", "benchmarks.reorder", "--child", spec]
    command += ["--repeat", str(repeat), "--token-rows", str(token_rows)]
    command += ["--authors-rows", str(authors_rows)] + (["--budget-only"] if budget_only else [])
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark of {spec} failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


def _pct(value) -> str:
    return "" if value is None else f"{value:.1%}"


def _budget_label(fraction: str) -> str:
    return f"K = {float(fraction):.0%}"


def budget_markdown(results: list[dict]) -> str:
    """The fixed-cache-budget table: per table and method, the token hit rate with an
    unbounded cache and at each budget K, and the prompt tokens prefilled at each K."""
    results = [r for r in results if r.get("cache_budget")]
    if not results:
        return ""
    keys = list(results[0]["cache_budget"]["blocks"])
    hit_cols = " | ".join(f"hit @ {_budget_label(k)}" for k in keys)
    tok_cols = " | ".join(f"prefill tokens @ {_budget_label(k)}" for k in keys)
    lines = [
        "Fixed prefix-cache budget (SOLO, ICML 2026): prompts prefilled one at a time, in "
        "schedule order, through the simulator's block pool holding K blocks of 16 tokens "
        "(LRU eviction, as vLLM's free queue); K is a share of the table's distinct blocks in "
        "file order (at least the longest prompt's blocks). Hit = cached prompt tokens / prompt "
        "tokens; prefill tokens = prompt tokens computed. **bold**: the best method at that K.",
        "",
        f"| table | K blocks ({', '.join(_budget_label(k) for k in keys)} of distinct) | method "
        f"| hit, unbounded | {hit_cols} | {tok_cols} |",
        "|---|---|---|---|" + "---|" * (2 * len(keys)),
    ]
    for r in results:
        b = r["cache_budget"]
        best = {k: max(m["budget_token_hit_rate"][k] for m in r["methods"].values()) for k in keys}
        size = " / ".join(f"{b['blocks'][k]:,}" for k in keys) + f" of {b['distinct_blocks']:,}"
        for method, m in r["methods"].items():
            label = f"ggr (chose {m['method_used']})" if method == "ggr" else method
            hits = []
            for k in keys:
                cell = _pct(m["budget_token_hit_rate"][k])
                hits.append(f"**{cell}**" if m["budget_token_hit_rate"][k] == best[k] else cell)
            tokens = [f"{m['budget_prefill_tokens'][k]:,}" for k in keys]
            lines.append(
                f"| {r['table']} | {size} | {label} | {_pct(m['token_hit_rate'])} | "
                + " | ".join(hits + tokens)
                + " |"
            )
    return "\n".join(lines) + "\n"


def markdown(results: list[dict], scaling: dict | None) -> str:
    lines = [
        "| table | rows x cols | method | char hit rate | token hit rate | PHC | seconds | CPU s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for method, m in r["methods"].items():
            label = f"ggr (chose {m['method_used']})" if method == "ggr" else method
            lines.append(
                f"| {r['table']} | {r['rows']:,} x {r['columns']} | {label} | "
                f"{_pct(m['char_hit_rate'])} | {_pct(m.get('token_hit_rate'))} | "
                f"{m['phc']:.3g} | {m['seconds']:.3f} | {m['cpu_seconds']:.3f} |"
            )
        if r["table"] in PUBLISHED:
            a = PUBLISHED[r["table"]]
            lines.append(
                f"| {r['table']} | | authors' own code (published) | "
                f"{_pct(a['char_hit_rate'])} | | | {a['seconds']} | |"
            )
        b, g = r["bound"], r["ggr_over_bound"]
        lines.append(
            f"| {r['table']} | | upper bound (GGR / bound) | {_pct(b['char_hit_rate'])} "
            f"({_pct(g['char_hit_rate'])}) | | {b['phc']:.3g} ({_pct(g['phc'])}) | | |"
        )
    lines.append("")
    lines.append(
        "| table | GGR >= max(original, column_stats, authors) | max RSS MB | load average |"
    )
    lines.append("|---|---|---|---|")
    for r in results:
        start, end = r["load_average"]
        lines.append(
            f"| {r['table']} | {'yes' if r['ggr_never_loses'] else 'NO'} | "
            f"{r['max_rss_mb']:.0f} | {start} -> {end} |"
        )
    if scaling:
        lines.append("")
        lines.append(
            f"GGR time {scaling['from_rows']:,} -> {scaling['to_rows']:,} rows: "
            f"x{scaling['time_ratio']:.1f} (n log n would be x{scaling['nlogn_ratio']:.1f})."
        )
    lines += ["", *speed_markdown(results)]
    budget = budget_markdown(results)
    if budget:
        lines += ["", budget.rstrip("\n")]
    return "\n".join(lines) + "\n"


def speed_markdown(results: list[dict]) -> list[str]:
    """Issue 24's speed targets in one place: GGR's CPU time against the authors' port (this
    run) and their published seconds, then what `benchmarks.safety_net` and
    `benchmarks.loader` last measured (their JSON, where present)."""
    lines = [
        "Speed (issue 24): GGR (encode + greedy + safety net) against the authors' QuickGreedy "
        "(our port, this run, CPU s) and against the seconds the authors published (divided "
        "by GGR's wall seconds).",
        "",
        "| table | GGR CPU s | port CPU s | port / GGR | published s | published / GGR |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        ggr, port = r["methods"]["ggr"], r["methods"].get("authors_ggr")
        published = PUBLISHED.get(r["table"], {}).get("seconds")
        cells = [f"{ggr['cpu_seconds']:.3f}"]
        cells += (
            [f"{port['cpu_seconds']:.3f}", f"{port['cpu_seconds'] / ggr['cpu_seconds']:.1f}x"]
            if port
            else ["", ""]
        )
        cells += [f"{published}", f"{published / ggr['seconds']:.0f}x"] if published else ["", ""]
        lines.append(f"| {r['table']} | " + " | ".join(cells) + " |")
    results_dir = ROOT / "benchmarks" / "results"
    net_path, loader_path = results_dir / "safety_net.json", results_dir / "loader.json"
    if net_path.exists():
        net = json.loads(net_path.read_text())
        shares = ", ".join(f"{t['table']} {t['ratio']:.0%}" for t in net["tables"])
        met = sum(t["ratio"] <= net["target"] for t in net["tables"])
        lines += ["", f"Safety net / greedy (`safety_net.md`, target {net['target']:.0%}): "
                  f"{shares}; met on {met} of {len(net['tables'])}."]  # fmt: skip
    if loader_path.exists():
        sizes = json.loads(loader_path.read_text()).get("memory", {}).get("sizes", [])
        for size in sizes:
            cli = size["cli"]
            lines += ["", f"`llm-assets plan` on {size['rows']:,} rows (`loader.md`): "
                      f"{cli['wall_s']:.0f} s, max RSS {cli['max_rss_mb']:,.0f} MiB."]  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="28000,1000000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--token-rows", type=int, default=200_000)
    parser.add_argument(
        "--authors-rows", type=int, default=10**9, help="skip the authors' port above this"
    )
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks/results/reorder.json")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, results under .llm_assets"
    )
    parser.add_argument("--demo", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--only", help="comma-separated table specs to run (for debugging)")
    parser.add_argument("--jobs", type=int, default=1, help="tables measured at once")
    parser.add_argument(
        "--budget-only",
        action="store_true",
        help="only the fixed prefix-cache budget metric (untimed), to reorder_budget.json",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        result = measure(
            args.child, args.repeat, args.token_rows, args.authors_rows, args.budget_only
        )
        print(json.dumps(result))
        return
    shape_rows = dict(SHAPE_ROWS)
    if args.quick or args.demo:
        args.sizes, args.repeat = "28000", 1
        shape_rows = {k: min(v, 5_000) for k, v in shape_rows.items()}
        args.json = ROOT / ".llm_assets/results/reorder.json"
    specs = table_specs(shape_rows, [int(s) for s in args.sizes.split(",") if s])
    if not any(s.startswith("csv:") for s in specs):
        print(f"note: {SHARED_DATA} is absent; synthetic tables only", file=sys.stderr)
    if args.budget_only:
        if args.json.name == "reorder.json":
            args.json = args.json.with_name("reorder_budget.json")
        tokenized = [s for s in specs if not s.startswith("synthetic:")]
        tokenized += [
            f"synthetic:{int(s)}" for s in args.sizes.split(",") if s and int(s) <= args.token_rows
        ]
        specs = tokenized
    if args.only:
        specs = args.only.split(",")

    def child(spec: str) -> dict:
        print(f"... {spec}", file=sys.stderr, flush=True)
        return run_child(spec, args.repeat, args.token_rows, args.authors_rows, args.budget_only)

    # The largest table first, so that with --jobs > 1 it overlaps the others.
    order = sorted(range(len(specs)), key=lambda k: not specs[k].endswith("000000"))
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        done = dict(zip(order, pool.map(child, [specs[k] for k in order]), strict=True))
    results = [done[k] for k in range(len(specs))]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    payload = {"command": "python -m benchmarks.reorder " + " ".join(argv or sys.argv[1:])}
    if args.budget_only:
        payload |= {"budget_fractions": BUDGET_FRACTIONS, "results": results}
        write_result(args.json, payload)
        table = budget_markdown(results)
        args.json.with_suffix(".md").write_text(table)
        print(table)
        return
    synthetic = [r for r in results if r["table"].startswith("synthetic")]
    scaling = None
    if len(synthetic) >= 2:
        a, b = synthetic[-2], synthetic[-1]
        scaling = {
            "from_rows": a["rows"],
            "to_rows": b["rows"],
            "time_ratio": b["methods"]["ggr"]["seconds"] / a["methods"]["ggr"]["seconds"],
            "nlogn_ratio": (b["rows"] * math.log(b["rows"])) / (a["rows"] * math.log(a["rows"])),
        }
    payload |= {"results": results, "ggr_scaling": scaling, "published": PUBLISHED}
    write_result(args.json, payload)
    table = markdown(results, scaling)
    args.json.with_suffix(".md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
