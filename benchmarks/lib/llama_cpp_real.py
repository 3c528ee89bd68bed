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
OWN_MODULES = ("llama_cpp_pair", "llama_cpp_measure", "llama_cpp_real", "llama_server")
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
        "rerun_agreement": answer_agreement(
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


def model_shape(path: Path) -> dict:
    """Architecture, layers, width, vocabulary size and whether BOS is added, from the GGUF
    header."""
    from gguf import GGUFReader

    fields = GGUFReader(path).fields
    arch = fields["general.architecture"].contents()
    add_bos = fields.get("tokenizer.ggml.add_bos_token")
    return {
        "architecture": arch,
        "layers": int(fields[f"{arch}.block_count"].contents()),
        "width": int(fields[f"{arch}.embedding_length"].contents()),
        "vocab": len(fields["tokenizer.ggml.tokens"].data),
        "add_bos": None if add_bos is None else bool(add_bos.contents()),
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
) -> dict:
    """Every rung of every job on every model over the first `rows` rows of `source` (see
    the module docstring)."""
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


# -- the report ------------------------------------------------------------------------------


def _share(a: dict) -> str:
    if a["rate"] is None:
        return "n/a"
    return f"{a['rate']:.1%} [{a['lo']:.0%}, {a['hi']:.0%}] of {a['n']}"


def _answers(a: dict) -> str:
    if "counts" in a:
        return ", ".join(f"{k} {v}" for k, v in a["counts"].items())
    if "mean" in a:
        mean = "n/a" if a["mean"] is None else f"{a['mean']:.2f}"
        return f"mean {mean}, {a['parsed']}/{a['answered']} parse"
    return f"{a['distinct']} distinct of {a['answered']}"


def _shape(shape: dict) -> str:
    bos = {True: "BOS added", False: "no BOS", None: "BOS unknown"}[shape.get("add_bos")]
    return f"{shape['layers']} layers x {shape['width']}, vocabulary {shape['vocab']:,}, {bos}"


def _random_costs(reference: dict) -> dict | None:
    """The random-weight model's prefill rate, estimated from its Q4 pair (the engine seconds
    the two orders differ by over the prompt tokens they computed differently: the decode
    work is the same in both), and the share of its Q1 engine seconds that prefill took."""
    jobs = reference.get("jobs", {})
    q4, q1 = jobs.get("q4_job"), jobs.get("q1_job")
    if not q4:
        return None
    saved = q4["computed_tokens"]["original"] - q4["computed_tokens"]["ggr"]
    gained = q4["engine_time_s_median"]["original"] - q4["engine_time_s_median"]["ggr"]
    if saved <= 0 or gained <= 0:
        return None
    per_token = gained / saved
    out = {"prefill_tokens_per_s": 1 / per_token}
    if q1:
        prefill = q1["computed_tokens"]["original"] * per_token
        out["q1_prefill_share"] = prefill / q1["engine_time_s_median"]["original"]
    return out


def _row(job: str, rung: str, m: dict, output: str) -> str:
    same = "=" if m["cached_tokens"] == m["server_cached_tokens"] else "!="
    rule = m["one_slot_rule"]
    agree = "(reference)" if rung == "original" else _share(m["vs_original"])
    if output == "number" and rung != "original":
        diff = m["vs_original"]["mean_abs_diff"]
        agree += "" if diff is None else f", mean abs diff {diff:.2f}"
    return (
        f"| {job.removesuffix('_job')} | {rung} | {m['requests']} "
        f"| {m['prompt_tokens']} | {m['output_tokens_per_request']:.1f} "
        f"| {m['cached_tokens'][0]} {same} {m['server_cached_tokens'][0]} "
        f"| {m['hit_rate']:.1%} "
        f"| {rule['hit_rate']:.1%} ({rule['requests_equal']}/{m['requests']}) "
        f"| {m['sim']['hit_rate']:.1%} / {m['sim_one_slot']['hit_rate']:.1%} "
        f"| {m['prefill_s_median']} | {m['decode_s_median']} "
        f"| {m['engine_time_s_median']} | {m['wall_s_median']} "
        f"| {m['speedup']['measured']:.2f}x ({m['speedup']['sim_one_slot']:.2f}x) "
        f"| {agree} | {_share(m['rerun_agreement'])} | {_answers(m['answers'])} |"
    )


def _split(a: dict, key: str) -> str:
    part = a.get(key)
    return "n/a" if not part or not part["n"] else _share(part)


def markdown_real(result: dict) -> str:
    lines = [
        f"# llama.cpp `llama-server` (llama-cpp-python {result['llama_cpp_python']}) with real "
        "weights: the savings and the answers",
        "",
        f"Command: `{result['command']}` at commit `{result['commit']}` "
        f"({len(result.get('uncommitted_elsewhere', []))} other tracked files differed from it: "
        "others' work in progress in the shared tree, listed in the JSON). "
        f"{result['rows']} rows of movies_small.csv; one slot, {result['threads']} CPU "
        f"thread(s), one request in flight, host prompt cache off, `--swa-full`; each rung run "
        f"{result['repeats']} times, interleaved, each on a fresh server (times: medians). "
        f"Machine: {result['cpus']} CPUs shared with other engineers' tests, load average "
        f"(1/5/15 min) {'/'.join(map(str, result['load_average_start']))} at the start and "
        f"{'/'.join(map(str, result['load_average_end']))} at the end; the whole run took "
        f"{result['total_s'] / 60:.1f} min. Sim: {result['sim_deployment']['gpu']} + "
        f"{result['sim_deployment']['model']}, one sequence at a time, fed the server's own "
        "token ids for each request (so the real model's tokenizer and chat template, not "
        "Llama 3's tokenizer), with its default KV cache (`sim`) or one the size of the slot "
        "(`sim 1-slot`). Q2 is left out to keep the run near 20 minutes (`--jobs q2_job` runs "
        "it with its pushdown rung); no Q1/Q4 rung adds dedup because these rows hold no "
        "duplicate inputs.",
        "",
        "Columns: `cached` is the project's count (`llm_outputs`) and the server's "
        "`llamacpp:prompt_tokens_cached_total` over the run; `one-slot rule` is the prediction "
        "from the server's own token ids (`/apply-template` for a chat model, then `/tokenize` "
        "with special tokens as the server adds them; requests predicted exactly); `prefill s` "
        "/ `decode s` are the server's `prompt_seconds_total` / "
        "`tokens_predicted_seconds_total`; `engine s` the engine's measured makespan, `wall s` "
        "the whole pipeline run; `speed-up` is the written order's engine s over the rung's "
        "(in brackets the sim's, on the 1-slot cache); `agreement` the share of rows whose "
        "answer equals the written order's (Q4: as numbers), Wilson 95% interval; `floor` the "
        "same rung sent twice, each time to a fresh server.",
    ]
    for name, entry in result["models"].items():
        how = "chat template (/chat/completions)" if entry["use_chat"] else "plain completion"
        lines += [
            "",
            f"## {name} (`{entry['file']}`, {entry['bytes'] / 2**20:.0f} MiB, "
            f"{_shape(entry['shape'])}; {how})",
            "",
            "| query | rung | requests | prompt tok | out tok/req | cached: project = server "
            "| hit rate | one-slot rule | sim / sim 1-slot | prefill s | decode s | engine s "
            "| wall s | speed-up (sim) | agreement with written | floor (rerun) | answers |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for job, figures in entry["jobs"].items():
            for rung, m in figures["rungs"].items():
                lines.append(_row(job, rung, m, figures["output"]))
        lines.append("")
        for job, figures in entry["jobs"].items():
            for rung, m in figures["rungs"].items():
                if rung == "original":
                    continue
                a = m["vs_original"]
                n_same = (a.get("same_prompt") or {}).get("n", 0)
                lines.append(
                    f"- {job.removesuffix('_job')} {rung} vs the written order: rows sent the "
                    f"very same prompt ({n_same} of {a['n']}: only the row order, and so the "
                    f"cached prefix, differ) agree {_split(a, 'same_prompt')}; rows whose prompt "
                    f"changed (fields moved) {_split(a, 'changed_prompt')}; the floor (written "
                    f"order twice) {_share(figures['rungs']['original']['rerun_agreement'])}."
                )
    lines += _why(result)
    return "\n".join(lines) + "\n"


def _why(result: dict) -> list[str]:
    """Where real weights change the random-weight speed-ups, and why, from the figures."""
    reference = result.get("random_weight_reference") or {}
    costs = _random_costs(reference) if reference else None
    lines = ["", "## Against the random-weight run (`llama_cpp.md`)", ""]
    shape = reference.get("shape") or {}
    if costs:
        q1 = costs.get("q1_prefill_share")
        lines.append(
            f"- random weights ({shape.get('layers')} layers x {shape.get('width')}, the Llama 3 "
            f"vocabulary of {shape.get('vocab'):,}): prefill about "
            f"{costs['prefill_tokens_per_s']:.0f} tokens/s (estimated from its Q4 pair: engine "
            "s saved / prompt tokens no longer computed)"
            + ("" if q1 is None else f", so prefill was about {q1:.0%} of its Q1 engine s")
            + "."
        )
    for job in sorted({j for e in result["models"].values() for j in e["jobs"]}):
        parts = []
        for name, entry in result["models"].items():
            rungs = entry["jobs"].get(job, {}).get("rungs", {})
            if "ggr" not in rungs:
                continue
            g, o = rungs["ggr"], rungs["original"]
            prefill = o["prefill_tokens_per_s"]
            parts.append(
                f"{name} {g['speedup']['measured']:.2f}x (prefill "
                f"{'n/a' if prefill is None else f'{prefill:.0f}'} tokens/s, decode "
                f"{o['decode_tokens_per_s']:.0f} tokens/s, decode "
                f"{o['decode_s_median'] / max(o['engine_time_s_median'], 1e-9):.0%} of the "
                f"written order's engine s, {o['output_tokens_per_request']:.1f} output "
                "tokens/request)"
            )
        ref = reference.get("jobs", {}).get(job)
        was = (
            f"random weights {ref['speedup']:.2f}x ({ref['output_tokens_per_request']:.1f} "
            "output tokens/request)"
            if ref
            else "no random-weight figure"
        )
        lines.append(f"- {job.removesuffix('_job')}: GGR speed-up {'; '.join(parts)}; {was}.")
    lines += [
        "",
        "Reading. GGR removes prompt tokens only (prefill); the decoding is the same work in "
        "both orders, so a query's speed-up is bounded by how much of its engine time prefill "
        "takes. The output lengths are not what differs between random and real weights "
        "here: Q1's answers run to the query's 16-token limit with every model, Q4's take "
        "about 3 tokens (the number grammar). What differs is the price of a prompt token "
        "against an output token: the random-weight model has a few thin layers and Llama 3's "
        "large vocabulary, so a prompt token costs almost nothing while each output token "
        "pays the vocabulary-wide output layer and sampling; its Q1 was decode-bound and "
        "GGR's saving was inside the run-to-run spread. The real models' layers make a prompt "
        "token dear (tens of times the random model's cost) and an output token costs only a "
        "few prompt tokens, so prefill dominates Q4 and a large share of Q1, and GGR's "
        "hit-rate gain turns into a real speed-up on both queries. Gemma 3's 262k vocabulary "
        "makes its output tokens dearer than SmolLM2's, so its Q1 is closer to decode-bound "
        "and gains less. The simulator's hit rates follow the measured ones (1-slot cache); "
        "its speed-ups are for an L4 running Llama-3-8B, where prefill is cheap against "
        "decode, so compare its hit rates, not its seconds.",
        "",
        "Answers. The floor, the written order sent twice to fresh servers, is exact: greedy "
        "decoding on one slot repeats itself when the cache history repeats. GGR's answers "
        "differ from the written order's far more often, and not only where GGR moved fields: "
        "rows whose prompt is byte-identical in both runs (most of Q1, where GGR keeps the "
        "written field order) differ too, because the same prompt computed partly from a "
        "reused prefix is not computed with the same floating-point operations as the whole "
        "prompt in one batch, and these small models' greedy decoding flips on near-ties "
        "(and a 16-token text answer differs if any token does). So for reordering, the floor "
        "that matters is the same prompts in another order (the `same prompt` split above), "
        "not the same requests twice.",
    ]
    for name, entry in result["models"].items():
        for job, figures in entry["jobs"].items():
            m = figures["rungs"]["original"]
            if figures["output"] == "number" and m["spec_violations"] > m["requests"] / 2:
                lines[-1] += (
                    f" {name} answers {job.removesuffix('_job')} outside its range in "
                    f"{m['spec_violations']} of {m['requests']} requests (mean answer "
                    f"{m['answers']['mean']:.1f}; the `answers_obey_output_spec` check fails: "
                    "llama.cpp's number grammar does not encode the range), so its agreement "
                    "there compares those raw numbers."
                )
    return lines
