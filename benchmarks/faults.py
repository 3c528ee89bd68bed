"""Fault matrix benchmark: `python -m benchmarks.faults [--rows 2000] [--smoke] [--json PATH]`.

A thin command line over `benchmarks.lib.faults.run_fault_matrix` (see its docstring for what each
scenario does and what each number means). Writes the JSON (default
`benchmarks/results/faults.json`) and a markdown table beside it (`.md`); exits 1 when any
scenario lost a row, a kill -9 rerun resent more than one chunk, 10% 503 left a row
unanswered, a hostile case (drip-feed, endless body, dead server) ran past its documented
bound, the wrong-key case sent more than `max_concurrency` requests, or:

- a concurrent-runs case had a run that did not run to success (`runs_ran` < `runs_at_once`);
- a product-path case (`concurrent-runs`, `concurrent-runs-5`, `concurrent-runs-8-postgres`,
  `stray-byte`, `half-written`) has a `mixed` row: a result row that is not its own source's,
  or whose text differs from what was written;
- `stray-byte`: the file was not refused by default, or the refusal did not name its file,
  line and column;
- `half-written`: the landing sensor asked for a run while a file was being written or under
  a temporary name;
- a fleet case (`fleet-*`) ran past 1.5x its healthy replicas alone (30 s when all are
  dead), or a request was served twice (beyond those abandoned at the slow replica);
- a hostile-file case (`gzip-bomb`, `long-cell`, `10k-columns`, `long-line`) did not end as
  expected (refused in one `error:` line naming the limit, or loaded; `long-cell` also loads
  intact with its limit raised) or its peak RSS reached `limit_mb` (`mixed` 1);
- `implausible-usage`: a row given usage its request cannot have ended answered, such a row
  failed without the reason, or the recorded cost exceeded its bound.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from benchmarks.lib.faults import FAULT_MATRIX, markdown_table, run_fault_matrix
from benchmarks.lib.provenance import write_result

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
    for name, row in result["faults"].items():
        if "runs_ran" in row and row["runs_ran"] != row["runs_at_once"]:
            problems.append(f"{name}: {row['runs_ran']} of {row['runs_at_once']} runs ran")
        twice = row.get("served_twice", 0) - row.get("abandoned_at_slow", 0)
        if twice:
            problems.append(f"{name}: {twice} requests served twice")
        if row.get("mixed"):
            problems.append(f"{name}: {row['mixed']} rows mixed or garbled")
    stray = result["faults"].get("stray-byte")
    if stray is not None and not (stray["default_refused"] and stray["default_error_names_place"]):
        problems.append(
            f"stray-byte: not refused with file, line and column: {stray['default_error']}"
        )
    half = result["faults"].get("half-written")
    if half is not None and half["runs_requested_early"]:
        problems.append(f"half-written: {half['runs_requested_early']} runs of unfinished files")
    usage = result["faults"].get("implausible-usage")
    if usage is not None:
        if usage["implausible_answered"]:
            problems.append(f"implausible-usage: {usage['implausible_answered']} answered")
        if usage["implausible_failed_with_reason"] != usage["implausible_rows"]:
            problems.append(
                f"implausible-usage: {usage['implausible_failed_with_reason']} of "
                f"{usage['implausible_rows']} rows failed with the reason"
            )
        if usage["recorded_cost_usd"] > usage["cost_bound_usd"]:
            problems.append(
                f"implausible-usage: cost {usage['recorded_cost_usd']} > bound "
                f"{usage['cost_bound_usd']}"
            )
    return problems


DETAILS: dict[str, tuple[str, ...]] = {
    "concurrent-runs": ("sizes", "runs_ran", "runs_failed"),
    "concurrent-runs-5": ("sizes", "runs_ran", "runs_failed"),
    "concurrent-runs-8-postgres": ("sizes", "runs_ran", "runs_failed"),
    "stray-byte": ("default_refused", "default_error_names_place", "replaced_rows"),
    "half-written": ("settle_seconds", "runs_requested", "runs_requested_early", "runs_per_file"),
    **{name: ("baseline_s", "served_twice", "abandoned_at_slow", "slow_latency_ms", "given_up",
              "per_replica", "stopped")
       for name in ("fleet-3-bad-of-4", "fleet-hung-1-of-2", "fleet-slow-1-of-4",
                    "fleet-all-dead")},
    "gzip-bomb": ("file_mb", "peak_rss_mb", "limit_mb", "outcome"),
    "long-cell": ("peak_rss_mb", "limit_mb", "outcome", "raised_intact", "raised_peak_rss_mb"),
    "10k-columns": ("peak_rss_mb", "limit_mb", "outcome"),
    "long-line": ("peak_rss_mb", "limit_mb", "outcome"),
    "implausible-usage": ("implausible_rows", "implausible_answered",
                          "implausible_failed_with_reason", "recorded_prompt_tokens",
                          "recorded_cost_usd", "cost_bound_usd"),
}  # fmt: skip
"""The fields of a case shown under the table (all of them are in the JSON)."""


def details(result: dict) -> str:
    """One line per case with fields beyond the table's (`DETAILS`); empty when none ran."""
    lines = [
        f"- {name}: " + ", ".join(f"{k}={row[k]}" for k in DETAILS[name] if k in row)
        for name, row in result["faults"].items()
        if name in DETAILS
    ]
    return "\n" + "\n".join(lines) + "\n" if lines else ""


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
    write_result(args.json, result, indent=2)
    md = args.json.with_suffix(".md")
    problems = _acceptance(result)
    md.write_text(
        f"# Fault matrix\n\n`{result['command']}` — {result['rows']} rows, "
        f"chunk size {result['settings']['chunk_size']}, total {result['total_wall_s']} s.\n\n"
        + markdown_table(result)
        + details(result)
        + "\nlost = rows_in − answered − skipped − failed (the product-path cases count each "
        + "source row missing from its run's result); mixed = result rows not their own "
        + "source's, or whose text differs from what was written. "
        + ("All acceptance checks pass.\n" if not problems else f"FAILED: {problems}\n")
    )
    print(f"wrote {args.json} and {md} in {result['total_wall_s']} s")
    for problem in problems:
        print(f"ACCEPTANCE FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
