"""Wall-clock speed of the simulated engine on 15,000 requests of ~600 tokens, 5 output tokens.

    python -m benchmarks.sim_speed [--json PATH]

Two workloads, each timed end to end (`SimulatedEngine.run`, tokenization included) on a fresh
engine: `relational` (the Movies classification prompt padded with three reviews of the same
movie to ~2,400 chars: shared instruction and movie_info, distinct reviews; prefix cache on) and
`distinct` (~2,400 chars of `llm_assets.data.text` sentences per prompt, nothing shared;
prefix cache off, the tokenizer's worst case). Writes JSON (default
`benchmarks/results/sim_speed.json`).
"""

from __future__ import annotations

import argparse
import platform
import random
import time
from pathlib import Path

import numpy as np

from benchmarks.fidelity import CLASSIFY_INSTRUCTION, _requests, movies_table
from benchmarks.lib.provenance import write_result
from llm_assets.data.text import random_texts
from resources.sim import SimulatedEngine

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "sim_speed.json"
NUM_REQUESTS = 15_000


def relational_prompts() -> list[str]:
    rows = movies_table()[:NUM_REQUESTS]
    by_movie: dict[int, list[str]] = {}
    for r in rows:
        by_movie.setdefault(r.movie, []).append(r.review_content)
    rng = random.Random(1)
    out = []
    for r in rows:
        others = rng.sample(by_movie[r.movie], min(3, len(by_movie[r.movie])))
        context = "\n".join(f"other_review: {o}" for o in others)
        out.append(
            f"{CLASSIFY_INSTRUCTION}\n{CLASSIFY_INSTRUCTION}\nmovie_info: {r.movie_info}\n"
            f"{context}\nreview_content: {r.review_content}\nAnswer:"
        )
    return out


def distinct_prompts() -> list[str]:
    return random_texts(np.random.default_rng(2), [2400] * NUM_REQUESTS)


def measure(name: str, prompts: list[str], enable_prefix_caching: bool) -> dict:
    engine = SimulatedEngine(
        "L4", "llama-2-7b", "vllm-v1", enable_prefix_caching=enable_prefix_caching
    )
    requests = _requests(prompts, 5)
    t0 = time.perf_counter()
    result = engine.run(name, requests)
    wall = time.perf_counter() - t0
    stats = result.stats
    return {
        "requests": stats.n_requests,
        "avg_prompt_chars": sum(map(len, prompts)) / len(prompts),
        "avg_prompt_tokens": stats.prompt_tokens / stats.n_requests,
        "output_tokens_each": 5,
        "token_hit_rate": stats.token_hit_rate,
        "simulated_s": stats.engine_time_s,
        "wall_s": wall,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args(argv)
    results = {
        "relational": measure("relational", relational_prompts(), True),
        "distinct": measure("distinct", distinct_prompts(), False),
    }
    out = {"machine": platform.machine(), "python": platform.python_version(), "runs": results}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.json, out, indent=2, sort_keys=True)
    for name, r in results.items():
        print(
            f"{name:10s} {r['requests']} requests, {r['avg_prompt_tokens']:.0f} tokens avg, "
            f"hit {r['token_hit_rate']:.2f}: {r['wall_s']:.2f} s wall, "
            f"{r['simulated_s']:.1f} s simulated"
        )
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
