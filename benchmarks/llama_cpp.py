"""A real engine against the simulator: `python -m benchmarks.llama_cpp [--rows 300]
[--jobs q1_job,q4_job] [--repeats 3] [--shape small|wide]`.

Runs each query job through the project's pipeline (`LLM_ASSETS_ENGINE=openai`) against
llama.cpp's `llama-server` on this CPU (`make llama-server`; one slot, one request in flight,
the host prompt cache off), in the original order and in GGR order, on the first `--rows` rows
of `../shared/data/movies_small.csv`, with a random-weight Llama GGUF carrying the real Llama 3
tokenizer. For the very requests each run sent, it also computes

- the simulator's prediction (`SimulatedEngine`, vLLM's block prefix cache, L4 + Llama-3-8B,
  the Llama 3 tokenizer, one sequence at a time, each request's output length as measured);
- the one-slot rule a single llama.cpp slot follows: a request reuses the longest common prefix
  of its tokens (BOS included) with the previous request's, minus one token when the whole
  prompt matches (llama.cpp always computes at least one token).

Writes `benchmarks/results/llama_cpp.json` and `.md`: measured cached tokens (the project's
count and the server's `/metrics` counter), hit rates, the engine's measured seconds (median
over `--repeats`) and the simulator's, side by side with how close they are. Exits 1 when the
project's count differs from the server's counter or a row is unaccounted for.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from benchmarks.lib.gguf_model import BOS_ID, LlamaShape, write_model
from benchmarks.lib.llama_cpp_build import VERSION, build
from benchmarks.lib.llama_cpp_pair import PairRun, first_rows_csv, run_pair

SHARED = Path(__file__).resolve().parents[2] / "shared"
TOKENIZER = SHARED / "tokenizers" / "llama3_tokenizer.json"
MOVIES = SHARED / "data" / "movies_small.csv"
DEFAULT_JSON = Path("benchmarks/results/llama_cpp.json")
SHAPES = {
    "small": LlamaShape(),
    "wide": LlamaShape(n_embd=768, n_layer=12, n_head=12, n_head_kv=4, n_ff=2048),
}
SIM_DEPLOYMENT = {"gpu": "L4", "model": "llama-3-8b"}


def one_slot_cached(token_ids: list[list[int]]) -> list[int]:
    """Cached tokens per request under one llama.cpp slot holding the previous prompt."""
    cached, previous = [], []
    for ids in token_ids:
        common = 0
        for a, b in zip(previous, ids, strict=False):
            if a != b:
                break
            common += 1
        cached.append(min(common, len(ids) - 1))
        previous = ids
    return cached


def sim_prediction(requests: pd.DataFrame, tokenizer: Path) -> dict:
    """The simulator's cached tokens and engine seconds for the requests as sent."""
    from resources.engine import Request
    from resources.sim.engine import SimulatedEngine

    engine = SimulatedEngine(**SIM_DEPLOYMENT, tokenizer=str(tokenizer), max_num_seqs=1)
    sent = [
        Request(id=rid, prompt=prompt, max_tokens=max(1, int(n_out)))
        for rid, prompt, n_out in zip(
            requests["request_id"], requests["prompt"], requests["output_tokens"], strict=True
        )
    ]
    result = engine.run("llama_cpp", sent)
    return {
        "prompt_tokens": result.stats.prompt_tokens,
        "cached_tokens": result.stats.cached_tokens,
        "hit_rate": result.stats.token_hit_rate,
        "engine_time_s": result.stats.engine_time_s,
        "per_request": [r.cached_tokens for r in result.responses],
    }


def _record(runs: list[PairRun], tokenizer) -> dict:
    """One method's measurements over repeats, with both predictions."""
    first = runs[0]
    requests = first.run.requests
    measured = [int(c) for c in requests["cached_tokens"]]
    ids = [[BOS_ID, *tokenizer.encode(p, add_special_tokens=False).ids] for p in requests["prompt"]]
    rule = one_slot_cached(ids)
    sim = sim_prediction(requests, TOKENIZER)
    meta = first.run.metadata
    prompt_tokens = int(meta["prompt_tokens"])
    return {
        "requests": len(requests),
        "rows_in": meta["rows_in"],
        "rows_answered": meta["rows_answered"],
        "rows_failed": meta["rows_failed"],
        "rows_skipped": meta["rows_skipped"],
        "prompt_tokens": prompt_tokens,
        "output_tokens": int(meta["output_tokens"]),
        "cached_tokens": [r.cached_tokens for r in runs],
        "server_cached_tokens": [r.server_cached_tokens for r in runs],
        "hit_rate": first.hit_rate,
        "engine_time_s": [round(float(r.run.metadata["engine_time_s"]), 3) for r in runs],
        "engine_time_s_median": round(
            statistics.median(float(r.run.metadata["engine_time_s"]) for r in runs), 3
        ),
        "one_slot_rule": {
            "cached_tokens": sum(rule),
            "hit_rate": sum(rule) / prompt_tokens,
            "requests_equal": sum(a == b for a, b in zip(rule, measured, strict=True)),
        },
        "sim": {k: v for k, v in sim.items() if k != "per_request"}
        | {
            # the sim counts no BOS: compare per request after adding it to its prompt count
            "requests_equal": sum(
                a == b for a, b in zip(sim["per_request"], measured, strict=True)
            ),
        },
    }


def run(rows: int, jobs: list[str], repeats: int, shape: str, workdir: Path) -> dict:
    from tokenizers import Tokenizer

    binary = build()
    started = time.perf_counter()
    model = write_model(workdir / f"model-{shape}.gguf", TOKENIZER, SHAPES[shape])
    model_write_s = time.perf_counter() - started
    movies = first_rows_csv(MOVIES, rows, workdir / "movies.csv")
    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    result: dict = {
        "llama_cpp_python": VERSION,
        "model": {"shape": shape, **vars(SHAPES[shape]), "bytes": model.stat().st_size},
        "model_write_s": round(model_write_s, 2),
        "rows": rows,
        "slots": 1,
        "sim_deployment": SIM_DEPLOYMENT,
        "jobs": {},
    }
    for job in jobs:
        by_method: dict[str, list[PairRun]] = {}
        for k in range(repeats):
            for r in run_pair(binary, model, movies, workdir / f"{job}-{k}", job=job):
                by_method.setdefault(r.method, []).append(r)
        methods = {m: _record(runs, tokenizer) for m, runs in by_method.items()}
        orig, ggr = methods["original"], methods["ggr"]
        methods["speedup"] = {
            "measured": orig["engine_time_s_median"] / ggr["engine_time_s_median"],
            "sim": orig["sim"]["engine_time_s"] / ggr["sim"]["engine_time_s"],
        }
        result["jobs"][job] = methods
    return result


def problems(result: dict) -> list[str]:
    found = []
    for job, methods in result["jobs"].items():
        for method in ("original", "ggr"):
            m = methods[method]
            if m["cached_tokens"] != m["server_cached_tokens"]:
                found.append(f"{job} {method}: project {m['cached_tokens']} != server counter")
            accounted = m["rows_answered"] + m["rows_failed"] + m["rows_skipped"]
            if accounted != m["rows_in"]:
                found.append(f"{job} {method}: {accounted} of {m['rows_in']} rows accounted for")
    return found


def markdown(result: dict) -> str:
    lines = [
        f"# llama.cpp `llama-server` (llama-cpp-python {result['llama_cpp_python']}) vs the "
        "simulator",
        "",
        f"Command: `{result['command']}`. Model: random-weight Llama "
        f"{result['model']['n_embd']}x{result['model']['n_layer']} "
        f"({result['model']['bytes'] / 2**20:.0f} MiB, written in {result['model_write_s']} s) "
        f"with the Llama 3 tokenizer; {result['rows']} rows of movies_small.csv; one slot, one "
        f"request in flight. Sim: {result['sim_deployment']['gpu']} + "
        f"{result['sim_deployment']['model']}, one sequence at a time.",
        "",
        "| job | order | requests | prompt tok | cached (project) | cached (server) | hit rate "
        "| one-slot rule | = per req | sim hit rate | sim = per req | engine s (median) "
        "| sim engine s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for job, methods in result["jobs"].items():
        for method in ("original", "ggr"):
            m = methods[method]
            rule, sim = m["one_slot_rule"], m["sim"]
            lines.append(
                f"| {job} | {method} | {m['requests']} | {m['prompt_tokens']} "
                f"| {m['cached_tokens'][0]} | {m['server_cached_tokens'][0]} "
                f"| {m['hit_rate']:.1%} | {rule['hit_rate']:.1%} "
                f"| {rule['requests_equal']}/{m['requests']} | {sim['hit_rate']:.1%} "
                f"| {sim['requests_equal']}/{m['requests']} | {m['engine_time_s_median']} "
                f"| {sim['engine_time_s']:.2f} |"
            )
    lines.append("")
    for job, methods in result["jobs"].items():
        s = methods["speedup"]
        orig, ggr = methods["original"], methods["ggr"]
        lines.append(
            f"- {job}: GGR speed-up measured {s['measured']:.2f}x, simulated {s['sim']:.2f}x; "
            f"hit rate gain measured {ggr['hit_rate'] - orig['hit_rate']:+.1%}, simulated "
            f"{ggr['sim']['hit_rate'] - orig['sim']['hit_rate']:+.1%}."
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.llama_cpp", description=__doc__)
    p.add_argument("--rows", type=int, default=300, help="first rows of movies_small.csv")
    p.add_argument("--jobs", default="q1_job,q4_job", help="comma-separated query jobs")
    p.add_argument("--repeats", type=int, default=3, help="runs per order (median time)")
    p.add_argument("--shape", choices=sorted(SHAPES), default="small")
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"default {DEFAULT_JSON}")
    args = p.parse_args(argv)
    for path in (TOKENIZER, MOVIES):
        if not path.exists():
            print(f"error: {path} is absent (the shared folder is not beside the project)")
            return 2
    with tempfile.TemporaryDirectory(prefix="llama-cpp-bench-") as tmp:
        result = run(args.rows, args.jobs.split(","), args.repeats, args.shape, Path(tmp))
    words = sys.argv[1:] if argv is None else argv
    result["command"] = " ".join(["python -m benchmarks.llama_cpp", *words])
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    args.json.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    found = problems(result)
    for line in found:
        print(f"error: {line}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
