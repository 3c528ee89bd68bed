"""Speed of the one table loader (`llm_assets.data.tables.load_table`) on 100,000 rows x 8
text columns, as UTF-8 CSV, as cp1252 TSV (decoded and re-encoded on the way) and as JSON
lines, with `pandas.read_csv(dtype=str, keep_default_na=False)` on the same CSV for reference;
then the memory and time of each stage of `llm-assets plan` on a seeded 6-column table.

    python -m benchmarks.loader [--rows N] [--repeats K] [--memory-rows N1,N2,...] [--json PATH]

Each loader figure is the median of K timed loads (after one warm-up).

Memory (`--memory-rows`; default 100,000, 250,000 and 500,000 rows; "" skips it): for each
size, a fresh Python process runs the `plan` command in process (`llm_assets.cli.main`,
`--methods ggr --json`) with the stage functions it calls metered (`stage_specs`):
`load_table`, `check_predicates`, `run_filtered` (DuckDB pushdown), `stage_input`,
`plan_stage` and the optimizer passes it runs (nulls, dedup, GGR reorder, prompt rendering,
context-window fit with a token count per prompt), `requests_from_plan` and the simulated
engine's `run`. Before each stage the peak RSS is reset (`5` written to
`/proc/self/clear_refs`) and after it `VmHWM` (the stage's peak) and `VmRSS` are read from
`/proc/self/status`; a stage that calls others is metered without them (its own code only).
Where `clear_refs` cannot be written, the peak is `getrusage`'s lifetime maximum (not per
stage) and the JSON says so. Then the real command (`llm-assets plan`, a second fresh
process) on the same file gives the end-to-end wall time and peak RSS (`wait4`'s
`ru_maxrss`). A least-squares line over the measured sizes gives 10M-row figures: an
extrapolation, not a measurement.

Writes JSON and markdown (default `benchmarks/results/loader.{json,md}`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pandas as pd

from benchmarks.lib.provenance import write_result
from llm_assets.data.tables import load_table

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "loader.json"
ROOT = Path(__file__).resolve().parent.parent
WORDS = ["good", "bad", "caf\u00e9", "\u201cgreat\u201d", 'say "hi", ok', "0042", "TRUE", "NaN"]


def write_files(folder: Path, rows: int) -> dict[str, Path]:
    """The same seeded table (some nulls, quotes, delimiters, numeric-looking text) in three
    files."""
    rng = random.Random(0)
    columns = [f"c{i}" for i in range(8)]
    cells = [
        [
            None if rng.random() < 0.05 else f"{rng.choice(WORDS)} {rng.randint(0, 999)}"
            for _ in columns
        ]
        for _ in range(rows)
    ]
    frame = pd.DataFrame(cells, columns=columns)
    paths = {
        "csv_utf8": folder / "t.csv",
        "tsv_cp1252": folder / "t.tsv",
        "jsonl": folder / "t.jsonl",
    }
    frame.to_csv(paths["csv_utf8"], index=False)
    frame.to_csv(paths["tsv_cp1252"], index=False, sep="\t", encoding="cp1252")
    frame.to_json(paths["jsonl"], orient="records", lines=True, force_ascii=False)
    return paths


def median_seconds(load, repeats: int) -> float:
    load()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        load()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def loader_speed(rows: int, repeats: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        paths = write_files(Path(folder), rows)
        results = {
            name: {
                "bytes": path.stat().st_size,
                "median_s": median_seconds(lambda p=path: load_table(p), repeats),
            }
            for name, path in paths.items()
        }
        results["pandas_read_csv_dtype_str"] = {
            "bytes": paths["csv_utf8"].stat().st_size,
            "median_s": median_seconds(
                lambda: pd.read_csv(paths["csv_utf8"], dtype=str, keep_default_na=False),
                repeats,
            ),
        }
    return results


# ---- memory per stage of `llm-assets plan` ---------------------------------------------------

DEFAULT_MEMORY_ROWS = (100_000, 250_000, 500_000)
EXTRAPOLATE_ROWS = 10_000_000
TARGET_WALL_S, TARGET_RSS_MB = 300, 8192
"""Issue 24's target for the real command on `EXTRAPOLATE_ROWS` rows: 5 min, 8 GiB."""
PLAN_COLUMNS = ("id", "category", "product", "rating", "country", "review")
PLAN_SQL = """SELECT r.id, r.country,
       LLM('Is this review of {product} ({category}) positive? {review}',
           r.product, r.category, r.review, output => 'choice(positive,negative)') AS sentiment
FROM reviews r
WHERE r.rating >= 2
"""
DUPLICATE_FRACTION = 0.2
"""Share of rows whose LLM inputs (product, category, review) copy another row's."""
PLAN_ARGS = ("--methods", "ggr", "--json")
"""`plan` with the one method the stages are metered for (the default runs three in turn)."""

PIPELINE = ("llm_assets.pipeline.{}",)
SIMULATE = "simulate (sim engine run)"
OTHER = "cli (rest)"
PLAN_REST = "plan: frames (rest of plan_stage)"
PASS_STAGES = {
    "skip_nulls": "plan: skip nulls",
    "dedup": "plan: dedup",
    "reorder_inputs": "plan: reorder (GGR)",
    "render": "plan: render prompts",
    "fit_context": "plan: fit context (token count)",
}
"""Stage names of the optimizer rules (`llm_assets.optimizer.passes.RULES`); a rule not
named here is `plan: <its name>`."""
REQUIRED = (
    "load",
    "typecheck",
    "filter (DuckDB pushdown)",
    "stage input",
    "plan: dedup",
    "plan: reorder (GGR)",
    "plan: render prompts",
    "plan: fit context (token count)",
    PLAN_REST,
    "requests",
    SIMULATE,
    OTHER,
)
"""The stages every run reports, whatever functions the planner is made of."""


def stage_specs() -> list[tuple[str, str, Sequence[str]]]:
    """(stage, function, modules that may define it: the first that does; `{}` is any loaded
    module of `llm_assets.pipeline`), in the order `plan` calls them; `plan_stage` (the one
    LLM stage's plan) runs the optimizer rules (`llm_assets.optimizer.passes.RULES`), one
    stage each, and its own line is the rest of it (the deduped and plan frames)."""
    from llm_assets.optimizer.passes import RULES

    return [
        ("load", "load_table", ("llm_assets.data.tables",)),
        ("typecheck", "check_predicates", ("llm_assets.pipeline.typecheck",)),
        ("filter (DuckDB pushdown)", "run_filtered", PIPELINE),
        ("stage input", "stage_input", PIPELINE),
        (PLAN_REST, "plan_stage", PIPELINE),
        *(
            (PASS_STAGES.get(r.__name__, f"plan: {r.__name__}"), r.__name__, (r.__module__,))
            for r in RULES
        ),
        ("requests", "requests_from_plan", PIPELINE),
    ]


def write_plan_table(path: Path, rows: int, seed: int = 0) -> dict:
    """A seeded CSV of `rows` x `PLAN_COLUMNS` (`plan_table`)."""
    import pyarrow.csv as pa_csv

    pa_csv.write_csv(plan_table(rows, seed), path)
    return {"rows": rows, "file_mb": round(path.stat().st_size / 1e6, 1)}


def plan_table(rows: int, seed: int = 0):
    """A seeded Arrow table of `rows` x `PLAN_COLUMNS`: `rating` 1-5 (the pushdown keeps
    ~80%), low-cardinality `category` (12), `product` (800), `country` (30), a ~110-character
    `review` distinct per row, and `DUPLICATE_FRACTION` of rows copying another row's LLM
    inputs (so dedup has work)."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}" for i in range(400)], dtype=object)
    phrases = np.array(
        [" ".join(vocab[rng.integers(0, len(vocab), 6)]) for _ in range(4096)], dtype=object
    )
    ids = np.arange(rows).astype(str).astype(object)
    review = phrases[rng.integers(0, len(phrases), rows)]
    for _ in range(3):
        review = review + " " + phrases[rng.integers(0, len(phrases), rows)]
    review = review + " #" + ids
    category = np.array([f"category {i}" for i in range(12)], dtype=object)
    product = np.array([f"product {i:04d}" for i in range(800)], dtype=object)
    country = np.array([f"country {i}" for i in range(30)], dtype=object)
    source = np.arange(rows)
    copies = rng.random(rows) < DUPLICATE_FRACTION
    source[copies] = rng.integers(0, rows, int(copies.sum()))
    columns = {
        "id": ids,
        "category": category[rng.integers(0, len(category), rows)][source],
        "product": product[rng.integers(0, len(product), rows)][source],
        "rating": rng.integers(1, 6, rows).astype(str).astype(object),
        "country": country[rng.integers(0, len(country), rows)],
        "review": review[source],
    }
    return pa.table({c: pa.array(columns[c], type=pa.string()) for c in PLAN_COLUMNS})


def _status_kb() -> tuple[int, int]:
    """(VmHWM, VmRSS) of this process in kB."""
    found = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                found[key] = int(value.split()[0])
    return found["VmHWM"], found["VmRSS"]


def _maxrss_mb(usage) -> float:
    """`ru_maxrss` in MB (kB on Linux, bytes on macOS)."""
    return usage.ru_maxrss / (1e6 if sys.platform == "darwin" else 1e3)


class StageMeter:
    """Wall time, peak RSS and RSS after, per stage, over a stack of entered stages (time and
    memory go to the innermost). Each boundary reads the peak and resets it."""

    def __init__(self, outer: str = OTHER):
        self.per_stage = Path("/proc/self/clear_refs").exists() and self._reset()
        self.method = (
            "/proc/self/clear_refs + VmHWM (peak reset per stage)"
            if self.per_stage
            else "getrusage ru_maxrss (lifetime peak, NOT reset per stage: clear_refs not writable)"
        )
        self.stack = [outer]
        self.stages: dict[str, dict] = {}
        self.segment_rss = self._sample()[1]
        self._stage(outer).update(calls=1, rss_before_mb=self.segment_rss)
        self.started = time.perf_counter()

    @staticmethod
    def _reset() -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    def _sample(self) -> tuple[float, float | None]:
        """(peak MB since the last reset, RSS MB now or None)."""
        if self.per_stage:
            hwm, rss = _status_kb()
            return hwm / 1e3, rss / 1e3
        rss = _status_kb()[1] / 1e3 if Path("/proc/self/status").exists() else None
        return _maxrss_mb(resource.getrusage(resource.RUSAGE_SELF)), rss

    def boundary(self) -> float | None:
        """Close the running segment: charge it to the innermost stage and reset the peak;
        the RSS now (MB)."""
        now = time.perf_counter()
        peak, rss = self._sample()
        stage = self._stage(self.stack[-1])
        stage["seconds"] += now - self.started
        stage["peak_mb"] = max(stage["peak_mb"], peak)
        if self.per_stage:  # the most this stage's own code rose above where it started
            stage["grew_mb"] = max(stage["grew_mb"], peak - self.segment_rss)
        stage["rss_after_mb"] = self.segment_rss = rss
        if self.per_stage:
            self._reset()
        self.started = time.perf_counter()
        return rss

    def _stage(self, name: str) -> dict:
        empty = {"seconds": 0.0, "peak_mb": 0.0, "grew_mb": 0.0, "rss_before_mb": None}
        return self.stages.setdefault(name, {**empty, "rss_after_mb": None, "calls": 0})

    def enter(self, name: str) -> None:
        rss = self.boundary()
        stage = self._stage(name)
        if stage["rss_before_mb"] is None:  # first entry
            stage["rss_before_mb"] = rss
        self.stack.append(name)

    def leave(self) -> None:
        self.boundary()
        self.stages[self.stack.pop()]["calls"] += 1

    def wrap(self, fn: Callable, name: str) -> Callable:
        @functools.wraps(fn)
        def metered(*args, **kwargs):
            self.enter(name)
            try:
                return fn(*args, **kwargs)
            finally:
                self.leave()

        return metered

    def report(self) -> list[dict]:
        return [
            {
                "stage": name,
                "seconds": round(s["seconds"], 6),  # a pass that returns at once: a few us
                "peak_mb": round(s["peak_mb"], 1),
                "grew_mb": round(s["grew_mb"], 1) if self.per_stage else None,
                **{
                    k: None if s[k] is None else round(s[k], 1)
                    for k in ("rss_before_mb", "rss_after_mb")
                },
                "calls": s["calls"],
            }
            for name, s in self.stages.items()
        ]


def find_function(name: str, modules: Sequence[str]) -> Callable:
    """`name` from the first of `modules` that defines it (a `{}` in a module name is tried
    as every loaded module of that package)."""
    import importlib

    tried = []
    for pattern in modules:
        if "{}" in pattern:
            prefix = pattern.split("{}")[0]
            names = sorted(m for m in sys.modules if m.startswith(prefix))
        else:
            names = [pattern]
        for module_name in names:
            tried.append(module_name)
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
            value = module.__dict__.get(name)
            if callable(value) and getattr(value, "__module__", None) == module_name:
                return value
    raise AttributeError(f"{name!r} is defined in none of {tried}: update benchmarks.loader")


def _import_plan_path() -> None:
    """What `plan` imports, imported before metering: no import lands in a stage."""
    import duckdb  # noqa: F401
    import pyarrow.pandas_compat  # noqa: F401
    import sqlglot.dialects.duckdb  # noqa: F401
    import tqdm  # noqa: F401

    import llm_assets.assets.tracking  # noqa: F401
    import llm_assets.planning  # noqa: F401
    from llm_assets.cli import commands as cli  # noqa: F401
    from llm_assets.pipeline import run, typecheck  # noqa: F401
    from resources import llm_resources  # noqa: F401


HOOK = "__loader_benchmark_hook_{}__"


def _hook(fn, around: Callable, undo: list) -> None:
    """Make every call of `fn` (however its caller reached it: a module attribute, a name
    imported from it, a default argument, a tuple of rules) `around(original, args,
    kwargs)`, by giving `fn` the code of a trampoline; `undo` collects what restores it."""
    import types

    if not isinstance(fn, types.FunctionType) or fn.__closure__:
        raise TypeError(f"cannot meter {fn!r}: not a plain module-level function")
    original = types.FunctionType(
        fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
    original.__kwdefaults__ = fn.__kwdefaults__
    name = HOOK.format(id(fn))
    namespace: dict = {}
    exec(f"def {fn.__name__}(*args, **kwargs):\n    return {name}(args, kwargs)\n", namespace)
    fn.__globals__[name] = lambda args, kwargs: around(original, args, kwargs)
    code = fn.__code__
    fn.__code__ = namespace[fn.__name__].__code__
    undo.append(lambda: (setattr(fn, "__code__", code), fn.__globals__.pop(name, None)))


@contextlib.contextmanager
def metered_stages(meter: StageMeter) -> Iterator[dict]:
    """Meter every stage of `stage_specs()`, the simulated engine's `run` (through the CLI's
    `build_engine`) and the context-window token counter (`context_limit`; time only, as
    `token_count_s`); restore them after. Yields `counted` (the token counter's time and
    calls, and `expected`: every stage name the run must report). A stage function found
    nowhere is an AttributeError."""
    _import_plan_path()
    from llm_assets.cli import commands as cli

    counted = {"token_count_s": 0.0, "token_counts": 0}
    undo: list[Callable] = []

    def stage(name: str) -> Callable:
        def around(original, args, kwargs):
            meter.enter(name)
            try:
                return original(*args, **kwargs)
            finally:
                meter.leave()

        return around

    def build_engine(original, args, kwargs):
        engine = original(*args, **kwargs)
        engine.run = meter.wrap(engine.run, SIMULATE)
        return engine

    def context_limit(original, args, kwargs):
        limit, count = original(*args, **kwargs)

        def timed_count(text: str) -> int:
            started = time.perf_counter()
            try:
                return count(text)
            finally:
                counted["token_count_s"] += time.perf_counter() - started
                counted["token_counts"] += 1

        return limit, timed_count

    specs = stage_specs()
    counted["expected"] = [name for name, _, _ in specs] + [SIMULATE, OTHER]
    try:
        for name, function, modules in specs:
            _hook(find_function(function, modules), stage(name), undo)
        _hook(cli.build_engine, build_engine, undo)
        _hook(find_function("context_limit", PIPELINE), context_limit, undo)
        yield counted
    finally:
        for restore in reversed(undo):
            restore()


def measure_stages(csv_path: Path, sql_path: Path) -> dict:
    """`llm-assets plan SQL --table reviews=CSV --methods ggr --json`, in this process, metered
    per stage (see the module docstring). Run it in a fresh process for figures to compare."""
    from llm_assets.cli import commands as cli

    _import_plan_path()
    meter = StageMeter()
    baseline = meter.stages[OTHER]["rss_before_mb"]
    out = io.StringIO()
    args = ["plan", str(sql_path), "--table", f"reviews={csv_path}", *PLAN_ARGS]
    with metered_stages(meter) as counted, contextlib.redirect_stdout(out):
        cli.main.main(args, standalone_mode=False)
    meter.boundary()
    report = json.loads(out.getvalue())["methods"]["ggr"]
    stage_rows = meter.report()
    return {
        "expected_stages": counted["expected"],
        "peak_method": meter.method,
        "baseline_rss_mb": None if baseline is None else round(baseline, 1),
        "stages": stage_rows,
        "seconds_total": round(sum(s["seconds"] for s in stage_rows), 3),
        "peak_mb": round(max(s["peak_mb"] for s in stage_rows), 1),
        "token_count_s": round(counted["token_count_s"], 3),
        "token_counts": counted["token_counts"],
        "rows_to_first_llm": report["rows_to_first_llm"],
        "n_requests": report["n_requests"],
        "prompt_tokens": report["prompt_tokens"],
        "priced_on": report["stages"][0]["priced_on"],
    }


def run_cli(csv_path: Path, sql_path: Path) -> dict:
    """The real command in a fresh process: wall seconds and peak RSS (`wait4`)."""
    script = Path(sys.executable).with_name("llm-assets")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "llm_assets.cli"]
    command += ["plan", str(sql_path), "--table", f"reviews={csv_path}", *PLAN_ARGS]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(command, stdout=out, stderr=err, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(command)} failed:\n{err.read().decode()[-2000:]}")
    return {"wall_s": round(wall, 3), "max_rss_mb": round(_maxrss_mb(usage), 1)}


def memory_size(rows: int, folder: Path) -> dict:
    """One size: the table, the metered stages in a fresh process, then the real command."""
    csv_path, sql_path = folder / f"plan_{rows}.csv", folder / "plan.sql"
    sql_path.write_text(PLAN_SQL, encoding="utf-8")
    entry = write_plan_table(csv_path, rows)
    entry["load_average_before"] = round(os.getloadavg()[0], 2)
    command = [sys.executable, "-m", "benchmarks.loader", "--memory-child"]
    command += [str(csv_path), str(sql_path)]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"metered plan of {rows} rows failed:\n{proc.stderr[-2000:]}")
    entry.update(json.loads(proc.stdout))
    entry["cli"] = run_cli(csv_path, sql_path)
    entry["load_average_after"] = round(os.getloadavg()[0], 2)
    csv_path.unlink()
    return entry


def check_memory(entry: dict) -> list[str]:
    """What is wrong with one size's figures (empty: nothing): every stage the run expected
    and every `REQUIRED` one present, entered, with positive seconds, peak and RSS before and
    after, the peak at least the RSS after it, and the real command's figures positive."""
    problems = []
    by_name = {s["stage"]: s for s in entry.get("stages", [])}
    expected = list(dict.fromkeys([*entry.get("expected_stages", []), *REQUIRED]))
    for name in expected:
        stage = by_name.get(name)
        if stage is None:
            problems.append(f"stage {name!r} missing")
            continue
        for key in ("seconds", "peak_mb", "rss_before_mb", "rss_after_mb", "calls"):
            if not (isinstance(stage.get(key), int | float) and stage[key] > 0):
                problems.append(f"stage {name!r}: {key} is {stage.get(key)!r}, not positive")
        if (stage.get("peak_mb") or 0) < (stage.get("rss_after_mb") or 0):
            problems.append(f"stage {name!r}: peak {stage['peak_mb']} < RSS after")
        if (stage.get("grew_mb") or 0) < 0:
            problems.append(f"stage {name!r}: grew_mb {stage['grew_mb']} is negative")
    extra = sorted(set(by_name) - set(expected))
    if extra:
        problems.append(f"unexpected stage(s) {extra}")
    cli = entry.get("cli") or {}
    for key in ("wall_s", "max_rss_mb"):
        if not (isinstance(cli.get(key), int | float) and cli[key] > 0):
            problems.append(f"cli {key} is {cli.get(key)!r}, not positive")
    if not entry.get("n_requests", 0) > 0:
        problems.append("no request planned")
    return problems


def stage_names(sizes: list[dict]) -> list[str]:
    """The stages of the first size, in the order they were first entered."""
    return [s["stage"] for s in sizes[0]["stages"]]


def _line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line through two or more distinct xs."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return slope, my - slope * mx


def extrapolate(sizes: list[dict], rows: int = EXTRAPOLATE_ROWS) -> dict:
    """Linear fit of each figure over the measured sizes, read at `rows`: NOT measured.
    Fewer than two distinct sizes fit no line: every figure is None."""
    xs = [s["rows"] for s in sizes]

    def at(ys: Sequence[float]) -> dict:
        if len(set(xs)) < 2:
            return {"per_million_rows": None, "intercept": None, "at_rows": None}
        slope, intercept = _line(xs, ys)
        return {
            "per_million_rows": round(slope * 1e6, 3),
            "intercept": round(intercept, 3),
            "at_rows": round(intercept + slope * rows, 1),
        }

    stages = {}
    for name in stage_names(sizes):
        rows_of = [{s["stage"]: s for s in size["stages"]}[name] for size in sizes]
        stages[name] = {
            "seconds": at([r["seconds"] for r in rows_of]),
            "peak_mb": at([r["peak_mb"] for r in rows_of]),
        }
    return {
        "label": f"EXTRAPOLATION to {rows:,} rows (least-squares line over the measured sizes "
        f"{xs}); not measured. Superlinear stages (sorting) or memory that does not fit would "
        "make the real figures larger.",
        "rows": rows,
        "fit_rows": xs,
        "stage_peak_mb": at([s["peak_mb"] for s in sizes]),
        "stage_seconds_total": at([s["seconds_total"] for s in sizes]),
        "cli_max_rss_mb": at([s["cli"]["max_rss_mb"] for s in sizes]),
        "cli_wall_s": at([s["cli"]["wall_s"] for s in sizes]),
        "stages": stages,
    }


def memory_report(rows_list: Sequence[int]) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        sizes = []
        for rows in rows_list:
            entry = memory_size(rows, Path(folder))
            problems = check_memory(entry)
            if problems:
                raise RuntimeError(f"{rows} rows: " + "; ".join(problems))
            sizes.append(entry)
            print(f"memory: {rows:,} rows done", file=sys.stderr)
    return {
        "command": "llm-assets plan plan.sql --table reviews=plan_N.csv " + " ".join(PLAN_ARGS),
        "sql": PLAN_SQL,
        "columns": list(PLAN_COLUMNS),
        "duplicate_fraction": DUPLICATE_FRACTION,
        "peak_method": sizes[0]["peak_method"],
        "sizes": sizes,
        "extrapolation": extrapolate(sizes),
    }


def _fit(figure: dict) -> str:
    return "n/a" if figure["at_rows"] is None else f"{figure['at_rows']:,.0f}"


def memory_markdown(memory: dict) -> list[str]:
    sizes = memory["sizes"]
    measured = max(s["rows"] for s in sizes) >= EXTRAPOLATE_ROWS
    header = "| stage | " + " | ".join(
        f"{s['rows']:,} rows: s / peak MB (+rise) / after MB" for s in sizes
    )
    header += " |" if measured else " | 10M rows (EXTRAPOLATED): s / peak MB |"
    lines = [
        f"## Memory per stage of `{memory['command']}`",
        "",
        f"A seeded table of {len(memory['columns'])} text columns ({', '.join(memory['columns'])});"
        f" {memory['duplicate_fraction']:.0%} of rows repeat another row's LLM inputs; the "
        "pushdown `rating >= 2` keeps ~80%. Each size in a fresh process; peak RSS: "
        f"{memory['peak_method']}. A stage that calls others is metered without them. Peak: the"
        " process's RSS high-water mark during the stage (everything held before it included); "
        "+rise: the most the stage's own code raised RSS above where it started; after: RSS "
        "when it returned.",
        "",
        header,
        "|---|" + "---|" * (len(sizes) + (0 if measured else 1)),
    ]
    fit = memory["extrapolation"]
    extra = (lambda cell: []) if measured else (lambda cell: [cell])
    for name in stage_names(sizes):
        cells = []
        for size in sizes:
            s = {r["stage"]: r for r in size["stages"]}[name]
            grew = "?" if s["grew_mb"] is None else f"{s['grew_mb']:,.0f}"
            peak = f"{s['peak_mb']:,.0f} (+{grew})"
            cells.append(f"{s['seconds']:.2f} / {peak} / {s['rss_after_mb']:,.0f}")
        e = fit["stages"][name]
        cells += extra(f"{_fit(e['seconds'])} / {_fit(e['peak_mb'])}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    total = f"**{_fit(fit['stage_seconds_total'])} / {_fit(fit['stage_peak_mb'])}**"
    real = f"**{_fit(fit['cli_wall_s'])} / {_fit(fit['cli_max_rss_mb'])}**"
    totals = [f"**{s['seconds_total']:.1f} / {s['peak_mb']:,.0f}**" for s in sizes]
    reals = [f"**{s['cli']['wall_s']:.1f} / {s['cli']['max_rss_mb']:,.0f}**" for s in sizes]
    lines += [
        "| **all stages (peak = max)** | " + " | ".join(totals + extra(total)) + " |",
        "| **real command (`wait4`): wall s / max RSS MB** | "
        + " | ".join(reals + extra(real))
        + " |",
        "",
        "| rows | file MB | rows to the LLM | requests (distinct) | prompt tokens | engine "
        "figures from | token counting s (in plan) | RSS after imports MB | load average "
        "before, after |",
        "|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {s['rows']:,} | {s['file_mb']} | {s['rows_to_first_llm']:,} | "
            f"{s['n_requests']:,} | {s['prompt_tokens']:,} | {_priced(s.get('priced_on'))} | "
            f"{s['token_count_s']:.2f} | {s['baseline_rss_mb']:,.0f} | "
            f"{s['load_average_before']}, {s['load_average_after']} |"
            for s in sizes
        ),
        "",
    ]
    if measured:
        big = max(sizes, key=lambda s: s["rows"])
        wall, rss = big["cli"]["wall_s"], big["cli"]["max_rss_mb"]
        verdict = lambda ok: "met" if ok else "MISSED"  # noqa: E731
        lines.append(
            f"{big['rows']:,} rows, measured: the real command took {wall:,.0f} s "
            f"(target {TARGET_WALL_S} s: {verdict(wall <= TARGET_WALL_S)}) and peaked at "
            f"{rss:,.0f} MB (target {TARGET_RSS_MB:,} MB: {verdict(rss <= TARGET_RSS_MB)})."
        )
    else:
        lines.append(f"10M column: {fit['label']}")
    return lines


def _priced(sample: dict | None) -> str:
    """Where a size's engine figures come from (`llm_assets.pipeline.pricing`)."""
    if not sample:
        return "every request simulated"
    return f"{sample['requests']:,} requests in {sample['windows']} windows"


def memory_child(csv_path: str, sql_path: str) -> None:
    print(json.dumps(measure_stages(Path(csv_path), Path(sql_path))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--memory-rows",
        default=",".join(str(n) for n in DEFAULT_MEMORY_ROWS),
        help="comma-separated table sizes for the per-stage memory of `plan` ('' skips it)",
    )
    parser.add_argument("--memory-child", nargs=2, metavar=("CSV", "SQL"), help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(*args.memory_child)
        return
    memory_rows = [int(n) for n in args.memory_rows.split(",") if n.strip()]
    results = loader_speed(args.rows, args.repeats)
    report = {
        "rows": args.rows,
        "columns": 8,
        "repeats": args.repeats,
        "machine": platform.platform(),
        "results": results,
    }
    if memory_rows:
        report["memory"] = memory_report(memory_rows)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.json, report, indent=2)
    text = report_markdown(report)
    args.json.with_suffix(".md").write_text(text)
    print(text, end="")


def report_markdown(report: dict) -> str:
    """The markdown of a `main` report (loader speed, then the memory section if any)."""
    results = report["results"]
    lines = [
        f"# Loader speed: {report['rows']:,} rows x 8 text columns (median of {report['repeats']})",
        "",
        "| file | MB | median s |",
        "|---|---|---|",
        *(
            f"| {name} | {r['bytes'] / 1e6:.1f} | {r['median_s']:.3f} |"
            for name, r in results.items()
        ),
        "",
        "`python -m benchmarks.loader`; pandas is the reference, not a path of the project.",
    ]
    if "memory" in report:
        lines += ["", *memory_markdown(report["memory"])]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
