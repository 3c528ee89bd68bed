"""Fault matrix benchmark: `python -m benchmarks.faults [--rows 2000] [--smoke] [--json PATH]`.

A thin command line over `benchmarks.lib.faults.run_fault_matrix` (see its docstring for what each
scenario does and what each number means). Writes the JSON (default
`benchmarks/results/faults.json`) and a markdown table beside it (`.md`); exits 1 when any
scenario lost a row, a kill -9 rerun resent more than one chunk, 10% 503 left a row
unanswered, a hostile case (drip-feed, endless body, dead server) ran past its documented
bound, or the wrong-key case sent more than `max_concurrency` requests.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks.lib.faults import FAULT_MATRIX, markdown_table, run_fault_matrix

DEFAULT_JSON = Path("benchmarks/results/faults.json")


def _acceptance(result: dict) -> list[str]:
    problems = []
    chunk = result["settings"]["chunk_size"]
    for name, row in result["faults"].items():
        if row["lost"] != 0:
            problems.append(f"{name}: lost {row['lost']} rows")
        if row.get("bound_s") is not None and row["wall_s"] > row["bound_s"]:
            problems.append(f"{name}: took {row['wall_s']} s > documented bound {row['bound_s']} s")
    wrong = result["faults"].get("wrong-key")
    if wrong is not None and wrong["requests_sent"] > result["settings"]["max_concurrency"]:
        problems.append(f"wrong-key: sent {wrong['requests_sent']} requests (> a handful)")
    kill = result["faults"].get("kill9")
    if kill is not None and kill["requests_resent_after_rerun"] > chunk:
        problems.append(f"kill9: resent {kill['requests_resent_after_rerun']} > chunk {chunk}")
    r503 = result["faults"].get("503")
    if r503 is not None and r503["answered"] != r503["rows_in"]:
        problems.append(f"503: only {r503['answered']} of {r503['rows_in']} rows answered")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.faults", description=__doc__)
    p.add_argument("--rows", type=int, default=2000, help="rows of the query (default 2000)")
    p.add_argument("--smoke", action="store_true", help="200 rows, fewer faults (< 30 s)")
    p.add_argument(
        "--faults",
        default=None,
        help=f"comma-separated scenarios (default all: {','.join(s.name for s in FAULT_MATRIX)})",
    )
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"default {DEFAULT_JSON}")
    p.add_argument("--workdir", default=None, help="keep caches and server logs here")
    args = p.parse_args(argv)
    started = time.perf_counter()
    result = run_fault_matrix(
        args.rows,
        smoke=args.smoke,
        faults=args.faults.split(",") if args.faults else None,
        workdir=args.workdir,
    )
    result["total_wall_s"] = round(time.perf_counter() - started, 1)
    words = sys.argv[1:] if argv is None else argv
    result["command"] = " ".join(["python -m benchmarks.faults", *words])
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    md = args.json.with_suffix(".md")
    problems = _acceptance(result)
    md.write_text(
        f"# Fault matrix\n\n`{result['command']}` — {result['rows']} rows, "
        f"chunk size {result['settings']['chunk_size']}, total {result['total_wall_s']} s.\n\n"
        + markdown_table(result)
        + "\nlost = rows_in − answered − skipped − failed. "
        + ("All acceptance checks pass.\n" if not problems else f"FAILED: {problems}\n")
    )
    print(f"wrote {args.json} and {md} in {result['total_wall_s']} s")
    for problem in problems:
        print(f"ACCEPTANCE FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
