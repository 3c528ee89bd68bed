"""Quality measured, not assumed: `python -m benchmarks.quality [--rows 80] [--seed 0]
[--models smollm2-135m,gemma3-270m] [--tasks answerability,extractive] [--slots 1]
[--floor-slots 4] [--json benchmarks/results/quality.json]`.

Do the cache optimizations change the answers of a real model? On labelled SQuAD v2 rows
(`../shared/data/squad_v2_dev_half.csv`: context, question, answers, is_impossible) two
LLM-SQL queries run on the bundled models (`LlamaCppEngine`, llama.cpp's `llama-server` on
this CPU, greedy decoding), each through `run_query`, the path `llm-assets run` takes:

- `answerability`: `choice(yes,no)`, can the question be answered from the context? Scored
  against `is_impossible`;
- `extractive`: a short text answer (16 tokens) on the answerable rows (the others are
  skipped by the query's WHERE), scored by SQuAD exact match and token F1 against the
  acceptable answers.

The prompts are written as a user would: the instruction first, then the fields in the
default `named` style (`name: value` lines), the question before the context. Methods:
`original` (the written order: rows as in the table, fields as written), `rows_only` (the
same prompts, sent in GGR's row order: `benchmarks.lib.quality_runs` says how it is built),
`column_stats` (field order and row sort by column statistics), `ggr` (GGR rows + fields)
and `ggr_no_dedup`. Each answers every sampled row on a fresh server with `--slots` slots.
The determinism floor: the written-order prompts sent again (`floor_rerun`, same slots) and
with `--floor-slots` slots (`floor_slots`).

Per method and model: accuracy (Wilson 95% interval; F1 with a normal interval), agreement
with the written order's answers (share of rows with the same answer, Wilson 95%), parse
rate (answers in the allowed form / answers), token hit rate (server-reported cached /
prompt tokens, `RunStats`), wall seconds of `run_query` (server start excluded, measured
apart). Each server runs `--threads` CPU threads (default 1: on this shared 2-core machine
two threads spin on each other when another tenant takes a core; four extractive requests
took 6.0-6.6 s with one thread against 11-35 s with two, at a load average of 4.5). The
sample is seeded and made of whole contexts (`quality_metrics.sample_contexts`), so GGR
finds the groups SQuAD has. Its default size keeps the whole run near 25 minutes here: a
12-row run of all 28 runs (2 tasks x 2 models x 7) took 233-354 s at load averages 3-4.5,
about 100 s of it fixed per-run costs, so 11-21 s per sampled row. Writes `--json`, the
markdown beside it and a plot (`.png`); exits 1 when a row is unaccounted for, a choice
answer is out of its form, a request failed or `rows_only` did not send the written prompts
in GGR's order.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from benchmarks.lib.provenance import write_result
from benchmarks.lib.quality_metrics import (
    agreement,
    exact_match,
    mean_interval,
    paired_difference,
    sample_contexts,
    share,
    token_f1,
)

ROOT = Path(__file__).resolve().parents[1]
DATA = Path("../shared/data/squad_v2_dev_half.csv")
"""Relative to the repository root (the shared folder sits beside the project)."""
DEFAULT_JSON = Path("benchmarks/results/quality.json")
MODELS = ("smollm2-135m", "gemma3-270m")
KEY = "id"
TABLE = "squad"


@dataclass(frozen=True)
class Task:
    name: str
    sql: str
    column: str
    """The answer's column in the query's result."""
    kind: str
    """`choice` (scored by accuracy against the label) or `text` (exact match and F1)."""
    what: str


TASKS = {
    t.name: t
    for t in (
        Task(
            "answerability",
            "SELECT s.id,\n"
            "       LLM('Can the {question} be answered from the {context}? Answer yes or no.',\n"
            "           s.question, s.context, output => 'choice(yes,no)') AS answerable\n"
            "FROM squad s",
            "answerable",
            "choice",
            "yes/no: can the question be answered from the context (label: not is_impossible)",
        ),
        Task(
            "extractive",
            "SELECT s.id,\n"
            "       LLM('Answer the {question} with a short phrase copied from the {context}.',\n"
            "           s.question, s.context, max_tokens => 16) AS answer\n"
            "FROM squad s\n"
            "WHERE s.is_impossible = 'False'",
            "answer",
            "text",
            "extractive QA on the answerable rows: exact match and token F1 (SQuAD)",
        ),
    )
}

METHODS = ("original", "rows_only", "column_stats", "ggr", "ggr_no_dedup")
FLOORS = ("floor_rerun", "floor_slots")
RUNS = ("original", *FLOORS, *METHODS[1:])
"""The order the runs go in, per task and model (the written order first: the reference)."""
OPTIONS = {
    "original": {"method": "original"},
    "floor_rerun": {"method": "original"},
    "floor_slots": {"method": "original"},
    "rows_only": {"method": "original"},  # over the table in GGR's row order
    "column_stats": {"method": "column_stats"},
    "ggr": {"method": "ggr"},
    "ggr_no_dedup": {"method": "ggr", "dedup": False},
}
LABELS = {
    "original": "written order",
    "rows_only": "rows reordered (GGR), prompts unchanged",
    "column_stats": "column stats (fields + rows)",
    "ggr": "GGR (rows + fields)",
    "ggr_no_dedup": "GGR, dedup off",
    "floor_rerun": "written order, sent again",
    "floor_slots": "written order, more slots",
}
RUN_FIELDS = (
    "options", "slots", "rows", "answered", "skipped", "failed", "requests", "prompt_tokens",
    "cached_tokens", "cached_tokens_reported", "output_tokens", "token_hit_rate", "wall_s",
    "engine_time_s", "server_start_s", "parse", "field_orders", "accuracy", "agreement",
    "versus_written", "same_prompts_as", "first_prompt", "answers", "cached_tokens_by_row",
)  # fmt: skip
"""Every run record carries these (`missing_fields`)."""


def git_state() -> dict:
    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return out.stdout.strip()

    modified = git("status", "--porcelain", "--", "llm_assets", "resources", "benchmarks")
    return {"commit": git("rev-parse", "HEAD"), "modified": modified.splitlines()}


def scored_keys(task: Task, table: pd.DataFrame) -> list[str]:
    """The rows a task is scored on: every row, or the answerable ones for `extractive`."""
    rows = table if task.kind == "choice" else table[table["is_impossible"] == "False"]
    return rows[KEY].astype(str).tolist()


def row_scores(task: Task, answers: dict, table: pd.DataFrame) -> dict[str, list[float]]:
    """Per scored row, in `scored_keys` order: `correct` (1/0) for a choice task, `exact_match`
    and `f1` for a text task. An unanswered row (None) scores 0."""
    rows = table.set_index(table[KEY].astype(str))
    keys = scored_keys(task, table)
    if task.kind == "choice":
        expected = ["no" if rows.at[k, "is_impossible"] == "True" else "yes" for k in keys]
        return {"correct": [float(answers[k] == e) for k, e in zip(keys, expected, strict=True)]}
    golds = [json.loads(rows.at[k, "answers"]) for k in keys]
    return {
        "exact_match": [
            float(exact_match(answers[k], g)) for k, g in zip(keys, golds, strict=True)
        ],
        "f1": [token_f1(answers[k], g) for k, g in zip(keys, golds, strict=True)],
    }


def accuracy(task: Task, answers: dict, table: pd.DataFrame) -> dict:
    """The task's accuracy over its scored rows (an unanswered row is wrong): a share with
    its Wilson interval (choice), or exact match (Wilson) and mean F1 (normal interval)."""
    scores = row_scores(task, answers, table)
    if task.kind == "choice":
        return share(int(sum(scores["correct"])), len(scores["correct"]))
    em = scores["exact_match"]
    return {"exact_match": share(int(sum(em)), len(em)), "f1": mean_interval(scores["f1"])}


def versus_written(task: Task, answers: dict, written: dict, table: pd.DataFrame) -> dict:
    """The paired change in quality against the written order's answers on the same rows:
    accuracy (choice, with McNemar's exact p) or F1 (text), `paired_difference`."""
    mine, theirs = row_scores(task, answers, table), row_scores(task, written, table)
    name = "correct" if task.kind == "choice" else "f1"
    return {"score": name} | paired_difference(mine[name], theirs[name])


def majority_baseline(task: Task, table: pd.DataFrame) -> dict | None:
    """For a choice task: the accuracy of always giving the sample's most frequent label."""
    if task.kind != "choice":
        return None
    impossible = int((table["is_impossible"] == "True").sum())
    return share(max(impossible, len(table) - impossible), len(table))


def run_task(task: Task, model: str, table: pd.DataFrame, args, logs: Path, say) -> dict:
    """Every run of one task on one model: the methods and the floor, each scored."""
    from benchmarks.lib.quality_runs import (
        planned_order,
        rows_only_table,
        run_once,
        submission_keys,
    )
    from llm_assets.pipeline.options import QueryOptions
    from llm_assets.sql.compiler import compile_sql
    from resources.llama_cpp.engine import LlamaCppEngine

    query = compile_sql(task.sql, name=f"quality_{task.name}")
    records, checks = {}, {}
    for name in RUNS:
        slots = args.floor_slots if name == "floor_slots" else args.slots
        options = QueryOptions(**OPTIONS[name])

        def make_engine(slots=slots):
            return LlamaCppEngine(model=model, slots=slots, threads=args.threads, log_dir=str(logs))

        before = None
        if name == "rows_only":

            def before(engine):
                deduped, plan = planned_order(
                    query, TABLE, table, QueryOptions(method="ggr"), engine, KEY
                )
                checks["ggr_planned_order"] = submission_keys(deduped, plan, KEY)
                return rows_only_table(table, deduped, plan, KEY)

        say(f"{task.name} {model} {name} ({slots} slot{'s' * (slots > 1)}) ...")
        rec = run_once(query, TABLE, table, options, make_engine, KEY, task.column, before)
        records[name] = rec
        f = rec.figures
        say(
            f"  {f['requests']} requests, {f['answered']} answered, {f['skipped']} skipped, "
            f"{f['failed']} failed; hit rate {f['token_hit_rate']:.1%}; {f['wall_s']:.1f} s"
        )
    reference = records["original"]
    keys = scored_keys(task, table)
    runs = {}
    for name, rec in records.items():
        slots = args.floor_slots if name == "floor_slots" else args.slots
        runs[name] = rec.figures | {
            "slots": slots,
            "accuracy": accuracy(task, rec.answers, table),
            "agreement": None
            if name == "original"
            else agreement(
                {k: rec.answers[k] for k in keys}, {k: reference.answers[k] for k in keys}
            ),
            "versus_written": None
            if name == "original"
            else versus_written(task, rec.answers, reference.answers, table),
            "same_prompts_as": [
                other for other, o in records.items() if other != name and o.prompts == rec.prompts
            ],
            "first_prompt": rec.prompts[rec.sent_keys[0]] if rec.sent_keys else None,
            "answers": [rec.answers[k] for k in keys],
            "cached_tokens_by_row": [rec.cached.get(k) for k in keys],
        }
    rows_only = records["rows_only"]
    runs["rows_only"]["changed_rows"] = changed_rows(rows_only, reference, keys)
    runs["rows_only"]["construction"] = {
        "same_prompts_as_written": rows_only.prompts == reference.prompts,
        "sent_in_ggr_planned_order": rows_only.sent_keys == checks["ggr_planned_order"],
        "sent_in_ggr_run_order": rows_only.sent_keys == records["ggr"].sent_keys,
        "row_order_differs_from_written": rows_only.sent_keys != reference.sent_keys,
    }
    verdicts = {name: verdict(runs, name) for name in METHODS[1:]}
    return {
        "runs": runs,
        "floor": {f: runs[f]["agreement"] for f in FLOORS},
        "verdicts": verdicts,
    }


def verdict(runs: dict, name: str) -> dict:
    """Did method `name` change more answers than the determinism floor? `changed` counts its
    rows with another answer than the written order's, `floor_changed` each floor run's;
    `beyond_rerun`: more than the same prompts sent again; `beyond_floor`: more than every
    floor run; `intervals_disjoint`: its agreement interval lies wholly below that of the
    floor run that changed most."""
    a = runs[name]["agreement"]
    changed = a["n"] - a["same"]
    floors = {f: runs[f]["agreement"]["n"] - runs[f]["agreement"]["same"] for f in FLOORS}
    worst = max(FLOORS, key=lambda f: (floors[f], f))
    return {
        "changed": changed,
        "floor_changed": floors,
        "beyond_rerun": changed > floors["floor_rerun"],
        "beyond_floor": changed > floors[worst],
        "intervals_disjoint": a["hi"] < runs[worst]["agreement"]["lo"],
    }


def changed_rows(rec, reference, keys: list[str]) -> list[dict]:
    """The scored rows whose answer differs from the written order's, each with the cached
    tokens its request reused in both runs (what differs when the prompt does not)."""
    return [
        {
            "id": k,
            "written": reference.answers[k],
            "answer": rec.answers[k],
            "cached_tokens_written": reference.cached.get(k),
            "cached_tokens": rec.cached.get(k),
        }
        for k in keys
        if rec.answers[k] != reference.answers[k]
    ]


def run(args, table: pd.DataFrame, say) -> dict:
    from resources.llama_cpp.binary import VERSION

    started = time.perf_counter()
    result: dict = {
        "benchmark": "quality",
        **git_state(),
        "started_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "data": {
            "file": str(DATA),
            "seed": args.seed,
            "rows": len(table),
            "contexts": int(table["context"].nunique()),
            "titles": int(table["title"].nunique()),
            "answerable": int((table["is_impossible"] == "False").sum()),
        },
        "engine": {
            "engine": "llama_cpp",
            "llama_cpp_python": VERSION,
            "slots": args.slots,
            "floor_slots": args.floor_slots,
            "threads": args.threads,
            "temperature": 0.0,
            "prompt_style": "named",
        },
        "tasks": {},
    }
    with tempfile.TemporaryDirectory(prefix="quality-bench-") as logs:
        for task_name in args.tasks:
            task = TASKS[task_name]
            entry = {
                "sql": task.sql,
                "kind": task.kind,
                "what": task.what,
                "ids": scored_keys(task, table),
                "majority_baseline": majority_baseline(task, table),
                "models": {},
            }
            result["tasks"][task_name] = entry
            for model in args.models:
                entry["models"][model] = run_task(task, model, table, args, Path(logs), say)
    result["wall_s"] = round(time.perf_counter() - started, 1)
    result["finished_utc"] = datetime.now(UTC).isoformat(timespec="seconds")
    return result


def missing_fields(result: dict) -> list[str]:
    """The fields a result lacks: every task and model needs every run with `RUN_FIELDS`."""
    missing = [k for k in ("commit", "command", "data", "engine", "tasks") if k not in result]
    for task, entry in result.get("tasks", {}).items():
        for model, m in entry["models"].items():
            for name in RUNS:
                run_ = m["runs"].get(name)
                if run_ is None:
                    missing.append(f"{task}/{model}/{name}")
                    continue
                missing += [f"{task}/{model}/{name}.{f}" for f in RUN_FIELDS if f not in run_]
            missing += [
                f"{task}/{model}/verdicts.{n}" for n in METHODS[1:] if n not in m["verdicts"]
            ]
    return missing


def problems(result: dict) -> list[str]:
    """Why a result is not to be trusted (empty: none): missing fields first (then nothing
    else is checked), rows unaccounted for, failed requests, a choice answer out of its
    form, cached tokens not reported, or a rows_only run that did not send the written
    prompts in GGR's order."""
    found = [f"missing field {f}" for f in missing_fields(result)]
    if found:
        return found
    rows = result["data"]["rows"]
    for task, entry in result["tasks"].items():
        for model, m in entry["models"].items():
            for name, r in m["runs"].items():
                where = f"{task} {model} {name}"
                if r["answered"] + r["skipped"] + r["failed"] != rows or r["rows"] != rows:
                    found.append(f"{where}: {r['answered']}+{r['skipped']}+{r['failed']} of {rows}")
                if r["failed"]:
                    found.append(f"{where}: {r['failed']} rows failed")
                if entry["kind"] == "choice" and r["parse"]["rate"] != 1.0:
                    found.append(f"{where}: parse rate {r['parse']['rate']}")
                if not r["cached_tokens_reported"]:
                    found.append(f"{where}: the server did not report cached tokens")
            bad = [k for k, ok in m["runs"]["rows_only"]["construction"].items() if not ok]
            if bad:
                found.append(f"{task} {model} rows_only: not {', '.join(bad)}")
    return found


def _pct(s: dict | None) -> str:
    if s is None or s.get("rate", s.get("mean")) is None:
        return "–"
    value = s.get("rate", s.get("mean"))
    return f"{value:.1%} [{s['lo']:.1%}, {s['hi']:.1%}]"


def _accuracy_cell(entry: dict, r: dict) -> str:
    acc = r["accuracy"]
    if entry["kind"] == "choice":
        return _pct(acc)
    return f"EM {_pct(acc['exact_match'])}; F1 {_pct(acc['f1'])}"


ROW_MOVES = ("rows_only",)
FIELD_MOVES = ("column_stats", "ggr", "ggr_no_dedup")


def verdict_line(task: str, model: str, m: dict, floor_slots: int) -> str:
    """One plain sentence per task and model: did moving rows, and did moving fields, change
    answers beyond the determinism floor?"""
    floor_text = ", ".join(
        f"{LABELS[f]} {a['n'] - a['same']}/{a['n']}" for f, a in m["floor"].items()
    )

    def word(v: dict) -> str:
        if v["beyond_floor"]:
            return "beyond every floor run" + (
                "" if v["intervals_disjoint"] else "; intervals overlap"
            )
        if v["beyond_rerun"]:
            return f"beyond the rerun, within {floor_slots} slots"
        return "within the floor"

    def said(names: tuple[str, ...]) -> str:
        return "; ".join(
            f"{n} {m['verdicts'][n]['changed']}/{m['runs'][n]['agreement']['n']} "
            f"({word(m['verdicts'][n])})"
            for n in names
        )

    def head(names: tuple[str, ...], what: str) -> str:
        vs = [m["verdicts"][n] for n in names]
        if any(v["beyond_floor"] for v in vs):
            return f"{what} changed answers beyond the floor"
        if any(v["beyond_rerun"] for v in vs):
            return (
                f"{what} changed answers beyond the rerun floor, though fewer than "
                f"{floor_slots} slots did"
            )
        return f"{what} changed no answer beyond the floor"

    line = (
        f"- **{task}, {model}: {head(ROW_MOVES, 'moving rows alone')}; "
        f"{head(FIELD_MOVES, 'moving fields')}.** Rows changed: floor ({floor_text}); "
        f"{said(ROW_MOVES)}; {said(FIELD_MOVES)}."
    )
    moved = m["runs"]["rows_only"].get("changed_rows") or []
    if moved:
        reuse = ", ".join(f"{c['cached_tokens_written']} vs {c['cached_tokens']}" for c in moved)
        other = sum(c["cached_tokens_written"] != c["cached_tokens"] for c in moved)
        line += (
            f" The {len(moved)} row(s) rows_only changed had the very same prompt; the cached "
            f"tokens their requests reused (written vs rows_only: {reuse}) differ for {other} "
            "of them."
        )
    return line


def answer_shapes(entry: dict, model: str, m: dict) -> str:
    """What the answers look like per run: the share of the first choice value (a choice
    task) or of answers that copy a `{placeholder}` of the instruction (a text task)."""
    runs = m["runs"]

    def shares(test) -> str:
        def rate(answers: list) -> float:
            return sum(map(test, answers)) / max(1, len(answers))

        return ", ".join(f"{name} {rate(runs[name]['answers']):.0%}" for name in METHODS)

    if entry["kind"] == "choice":
        value = entry["sql"].split("choice(")[1].split(",")[0]
        return f"- {model}, answers '{value}': {shares(lambda a: a == value)}."
    copied = shares(lambda a: a is not None and re.search(r"\{\w+\}", a) is not None)
    return f"- {model}, answers copying a `{{placeholder}}` of the instruction: {copied}."


def _delta_cell(r: dict) -> str:
    v = r["versus_written"]
    if v is None:
        return "–"
    p = f", p={v['mcnemar_p']:.2g}" if "mcnemar_p" in v else ""
    return f"{v['delta']:+.1%} [{v['lo']:+.1%}, {v['hi']:+.1%}]{p}"


def markdown(result: dict, png: str = "quality.png") -> str:
    d, e = result["data"], result["engine"]
    lines = [
        "# Quality: do reordering and dedup change a real model's answers?",
        "",
        f"Command: `{result['command']}` on commit `{result['commit'][:12]}`"
        + (
            f" (uncommitted changes in the tree: {len(result['modified'])} files under "
            "llm_assets/, resources/ or benchmarks/)"
            if result["modified"]
            else ""
        )
        + (
            f" (this page and the plot rendered from its JSON by `--render` at commit "
            f"`{result['rendered_at'][:12]}`)"
            if result.get("rendered_at", result["commit"]) != result["commit"]
            else ""
        )
        + f"; {result['started_utc']} to {result['finished_utc']}, {result['wall_s']:.0f} s "
        "in all on this shared 2-core machine (other tenants' load varies, so wall seconds "
        "vary between runs by tens of percent).",
        "",
        f"Data: `{d['file']}`, a seeded sample (seed {d['seed']}) of whole contexts: "
        f"{d['rows']} questions on {d['contexts']} contexts from {d['titles']} articles, "
        f"{d['answerable']} answerable. Engine: llama.cpp `llama-server` (llama-cpp-python "
        f"{e['llama_cpp_python']}) on the CPU, greedy (temperature {e['temperature']}), a "
        f"fresh server per run with {e['slots']} slot(s); the floor's other setting "
        f"{e['floor_slots']} slots. Prompt style `{e['prompt_style']}`. Every run goes "
        "through `run_query` (the path of `llm-assets run`). `rows_only` is the written-order "
        "query over the table with its rows permuted into GGR's planned submission order: the "
        "same prompts, in GGR's row order (the pipeline has no such option under `named`; "
        "`benchmarks/lib/quality_runs.py`).",
        "",
        "Agreement: the share of scored rows whose answer equals the written order's (exact "
        "text), Wilson 95% interval. Accuracy: Wilson 95% (exact match too); F1 with a normal "
        "95% interval. The intervals treat rows as independent; questions on one context are "
        "not, so read them as a little narrow. Parse rate: answers in the output spec's "
        "allowed form / answers. Token hit rate: cached / prompt tokens as the server reports "
        "them. Wall s: `run_query` only (the server's start is measured apart). Change vs "
        "written: the paired per-row difference in accuracy (choice; McNemar's exact p) or "
        "F1 (text) against the written order's answers, normal 95% interval. A method is "
        "beyond the floor when it changed more rows than the floor run that changed most.",
        "",
    ]
    for task, entry in result["tasks"].items():
        lines += [f"## {task}: {entry['what']}", "", "```sql", entry["sql"], "```", ""]
        if entry["majority_baseline"] is not None:
            lines += [
                f"Always answering the sample's majority label scores "
                f"{_pct(entry['majority_baseline'])}.",
                "",
            ]
        lines += [
            "| model | run | accuracy | change vs written (paired) | agreement with written "
            "order | parse rate | token hit rate | wall s | requests |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for model, m in entry["models"].items():
            for name in (*METHODS, *FLOORS):
                r = m["runs"][name]
                a = r["agreement"]
                agree = "(reference)" if a is None else f"{_pct(a)} ({a['same']}/{a['n']})"
                label = f"{name}: {LABELS[name]}"
                if name in FLOORS:
                    label += f" ({r['slots']} slot{'s' * (r['slots'] > 1)})"
                lines.append(
                    f"| {model} | {label} | {_accuracy_cell(entry, r)} | {_delta_cell(r)} "
                    f"| {agree} "
                    f"| {r['parse']['rate']:.1%} | {r['token_hit_rate']:.1%} | {r['wall_s']:.1f} "
                    f"| {r['requests']} |"
                )
        lines.append("")
        for model, m in entry["models"].items():
            o, g = m["runs"]["original"], m["runs"]["ggr"]
            lines.append(
                f"- {model}, cost: token hit rate {o['token_hit_rate']:.1%} written, "
                f"{g['token_hit_rate']:.1%} GGR; `run_query` {o['wall_s']:.1f} s written, "
                f"{g['wall_s']:.1f} s GGR ({o['wall_s'] / g['wall_s']:.1f}x)."
            )
        for model, m in entry["models"].items():
            lines.append(verdict_line(task, model, m, e["floor_slots"]))
        for model, m in entry["models"].items():
            lines.append(answer_shapes(entry, model, m))
        lines.append("")
        for model, m in entry["models"].items():
            ro = m["runs"]["rows_only"]["construction"]
            lines.append(
                f"- {model}, rows_only: same prompts as written {ro['same_prompts_as_written']}, "
                f"sent in GGR's planned order {ro['sent_in_ggr_planned_order']}, in the ggr "
                f"run's order {ro['sent_in_ggr_run_order']}."
            )
        lines.append("")
        first = entry["models"][next(iter(entry["models"]))]["runs"]
        lines += [
            "First prompt sent, written order:",
            "",
            "```",
            _cut(first["original"]["first_prompt"]),
            "```",
            "",
            "and under GGR (fields moved: "
            + ", ".join(f"`{k}` x{v}" for k, v in first["ggr"]["field_orders"].items())
            + "):",
            "",
            "```",
            _cut(first["ggr"]["first_prompt"]),
            "```",
            "",
        ]
    lines += [f"![quality]({png})", ""]
    return "\n".join(lines)


def _cut(text: str | None, width: int = 400) -> str:
    if text is None:
        return "(none)"
    return text if len(text) <= width else text[:width] + " ..."


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    tasks = list(result["tasks"])
    fig, axes = plt.subplots(3, len(tasks), figsize=(6.5 * len(tasks), 10.5), squeeze=False)
    colours = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
    for col, task in enumerate(tasks):
        entry = result["tasks"][task]
        models = list(entry["models"])
        width = 0.8 / max(1, len(models))
        names = list(METHODS[1:]) + list(FLOORS)
        for j, model in enumerate(models):
            m = entry["models"][model]
            xs = [i + (j - (len(models) - 1) / 2) * width for i in range(len(names))]
            ags = [m["runs"][n]["agreement"] for n in names]
            axes[0][col].bar(
                xs,
                [a["rate"] for a in ags],
                width,
                yerr=[
                    [max(0.0, a["rate"] - a["lo"]) for a in ags],
                    [max(0.0, a["hi"] - a["rate"]) for a in ags],
                ],
                color=[to_rgba(colours[j % 4], 0.4 if n in FLOORS else 1.0) for n in names],
                label=model,
                capsize=3,
            )
            ax = axes[0][col]
            ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
            ax.set_ylabel("agreement with written order")
            ax.set_title(f"{task}: agreement (pale: determinism floor)")
            ax.set_ylim(min(0.5, ax.get_ylim()[0]), 1.02)

            xs = [i + (j - (len(models) - 1) / 2) * width for i in range(len(METHODS))]
            accs = []
            for n in METHODS:
                a = m["runs"][n]["accuracy"]
                accs.append(a if entry["kind"] == "choice" else a["f1"])
            vals = [a.get("rate", a.get("mean")) for a in accs]
            axes[1][col].bar(
                xs,
                vals,
                width,
                yerr=[
                    [max(0.0, v - a["lo"]) for v, a in zip(vals, accs, strict=True)],
                    [max(0.0, a["hi"] - v) for v, a in zip(vals, accs, strict=True)],
                ],
                color=colours[j % 4],
                label=model,
                capsize=3,
            )
            axes[2][col].bar(
                xs,
                [m["runs"][n]["token_hit_rate"] for n in METHODS],
                width,
                color=colours[j % 4],
                label=model,
            )
        if entry["majority_baseline"] is not None:
            axes[1][col].axhline(
                entry["majority_baseline"]["rate"], color="grey", ls="--", label="majority label"
            )
        axes[1][col].set_ylabel("accuracy" if entry["kind"] == "choice" else "token F1")
        axes[1][col].set_title(f"{task}: quality against the labels (95% interval)")
        axes[2][col].set_ylabel("token hit rate (server)")
        axes[2][col].set_title(f"{task}: cached / prompt tokens")
        for row in (1, 2):
            axes[row][col].set_xticks(
                range(len(METHODS)), METHODS, rotation=20, ha="right", fontsize=8
            )
            axes[row][col].set_ylim(0, 1.0)
    # one legend for the figure, above the panels (inside them it covered bars)
    handles: dict = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    fig.suptitle(
        f"SQuAD v2 sample of {result['data']['rows']} questions, llama.cpp on CPU, greedy "
        f"(commit {result['commit'][:10]})",
        fontsize=11,
    )
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="upper center",
        bbox_to_anchor=(0.5, 0.965),
        ncol=len(handles),
        fontsize=9,
        frameon=False,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_reports(result: dict, json_path: Path, plot_too: bool = True) -> None:
    """The markdown (printed too) and, unless told not to, the plot beside `json_path`."""
    png = json_path.with_suffix(".png")
    text = markdown(result, png.name)
    json_path.with_suffix(".md").write_text(text)
    if plot_too:
        plot(result, png)
    print(text)


def load_table(path: Path, rows: int, seed: int) -> pd.DataFrame:
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    return sample_contexts(frame, rows, seed)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.quality", description=__doc__)
    p.add_argument("--rows", type=int, default=80, help="questions sampled (whole contexts)")
    p.add_argument("--seed", type=int, default=0, help="seed of the contexts' sample")
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated bundled models")
    p.add_argument("--tasks", default=",".join(TASKS), help="comma-separated tasks")
    p.add_argument("--slots", type=int, default=1, help="llama-server slots of every method")
    p.add_argument("--floor-slots", type=int, default=4, help="the floor's other slot count")
    p.add_argument(
        "--threads", type=int, default=1, help="CPU threads of each llama-server (see above)"
    )
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"default {DEFAULT_JSON}")
    p.add_argument("--no-plot", action="store_true", help="write no .png")
    p.add_argument(
        "--render", action="store_true", help="only rewrite the .md and .png from --json"
    )
    args = p.parse_args(argv)
    if args.render:
        result = json.loads(args.json.read_text())
        result["rendered_at"] = git_state()["commit"]
        write_reports(result, args.json, plot_too=not args.no_plot)
        return 1 if problems(result) else 0
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in args.tasks if t not in TASKS]
    if unknown or not args.tasks:
        p.error(f"unknown task(s) {unknown}; choose from {', '.join(TASKS)}")
    if args.rows < 1:
        p.error(f"--rows must be >= 1, got {args.rows}")
    data = ROOT / DATA
    if not data.exists():
        print(f"skipped: {data} is absent (the shared data folder is not beside the project)")
        return 0
    from resources.llama_cpp.binary import find_binary
    from resources.llama_cpp.models import resolve_model

    try:
        find_binary()
        for model in args.models:
            resolve_model(model)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}")
        return 2
    table = load_table(data, args.rows, args.seed)

    def say(line: str) -> None:
        print(f"[quality {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)

    say(
        f"{len(table)} rows on {table['context'].nunique()} contexts; tasks {args.tasks}; "
        f"models {args.models}"
    )
    result = run(args, table, say)
    words = sys.argv[1:] if argv is None else argv
    result["command"] = " ".join(["python -m benchmarks.quality", *words])
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.json, result, indent=2)
    write_reports(result, args.json, plot_too=not args.no_plot)
    found = problems(result)
    for line in found:
        print(f"error: {line}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
