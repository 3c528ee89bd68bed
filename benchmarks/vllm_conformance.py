"""Conformance of the simulator with vLLM's own v1 scheduler and KV-cache manager.

    python -m benchmarks.vllm_conformance [--vllm-python PATH] [--rows N] [--json PATH]
        [--record-traces [PATH]] [--traces-only]

Drives vLLM's real v1 `Scheduler` (and through it its `KVCacheManager`, `BlockPool` and free
queue; no model, no GPU: `benchmarks.lib.vllm_recorder`) and the simulated engine on identical
token sequences and reports, per run, how many requests got the same prefix-cache hit and how
many scheduler steps formed the same batch. Where `vllm` is importable the recorder runs in this
process; otherwise `--vllm-python` names an interpreter that has it (`make conformance` builds
`.venv-conformance` for this).

Workload: Q1 and Q2 prompts over ../shared/data/movies_small.csv exactly as the product plans
them (`llm_assets.pipeline.run.run_query` without sending, as `llm-assets plan` does: system
prompt, template, fields; rows with a null field skipped, equal inputs sent once, Q2's Fresh
filter pushed down, prompts fitted to Llama-3-8B's context), tokenized with the Llama 3
tokenizer in ../shared/tokenizers/, in file, GGR and shuffled (seeded) order; output lengths
vary from 1 to 48 tokens so outputs fill blocks. Runs: every order x every cache size (40,000
blocks: no eviction; 400 and 200: the eviction regime of the project's own defaults; 100:
heavy preemption) x every (`max_num_seqs`, `max_num_batched_tokens`) pair in `SCHEDULES` (the
smallest budget splits prompts into chunks, where vLLM's whole-prompt admission gate matters).

`--record-traces` also writes the compact trace the test suite replays without vLLM
(`tests/fixtures/vllm_traces.json.gz`): a small slice of the workload (the first `TRACE_ROWS`
rows, the `TRACE_RUNS` sizes), vLLM's decisions on it and vLLM's version; `--traces-only`
writes just that.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.lib.conformance import MAX_MODEL_LEN, MODEL, compare, simulate_run, vllm_requests
from benchmarks.lib.model_dir import write_model_dir
from benchmarks.lib.provenance import write_result
from resources.sim.block_cache import BLOCK_SIZE

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
MOVIES = SHARED / "data" / "movies_small.csv"
TOKENIZER = SHARED / "tokenizers" / "llama3_tokenizer.json"
DEFAULT_JSON = ROOT / "benchmarks" / "results" / "vllm_conformance.json"
DEFAULT_TRACES = ROOT / "tests" / "fixtures" / "vllm_traces.json.gz"
CACHE_BLOCKS = (40_000, 400, 200, 100)
SCHEDULES = ((1, 2048), (8, 2048), (16, 8192), (64, 8192), (32, 256))
TRACE_ROWS = 120
TRACE_RUNS = (  # (cache blocks, max_num_seqs, max_num_batched_tokens): every rule exercised
    (40_000, 16, 2048),
    (200, 16, 2048),
    (120, 64, 8192),
    (60, 8, 512),
    (80, 32, 128),  # chunks much smaller than prompts: the whole-prompt admission gate binds
)
SEED = 13


def planned_prompts(query, frames: dict, method: str, system_prompt: str, engine) -> list[str]:
    """The prompts the product sends for `query`'s first LLM call, in submission order: the
    one planner (`run_query` without sending, as `llm-assets plan`), minus those it refuses."""
    from llm_assets.pipeline.options import QueryOptions
    from llm_assets.pipeline.run import run_query

    options = QueryOptions(method=method, system_prompt=system_prompt)
    plan = run_query(query, frames, options, engine, send=False).stages[0].plan
    return [str(p) for p in plan.loc[plan["error"].isna(), "prompt"]]


def movie_prompts(rows: int | None) -> dict[str, dict[str, list[str]]]:
    """Query -> order -> prompts over the first `rows` rows of movies_small.csv."""
    from llm_assets.benchmark_queries import SYSTEM_PROMPTS, compile_query
    from llm_assets.data.loaders import load_movies_joined
    from resources.sim import SimulatedEngine
    from resources.sim.tokenizer import load_tokenizer

    if not MOVIES.exists():
        raise SystemExit(f"{MOVIES} is absent: the conformance workload is built from it")
    frames = load_movies_joined(MOVIES)
    if rows is not None:
        frames["reviews"] = frames["reviews"].head(rows)
    # the context fit counts with the tokenizer the workload is tokenized with
    engine = SimulatedEngine("H100-80GB", MODEL, tokenizer=load_tokenizer(TOKENIZER))
    out: dict[str, dict[str, list[str]]] = {}
    for name in ("q1", "q2"):
        query = compile_query(name, "movies")
        system = SYSTEM_PROMPTS.get(name, {}).get("movies", "")
        file = planned_prompts(query, frames, "original", system, engine)
        shuffled = list(file)
        random.Random(SEED).shuffle(shuffled)
        out[name] = {
            "file": file,
            "ggr": planned_prompts(query, frames, "ggr", system, engine),
            "shuffled": shuffled,
        }
    return out


def workload(rows: int | None, runs: list[tuple[int, int, int]]) -> dict:
    """Requests (token ids, output lengths) and runs: every query x order x `runs` entry."""
    from resources.sim.tokenizer import load_tokenizer

    if not TOKENIZER.exists():
        raise SystemExit(f"{TOKENIZER} is absent: the workload is tokenized with it")
    tokenizer = load_tokenizer(TOKENIZER)
    prompts = movie_prompts(rows)
    index: dict[str, int] = {}
    requests: list[dict] = []
    orders: dict[str, list[int]] = {}
    for query, by_order in prompts.items():
        for order, texts in by_order.items():
            positions = []
            for text in texts:
                if text not in index:
                    index[text] = len(requests)
                    max_tokens = 1 + (len(requests) * 37) % 48
                    requests.append({"prompt": tokenizer.encode(text), "max_tokens": max_tokens})
                positions.append(index[text])
            orders[f"{query}/{order}"] = positions
    run_specs = [
        {
            "name": f"{name}/blocks={blocks}/seqs={seqs}/budget={budget}",
            "order": order,
            "num_blocks": blocks,
            "max_num_seqs": seqs,
            "max_num_batched_tokens": budget,
        }
        for name, order in orders.items()
        for blocks, seqs, budget in runs
    ]
    return {"requests": requests, "runs": run_specs}


def record_vllm(work: dict, vllm_python: str | None) -> dict:
    """vLLM's decisions on every run, in process or through `vllm_python`."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = {
            "model_dir": str(write_model_dir(Path(tmp) / "llama-3-8b")),
            "max_model_len": MAX_MODEL_LEN,
            "block_size": BLOCK_SIZE,
            "requests": vllm_requests(work["requests"]),
            "runs": work["runs"],
        }
        if vllm_python is None and importlib.util.find_spec("vllm") is not None:
            from benchmarks.lib.vllm_recorder import record

            return record(spec)
        if vllm_python is None:
            raise SystemExit(
                "vllm is not importable here; run `make conformance` or pass --vllm-python "
                ".venv-conformance/bin/python"
            )
        src, dst = Path(tmp) / "in.json", Path(tmp) / "out.json"
        src.write_text(json.dumps(spec))
        cmd = [vllm_python, "-m", "benchmarks.lib.vllm_recorder", str(src), str(dst)]
        subprocess.run(cmd, check=True, cwd=ROOT)
        return json.loads(dst.read_text())


def check(work: dict, recorded: dict) -> list[dict]:
    """The simulator against vLLM on every recorded run."""
    rows = []
    for run, vllm in zip(work["runs"], recorded["runs"], strict=True):
        sim = simulate_run(work["requests"], run)
        rows.append({"run": run["name"], **compare(vllm, sim)})
    return rows


def write_traces(path: Path, work: dict, recorded: dict) -> None:
    """The compact trace the test suite replays: requests, runs and vLLM's decisions."""
    runs = [
        {**run, **{k: v for k, v in rec.items() if k != "name"}}
        for run, rec in zip(work["runs"], recorded["runs"], strict=True)
    ]
    trace = {"vllm_version": recorded["vllm_version"], "requests": work["requests"], "runs": runs}
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", compresslevel=9) as f:
        json.dump(trace, f, separators=(",", ":"))


def record_traces(path: Path, vllm_python: str | None) -> None:
    work = workload(TRACE_ROWS, list(TRACE_RUNS))
    write_traces(path, work, record_vllm(work, vllm_python))
    print(f"wrote {path} ({path.stat().st_size} bytes)")


def summary(rows: list[dict]) -> dict:
    preempting = [r for r in rows if r["preemptions_vllm"] or r["preemptions_sim"]]
    calm = [r for r in rows if not (r["preemptions_vllm"] or r["preemptions_sim"])]
    return {
        "runs": len(rows),
        "runs_exact": sum(r["exact"] for r in rows),
        "non_preempting_runs": len(calm),
        "non_preempting_runs_exact": sum(r["exact"] for r in calm),
        "preempting_runs": len(preempting),
        "requests": sum(r["requests"] for r in rows),
        "requests_agreeing": sum(r["requests_agreeing"] for r in rows),
        "steps_vllm": sum(r["steps_vllm"] for r in rows),
        "steps_agreeing": sum(r["steps_agreeing"] for r in rows),
        "max_cached_token_gap": max(
            (abs(r["cached_tokens_sim"] / max(r["cached_tokens_vllm"], 1) - 1) for r in rows),
            default=0.0,
        ),
        "max_computed_token_gap": max(
            (abs(r["computed_tokens_sim"] / r["computed_tokens_vllm"] - 1) for r in rows),
            default=0.0,
        ),
    }


def markdown(out: dict) -> str:
    s = out["summary"]
    lines = [
        f"# Simulator vs vLLM {out['vllm_version']} (v1 scheduler + KV-cache manager)",
        "",
        f"`{out['command']}`; {s['runs']} runs, {s['requests']} requests, "
        f"{s['steps_vllm']} vLLM steps.",
        "",
        f"- runs in exact agreement: {s['runs_exact']} / {s['runs']} "
        f"(non-preempting: {s['non_preempting_runs_exact']} / {s['non_preempting_runs']})",
        f"- requests with the same cached tokens: {s['requests_agreeing']} / {s['requests']}",
        f"- steps with the same batch: {s['steps_agreeing']} / {s['steps_vllm']}",
        f"- largest gap in cached tokens: {s['max_cached_token_gap']:.2%}; in computed tokens: "
        f"{s['max_computed_token_gap']:.2%}",
        "",
        "| run | requests agreeing | steps agreeing (vLLM / sim) | cached vLLM / sim | "
        "computed vLLM / sim | preemptions vLLM / sim |",
        "|---|---|---|---|---|---|",
    ]
    for r in out["rows"]:
        lines.append(
            f"| {r['run']} | {r['requests_agreeing']} / {r['requests']} | {r['steps_agreeing']}"
            f" ({r['steps_vllm']} / {r['steps_sim']}) | {r['cached_tokens_vllm']} / "
            f"{r['cached_tokens_sim']} | {r['computed_tokens_vllm']} / "
            f"{r['computed_tokens_sim']} | {r['preemptions_vllm']} / {r['preemptions_sim']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python", help="an interpreter with vllm (default: this one)")
    parser.add_argument("--rows", type=int, default=None, help="first N table rows (all)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--record-traces", type=Path, nargs="?", const=DEFAULT_TRACES)
    parser.add_argument("--traces-only", action="store_true", help="skip the full comparison")
    args = parser.parse_args(argv)
    if args.traces_only:
        args.record_traces = args.record_traces or DEFAULT_TRACES
        record_traces(args.record_traces, args.vllm_python)
        return 0
    t0 = time.perf_counter()
    runs = [(b, s, t) for b in CACHE_BLOCKS for s, t in SCHEDULES]
    work = workload(args.rows, runs)
    recorded = record_vllm(work, args.vllm_python)
    rows = check(work, recorded)
    out = {
        "command": "python -m benchmarks.vllm_conformance"
        + (f" --rows {args.rows}" if args.rows else ""),
        "vllm_version": recorded["vllm_version"],
        "summary": summary(rows),
        "rows": rows,
        "wall_s": time.perf_counter() - t0,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.json, out, indent=1)
    args.json.with_suffix(".md").write_text(markdown(out))
    print(markdown(out).split("| run |")[0])
    if args.record_traces:
        record_traces(args.record_traces, args.vllm_python)
    print(f"wrote {args.json} ({out['wall_s']:.0f} s wall)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
