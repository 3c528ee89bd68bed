"""Validate the simulator on a real GPU: in-process vLLM, random weights, Llama-3-8B shape.

    python -m benchmarks.gpu_validation [--concurrency 1,8,16,64] [--rows N] [--json PATH]
        [--dry-run]

Needs `vllm` and a CUDA GPU (nothing is downloaded): vLLM loads a local model directory
(`benchmarks.lib.model_dir`: Llama-3-8B's `config.json` and the shared Llama 3 tokenizer) with
`load_format="dummy"` (random weights: speed is that of the real model, answers are noise).
It measures, driving `LLMEngine.step()` and timing every step:

1. a closed-loop concurrency sweep at each `--concurrency` C (C clients, 20*C requests of
   64-512 prompt and 32-256 output tokens, uniform and seeded):
   median TTFT and TPOT, output tokens/s;
2. the prefix-cache hits of Q1 over ../shared/data/movies_small.csv in original and GGR order
   (each on an empty cache): vLLM's `num_cached_tokens` per request, summed;
3. a fit of the cost model (`resources.sim.cost_model.fit`) to every timed step, with each
   step's batch shape read from vLLM's own `SchedulerOutput` (chunk c and context m of every
   prefill, context of every decode).

Writes JSON (default `benchmarks/results/gpu_validation.json`) with the measurements, the fitted
coefficients, and the simulator's predictions for the same requests under both timing profiles
and under the fitted coefficients. `--dry-run` builds everything up to the CUDA call (model
directory, workloads, the simulator's predictions) and writes the plan without running vLLM.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.lib.model_dir import write_model_dir
from benchmarks.lib.sweep import random_lengths, simulate_point
from benchmarks.vllm_conformance import TOKENIZER, movie_prompts
from resources.sim.cost_model import BatchShape, CostCoefficients, fit

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_JSON = ROOT / "benchmarks" / "results" / "gpu_validation.json"
GPU = "H100-80GB"
MODEL = "llama-3-8b"
MAX_MODEL_LEN = 8192
Q1_MAX_TOKENS = 16


def external_id(rid: str, known) -> str:
    """The id a request was added with: vLLM appends "-" and 8 random characters inside."""
    return rid if rid in known else rid.rsplit("-", 1)[0]


def step_shape(output, prompt_lens: dict[str, int]) -> BatchShape:
    """The cost model's view of one vLLM step from its `SchedulerOutput`: a request computing
    one token past its prompt is a decode (context m), anything else a prefill chunk (c, m)."""
    computed = {r.req_id: r.num_computed_tokens for r in output.scheduled_new_reqs}
    cached = output.scheduled_cached_reqs
    computed.update(zip(cached.req_ids, cached.num_computed_tokens, strict=True))
    prefill, decode = [], []
    for rid, c in output.num_scheduled_tokens.items():
        m = computed[rid]
        if c == 1 and m >= prompt_lens[external_id(rid, prompt_lens)]:
            decode.append(m)
        else:
            prefill.append((c, m))
    return BatchShape(prefill=tuple(prefill), decode=tuple(decode))


class StepTimer:
    """Drives an in-process vLLM `LLMEngine` one step at a time, keeping at most
    `concurrency` requests in flight, and records per request the send, first-token and
    finish times and cached tokens, and per step its shape and wall seconds."""

    def __init__(self, llm) -> None:
        self.engine = llm.llm_engine
        scheduler = self.engine.engine_core.engine_core.scheduler
        schedule = scheduler.schedule
        self.last = None

        def recording_schedule(*args, **kwargs):
            self.last = schedule(*args, **kwargs)
            return self.last

        scheduler.schedule = recording_schedule
        self.rows: list[tuple[BatchShape, float]] = []

    def run(self, requests: list[tuple[list[int], int]], concurrency: int) -> list[dict]:
        from vllm import SamplingParams

        pending = list(enumerate(requests))[::-1]
        prompt_lens = {str(i): len(ids) for i, (ids, _) in enumerate(requests)}
        stats: dict[str, dict] = {}
        in_flight = 0
        while pending or in_flight:
            while pending and in_flight < concurrency:
                i, (ids, n_out) = pending.pop()
                params = SamplingParams(max_tokens=n_out, ignore_eos=True, temperature=0.0)
                self.engine.add_request(str(i), {"prompt_token_ids": ids}, params)
                stats[str(i)] = {"sent": time.perf_counter(), "prompt_tokens": len(ids)}
                in_flight += 1
            t0 = time.perf_counter()
            outputs = self.engine.step()
            now = time.perf_counter()
            if self.last is not None and self.last.total_num_scheduled_tokens:
                self.rows.append((step_shape(self.last, prompt_lens), now - t0))
            for out in outputs:
                s = stats[external_id(out.request_id, stats)]
                if "first" not in s and out.outputs and out.outputs[0].token_ids:
                    s["first"] = now
                if out.finished:
                    s.update(finish=now, output_tokens=len(out.outputs[0].token_ids))
                    s["cached_tokens"] = out.num_cached_tokens or 0
                    in_flight -= 1
        return [stats[str(i)] for i in range(len(requests))]


def summarize(stats: list[dict]) -> dict:
    tpot = [
        (s["finish"] - s["first"]) / (s["output_tokens"] - 1)
        for s in stats
        if s["output_tokens"] > 1
    ]
    span = max(s["finish"] for s in stats) - min(s["sent"] for s in stats)
    return {
        "ttft_ms_p50": 1000 * statistics.median(s["first"] - s["sent"] for s in stats),
        "tpot_ms_p50": 1000 * statistics.median(tpot),
        "output_tok_per_s": sum(s["output_tokens"] for s in stats) / span,
        "prompt_tokens": sum(s["prompt_tokens"] for s in stats),
        "cached_tokens": sum(s["cached_tokens"] for s in stats),
    }


def sweep_lengths(concurrency: int) -> list[tuple[int, int]]:
    return random_lengths(20 * concurrency, (64, 512), (32, 256), seed=concurrency)


def q1_requests(rows: int | None) -> dict[str, list[tuple[list[int], int]]]:
    """Q1 prompts over movies_small.csv in original and GGR order, as token ids."""
    from resources.sim.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(TOKENIZER)
    prompts = movie_prompts(rows)["q1"]
    return {
        order: [(tokenizer.encode(p), Q1_MAX_TOKENS) for p in prompts[key]]
        for order, key in (("original", "file"), ("ggr", "ggr"))
    }


def simulated(concurrency: list[int], q1: dict, coefficients: CostCoefficients | None) -> dict:
    """The simulator's predictions for the same requests (both profiles, or `coefficients`)."""
    from benchmarks.lib.conformance import TokenIdText
    from llm_assets.output_spec import OutputSpec
    from resources.engine import Request
    from resources.sim import SimulatedEngine

    out: dict = {}
    for timing in ("vllm-2024", "vllm-2026"):
        out[timing] = {
            str(c): simulate_point(GPU, MODEL, c, sweep_lengths(c), timing=timing)
            for c in concurrency
        }
    engine = SimulatedEngine(GPU, MODEL, "vllm-v1", tokenizer=TokenIdText())
    out["q1_cached_tokens"] = {}
    for order, reqs in q1.items():
        engine.reset_cache()
        requests = [
            Request(str(i), " ".join(map(str, ids)), n, OutputSpec.text())
            for i, (ids, n) in enumerate(reqs)
        ]
        out["q1_cached_tokens"][order] = engine.run(order, requests).stats.cached_tokens
    if coefficients is not None:
        out["fitted"] = {
            str(c): simulate_point(GPU, MODEL, c, sweep_lengths(c), coefficients=coefficients)
            for c in concurrency
        }
    return out


def measure(model_dir: Path, concurrency: list[int], q1: dict) -> tuple[dict, list]:
    """Everything that runs on the GPU; returns the measurements and the fit rows."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # scheduler in this process
    import torch
    from vllm import LLM

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run on a GPU machine, or pass --dry-run")
    llm = LLM(
        model=str(model_dir),
        tokenizer=str(model_dir),
        load_format="dummy",
        dtype="bfloat16",
        max_model_len=MAX_MODEL_LEN,
        enable_prefix_caching=True,
        max_num_seqs=max(max(concurrency), 256),
        seed=0,
    )
    timer = StepTimer(llm)
    sweep = {}
    for c in concurrency:
        llm.reset_prefix_cache()
        reqs = [([1000 + (7 * i + k) % 120_000 for k in range(n_in)], n_out)
                for i, (n_in, n_out) in enumerate(sweep_lengths(c))]  # fmt: skip
        sweep[str(c)] = summarize(timer.run(reqs, c))
    q1_out = {}
    for order, reqs in q1.items():
        llm.reset_prefix_cache()
        q1_out[order] = summarize(timer.run(reqs, 256))
    return {"sweep": sweep, "q1": q1_out, "num_steps": len(timer.rows)}, timer.rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,8,16,64")
    parser.add_argument("--rows", type=int, default=None, help="first N movies rows (all)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--dry-run", action="store_true", help="stop before the CUDA call")
    args = parser.parse_args(argv)
    try:
        concurrency = [int(c) for c in args.concurrency.split(",")]
    except ValueError:
        parser.error(f"--concurrency {args.concurrency!r}: expected integers like 1,8,16,64")
    if not TOKENIZER.exists():
        raise SystemExit(f"{TOKENIZER} is absent: the model directory needs it")
    t0 = time.perf_counter()
    q1 = q1_requests(args.rows)
    out: dict = {
        "command": "python -m benchmarks.gpu_validation " + " ".join(argv or sys.argv[1:]),
        "gpu_profile": GPU,
        "model": MODEL,
        "concurrency": concurrency,
        "q1_requests": {order: len(reqs) for order, reqs in q1.items()},
    }
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = write_model_dir(Path(tmp) / "llama-3-8b", TOKENIZER)
        if args.dry_run:
            out["dry_run"] = True
            out["model_dir_files"] = sorted(p.name for p in model_dir.iterdir())
            coefficients = None
        else:
            import vllm

            measured, rows = measure(model_dir, concurrency, q1)
            coefficients = fit(rows)
            out.update(vllm_version=vllm.__version__, measured=measured)
            out["fitted_coefficients"] = coefficients.__dict__
    out["simulated"] = simulated(concurrency, q1, coefficients)
    out["wall_s"] = time.perf_counter() - t0
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.json} ({out['wall_s']:.0f} s wall)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
