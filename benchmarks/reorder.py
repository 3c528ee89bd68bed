"""Reordering benchmark: hit rate and time of each method on real and synthetic tables.

    python -m benchmarks.reorder [--sizes 28000,100000,1000000] [--repeat 3]
                                 [--json benchmarks/results/reorder.json]

Tables: every CSV in ../shared/data (all columns; skipped when absent) and seeded skewed
synthetic tables of 10 columns at each size. Each table runs in a fresh subprocess, so its
`max_rss_mb` is the peak memory of loading the table and running all methods on it.
`seconds` is the median over `--repeat` runs of encode + reorder (file reading excluded).
Writes JSON and a markdown table next to it, and prints the table.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
METHODS = ("original", "column_stats", "ggr")
# ../shared/data/README.md: the GGR authors' implementation on this data, 2-core machine.
AUTHORS = {
    "movies_small": {"char_hit_rate": 0.759, "seconds": 0.22},
    "contributions": {"char_hit_rate": 0.539, "seconds": 27.5},
}


def measure(spec: str, repeat: int) -> dict:
    """Run in a child process: load one table, time every method, compute metrics."""
    import pandas as pd

    from llm_assets.data.skewed import skewed_table
    from llm_assets.optimizer import encode, reorder
    from llm_assets.optimizer.metrics import char_hit_rate, phc

    kind, _, arg = spec.partition(":")
    if kind == "csv":
        table = pd.read_csv(arg, dtype=str, keep_default_na=False)
        name = Path(arg).stem
    else:
        table = skewed_table(int(arg), 10, seed=0)
        name = f"synthetic_{int(arg)}x10"
    methods = {}
    for method in METHODS:
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            enc = encode(table)
            schedule = reorder(enc, method=method)
            times.append(time.perf_counter() - started)
        methods[method] = {
            "seconds": round(statistics.median(times), 4),
            "char_hit_rate": round(char_hit_rate(enc, schedule), 4),
            "phc": phc(enc, schedule),
        }
    rows, cols = enc.codes.shape
    return {
        "table": name,
        "rows": rows,
        "columns": cols,
        "methods": methods,
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def run_child(spec: str, repeat: int) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.reorder", "--child", spec, "--repeat", str(repeat)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark of {spec} failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


def markdown(results: list[dict], scaling: dict | None) -> str:
    lines = [
        "| table | rows x cols | method | char hit rate | PHC | seconds | max RSS MB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for method, m in r["methods"].items():
            lines.append(
                f"| {r['table']} | {r['rows']:,} x {r['columns']} | {method} | "
                f"{m['char_hit_rate']:.1%} | {m['phc']:.3g} | {m['seconds']:.3f} | "
                f"{r['max_rss_mb']:.0f} |"
            )
        if r["table"] in AUTHORS:
            a = AUTHORS[r["table"]]
            lines.append(
                f"| {r['table']} | | authors' GGR (published) | {a['char_hit_rate']:.1%} | | "
                f"{a['seconds']} | |"
            )
    if scaling:
        lines.append("")
        lines.append(
            f"GGR time {scaling['from_rows']:,} -> {scaling['to_rows']:,} rows: "
            f"x{scaling['time_ratio']:.1f} (n log n would be x{scaling['nlogn_ratio']:.1f})."
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="28000,100000,1000000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks/results/reorder.json")
    parser.add_argument(
        "--demo", action="store_true", help="small sizes, results under .llm_assets"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.repeat)))
        return
    if args.demo:
        args.sizes, args.repeat = "28000,100000", 1
        args.json = ROOT / ".llm_assets/results/reorder.json"
    specs = [f"csv:{p}" for p in sorted(SHARED_DATA.glob("*.csv"))]
    if not specs:
        print(f"note: {SHARED_DATA} is absent; synthetic tables only", file=sys.stderr)
    specs += [f"synthetic:{int(s)}" for s in args.sizes.split(",") if s]
    results = []
    for spec in specs:
        print(f"... {spec.split(':', 1)[1]}", file=sys.stderr, flush=True)
        results.append(run_child(spec, args.repeat))
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
    args.json.parent.mkdir(parents=True, exist_ok=True)
    payload = {"command": "python -m benchmarks.reorder " + " ".join(argv or sys.argv[1:])}
    payload |= {"results": results, "ggr_scaling": scaling, "authors": AUTHORS}
    args.json.write_text(json.dumps(payload, indent=2) + "\n")
    table = markdown(results, scaling)
    args.json.with_suffix(".md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
