"""What GGR's safety net costs beside the greedy itself (issue 24 item 5: at most 20%).

    python -m benchmarks.safety_net [--repeat 5] [--json benchmarks/results/safety_net.json]
                                    [SPEC ...]

`reorder(method="ggr")` runs the greedy (`ggr.ggr_schedule`) and then the safety net: it
scores the greedy's schedule, column statistics and file order, and on tables of at most
`optimizer.AUTHORS_CELLS` cells the authors' QuickGreedy, and keeps the best. Per table (the
`benchmarks.reorder` tables and two small look-alikes of the shapes within that budget,
`SMALL_SPECS`; SPECs as `benchmarks.reorder.load` reads them), each in a fresh process:
the greedy's CPU seconds, then `reorder` with the greedy patched to return the schedule just
computed (so only the safety net runs), `--repeat` times each; the minimum of each, their
ratio and the method the net kept. CPU time, not wall: the cores are shared with other
tenants. Writes JSON and a markdown table next to it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.lib.provenance import write_result
from benchmarks.reorder import SHAPE_ROWS, table_specs

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_JSON = ROOT / "benchmarks" / "results" / "safety_net.json"
TARGET = 0.20
"""The safety net's time / the greedy's (issue 24)."""


SMALL_SPECS = ["shape:claims_rows:60", "shape:rt_movies:25"]
"""Look-alikes of the fact-checking and one-row-per-movie tables (issue 34 item 6) small
enough (240 and 300 cells) for the net to score the authors' QuickGreedy too."""


def default_specs() -> list[str]:
    """`benchmarks.reorder`'s tables less its 1M-row one, then `SMALL_SPECS`."""
    return table_specs(SHAPE_ROWS, [28_000]) + SMALL_SPECS


def measure(spec: str, repeat: int) -> dict:
    """One table, in this process (see the module docstring)."""
    import llm_assets.optimizer as optimizer
    from benchmarks.reorder import load
    from llm_assets.optimizer import AUTHORS_CELLS, encode, reorder

    name, table = load(spec)
    enc = encode(table)
    greedy, net, kept = [], [], None
    original = optimizer.ggr_schedule
    for _ in range(repeat):
        started = time.process_time()
        schedule = original(enc)
        greedy.append(time.process_time() - started)
        optimizer.ggr_schedule = lambda _enc, config=None, schedule=schedule: schedule
        try:
            started = time.process_time()
            kept = reorder(enc, method="ggr").method_used
            net.append(time.process_time() - started)
        finally:
            optimizer.ggr_schedule = original
    return {
        "table": name,
        "rows": enc.num_rows,
        "fields": len(enc.fields),
        "greedy_cpu_s": round(min(greedy), 4),
        "safety_net_cpu_s": round(min(net), 4),
        "ratio": round(min(net) / min(greedy), 4),
        "kept": kept,
        "authors_scored": enc.num_rows * len(enc.fields) <= AUTHORS_CELLS,
        "load_average": round(os.getloadavg()[0], 2),
    }


def markdown(report: dict) -> str:
    lines = [
        "# GGR's safety net beside the greedy",
        "",
        f"`python -m benchmarks.safety_net --repeat {report['repeat']}`: CPU seconds, minimum "
        f"of {report['repeat']} runs, each table in a fresh process; target: the net at most "
        f"{TARGET:.0%} of the greedy.",
        "",
        "| table | rows x fields | greedy s | safety net s | net / greedy | target | "
        "authors' port scored | kept | load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["tables"]:
        verdict = "met" if r["ratio"] <= TARGET else "MISSED"
        lines.append(
            f"| {r['table']} | {r['rows']:,} x {r['fields']} | {r['greedy_cpu_s']:.4f} | "
            f"{r['safety_net_cpu_s']:.4f} | {r['ratio']:.0%} | {verdict} | "
            f"{'yes' if r.get('authors_scored') else 'no'} | {r['kept']} | "
            f"{r['load_average']} |"
        )
    met = sum(r["ratio"] <= TARGET for r in report["tables"])
    lines += ["", f"Met on {met} of {len(report['tables'])} tables."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="*")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.repeat)))
        return
    tables = []
    for spec in args.specs or default_specs():
        command = [sys.executable, "-m", "benchmarks.safety_net", "--child", spec]
        command += ["--repeat", str(args.repeat)]
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
        tables.append(json.loads(proc.stdout))
        print(json.dumps(tables[-1]), file=sys.stderr)
    report = {"repeat": args.repeat, "target": TARGET, "tables": tables}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.json, report, indent=2)
    args.json.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
