"""One method's runs on `llama-server`, measured, beside what the simulator and the one-slot
rule predict for the very requests sent; shared by the random-weight and the real-weight
paths of `python -m benchmarks.llama_cpp`.

- `sim_prediction`: the simulator (`SimulatedEngine`, vLLM's block prefix cache, L4 +
  Llama-3-8B, one sequence at a time) on the requests as sent, each with its measured output
  length, tokenized by `tokenizer` (a tokenizer file, or any object with `encode`, e.g.
  `MappedTokenizer`: the server's own token ids per prompt);
- `one_slot_cached` (`benchmarks.lib.llama_server`): a request reuses the longest common
  prefix of its token ids with the previous request's, less one when the whole prompt matches;
- `record`: the figures of one method over its repeats (cached tokens as the project counts
  them and as the server's `/metrics` counter does, hit rate, engine seconds, both
  predictions with how many requests each predicts exactly).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

import pandas as pd

from benchmarks.lib.llama_server import one_slot_cached

SIM_DEPLOYMENT = {"gpu": "L4", "model": "llama-3-8b"}


class MappedTokenizer:
    """A tokenizer for the simulator that returns, for each prompt sent, the token ids the
    server itself processed for it (`token_ids`: prompt -> ids); an unknown prompt is a
    KeyError (the simulator must see exactly the server's requests)."""

    def __init__(self, token_ids: Mapping[str, list[int]]) -> None:
        self.token_ids = dict(token_ids)

    def encode(self, text: str) -> list[int]:
        return list(self.token_ids[text])


def sim_prediction(requests: pd.DataFrame, tokenizer, num_blocks: int | None = None) -> dict:
    """The simulator's cached tokens and engine seconds for the requests as sent, each with
    its measured output length; `num_blocks` overrides the KV cache's size in 16-token blocks."""
    from resources.engine import Request
    from resources.sim.engine import SimulatedEngine

    engine = SimulatedEngine(
        **SIM_DEPLOYMENT,
        tokenizer=tokenizer,
        max_num_seqs=1,
        num_gpu_blocks_override=num_blocks,
    )
    sent = [
        Request(id=rid, prompt=prompt, max_tokens=max(1, int(n_out)))
        for rid, prompt, n_out in zip(
            requests["request_id"], requests["prompt"], requests["output_tokens"], strict=True
        )
    ]
    result = engine.run("llama_cpp", sent)
    return {
        "kv_blocks": engine.num_kv_blocks,
        "cached_tokens": result.stats.cached_tokens,
        "hit_rate": result.stats.token_hit_rate,
        "engine_time_s": result.stats.engine_time_s,
        "per_request": [r.cached_tokens for r in result.responses],
    }


def per_request_agreement(predicted: list[int], measured: list[int]) -> dict:
    """How close per-request predictions are: exact matches and mean absolute difference."""
    diffs = [abs(a - b) for a, b in zip(predicted, measured, strict=True)]
    return {"requests_equal": diffs.count(0), "mean_abs_diff_tokens": statistics.fmean(diffs)}


def record(runs: Sequence, ids: list[list[int]], sim_tokenizer) -> dict:
    """One method's measurements over its repeats (`PairRun`s, the first one's requests
    predicted), with `ids` the token ids the server processes for each request in send order
    (BOS included where the model adds one) and `sim_tokenizer` what the simulator tokenizes
    the prompts with."""
    first = runs[0]
    requests = first.run.requests
    measured = [int(c) for c in requests["cached_tokens"]]
    rule = one_slot_cached(ids)
    meta = first.run.metadata
    prompt_tokens = int(meta["prompt_tokens"])
    # a cache the size of the one slot: the longest request's blocks, plus one
    lengths = [len(i) + int(n) for i, n in zip(ids, requests["output_tokens"], strict=True)]
    slot_blocks = -(-max(lengths) // 16)
    sims = {
        "sim": sim_prediction(requests, sim_tokenizer),
        "sim_one_slot": sim_prediction(requests, sim_tokenizer, slot_blocks + 1),
    }
    times = [float(r.run.metadata["engine_time_s"]) for r in runs]
    return {
        "requests": len(requests),
        **{k: meta[k] for k in ("stage_rows_answered", "stage_rows_failed", "stage_rows_skipped")},
        "spec_violations": meta["spec_violations"],
        "failed_checks": first.run.failed_checks,
        "prompt_tokens": prompt_tokens,
        "output_tokens": int(meta["output_tokens"]),
        "cached_tokens": [r.cached_tokens for r in runs],
        "server_cached_tokens": [r.server_cached_tokens for r in runs],
        "hit_rate": first.hit_rate,
        "engine_time_s": [round(t, 3) for t in times],
        "engine_time_s_median": round(statistics.median(times), 3),
        "one_slot_rule": {"cached_tokens": sum(rule), "hit_rate": sum(rule) / prompt_tokens}
        | per_request_agreement(rule, measured),
        **{
            name: {k: v for k, v in sim.items() if k != "per_request"}
            | per_request_agreement(sim["per_request"], measured)
            for name, sim in sims.items()
        },
    }
