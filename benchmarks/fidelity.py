"""Fidelity of the simulated engine against published measurements, per timing profile.

    python -m benchmarks.fidelity [--json PATH]

Writes ``{"profiles": {profile: {"checks": {name: {"published", "simulated", "unit", "ratio",
"source", ...}}, "band", "outside_band"}}}`` (default `benchmarks/results/fidelity.json`) and
the same as a table in `fidelity.md`, and prints it. Each timing profile
(`resources.sim.cost_model.TIMING_PROFILES`) is checked against its own sources, with the same
constants for every check of that profile (no per-check tuning):

- "vllm-2024", the early-2024 vLLM of the papers: checks (a)-(d) below, band 0.65-1.35;
- "vllm-2026", today's vLLM: closed-loop concurrency sweeps (`benchmarks.lib.sweep`: the
  benchmark client co-simulated with a `vllm serve` engine) against recent published sweeps,
  each run on the source's own workload and client, band 0.85-1.15. Each check says its `role`:
  `fit` (a coefficient was fitted on it, `FIT` says which) or `validation` (held out of every
  fit), and also gives what the "vllm-2024" profile predicts (`simulated_vllm_2024`) and, on
  the H100 checks, the engine alone behind a client that costs nothing
  (`simulated_ideal_client`). The H100 source's client (LiteLLM in one Python process, a
  thread per stream) saturates near 1,350 tokens/s: from 16 concurrent requests on, its TPOT
  and throughput are the client's, not vLLM's (`INFERENCEBENCH_CLIENT`).

Workloads are rendered from `llm_assets.data.movie_reviews`, the project's synthetic table with
the Movies statistics of DESIGN.md section 7 (15,018 rows; movie_info avg 407 chars over 68
distinct values; review_content avg 132 chars, 14,977 distinct): made-up text, not text from
any data file.

Checks:
(a) L4 + Llama-2-7B classifying the 15,018 movie reviews with no optimizations (no prefix cache,
    rows in random order) takes ~30 min (llm_queries_relational.txt section 1; setup section 7.2:
    vLLM on one L4, Llama-2-7B; Q1's instruction prompt is 172 tokens, section 7.3).
(b) The optimized run (prefix cache on, movie_info first and rows grouped by movie, exact
    duplicates removed) takes ~8 min: a speed-up of 30/8 (same source, section 1).
(c) L4 + Llama-3-8B processes ~6 KB of text per second (llm_queries_relational.txt abstract;
    the paper states the figure for Llama2-7B, the check runs it on Llama-3-8B as asked).
(d) A100-40GB + OPT-13B processes ~30 KB of data per second (relserve.txt section 2.1), on the
    Rotten Tomatoes rating relQuery of section 2.1, first 10k rows in table order, with vLLM's
    prefix cache on (section 5.1), outputs of 21 tokens (Table 4: Rotten avg output length).

Common modelling choices, stated once: the engine is vLLM v0 (`vllm-v0`, FCFS, prefill first, no
chunked prefill: the vLLM of early 2024 both papers ran); outputs are free text of `max_tokens`
tokens (a chat model's answer runs to the limit; the authors' LLM-SQL harness calls vLLM with
default `SamplingParams()`, whose `max_tokens` is 16); "KB of text" counts the table's field
text (movie_info + review_content bytes), the data the papers compare with DuckDB's GB/s.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from benchmarks.lib.provenance import write_result
from benchmarks.lib.sweep import IDEAL_CLIENT, ClientModel, simulate_point
from llm_assets.data.movies import movie_reviews
from llm_assets.output_spec import OutputSpec
from resources.engine import Request
from resources.sim import SimulatedEngine

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "fidelity.json"

NUM_ROWS = 15_018
SEED = 20240101

# Q1/Q2-style classification instruction (the paper reports 166-172-token instructions for the
# Movies queries; this one is ~170 tokens with the approximate Llama 3 tokenizer).
CLASSIFY_INSTRUCTION = (
    "You are a helpful data analyst. You will be given information about a movie and a review "
    "written by a critic for that movie. Read the movie description carefully, then read the "
    "review, and decide whether the overall sentiment of the review towards the movie is "
    "positive or negative. Consider the tone of the critic, the words used to describe the "
    "acting, the story, the direction and the overall experience, and whether the critic would "
    "recommend the movie to other people. Some reviews are short and some are sarcastic, so pay "
    "attention to irony and to comparisons with other movies. Do not summarise the movie and do "
    "not explain your reasoning. Answer with exactly one word, either Positive or Negative, and "
    "nothing else. If the review is ambiguous, choose the label that best matches the final "
    "recommendation of the critic. The movie information and the review follow."
)
# relserve.txt section 2.1's rating relQuery template.
RATING_TEMPLATE = (
    "Predict rating (1 to 5) for the movie {movie_info} given the user's review "
    "{review_content}. Output only digit and nothing else"
)


# -- the Movies table ---------------------------------------------------------------------------
@dataclass(frozen=True)
class MovieRow:
    movie: int
    """The movie's index, in order of first appearance in the table."""
    movie_info: str
    review_content: str


def movies_table(seed: int = SEED) -> list[MovieRow]:
    """`llm_assets.data.movie_reviews` at the full size, in its (random) row order: 15,018
    rows, 68 movies, 14,977 distinct reviews (41 exact duplicate rows)."""
    table = movie_reviews(NUM_ROWS, seed=seed)
    movie = pd.factorize(table["rotten_tomatoes_link"])[0]
    return [
        MovieRow(int(m), info, review)
        for m, info, review in zip(movie, table["movie_info"], table["review_content"], strict=True)
    ]


def _classify_prompt(row: MovieRow) -> str:
    return (
        f"{CLASSIFY_INSTRUCTION}\nmovie_info: {row.movie_info}\n"
        f"review_content: {row.review_content}\nAnswer:"
    )


def _field_bytes(rows: list[MovieRow]) -> int:
    return sum(len(r.movie_info.encode()) + len(r.review_content.encode()) for r in rows)


def _requests(prompts: list[str], max_tokens: int) -> list[Request]:
    return [
        Request(id=str(i), prompt=p, max_tokens=max_tokens, output=OutputSpec.text())
        for i, p in enumerate(prompts)
    ]


# -- checks -------------------------------------------------------------------------------------
CLASSIFY_MAX_TOKENS = 16  # vLLM SamplingParams() default, used by the authors' LLM-SQL harness
RATING_MAX_TOKENS = 21  # relserve.txt Table 4: Rotten avg output length
POLICY = "vllm-v0"


def _run(engine: SimulatedEngine, requests: list[Request]) -> tuple[float, float, float]:
    """(simulated seconds, token hit rate, wall seconds)."""
    result = engine.run("fidelity", requests)
    return result.stats.engine_time_s, result.stats.token_hit_rate, result.stats.wall_time_s


def run_checks() -> dict[str, dict]:
    rows = movies_table()
    checks: dict[str, dict] = {}

    # (a) no optimizations: no prefix cache, random order, all rows.
    no_cache = SimulatedEngine(
        "L4", "llama-2-7b", POLICY, enable_prefix_caching=False, timing="vllm-2024"
    )
    plain = _requests([_classify_prompt(r) for r in rows], CLASSIFY_MAX_TOKENS)
    t_a, hit_a, wall_a = _run(no_cache, plain)
    checks["a_l4_llama2_7b_no_opt_minutes"] = {
        "published": 30.0,
        "simulated": t_a / 60,
        "unit": "minutes",
        "source": "llm_queries_relational.txt section 1 (15,000 movie reviews, L4, Llama 7B, "
        "30 min without optimizations); setup section 7.2",
        "token_hit_rate": hit_a,
        "wall_s": wall_a,
    }

    # (b) optimized: prefix cache, grouped by movie (movie_info first), exact dedup.
    seen: set[str] = set()
    grouped: list[str] = []
    for r in sorted(rows, key=lambda r: (r.movie_info, r.review_content)):
        prompt = _classify_prompt(r)
        if prompt not in seen:
            seen.add(prompt)
            grouped.append(prompt)
    cached = SimulatedEngine(
        "L4", "llama-2-7b", POLICY, enable_prefix_caching=True, timing="vllm-2024"
    )
    t_b, hit_b, wall_b = _run(cached, _requests(grouped, CLASSIFY_MAX_TOKENS))
    checks["b_l4_llama2_7b_optimized_speedup"] = {
        "published": 30.0 / 8.0,
        "simulated": t_a / t_b,
        "unit": "x (no-opt time / optimized time)",
        "source": "llm_queries_relational.txt section 1 (30 min -> 8 min with the optimizations)",
        "simulated_minutes": t_b / 60,
        "requests": len(grouped),
        "token_hit_rate": hit_b,
        "wall_s": wall_b,
    }

    # (c) L4 + Llama-3-8B throughput on the unoptimized workload.
    llama3 = SimulatedEngine(
        "L4", "llama-3-8b", POLICY, enable_prefix_caching=False, timing="vllm-2024"
    )
    t_c, hit_c, wall_c = _run(llama3, plain)
    checks["c_l4_llama3_8b_kb_per_s"] = {
        "published": 6.0,
        "simulated": _field_bytes(rows) / 1000 / t_c,
        "unit": "KB of field text per second",
        "source": "llm_queries_relational.txt abstract (an L4 running Llama2-7B processes 6 KB of "
        "text per second); run here with Llama-3-8B as the check asks",
        "token_hit_rate": hit_c,
        "wall_s": wall_c,
    }

    # (d) A100-40GB + OPT-13B, rating relQuery over the first 10k rows in table order.
    table_order = sorted(rows, key=lambda r: r.movie)[:10_000]
    rating = [
        RATING_TEMPLATE.format(movie_info=r.movie_info, review_content=r.review_content)
        for r in table_order
    ]
    opt = SimulatedEngine(
        "A100-40GB", "opt-13b", POLICY, enable_prefix_caching=True, timing="vllm-2024"
    )
    t_d, hit_d, wall_d = _run(opt, _requests(rating, RATING_MAX_TOKENS))
    checks["d_a100_opt13b_kb_per_s"] = {
        "published": 30.0,
        "simulated": _field_bytes(table_order) / 1000 / t_d,
        "unit": "KB of field text per second",
        "source": "relserve.txt section 2.1 (OPT-13B on an A100 processes ~30 KB per second); "
        "template section 2.1, output length Table 4, prefix caching section 5.1",
        "token_hit_rate": hit_d,
        "wall_s": wall_d,
    }
    for check in checks.values():
        check["ratio"] = check["simulated"] / check["published"]
    return checks


# -- today's vLLM -----------------------------------------------------------------------------
INFERENCEBENCH = (
    "InferenceBench concurrency sweep, H100-80GB-HBM3, vLLM 0.21.0, Llama-3.1-8B-Instruct fp16, "
    "workload llm.inference.chatbot-short, 2026-05-16 "
    "(https://yobitelcomm.github.io/bench/recipes/concurrency-sweep/)"
)
INFERENCEBENCH_REPEAT = (
    "InferenceBench envelope validation-runs/2026-05-18-multi-vendor-marathon/marathon/all/"
    "49e160db9a2a.json (github.com/yobitelcomm/bench): the same workload, harness, vLLM 0.21.0 "
    "and GPU two days later, at the workload's default concurrency of 4"
)
MUSGRAVE = (
    "J. Musgrave, vLLM throughput-latency sweep on NVIDIA A100: A100-40GB, vLLM 0.23.0, "
    "Llama-3.1-8B-Instruct BF16, `vllm bench serve` 1024-token inputs, 128-token outputs, "
    "C*20 prompts (https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on)"
)
# concurrency -> (TTFT p50 ms, TPOT p50 ms, output tok/s), the source's table.
INFERENCEBENCH_H100 = {
    1: (13.98, 6.48, 122.2),
    4: (22.75, 6.59, 580.3),
    16: (41.69, 10.94, 1384.2),
    64: (86.92, 46.91, 1312.3),
}
INFERENCEBENCH_REPEAT_C4 = (25.39, 6.60)
"""(TTFT p50 ms, TPOT p50 ms) of the repeat run; its throughput is left out (a 1.7 s p99 TTFT,
a cold start, sits inside its short window)."""

# The InferenceBench workload, from the harness's code (github.com/yobitelcomm/bench,
# plugins/llm-inference: benchmarks/chatbot-short.yaml, datasets.py, plugin.py; harness:
# client.py, drivers/closed_loop.py): its 10 built-in one-sentence questions (12-17 Llama 3
# tokens each) sent in turn as chat messages, so under Llama 3.1's chat template and default
# system header (30 tokens before the question, 5 after) each prompt is 47-52 tokens and all
# share their first 30; max_tokens=128, temperature 0 (the answers these questions ask for run
# past 128 tokens: the repeat run's p50 request is (862.5 - 25.4) / 6.60 + 1 = 128 tokens);
# vLLM's prefix cache is on by default. Only the lengths and the shared header matter to the
# simulator, so the prompts are token ids of those lengths.
CHAT_HEADER_TOKENS = 30
CHAT_TAIL_TOKENS = 5
QUESTION_TOKENS = (12, 13, 12, 12, 12, 14, 17, 14, 14, 13)
CHAT_MAX_TOKENS = 128

# The InferenceBench client: one Python process, a thread per concurrent request, each calling
# `litellm.completion(stream=True)` and reading the stream chunk by chunk, so every stream's
# per-token Python work shares one interpreter lock (LiteLLM's streaming wrapper costs
# 0.16-0.43 ms of CPU per chunk in onyx-dot-app/onyx PR #14937's measurement of a later
# version). Three coefficients, fitted on three of the source's figures (`FIT`):
# - chunk_cpu_s = 46.91 ms / 64: at 64 streams the client is saturated and each stream gets a
#   64th of it, so the c64 TPOT is 64 chunk times (the engine's own step is ~7 ms there);
# - request_cpu_s + latency_s = what the c1 TTFT (13.98 ms) leaves after the engine's first
#   step and one chunk: 5.9 ms, of which request_cpu_s (shared, so it stretches with
#   load) is set by the c64 TTFT (86.92 ms) and latency_s (HTTP and vLLM's API server:
#   chat template, tokenizing) is the rest, drawn per request (jitter: a real client's phase
#   against the engine's steps is not fixed).
INFERENCEBENCH_CLIENT = ClientModel(
    request_cpu_s=0.00028, chunk_cpu_s=0.04691 / 64, latency_s=0.0056, jitter=True
)
FIT = {
    "h100_c1_tpot_ms": "memory efficiency and step overhead (with a100_c1_tpot_ms)",
    "a100_c1_tpot_ms": "memory efficiency and step overhead (with h100_c1_tpot_ms)",
    "a100_throughput_c8_over_c1": "matmul efficiency (moved towards it, capped at 0.70)",
    "h100_c1_ttft_ms": "the InferenceBench client's request_cpu_s + latency_s",
    "h100_c64_tpot_ms": "the InferenceBench client's chunk_cpu_s",
    "h100_c64_ttft_ms": "the InferenceBench client's request_cpu_s",
}
"""Checks a coefficient was fitted on, and which; every other check is validation (held out)."""
CURRENT = "vllm-2026"
CURRENT_BAND = (0.85, 1.15)
"""The target for today's vLLM: every check within +-15%."""


def chat_prompt_ids() -> list[list[int]]:
    """The InferenceBench prompts as token ids: a shared chat header, a question, a tail."""
    header = list(range(1000, 1000 + CHAT_HEADER_TOKENS))
    tail = list(range(2000, 2000 + CHAT_TAIL_TOKENS))
    return [
        header + list(range(3000 + 100 * i, 3000 + 100 * i + n)) + tail
        for i, n in enumerate(QUESTION_TOKENS)
    ]


def _chat_point(concurrency: int, timing: str, client: ClientModel = INFERENCEBENCH_CLIENT) -> dict:
    prompts = chat_prompt_ids()
    n = max(20 * concurrency, 200)
    lengths = [(len(prompts[i % len(prompts)]), CHAT_MAX_TOKENS) for i in range(n)]
    return simulate_point(
        "H100-80GB",
        "llama-3-8b",
        concurrency,
        lengths,
        timing=timing,
        client=client,
        prompt_ids=prompts,
    )


def run_current_checks() -> dict[str, dict]:
    """The "vllm-2026" profile against recent published sweeps (and "vllm-2024" beside it)."""
    checks: dict[str, dict] = {}
    points = {}
    for timing in (CURRENT, "vllm-2024"):
        for c in INFERENCEBENCH_H100:
            points[timing, "h100", c] = _chat_point(c, timing)
            if timing == CURRENT:  # the engine alone, behind a client that costs nothing
                points["ideal", "h100", c] = _chat_point(c, timing, IDEAL_CLIENT)
        for c in (1, 8):
            points[timing, "a100", c] = simulate_point(
                "A100-40GB", "llama-3-8b", c, [(1024, 128)] * (20 * c), timing=timing
            )

    def add(name: str, published: float, unit: str, source: str, value) -> None:
        checks[name] = {
            "published": published,
            "simulated": value(CURRENT),
            "simulated_vllm_2024": value("vllm-2024"),
            "unit": unit,
            "source": source,
            "role": "fit" if name in FIT else "validation",
        }
        if name in FIT:
            checks[name]["fits"] = FIT[name]
        if name.startswith("h100_c"):
            checks[name]["simulated_ideal_client"] = value("ideal")

    def metric(gpu: str, c: int, key: str):
        return lambda t: points[t, gpu, c][key]

    def over(gpu: str, c: int, base: int, key: str):
        return lambda t: points[t, gpu, c][key] / points[t, gpu, base][key]

    tpot_unit, ttft_unit = "ms per output token (p50)", "ms to first token (p50)"
    for c, (ttft, tpot, tok_s) in INFERENCEBENCH_H100.items():
        add(f"h100_c{c}_tpot_ms", tpot, tpot_unit, INFERENCEBENCH, metric("h100", c, "tpot_ms_p50"))
        add(f"h100_c{c}_ttft_ms", ttft, ttft_unit, INFERENCEBENCH, metric("h100", c, "ttft_ms_p50"))
        if c > 1:  # the c1 row's 122 tok/s is 0.80 of what its own TTFT and TPOT give
            add(f"h100_c{c}_output_tok_per_s", tok_s, "output tokens/s", INFERENCEBENCH,
                metric("h100", c, "output_tok_per_s"))  # fmt: skip
    ttft4, tpot4 = INFERENCEBENCH_REPEAT_C4
    add("h100_c4_ttft_ms_repeat", ttft4, ttft_unit, INFERENCEBENCH_REPEAT,
        metric("h100", 4, "ttft_ms_p50"))  # fmt: skip
    add("h100_c4_tpot_ms_repeat", tpot4, tpot_unit, INFERENCEBENCH_REPEAT,
        metric("h100", 4, "tpot_ms_p50"))  # fmt: skip
    interference = "x (TPOT at 16 requests over 1)"
    add("h100_tpot_c16_over_c1", 10.94 / 6.48, interference, INFERENCEBENCH,
        over("h100", 16, 1, "tpot_ms_p50"))  # fmt: skip
    add("a100_c1_tpot_ms", 1000 / 75, "ms per output token (75 tok/s decode)", MUSGRAVE,
        metric("a100", 1, "tpot_ms_p50"))  # fmt: skip
    add("a100_throughput_c8_over_c1", 6.6, "x output tokens/s", MUSGRAVE,
        over("a100", 8, 1, "output_tok_per_s"))  # fmt: skip
    for check in checks.values():
        check["ratio"] = check["simulated"] / check["published"]
        check["ratio_vllm_2024"] = check["simulated_vllm_2024"] / check["published"]
    return checks


def _table(checks: dict[str, dict]) -> str:
    lines = [
        f"{'check':38s} {'published':>10s} {'simulated':>10s} {'ratio':>6s} {'role':>10s}  unit"
    ]
    for name, c in checks.items():
        lines.append(
            f"{name:38s} {c['published']:10.2f} {c['simulated']:10.2f} "
            f"{c['ratio']:6.2f} {c.get('role', ''):>10s}  {c['unit']}"
        )
    return "\n".join(lines)


def _markdown(out: dict) -> str:
    """fidelity.md: each profile's checks, with their role (fit or held-out validation)."""
    lines = [
        "# Fidelity of the simulated engine",
        "",
        "Written by `python -m benchmarks.fidelity` (see its docstring for every check's source "
        "and workload). `ratio` = simulated / published; for today's vLLM a `fit` check "
        "pinned the coefficient named and a `validation` check was held out of every fit.",
    ]
    for name, prof in out["profiles"].items():
        band = prof["band"]
        outside = prof["outside_band"]
        lines += [
            "",
            f"## {name}",
            "",
            f"Target band {band[0]}-{band[1]}: "
            + ("all checks inside." if not outside else f"outside: {', '.join(outside)}."),
            "",
            "| check | published | simulated | ratio | engine alone | vllm-2024 ratio | role "
            "| unit |",
            "|---|---:|---:|---:|---:|---:|---|---|",
        ]
        for check, c in prof["checks"].items():
            role = c.get("role", "")
            if "fits" in c:
                role += f" ({c['fits']})"
            alone = c.get("simulated_ideal_client")
            old = c.get("ratio_vllm_2024")
            lines.append(
                f"| {check} | {c['published']:.2f} | {c['simulated']:.2f} | {c['ratio']:.2f} "
                f"| {'' if alone is None else f'{alone:.2f}'} "
                f"| {'' if old is None else f'{old:.2f}'} | {role} | {c['unit']} |"
            )
        if name == CURRENT:
            lines += [
                "",
                "`engine alone`: the same workload behind a client that costs nothing (the "
                "simulated vLLM's own figure); `simulated` adds the InferenceBench client "
                "(`INFERENCEBENCH_CLIENT`) on the H100 checks.",
            ]
        lines += ["", "Sources:", ""]
        for source in dict.fromkeys(c["source"] for c in prof["checks"].values()):
            lines.append(f"- {source}")
    return "\n".join(lines) + "\n"


BANDS = {"vllm-2024": (0.65, 1.35), CURRENT: CURRENT_BAND}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write the JSON")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    profiles = {"vllm-2024": run_checks(), CURRENT: run_current_checks()}
    out = {
        "profiles": {
            name: {
                "checks": checks,
                "band": BANDS[name],
                "outside_band": [
                    k
                    for k, c in checks.items()
                    if not BANDS[name][0] <= c["ratio"] <= BANDS[name][1]
                ],
                "all_within_0.65_1.35": all(0.65 <= c["ratio"] <= 1.35 for c in checks.values()),
            }
            for name, checks in profiles.items()
        },
        "policy": {"vllm-2024": POLICY, CURRENT: "vllm-v1 (vllm serve budgets)"},
        "wall_s": time.perf_counter() - t0,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.json, out, indent=2, sort_keys=True)
    args.json.with_suffix(".md").write_text(_markdown(out))
    for name, checks in profiles.items():
        print(f"timing profile {name}:")
        print(_table(checks))
    print(f"wrote {args.json} and its .md ({out['wall_s']:.1f} s wall)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
