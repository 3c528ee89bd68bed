"""A closed-loop concurrency sweep on the simulated engine, as `vllm bench serve
--max-concurrency C` runs one on a real server.

`C` clients each send a request, wait for its last token, and send the next: the engine holds at
most `C` requests (`max_num_seqs=C`) and request k (k >= C) is sent when the (k-C+1)-th request
finishes. Lengths may vary per request, so requests start and finish at different times and
prefill chunks share steps with decodes (the interference a real sweep shows). Metrics are
vLLM's: TTFT from sending to the first token, TPOT over the later tokens, output throughput.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

from llm_assets.output_spec import OutputSpec
from resources.engine import Request
from resources.sim import SimulatedEngine
from resources.sim.cost_model import CostCoefficients

__all__ = ["SweepPoint", "random_lengths", "simulate_point"]

SweepPoint = dict[str, float]


class _Ids:
    """Prompts are space-separated token ids (lengths exact, no tokenizer in between)."""

    name = "token-ids"

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in text.split()]


def random_lengths(
    n: int, input_range: tuple[int, int], output_range: tuple[int, int], seed: int = 0
) -> list[tuple[int, int]]:
    """`n` (input, output) lengths drawn uniformly from the inclusive ranges (seeded)."""
    rng = random.Random(seed)
    return [(rng.randint(*input_range), rng.randint(*output_range)) for _ in range(n)]


def simulate_point(
    gpu: str,
    model: str,
    concurrency: int,
    lengths: Sequence[tuple[int, int]],
    timing: str = "vllm-2024",
    usage: str = "serve",
    seed: int = 0,
    coefficients: CostCoefficients | None = None,
) -> SweepPoint:
    """Median TTFT and TPOT (ms) and output tokens/s of `lengths` through `concurrency`
    clients (random prompts: no prefix-cache hits, as `vllm bench serve --dataset-name
    random`). `coefficients` (e.g. a `fit` of measurements) replace the timing profile."""
    rng = random.Random(seed)
    requests = [
        Request(
            id=str(i),
            prompt=" ".join(str(rng.randrange(1000, 120_000)) for _ in range(n_in)),
            max_tokens=n_out,
            output=OutputSpec.text(),
        )
        for i, (n_in, n_out) in enumerate(lengths)
    ]
    engine = SimulatedEngine(
        gpu,
        model,
        "vllm-v1",
        tokenizer=_Ids(),
        max_num_seqs=concurrency,
        usage=usage,
        timing=timing,
        coefficients=coefficients,
    )
    result = engine.run("sweep", requests)
    responses = result.responses
    finished = sorted(r.finish_s for r in responses)
    sent = [0.0 if k < concurrency else finished[k - concurrency] for k in range(len(responses))]
    ttft = [r.ttft_s - s for r, s in zip(responses, sent, strict=True)]
    tpot = [
        (r.finish_s - r.ttft_s) / (r.output_tokens - 1) for r in responses if r.output_tokens > 1
    ]
    return {
        "concurrency": concurrency,
        "ttft_ms_p50": 1000 * statistics.median(ttft),
        "tpot_ms_p50": 1000 * statistics.median(tpot),
        "output_tok_per_s": sum(r.output_tokens for r in responses) / result.stats.engine_time_s,
    }
