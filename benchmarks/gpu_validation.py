"""Validate the simulator on a real GPU: in-process vLLM, random weights, Llama-3-8B shape.

    python -m benchmarks.gpu_validation [--gpu H100-80GB|H200] [--concurrency 1,8,16,64]
        [--rows N] [--json PATH] [--dry-run]

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
and under the fitted coefficients, for the `--gpu` hardware profile. `--dry-run` builds
everything up to the CUDA call (model directory, workloads, the simulator's predictions) and
writes the plan without running vLLM.

Where the GPU machine has vLLM but not this project's dependencies (no DuckDB, no ../shared),
run it in three steps; the middle one imports only the standard library, vLLM and torch:

    python -m benchmarks.gpu_validation --export DIR [--rows N] [--concurrency ...]   # here
    python -m benchmarks.gpu_validation --measure DIR --json MEASURED.json           # on the GPU
    python -m benchmarks.gpu_validation --measured MEASURED.json --gpu H200          # here
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

from benchmarks.lib.provenance import write_result

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_JSON = ROOT / "benchmarks" / "results" / "gpu_validation.json"
GPUS = ("H100-80GB", "H200")
MODEL = "llama-3-8b"
MAX_MODEL_LEN = 8192
Q1_MAX_TOKENS = 16
Q1_CONCURRENCY = 256

Step = tuple[list[list[int]], list[int], float]
"""One timed vLLM step: its prefill chunks `[c, m]`, its decode contexts, its wall seconds."""


def external_id(rid: str, known) -> str:
    """The id a request was added with: vLLM appends "-" and 8 random characters inside."""
    return rid if rid in known else rid.rsplit("-", 1)[0]


def step_shape(output, prompt_lens: dict[str, int]) -> tuple[list[list[int]], list[int]]:
    """The cost model's view of one vLLM step from its `SchedulerOutput`, as plain lists
    (`BatchShape` is built back here, off the GPU machine): a request computing one token past
    its prompt is a decode (context m), anything else a prefill chunk [c, m]."""
    computed = {r.req_id: r.num_computed_tokens for r in output.scheduled_new_reqs}
    cached = output.scheduled_cached_reqs
    computed.update(zip(cached.req_ids, cached.num_computed_tokens, strict=True))
    prefill, decode = [], []
    for rid, c in output.num_scheduled_tokens.items():
        m = computed[rid]
        if c == 1 and m >= prompt_lens[external_id(rid, prompt_lens)]:
            decode.append(m)
        else:
            prefill.append([c, m])
    return prefill, decode


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
        self.steps: list[Step] = []

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
                self.steps.append((*step_shape(self.last, prompt_lens), now - t0))
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
    from benchmarks.lib.sweep import random_lengths

    return random_lengths(20 * concurrency, (64, 512), (32, 256), seed=concurrency)


def sweep_ids(i: int, n_in: int) -> list[int]:
    """Request i's prompt in the sweep: distinct token ids, so no two requests share a block."""
    return [1000 + (7 * i + k) % 120_000 for k in range(n_in)]


def q1_requests(rows: int | None) -> dict[str, list[tuple[list[int], int]]]:
    """Q1 prompts over movies_small.csv in original and GGR order, as token ids."""
    from benchmarks.vllm_conformance import TOKENIZER, movie_prompts
    from resources.sim.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(TOKENIZER)
    prompts = movie_prompts(rows)["q1"]
    return {
        order: [(tokenizer.encode(p), Q1_MAX_TOKENS) for p in prompts[key]]
        for order, key in (("original", "file"), ("ggr", "ggr"))
    }


def export(directory: Path, concurrency: list[int], rows: int | None) -> dict:
    """Everything the GPU machine needs, under `directory`: the model directory (`model/`)
    and `requests.json` (the sweep's lengths per concurrency, Q1's token ids per order)."""
    from benchmarks.lib.model_dir import write_model_dir
    from benchmarks.vllm_conformance import TOKENIZER

    if not TOKENIZER.exists():
        raise SystemExit(f"{TOKENIZER} is absent: the model directory needs it")
    write_model_dir(directory / "model", TOKENIZER)
    requests = {
        "concurrency": concurrency,
        "sweep": {str(c): sweep_lengths(c) for c in concurrency},
        "q1": q1_requests(rows),
    }
    (directory / "requests.json").write_text(json.dumps(requests))
    return requests


def measure(directory: Path) -> dict:
    """Everything that runs on the GPU, from an `export`ed directory: the measurements and
    every timed step. Imports nothing of this project's but this module."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # scheduler in this process
    import torch
    import vllm
    from vllm import LLM

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run on a GPU machine, or pass --dry-run")
    requests = json.loads((directory / "requests.json").read_text())
    model_dir = directory / "model"
    concurrency = requests["concurrency"]
    t0 = time.perf_counter()
    llm = LLM(
        model=str(model_dir),
        tokenizer=str(model_dir),
        load_format="dummy",
        dtype="bfloat16",
        max_model_len=MAX_MODEL_LEN,
        enable_prefix_caching=True,
        max_num_seqs=max(max(concurrency), Q1_CONCURRENCY),
        seed=0,
    )
    startup_s = time.perf_counter() - t0
    timer = StepTimer(llm)
    sweep = {}
    for c in concurrency:
        llm.reset_prefix_cache()
        reqs = [
            (sweep_ids(i, n_in), n_out) for i, (n_in, n_out) in enumerate(requests["sweep"][str(c)])
        ]
        sweep[str(c)] = summarize(timer.run(reqs, c))
        print(f"c={c}: {sweep[str(c)]}", flush=True)
    q1 = {}
    for order, reqs in requests["q1"].items():
        llm.reset_prefix_cache()
        q1[order] = summarize(timer.run([(ids, n) for ids, n in reqs], Q1_CONCURRENCY))
        print(f"q1 {order}: {q1[order]}", flush=True)
    return {
        "vllm_version": vllm.__version__,
        "torch_version": torch.__version__,
        "device_name": torch.cuda.get_device_name(0),
        "vllm_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("VLLM_")},
        "startup_s": startup_s,
        "requests": requests,
        "measured": {"sweep": sweep, "q1": q1, "num_steps": len(timer.steps)},
        "steps": timer.steps,
    }


def simulated(gpu: str, requests: dict, coefficients=None) -> dict:
    """The simulator's predictions for the same requests on the `gpu` profile (both timing
    profiles, and `coefficients` when given)."""
    from benchmarks.lib.conformance import TokenIdText
    from benchmarks.lib.sweep import simulate_point
    from llm_assets.output_spec import OutputSpec
    from resources.engine import Request
    from resources.sim import SimulatedEngine

    sweep = {int(c): lengths for c, lengths in requests["sweep"].items()}
    out: dict = {}
    for timing in ("vllm-2024", "vllm-2026"):
        out[timing] = {
            str(c): simulate_point(gpu, MODEL, c, lengths, timing=timing)
            for c, lengths in sweep.items()
        }
    engine = SimulatedEngine(gpu, MODEL, "vllm-v1", tokenizer=TokenIdText())
    out["q1_cached_tokens"] = {}
    for order, reqs in requests["q1"].items():
        engine.reset_cache()
        batch = [
            Request(str(i), " ".join(map(str, ids)), n, OutputSpec.text())
            for i, (ids, n) in enumerate(reqs)
        ]
        out["q1_cached_tokens"][order] = engine.run(order, batch).stats.cached_tokens
    if coefficients is not None:
        out["fitted"] = {
            str(c): simulate_point(gpu, MODEL, c, lengths, coefficients=coefficients)
            for c, lengths in sweep.items()
        }
    return out


def finish(gpu: str, requests: dict, measured: dict | None) -> dict:
    """The result: the measurements (if any), the cost model fitted to their steps, and the
    simulator's predictions for the same requests."""
    from resources.sim.cost_model import BatchShape, fit

    out: dict = {
        "gpu_profile": gpu,
        "model": MODEL,
        "concurrency": requests["concurrency"],
        "q1_requests": {order: len(reqs) for order, reqs in requests["q1"].items()},
    }
    coefficients = None
    if measured is not None:
        rows = [
            (BatchShape(prefill=tuple(map(tuple, p)), decode=tuple(d)), s)
            for p, d, s in measured["steps"]
        ]
        coefficients = fit(rows)
        keys = ("vllm_version", "torch_version", "device_name")
        out.update({k: measured[k] for k in keys}, measure_command=measured.get("command"))
        out["vllm_env"] = measured.get("vllm_env", {})
        out.update(startup_s=measured["startup_s"], measured=measured["measured"])
        out["fitted_coefficients"] = coefficients.__dict__
    out["simulated"] = simulated(gpu, requests, coefficients)
    return out


def markdown(out: dict) -> str:
    """A table of a finished run: measured medians, and each profile's ratio sim / measured."""
    profiles = [p for p in ("vllm-2024", "vllm-2026", "fitted") if p in out["simulated"]]
    lines = [
        f"# GPU validation: {out['device_name']}, vLLM {out['vllm_version']}, "
        f"torch {out['torch_version']}, {out['model']} (random weights)",
        "",
        f"`{out['measure_command'] or 'in process'}` on the GPU, then `{out['command']}`; "
        f"the simulator's `{out['gpu_profile']}` profile; "
        f"{out['measured']['num_steps']:,} timed steps; vLLM's environment: "
        + (", ".join(f"{k}={v}" for k, v in out["vllm_env"].items()) or "default")
        + ".",
        "",
        "Ratios are simulated / measured (TTFT / TPOT / output tokens per second).",
        "",
        "| C | TTFT ms | TPOT ms | out tok/s | " + " | ".join(profiles) + " |",
        "|---|---|---|---|" + "---|" * len(profiles),
    ]
    for c, m in out["measured"]["sweep"].items():
        keys = ("ttft_ms_p50", "tpot_ms_p50", "output_tok_per_s")
        ratios = [
            "/".join(f"{out['simulated'][p][c][k] / m[k]:.2f}" for k in keys) for p in profiles
        ]
        lines.append(
            f"| {c} | {m['ttft_ms_p50']:.1f} | {m['tpot_ms_p50']:.2f} | "
            f"{m['output_tok_per_s']:,.0f} | " + " | ".join(ratios) + " |"
        )
    lines += ["", "| Q1 order | requests | prompt tokens | cached (vLLM) | cached (sim) |"]
    lines.append("|---|---|---|---|---|")
    for order, m in out["measured"]["q1"].items():
        lines.append(
            f"| {order} | {out['q1_requests'][order]} | {m['prompt_tokens']:,} | "
            f"{m['cached_tokens']:,} | {out['simulated']['q1_cached_tokens'][order]:,} |"
        )
    fitted = ", ".join(f"{k} = {v:.3g}" for k, v in out["fitted_coefficients"].items())
    lines += ["", f"Fitted coefficients (s per unit): {fitted}."]
    negative = [k for k, v in out["fitted_coefficients"].items() if v < 0]
    if negative:
        lines.append(
            f"{', '.join(negative)} < 0 has no physical meaning: under vLLM's asynchronous "
            "scheduling a step's wall time overlaps the next batch, so a step's time is not its "
            "own batch's alone, and the fit is a description of these steps, not a profile."
        )
    return "\n".join([*lines, ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", choices=GPUS, default=GPUS[0], help="the sim's hardware profile")
    parser.add_argument("--concurrency", default="1,8,16,64")
    parser.add_argument("--rows", type=int, default=None, help="first N movies rows (all)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="stop before the CUDA call")
    mode.add_argument("--export", type=Path, metavar="DIR", help="write what --measure needs")
    mode.add_argument("--measure", type=Path, metavar="DIR", help="run vLLM on an export")
    mode.add_argument("--measured", type=Path, metavar="FILE", help="finish a --measure's JSON")
    args = parser.parse_args(argv)
    try:
        concurrency = [int(c) for c in args.concurrency.split(",")]
    except ValueError:
        parser.error(f"--concurrency {args.concurrency!r}: expected integers like 1,8,16,64")
    t0 = time.perf_counter()
    command = "python -m benchmarks.gpu_validation " + " ".join(argv or sys.argv[1:])
    if args.export:
        requests = export(args.export, concurrency, args.rows)
        print(
            f"wrote {args.export}/requests.json and model/ ({len(requests['q1']['ggr'])} Q1 rows)"
        )
        return 0
    if args.measure:
        out = measure(args.measure)
    elif args.measured:
        measured = json.loads(args.measured.read_text())
        out = finish(args.gpu, measured["requests"], measured)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            requests = export(Path(tmp), concurrency, args.rows)
            if args.dry_run:
                out = finish(args.gpu, requests, None) | {"dry_run": True}
                out["model_dir_files"] = sorted(p.name for p in (Path(tmp) / "model").iterdir())
            else:
                out = finish(args.gpu, requests, measure(Path(tmp)))
    out = {"command": command, **out, "wall_s": time.perf_counter() - t0}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.json, out, indent=1)
    print(f"wrote {args.json} ({out['wall_s']:.0f} s wall)")
    if "fitted_coefficients" in out:
        args.json.with_suffix(".md").write_text(markdown(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
