"""The fault matrix's input cases: a file with one stray byte, and a landed file still being
written. Both go through the product as a user declares a query (`llm_query_assets`, its
Dagster assets materialized in process on the sim engine, one scratch `$LLM_ASSETS_HOME`),
and check every row of the result against what was written to the file, cell by cell:

- `stray-byte`: a UTF-8 CSV of `rows` reviews, accented text (é, ñ, ü, ø, 日本, ...) in every
  other row, plus one byte invalid in UTF-8 (0xff) in one row. Declared as it is, the query is
  refused (`default_refused`, with the one-line `default_error`, which must name the file,
  line and column: `default_error_names_place`); declared with `encoding_errors: replace`, it
  runs. `lost` counts the file's rows missing from the result; `mixed` counts result rows
  whose text differs from what was written (the stray byte's row must read U+FFFD in place of
  that byte and nothing else changed; any other difference, such as the whole file re-read as
  Windows-1252, garbles every accented row), plus rows that are not the file's or appear twice.
- `half-written`: the landing sensor (`settle_seconds` 1 s) is evaluated while a CSV of
  `rows` rows is written in three steps (cut mid-number, then 3/4, then the rest), then past
  `settle_seconds` after the last write; a second file is written whole under a temporary name
  (`.b.csv`: a leading dot, the one temporary name that also ends in a landing suffix, so only
  the temporary-name rule keeps it out), aged, looked at, then renamed (the write-then-rename
  convention). Every run the sensor asks for is materialized at once, reading the file as it
  is at that moment (what a launched run does). `lost` counts, over those runs, the final
  file's rows missing from a run's result; `mixed` counts rows whose last value differs from
  the final file (`22486` read as `224`) or that are not the file's; `faults_injected` counts
  the looks made while a file was still being written or under its temporary name, and
  `runs_requested_early` the runs asked for then (must be 0).
"""

from __future__ import annotations

import csv
import io
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.lib.concurrent_runs import llm_assets_home

__all__ = ["half_written_case", "stray_byte_case", "stray_byte_file"]

STRAY = b"\xff"
"""Invalid anywhere in UTF-8."""
_MARK = "@@STRAY@@"
_ACCENTED = ("très émouvant", "niño pequeño", "Über-schön", "smørrebrød", "日本の映画",
             "façade naïve", "crème brûlée", "Ångström", "Straße", "ça va, à peu près")  # fmt: skip
STRAY_SQL = (
    "SELECT r.id, r.review, LLM('Is this review positive? Answer Yes or No. {review}', "
    "r.review) AS positive FROM reviews r"
)
LANDED_SQL = (
    "SELECT r.id, r.amount, LLM('Is this review positive? Answer Yes or No. {review}', "
    "r.review) AS positive FROM reviews r"
)


def _materialize(defs: Any, **kwargs: Any) -> Any:
    import dagster as dg

    from jobs.resources import resources_for

    assets = list(defs.assets) + list(defs.asset_checks)
    return dg.materialize(assets, resources=resources_for("sim"), raise_on_error=False, **kwargs)


def _result(run: Any, name: str) -> Any:
    return run.output_for_node(f"{name}__result") if run.success else None


def _statuses(result: Any) -> dict[str, int]:
    if result is None:
        return {"answered": 0, "failed": 0, "skipped": 0}
    status = result["status"]
    return {k: int((status == k).sum()) for k in ("answered", "failed", "skipped")}


def _compare(result: Any, expected: dict[str, str], column: str) -> dict[str, int]:
    """lost: expected ids missing from `result`; mixed: rows whose `column` differs from the
    expected text, ids not expected, ids seen twice."""
    if result is None:
        return {"lost": len(expected), "mixed": 0}
    ids = [str(i) for i in result["id"]]
    seen = Counter(ids)
    values = dict(zip(ids, (None if v is None else str(v) for v in result[column]), strict=True))
    lost = sum(1 for i in expected if i not in seen)
    foreign = sum(n for i, n in seen.items() if i not in expected)
    twice = sum(n - 1 for i, n in seen.items() if i in expected and n > 1)
    garbled = sum(1 for i, text in expected.items() if i in seen and values[i] != text)
    return {"lost": lost, "mixed": foreign + twice + garbled}


# ---------------------------------------------------------------------------------------------
# stray-byte


def stray_byte_file(path: Path, rows: int) -> tuple[dict[str, str], int]:
    """Write the case's CSV to `path`: (id -> the review as `encoding_errors: replace` must
    read it, the 1-based line of the stray byte)."""
    texts = {}
    for i in range(rows):
        words = f"review {i}: " + (_ACCENTED[i % len(_ACCENTED)] if i % 2 == 0 else "plain text")
        texts[str(i)] = f"{words}, seen {i % 7} times"
    bad = rows // 2
    texts[str(bad)] = texts[str(bad)].replace(": ", f": {_MARK}", 1)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["id", "review"])
    writer.writerows(texts.items())
    path.write_bytes(out.getvalue().encode("utf-8").replace(_MARK.encode(), STRAY))
    texts[str(bad)] = texts[str(bad)].replace(_MARK, "\ufffd")
    return texts, bad + 2


def stray_byte_case(rows: int, workdir: Path) -> dict[str, Any]:
    """See the module docstring."""
    from llm_assets import llm_query_assets

    folder = workdir / "stray-byte"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "reviews.csv"
    expected, line = stray_byte_file(path, rows)
    start = time.perf_counter()
    with llm_assets_home(folder / "home"):
        try:
            llm_query_assets("stray", STRAY_SQL, sources={"reviews": str(path)})
            default_error = None
        except ValueError as exc:
            default_error = str(exc)
        defs = llm_query_assets(
            "stray",
            STRAY_SQL,
            sources={"reviews": {"path": str(path), "encoding_errors": "replace"}},
        )
        run = _materialize(defs)
    wall = time.perf_counter() - start
    result = _result(run, "stray")
    counts = _statuses(result)
    checked = _compare(result, expected, "review")
    place = f"{path}: line {line}, column 2 ('review')"
    return {
        "rows_in": rows,
        **counts,
        **checked,
        "requests_sent": counts["answered"] + counts["failed"],
        "requests_resent_after_rerun": 0,
        "http_calls": 0,
        "faults_injected": {"stray_bytes": 1, "accented_rows": (rows + 1) // 2},
        "default_refused": default_error is not None,
        "default_error": default_error,
        "default_error_names_place": default_error is not None and place in default_error,
        "replaced_rows": sum(1 for t in expected.values() if "\ufffd" in t),
        "wall_s": round(wall, 2),
    }


# ---------------------------------------------------------------------------------------------
# half-written


def landed_csv(rows: int, first: int = 0) -> tuple[bytes, dict[str, str]]:
    """A landed CSV (id, review, amount) of `rows` rows with ids from `first`, and id ->
    amount (five digits, the last value of each line)."""
    amounts = {str(first + i): str(10000 + (first + i) * 7919 % 90000) for i in range(rows)}
    lines = [f"{i},review {i} of a landed file,{a}\n" for i, a in amounts.items()]
    return ("id,review,amount\n" + "".join(lines)).encode(), amounts


def _cut_mid_number(data: bytes, fraction: float) -> int:
    """A byte offset about `fraction` into `data`, inside the last value of a line (two
    digits of its five written)."""
    end = data.index(b"\n", int(len(data) * fraction))
    return end - 3


def _age(path: Path, seconds: float) -> None:
    when = time.time() - seconds
    os.utime(path, (when, when))


def half_written_case(rows: int, workdir: Path, *, settle_seconds: float = 1.0) -> dict[str, Any]:
    """See the module docstring."""
    import dagster as dg

    from llm_assets import llm_query_assets
    from resources.warehouse.store import warehouse_io_manager

    folder = workdir / "half-written"
    landing = folder / "landing"
    landing.mkdir(parents=True, exist_ok=True)
    a_data, a_amounts = landed_csv(rows)
    b_data, b_amounts = landed_csv(max(10, rows // 4), first=rows)
    finals = {"a.csv": a_amounts, "b.csv": b_amounts}
    start = time.perf_counter()
    runs: list[dict[str, Any]] = []
    with llm_assets_home(folder / "home"), dg.instance_for_test() as instance:
        defs = llm_query_assets(
            "landed",
            LANDED_SQL,
            sources={"reviews": "unused.csv"},
            landing={"folder": str(landing), "settle_seconds": settle_seconds},
        )
        (sensor,) = defs.sensors
        state: dict[str, Any] = {"cursor": None}

        def look(writing: tuple[str, ...] = ()) -> None:
            """One sensor evaluation; each run it asks for is materialized at once. A run is
            early when its file is in `writing` (not yet complete) or has a temporary name."""
            context = dg.build_sensor_context(
                instance=instance,
                cursor=state["cursor"],
                resources={"io_manager": warehouse_io_manager()},
            )
            result = sensor(context)
            state["cursor"] = result.cursor
            for added in result.dynamic_partitions_requests or []:
                instance.add_dynamic_partitions(added.partitions_def_name, added.partition_keys)
            for request in result.run_requests or []:
                key = request.partition_key
                run = _materialize(defs, partition_key=key, instance=instance)
                table = _result(run, "landed")
                final = finals[key.lstrip(".")]
                early = key in writing or key not in finals
                runs.append(
                    {"key": key, "early": early, **_statuses(table),
                     **_compare(table, final, "amount")}
                )  # fmt: skip

        a = landing / "a.csv"
        looks_while_writing = 0
        with open(a, "wb") as writer:
            cuts = [_cut_mid_number(a_data, 0.5), _cut_mid_number(a_data, 0.75), len(a_data)]
            done = 0
            for k, cut in enumerate(cuts):
                writer.write(a_data[done:cut])
                writer.flush()
                done = cut
                if k < len(cuts) - 1:
                    look(writing=("a.csv",))
                    looks_while_writing += 1
                    time.sleep(settle_seconds / 2)
        time.sleep(settle_seconds + 0.2)
        look()  # a.csv, settled: one run
        part = landing / ".b.csv"
        part.write_bytes(b_data)
        _age(part, 60 + settle_seconds)
        look()  # a temporary name: never launched, however old
        looks_while_writing += 1
        part.rename(landing / "b.csv")  # atomic; keeps its (old) modification time
        look()  # b.csv at first sight
        look()  # nothing new: nothing asked twice
    wall = time.perf_counter() - start
    asked = Counter(r["key"] for r in runs)
    never = [k for k in finals if asked[k] == 0]
    totals = Counter[str]()
    for r in runs:
        totals.update({k: r[k] for k in ("answered", "failed", "skipped", "lost", "mixed")})
    rows_in = sum(len(v) for v in finals.values())
    return {
        "rows_in": rows_in,
        "answered": totals["answered"],
        "skipped": totals["skipped"],
        "failed": totals["failed"],
        # a file never launched loses all its rows; a run of a partial file, its missing ones
        "lost": totals["lost"] + sum(len(finals[k]) for k in never),
        "mixed": totals["mixed"],
        "requests_sent": totals["answered"] + totals["failed"],
        "requests_resent_after_rerun": 0,
        "http_calls": 0,
        "faults_injected": {"looks_while_writing": looks_while_writing},
        "runs_requested": len(runs),
        "runs_requested_early": sum(1 for r in runs if r["early"]),
        "runs_per_file": dict(asked),
        "settle_seconds": settle_seconds,
        "wall_s": round(wall, 2),
    }
