"""Real weights for `python -m benchmarks.llama_cpp --model smollm2-135m[,gemma3-270m]`: the
same queries and rows as the random-weight path, answered by a bundled model
(`resources.llama_cpp.models.resolve_model`) on `llama-server` (one slot, host prompt cache
off, `--swa-full`: Gemma 3 reuses no prefix without it), through the project's pipeline with
the settings the `llama_cpp` engine uses (`server_style=llamacpp`: grammars for choices and
numbers; an instruction-tuned model through its chat template, `use_chat`).

Per query a ladder of rungs (`rungs_for`): `original` (the written order, no dedup, no
pushdown), `ggr`, `ggr_dedup` only where the rows hold duplicate LLM inputs (else it sends
exactly `ggr`'s requests), `ggr_dedup_pushdown` only where the query has a non-LLM predicate.
Every rung runs `repeats` times (>= 2), interleaved, each on a fresh server.

Token ids are the server's own (`server_token_ids`): the chat template applied by the server
(`/apply-template`, what `/chat/completions` does before tokenizing) for a chat model, then
`/tokenize` with `add_special` as the server does for a completion (Gemma's BOS is added,
SmolLM2's chat prompt gets none: its template starts with `<|im_start|>`). The harness checks
that each request's id count equals the prompt tokens the server reported for it; the one-slot
rule and the simulator (`MappedTokenizer`) both take these ids, so the simulator predicts with
the real model's tokenizer, not Llama 3's.

Answers (`answer_agreement`): per row, the first LLM call's answer under a rung against the
written order's (`original`, first repeat), over the rows both answered; numbers compared as
parsed numbers (Q4), anything else as strings. The determinism floor is the written order
against itself (`original`'s second repeat: the same requests sent again to a fresh server).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import struct
import subprocess
import time
from pathlib import Path

import httpx
import pandas as pd

from benchmarks.lib.llama_cpp_build import VERSION, build
from benchmarks.lib.llama_cpp_measure import SIM_DEPLOYMENT, MappedTokenizer, record
from benchmarks.lib.llama_cpp_pair import PairRun, first_rows_csv, run_pair
from benchmarks.lib.llama_server import LlamaServer
from benchmarks.lib.quality_metrics import share

RANDOM_WEIGHT_JSON = Path("benchmarks/results/llama_cpp.json")
"""The random-weight path's results, quoted beside the real ones when present."""
OWN_MODULES = (
    "llama_cpp_pair",
    "llama_cpp_measure",
    "llama_cpp_real",
    "llama_cpp_real_report",
    "llama_server",
)
"""The modules under benchmarks/lib this benchmark runs (the commit is marked `+changes` when
one of them, or benchmarks/llama_cpp.py, differs from it)."""
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


# -- the ladder ------------------------------------------------------------------------------


def _query(job: str):
    from llm_assets.benchmark_queries import compile_query

    return compile_query(job.removesuffix("_job"), "movies")


def duplicate_inputs(movies_csv: Path, columns: list[str]) -> int:
    """Rows of `movies_csv` whose values in `columns` (none null) repeat an earlier row's."""
    frame = pd.read_csv(movies_csv).dropna(subset=columns)
    return int(frame.duplicated(columns).sum())


def rungs_for(job: str, movies_csv: Path) -> dict[str, dict]:
    """Rung name -> `options` overrides for `job` on `movies_csv` (see the module docstring)."""
    query = _query(job)
    columns = [f.split(".")[-1] for f in query.llm_calls[0].fields]
    rungs = {
        "original": {"method": "original", "dedup": False, "pushdown": False},
        "ggr": {"method": "ggr", "dedup": False, "pushdown": False},
    }
    if duplicate_inputs(movies_csv, columns):
        rungs["ggr_dedup"] = {"method": "ggr", "dedup": True, "pushdown": False}
    if query.predicates:
        rungs["ggr_dedup_pushdown"] = {"method": "ggr", "dedup": True, "pushdown": True}
    return rungs


# -- token ids, answers ----------------------------------------------------------------------


def server_token_ids(server: LlamaServer, prompts, use_chat: bool) -> dict[str, list[int]]:
    """Prompt -> the token ids `server` processes for it, sent as one user message
    (`use_chat`) or as a plain completion (see the module docstring)."""
    ids: dict[str, list[int]] = {}
    with httpx.Client(base_url=server.url, timeout=30.0) as client:
        for prompt in dict.fromkeys(prompts):
            text = prompt
            if use_chat:
                body = {"messages": [{"role": "user", "content": prompt}]}
                text = client.post("/apply-template", json=body).raise_for_status().json()
                text = text["prompt"]
            reply = client.post(
                "/tokenize", json={"content": text, "add_special": True, "parse_special": True}
            )
            ids[prompt] = reply.raise_for_status().json()["tokens"]
    return ids


def parse_number(answer: str | None) -> float | None:
    """The first number in `answer` (None when there is none)."""
    found = NUMBER.search(answer or "")
    return float(found.group()) if found else None


def _equal(a: str, b: str, numeric: bool) -> tuple[bool, float | None]:
    """Whether two answers agree (as numbers when `numeric` and both parse, else as
    stripped strings), and their absolute difference when compared as numbers."""
    x, y = (parse_number(a), parse_number(b)) if numeric else (None, None)
    if x is not None and y is not None:
        return x == y, abs(x - y)
    return a.strip() == b.strip(), None


def answer_agreement(
    answers: dict[int, str | None],
    reference: dict[int, str | None],
    numeric: bool,
    prompts: dict[int, str] | None = None,
    reference_prompts: dict[int, str] | None = None,
) -> dict:
    """The share of rows answered in both runs whose answers are equal (`_equal`), with its
    Wilson 95% interval; `only_one`: rows answered in one run only; `mean_abs_diff`: over
    numeric rows both parsed. Given both runs' prompts per row, the same split in
    `same_prompt` (rows sent the very same prompt: only the order and the cache differ) and
    `changed_prompt` (rows whose prompt differs, e.g. fields moved)."""
    both = sorted(k for k, a in reference.items() if a is not None and answers.get(k) is not None)
    answered = {k for k, a in answers.items() if a is not None}
    answered_ref = {k for k, a in reference.items() if a is not None}
    equal = {k: _equal(answers[k], reference[k], numeric) for k in both}
    diffs = [d for _, d in equal.values() if d is not None]
    out = share(sum(e for e, _ in equal.values()), len(both))
    out["only_one"] = len(answered ^ answered_ref)
    if numeric:
        out["mean_abs_diff"] = statistics.fmean(diffs) if diffs else None
    if prompts is not None and reference_prompts is not None:
        same = [k for k in both if prompts.get(k) == reference_prompts.get(k)]
        changed = [k for k in both if prompts.get(k) != reference_prompts.get(k)]
        for name, keys in (("same_prompt", same), ("changed_prompt", changed)):
            out[name] = share(sum(equal[k][0] for k in keys), len(keys))
    return out


def answer_summary(answers: dict[int, str | None], kind: str) -> dict:
    """What the answers look like: for choices their counts, for numbers their mean and the
    share that parse, for text the number of distinct answers."""
    given = [a for a in answers.values() if a is not None]
    if kind == "choice":
        counts = pd.Series(given, dtype=object).value_counts()
        return {"answered": len(given), "counts": {str(k): int(v) for k, v in counts.items()}}
    if kind == "number":
        values = [v for v in map(parse_number, given) if v is not None]
        return {
            "answered": len(given),
            "parsed": len(values),
            "mean": statistics.fmean(values) if values else None,
        }
    return {"answered": len(given), "distinct": len(set(given))}


# -- the run ---------------------------------------------------------------------------------


def _median(values) -> float:
    return round(statistics.median(values), 3)


def _rung_record(
    runs: list[PairRun], ids_of: dict[str, list[int]], reference: PairRun, kind: str
) -> dict:
    first = runs[0]
    prompts = list(first.run.requests["prompt"])
    ids = [ids_of[p] for p in prompts]
    rec = record(runs, ids, MappedTokenizer(ids_of))
    reported = [int(n) for n in first.run.requests["prompt_tokens"]]
    numeric = kind == "number"
    rec |= {
        "server_ids_count_equal": sum(len(i) == n for i, n in zip(ids, reported, strict=True)),
        "output_tokens_per_request": rec["output_tokens"] / max(1, rec["requests"]),
        "wall_s": [round(r.wall_s, 3) for r in runs],
        "wall_s_median": _median(r.wall_s for r in runs),
        "prefill_s_median": _median(r.server.get("prompt_seconds_total", 0.0) for r in runs),
        "decode_s_median": _median(
            r.server.get("tokens_predicted_seconds_total", 0.0) for r in runs
        ),
        "statuses": first.run.statuses,
        "answers": answer_summary(first.run.answers, kind),
        "rerun_agreement": None
        if len(runs) < 2
        else answer_agreement(
            runs[1].run.answers, first.run.answers, numeric, runs[1].run.prompts, first.run.prompts
        ),
        "vs_original": answer_agreement(
            first.run.answers,
            reference.run.answers,
            numeric,
            first.run.prompts,
            reference.run.prompts,
        ),
    }
    computed = rec["prompt_tokens"] - rec["cached_tokens"][0]
    rec["prefill_tokens_per_s"] = computed / rec["prefill_s_median"] if computed else None
    rec["decode_tokens_per_s"] = rec["output_tokens"] / max(rec["decode_s_median"], 1e-9)
    return rec


_GGUF_SCALARS = {
    **{0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?"},
    **{10: "Q", 11: "q", 12: "d"},
}
"""GGUF value type -> its `struct` format (little-endian); 8 is a string, 9 an array."""
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def gguf_metadata(path: Path, keys: set[str]) -> dict[str, object]:
    """The values of `keys` in a GGUF file's key-value header (an array gives its length),
    read in one pass without touching the tensors (`gguf.GGUFReader` maps every field and
    tensor: seconds on a 262k-token vocabulary)."""
    found: dict[str, object] = {}
    with path.open("rb") as f:

        def read(fmt: str):
            size = struct.calcsize("<" + fmt)
            return struct.unpack("<" + fmt, f.read(size))[0]

        def string() -> str:
            return f.read(read("Q")).decode("utf-8", "replace")

        def value(kind: int):
            if kind == _GGUF_STRING:
                return string()
            if kind == _GGUF_ARRAY:
                item, count = read("I"), read("Q")
                if item in _GGUF_SCALARS:
                    f.seek(count * struct.calcsize("<" + _GGUF_SCALARS[item]), os.SEEK_CUR)
                else:
                    for _ in range(count):
                        value(item)
                return count
            return read(_GGUF_SCALARS[kind])

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        read("I")  # version
        read("Q")  # tensors
        for _ in range(read("Q")):
            key = string()
            found_value = value(read("I"))
            if key in keys:
                found[key] = found_value
                if len(found) == len(keys):
                    break
    return found


def model_shape(path: Path) -> dict:
    """Architecture, layers, width, vocabulary size and whether BOS is added, from the GGUF
    header."""
    arch = gguf_metadata(path, {"general.architecture"})["general.architecture"]
    block, width = f"{arch}.block_count", f"{arch}.embedding_length"
    tokens, bos = "tokenizer.ggml.tokens", "tokenizer.ggml.add_bos_token"
    meta = gguf_metadata(path, {block, width, tokens, bos})
    return {
        "architecture": arch,
        "layers": int(meta[block]),
        "width": int(meta[width]),
        "vocab": int(meta[tokens]),
        "add_bos": None if bos not in meta else bool(meta[bos]),
    }


def _git_commit() -> str:
    """HEAD's short hash, with `+changes` when this benchmark's own files differ from it."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=False)

    commit = git("rev-parse", "--short", "HEAD").stdout.strip() or "unknown"
    lib = Path("benchmarks/lib")
    mine = ["benchmarks/llama_cpp.py", *(str(lib / f"{m}.py") for m in OWN_MODULES)]
    changed = git("status", "--porcelain", "--", *mine).stdout.strip()
    return commit + ("+changes" if changed else "")


def _uncommitted_elsewhere() -> list[str]:
    """Tracked files, other than this benchmark's own, that differ from HEAD when the run
    starts (others' work in progress in a shared tree: the run used them as they were)."""
    done = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    )
    lib = Path("benchmarks/lib")
    mine = {"benchmarks/llama_cpp.py", *(str(lib / f"{m}.py") for m in OWN_MODULES)}
    paths = [line[3:].strip() for line in done.stdout.splitlines() if line.strip()]
    return [p for p in paths if p not in mine]


def _random_weight_reference(path: Path = RANDOM_WEIGHT_JSON) -> dict:
    """Speed-ups and output tokens per request of the random-weight run, per job."""
    if not path.exists():
        return {}
    saved = json.loads(path.read_text())
    jobs = {}
    for job, methods in saved.get("jobs", {}).items():
        orig = methods["original"]
        jobs[job] = {
            "speedup": methods["speedup"]["measured"],
            "output_tokens_per_request": orig["output_tokens"] / orig["requests"],
            "output_tokens": orig["output_tokens"],
            "computed_tokens": {
                m: methods[m]["prompt_tokens"] - methods[m]["cached_tokens"][0]
                for m in ("original", "ggr")
            },
            "engine_time_s_median": {
                m: methods[m]["engine_time_s_median"] for m in ("original", "ggr")
            },
        }
    model = saved.get("model", {})
    return {
        "command": saved.get("command"),
        "shape": {"layers": model.get("n_layer"), "width": model.get("n_embd"), "vocab": 128256},
        "jobs": jobs,
    }


def run_real(
    models: list[str],
    source: Path,
    rows: int,
    jobs: list[str],
    repeats: int,
    threads: int,
    workdir: Path,
    repeat_only: tuple[str, ...] | None = None,
) -> dict:
    """Every rung of every job on every model over the first `rows` rows of `source` (see
    the module docstring); with `repeat_only`, only those rungs are run again after the
    first round (a test's shortcut: `original` alone still gives the floor)."""
    from resources.llama_cpp.models import resolve_model

    if repeats < 2:
        raise ValueError("real weights need --repeats >= 2 (the determinism floor)")
    binary = build()
    movies = first_rows_csv(source, rows, workdir / "movies.csv")
    result: dict = {
        "llama_cpp_python": VERSION,
        "commit": _git_commit(),
        "uncommitted_elsewhere": _uncommitted_elsewhere(),
        "rows": rows,
        "slots": 1,
        "threads": threads,
        "repeats": repeats,
        "cpus": os.cpu_count(),
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
        "sim_deployment": SIM_DEPLOYMENT,
        "random_weight_reference": _random_weight_reference(),
        "models": {},
    }
    started = time.perf_counter()
    for spec in models:
        model = resolve_model(spec)
        use_chat = bool(model.instruct)
        engine_options = {"use_chat": use_chat, "server_style": "llamacpp"}
        entry: dict = {
            "file": model.path.name,
            "bytes": model.path.stat().st_size,
            "shape": model_shape(model.path),
            "use_chat": use_chat,
            "jobs": {},
        }
        by_job: dict[str, dict[str, list[PairRun]]] = {}
        for job in jobs:
            rungs = rungs_for(job, movies)
            by_rung: dict[str, list[PairRun]] = {}
            for k in range(repeats):
                home = workdir / f"{model.name}-{job}-{k}"
                if k and repeat_only is not None:
                    rungs = {n: o for n, o in rungs.items() if n in repeat_only}
                for r in run_pair(
                    binary,
                    model.path,
                    movies,
                    home,
                    job=job,
                    rungs=rungs,
                    alias=model.name,
                    threads=threads,
                    engine_options=engine_options,
                ):
                    by_rung.setdefault(r.method, []).append(r)
            by_job[job] = by_rung
        prompts = [
            p
            for by_rung in by_job.values()
            for runs in by_rung.values()
            for r in runs
            for p in r.run.requests["prompt"]
        ]
        log = workdir / f"{model.name}-tokenize.log"
        with LlamaServer(binary, model.path, alias=model.name, log_path=log) as server:
            ids_of = server_token_ids(server, prompts, use_chat)
        for job, by_rung in by_job.items():
            kind = _query(job).llm_calls[0].output.kind
            reference = by_rung["original"][0]
            rungs = {
                name: _rung_record(runs, ids_of, reference, kind) for name, runs in by_rung.items()
            }
            orig = rungs["original"]
            for rec in rungs.values():
                rec["speedup"] = {
                    "measured": orig["engine_time_s_median"] / rec["engine_time_s_median"],
                    "sim": orig["sim"]["engine_time_s"] / rec["sim"]["engine_time_s"],
                    "sim_one_slot": orig["sim_one_slot"]["engine_time_s"]
                    / rec["sim_one_slot"]["engine_time_s"],
                }
            entry["jobs"][job] = {"output": kind, "rungs": rungs}
        result["models"][model.name] = entry
    result["total_s"] = round(time.perf_counter() - started, 1)
    result["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    return result


def problems_real(result: dict) -> list[str]:
    """What makes the run wrong, not slow: a project count that differs from the server's
    counter, a row of the join without exactly one status in the query's `result` (rows a
    pushed-down predicate removes never reach the LLM stage's own counts), a request whose
    server-id count is not the prompt tokens the server reported for it."""
    found = []
    for name, entry in result["models"].items():
        for job, figures in entry["jobs"].items():
            for rung, m in figures["rungs"].items():
                where = f"{name} {job} {rung}"
                if m["cached_tokens"] != m["server_cached_tokens"]:
                    found.append(f"{where}: project {m['cached_tokens']} != server counter")
                accounted = sum(m["statuses"].get(s, 0) for s in ("answered", "skipped", "failed"))
                if accounted != result["rows"] or sum(m["statuses"].values()) != accounted:
                    found.append(
                        f"{where}: {accounted} of {result['rows']} rows accounted for "
                        f"({m['statuses']})"
                    )
                if m["server_ids_count_equal"] != m["requests"]:
                    found.append(
                        f"{where}: the server's token ids match the reported prompt tokens of "
                        f"{m['server_ids_count_equal']} of {m['requests']} requests"
                    )
    return found
