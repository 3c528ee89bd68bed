"""An original-vs-GGR pair through the project's own pipeline on a real `llama-server`.

`run_pair(binary, model, movies_csv, home)` runs one query job (Q1 by default) once per method
with `LLM_ASSETS_ENGINE=openai`, each against a fresh `llama-server` (one slot, empty cache),
and returns one `PairRun` per method (or per named rung of options, `rungs`): the project's own
counts (the `llm_outputs` materialization's metadata), the server's `/metrics` counters over the
run, the row accounting, the asset checks, the requests exactly as sent (for the simulator's
prediction) and each row's answer (for agreement between runs).

`run_query(job, movies_csv, method)` is the single call into the project's pipeline; it reads
the engine from the `LLM_ASSETS_*` environment that `openai_env` sets, like `dagster job
execute` would.

Work-arounds for defects of the OpenAI engine path (issue 13, fixed on another branch):
`LLM_ASSETS_OPENAI_API_KEY` is set to a dummy value (a keyless server still needs one), and
`max_concurrency` in run config repeats `base_url` and `model` (as `env:` references).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pandas as pd

from benchmarks.lib.llama_server import ALIAS, LlamaServer

DUMMY_KEY = "no-key-needed"
REQUEST_COLUMNS = ["request_id", "prompt", "prompt_tokens", "cached_tokens", "output_tokens"]


@contextlib.contextmanager
def openai_env(base_url: str, model: str, home: Path) -> Iterator[None]:
    """Point the project at an OpenAI-compatible server (restores the environment after)."""
    values = {
        "LLM_ASSETS_ENGINE": "openai",
        "LLM_ASSETS_OPENAI_BASE_URL": base_url,
        "LLM_ASSETS_OPENAI_MODEL": model,
        "LLM_ASSETS_OPENAI_API_KEY": DUMMY_KEY,
        "LLM_ASSETS_HOME": str(home),
    }
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclass
class QueryRun:
    """What one pipeline run reports, read back from Dagster and the warehouse."""

    success: bool
    metadata: dict[str, object]
    """The `llm_outputs` materialization's metadata (cached_tokens, rows_answered, ...)."""
    failed_checks: list[str]
    requests: pd.DataFrame
    """One row per request sent, in send order: prompt, prompt/cached/output tokens."""
    answers: dict[int, str | None] = field(default_factory=dict)
    """The first LLM call's answer per row of the query's `result` (`_row`, numbered before
    any predicate, so the same row in every run); None: the row was not answered."""
    prompts: dict[int, str] = field(default_factory=dict)
    """`_row` -> the prompt sent for it (rows that reached the LLM stage)."""
    statuses: dict[str, int] = field(default_factory=dict)
    """Rows of the query's `result` (every row of the join) by status: answered, skipped
    (a null field, a pushed-down predicate) or failed."""


def run_query(
    job: str,
    movies_csv: Path,
    method: str,
    *,
    max_concurrency: int = 1,
    options: dict | None = None,
    engine_options: dict | None = None,
) -> QueryRun:
    """Run `job` on `movies_csv` with reordering `method` through the project's pipeline;
    `options` are more `options` resource overrides (dedup, pushdown, ...), `engine_options`
    more `llm_engine` config (use_chat, server_style, ...)."""
    from jobs.definitions import build_defs
    from jobs.resources import get_environment, resources_for

    defs = build_defs(resources_for(get_environment()))
    engine = {
        "base_url": {"env": "LLM_ASSETS_OPENAI_BASE_URL"},
        "model": {"env": "LLM_ASSETS_OPENAI_MODEL"},
        "max_concurrency": max_concurrency,
        **(engine_options or {}),
    }
    config = {
        "ops": {"movies_source": {"config": {"paths": [str(movies_csv)]}}},
        "resources": {
            "options": {"config": {**(options or {}), "method": method}},
            "llm_engine": {"config": engine},
            "response_cache": {"config": {"enabled": False}},
        },
    }
    result = defs.resolve_job_def(job).execute_in_process(run_config=config, raise_on_error=False)
    outputs = [
        e.materialization
        for e in result.get_asset_materialization_events()
        if e.materialization.asset_key.path[-1] == "llm_outputs"
    ]
    metadata = {k: v.value for k, v in outputs[-1].metadata.items()} if outputs else {}
    failed = [
        f"{e.asset_key.to_user_string()}:{e.check_name}"
        for e in result.get_asset_check_evaluations()
        if not e.passed
    ]
    group = job.removesuffix("_job")
    rows = _result_rows(group)
    answers = {r: (a if status == "answered" else None) for r, a, status, _ in rows}
    prompts = {r: prompt for r, _, _, prompt in rows if prompt is not None}
    statuses = dict(Counter(status for _, _, status, _ in rows))
    return QueryRun(
        result.success, metadata, failed, _requests_sent(group), answers, prompts, statuses
    )


def _result_rows(group: str) -> list[tuple[int, str | None, str, str | None]]:
    """(`_row`, the first LLM call's answer `llm_1`, status, the prompt sent for the row or
    None) per row of the query's `result` (none when the run stored no result)."""
    from resources.home import llm_assets_home

    path = llm_assets_home() / "warehouse.duckdb"
    if not path.exists():
        return []
    with duckdb.connect(str(path), read_only=True) as con:
        columns = {
            c
            for (c,) in con.execute(
                "select column_name from information_schema.columns "
                "where table_schema = ? and table_name = 'result'",
                [group],
            ).fetchall()
        }
        if not {"_row", "llm_1", "status"} <= columns:
            return []
        rows = con.execute(
            f"select r._row, r.llm_1, r.status, p.prompt from {group}.result r "
            f"left join {group}.deduped d on d._row = r._row "
            f"left join {group}.request_plan p on p._input_id = d._input_id and d._input_id >= 0"
        ).fetchall()
    return [(int(r), a, str(status), prompt) for r, a, status, prompt in rows]


def _requests_sent(group: str) -> pd.DataFrame:
    """The plan's sendable prompts in send order, joined with what the engine reported (no rows
    when the run did not store both tables)."""
    from resources.home import llm_assets_home

    path = llm_assets_home() / "warehouse.duckdb"
    if not path.exists():
        return pd.DataFrame(columns=REQUEST_COLUMNS)
    with duckdb.connect(str(path), read_only=True) as con:
        tables = {
            t
            for (t,) in con.execute(
                "select table_name from information_schema.tables where table_schema = ?", [group]
            ).fetchall()
        }
        if not {"request_plan", "llm_outputs"} <= tables:  # the run failed before storing them
            return pd.DataFrame(columns=REQUEST_COLUMNS)
        return con.execute(
            f"select p.request_id, p.prompt, o.prompt_tokens, o.cached_tokens, o.output_tokens "
            f"from {group}.request_plan p join {group}.llm_outputs o using (request_id) "
            f"where p.error is null order by p.position"
        ).df()


@dataclass
class PairRun:
    """One method of the pair: the project's view and the server's, side by side."""

    method: str
    run: QueryRun
    server: dict[str, float] = field(default_factory=dict)
    """Increase of each `/metrics` counter over the run."""
    wall_s: float = 0.0

    @property
    def cached_tokens(self) -> int:
        return int(self.run.metadata.get("cached_tokens", 0))

    @property
    def server_cached_tokens(self) -> int:
        return int(self.server.get("prompt_tokens_cached_total", 0))

    @property
    def hit_rate(self) -> float:
        return float(self.run.metadata.get("token_hit_rate", 0.0))


def run_pair(
    binary: Path,
    model: Path,
    movies_csv: Path,
    home: Path,
    *,
    job: str = "q1_job",
    methods: tuple[str, ...] = ("original", "ggr"),
    rungs: Mapping[str, Mapping[str, object]] | None = None,
    slots: int = 1,
    alias: str = ALIAS,
    threads: int = 1,
    engine_options: Mapping[str, object] | None = None,
) -> list[PairRun]:
    """`job` once per method, each on a fresh `llama-server` with `slots` slots and `threads`
    CPU threads. `rungs` (name -> `options` overrides, `method` among them) replaces
    `methods` when given; `engine_options` is more `llm_engine` config (`use_chat`, ...)."""
    chosen = rungs if rungs is not None else {m: {"method": m} for m in methods}
    runs = []
    for name, options in chosen.items():
        log = home / f"llama-server-{name}.log"
        extra = {k: v for k, v in options.items() if k != "method"}
        with LlamaServer(
            binary, model, alias=alias, slots=slots, threads=threads, log_path=log
        ) as server:
            before = server.metrics()
            with openai_env(server.base_url, alias, home / name):
                start = time.perf_counter()
                run = run_query(
                    job,
                    movies_csv,
                    str(options["method"]),
                    max_concurrency=slots,
                    options=extra,
                    engine_options=dict(engine_options or {}),
                )
                wall = time.perf_counter() - start
            after = server.metrics()
        delta = {k: after[k] - before.get(k, 0.0) for k in after if k.endswith("_total")}
        runs.append(PairRun(name, run, delta, wall))
    return runs


def first_rows_csv(source: Path, rows: int, dest: Path) -> Path:
    """The first `rows` data rows of `source` as a CSV at `dest` (the pipeline reads files)."""
    pd.read_csv(source, nrows=rows).to_csv(dest, index=False)
    return dest
