"""A real engine against the simulator: `python -m benchmarks.llama_cpp [--rows 300]
[--jobs q1_job,q4_job] [--repeats 3] [--shape small|wide]`, or with real weights
`python -m benchmarks.llama_cpp --model smollm2-135m[,gemma3-270m] [--threads 1] ...`.

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

With `--model` the same queries run on bundled real weights instead (the path is
`benchmarks.lib.llama_cpp_real`): a ladder per query (written order, GGR, + dedup / +
pushdown where the rows or the query have them), each rung `--repeats` times (default 2), the
answers' agreement with the written order beside the determinism floor (the written order
sent twice), the one-slot rule and the simulator fed the server's own token ids. Writes
`benchmarks/results/llama_cpp_real.json` and `.md`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.lib.gguf_model import BOS_ID, LlamaShape, write_model
from benchmarks.lib.llama_cpp_build import VERSION, build
from benchmarks.lib.llama_cpp_measure import SIM_DEPLOYMENT, record
from benchmarks.lib.llama_cpp_pair import PairRun, first_rows_csv, run_pair
from benchmarks.lib.llama_cpp_real import problems_real, run_real
from benchmarks.lib.llama_cpp_real_report import markdown_real
from benchmarks.lib.provenance import write_result

SHARED = Path(__file__).resolve().parents[2] / "shared"
TOKENIZER = SHARED / "tokenizers" / "llama3_tokenizer.json"
MOVIES = SHARED / "data" / "movies_small.csv"
DEFAULT_JSON = Path("benchmarks/results/llama_cpp.json")
REAL_JSON = Path("benchmarks/results/llama_cpp_real.json")
REAL_MODELS = ("smollm2-135m", "gemma3-270m")
SHAPES = {
    "small": LlamaShape(),
    "wide": LlamaShape(n_embd=768, n_layer=12, n_head=12, n_head_kv=4, n_ff=2048),
}


def _ids(runs: list[PairRun], tokenizer) -> list[list[int]]:
    """The token ids of each request as the random-weight model's server processes them:
    BOS, then the Llama 3 tokenizer's ids."""
    return [
        [BOS_ID, *tokenizer.encode(p, add_special_tokens=False).ids]
        for p in runs[0].run.requests["prompt"]
    ]


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
        methods = {
            m: record(runs, _ids(runs, tokenizer), str(TOKENIZER)) for m, runs in by_method.items()
        }
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
            accounted = m["stage_rows_answered"] + m["stage_rows_failed"] + m["stage_rows_skipped"]
            if accounted != result["rows"]:
                found.append(f"{job} {method}: {accounted} of {result['rows']} rows accounted for")
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
        f"request in flight, host prompt cache off. Sim: {result['sim_deployment']['gpu']} + "
        f"{result['sim_deployment']['model']}, one sequence at a time, its default KV cache "
        "(`sim`) or one the size of the slot (`sim 1-slot`). Per-request columns: requests "
        "predicted exactly / mean absolute difference in cached tokens.",
        "",
        "| job | order | requests | prompt tok | cached: project = server | hit rate "
        "| one-slot rule | sim | sim 1-slot | engine s (median) | sim engine s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def predicted(p: dict, n: int) -> str:
        return f"{p['hit_rate']:.1%} ({p['requests_equal']}/{n}, {p['mean_abs_diff_tokens']:.1f})"

    for job, methods in result["jobs"].items():
        for method in ("original", "ggr"):
            m = methods[method]
            n = m["requests"]
            same = "=" if m["cached_tokens"] == m["server_cached_tokens"] else "!="
            lines.append(
                f"| {job} | {method} | {n} | {m['prompt_tokens']} "
                f"| {m['cached_tokens'][0]} {same} {m['server_cached_tokens'][0]} "
                f"| {m['hit_rate']:.1%} | {predicted(m['one_slot_rule'], n)} "
                f"| {predicted(m['sim'], n)} | {predicted(m['sim_one_slot'], n)} "
                f"| {m['engine_time_s_median']} | {m['sim']['engine_time_s']:.2f} |"
            )
    lines.append("")
    for job, methods in result["jobs"].items():
        s = methods["speedup"]
        orig, ggr = methods["original"], methods["ggr"]
        gains = {
            k: f"{ggr[k]['hit_rate'] - orig[k]['hit_rate']:+.1%}" for k in ("sim", "sim_one_slot")
        }
        one_slot = orig["sim_one_slot"]["engine_time_s"] / ggr["sim_one_slot"]["engine_time_s"]
        lines.append(
            f"- {job}: GGR speed-up measured {s['measured']:.2f}x, simulated {s['sim']:.2f}x "
            f"(1-slot cache {one_slot:.2f}x); "
            f"hit rate gain measured {ggr['hit_rate'] - orig['hit_rate']:+.1%}, simulated "
            f"{gains['sim']} (1-slot cache {gains['sim_one_slot']})."
        )
    lines += [
        "",
        "Reading: the project's count equals the server's counter, and the one-slot rule (common "
        "prefix with the previous request, BOS included) predicts every request exactly. The "
        "simulator models vLLM's block cache: with its default cache nothing is evicted and "
        "requests run one at a time, so every distinct 16-token block is computed once whatever "
        "the row order, and only GGR's field order can change its hit rate. Given a cache the "
        "size of the slot it predicts the row-order gain; it stays a little under the measured "
        "rates because it caches whole 16-token blocks only and counts no BOS token. Its engine "
        "seconds are for the GPU named above, not this CPU: compare the speed-ups, not the "
        "seconds. Measured seconds on this shared 2-core machine vary by up to 40% between "
        "repeats (see the JSON).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.llama_cpp", description=__doc__)
    p.add_argument("--rows", type=int, default=300, help="first rows of movies_small.csv")
    p.add_argument("--jobs", default="q1_job,q4_job", help="comma-separated query jobs")
    p.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="runs per order (median time; default 3, "
        "with --model 2: the second is the determinism floor)",
    )
    p.add_argument("--shape", choices=sorted(SHAPES), default="small")
    p.add_argument(
        "--model",
        default=None,
        help="real weights instead of the random-weight model: comma-separated bundled "
        f"models ({', '.join(REAL_MODELS)}); results in {REAL_JSON} unless --json",
    )
    p.add_argument("--threads", type=int, default=1, help="llama-server CPU threads (--model)")
    p.add_argument("--json", type=Path, default=None, help=f"default {DEFAULT_JSON}")
    p.add_argument(
        "--render",
        action="store_true",
        help="only write the markdown again from the JSON of an earlier run (nothing runs)",
    )
    args = p.parse_args(argv)
    if args.render:
        path = args.json or (REAL_JSON if args.model else DEFAULT_JSON)
        saved = json.loads(path.read_text())
        render = markdown_real if "models" in saved else markdown
        path.with_suffix(".md").write_text(render(saved))
        print(render(saved))
        return 0
    for path in (TOKENIZER, MOVIES):
        if not path.exists():
            print(f"error: {path} is absent (the shared folder is not beside the project)")
            return 2
    jobs = args.jobs.split(",")
    if args.model:
        models = args.model.split(",")
        unknown = [m for m in models if m not in REAL_MODELS]
        if unknown:
            print(f"error: --model {unknown[0]!r} is not one of {', '.join(REAL_MODELS)}")
            return 2
        repeats = 2 if args.repeats is None else args.repeats
        if repeats < 2:
            print("error: --model needs --repeats >= 2 (the second is the determinism floor)")
            return 2
        with tempfile.TemporaryDirectory(prefix="llama-cpp-real-") as tmp:
            result = run_real(models, MOVIES, args.rows, jobs, repeats, args.threads, Path(tmp))
        render, check, default_json = markdown_real, problems_real, REAL_JSON
    else:
        repeats = 3 if args.repeats is None else args.repeats
        with tempfile.TemporaryDirectory(prefix="llama-cpp-bench-") as tmp:
            result = run(args.rows, jobs, repeats, args.shape, Path(tmp))
        render, check, default_json = markdown, problems, DEFAULT_JSON
    words = sys.argv[1:] if argv is None else argv
    result["command"] = " ".join(["python -m benchmarks.llama_cpp", *words])
    out = args.json or default_json
    out.parent.mkdir(parents=True, exist_ok=True)
    write_result(out, result, indent=2)
    out.with_suffix(".md").write_text(render(result))
    print(render(result))
    found = check(result)
    for line in found:
        print(f"error: {line}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
