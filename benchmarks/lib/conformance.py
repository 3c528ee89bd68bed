"""The simulator's side of the vLLM conformance check, and the comparison of the two.

A *workload* is a list of requests given as token ids (``{"prompt": [ids], "max_tokens": n}``)
and a *run* names an order of them and the engine's sizes (``{"name", "order", "num_blocks",
"max_num_seqs", "max_num_batched_tokens"}``). `simulate_run` replays a run through
`SimulatedEngine` (policy `vllm-v1`) and returns the same decisions `benchmarks.lib.vllm_recorder`
records from vLLM: the prefix-cache hit of each request at first scheduling, the batch of every
step as (position in the order, scheduled tokens) pairs, and the preemptions. `vllm_requests`
gives the recorder the output token ids the simulator generates, so both engines see identical
sequences (and a preempted request's output blocks hash alike in both).

Imported by `benchmarks.vllm_conformance` and by the recorded-trace test; needs no vLLM.
"""

from __future__ import annotations

from collections.abc import Sequence

from llm_assets.output_spec import OutputSpec
from resources.engine import Request
from resources.sim import SimulatedEngine
from resources.sim.answers import output_token_ids, placeholder_answer
from resources.sim.policies import VLLMv1Policy

__all__ = [
    "MAX_MODEL_LEN",
    "MODEL",
    "compare",
    "simulate_run",
    "vllm_requests",
]

MODEL = "llama-3-8b"
MAX_MODEL_LEN = 8192
"""Llama-3-8B's context length: vLLM's `max_model_len` in the recorder and the simulator's."""


class TokenIdText:
    """Prompts written as space-separated token ids: the simulator reads exactly the ids
    vLLM was given (no tokenizer in between)."""

    name = "token-ids"

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in text.split()]


def _text(ids: Sequence[int]) -> str:
    return " ".join(map(str, ids))


def _request(pos: int, spec: dict) -> Request:
    return Request(
        id=str(pos),
        prompt=_text(spec["prompt"]),
        max_tokens=spec["max_tokens"],
        output=OutputSpec.text(),
    )


def vllm_requests(requests: Sequence[dict]) -> list[dict]:
    """The recorder's requests: each prompt with the output ids the simulator generates for
    it (a text answer runs to `max_tokens`, as `output_token_count` charges)."""
    out = []
    for spec in requests:
        answer = placeholder_answer(_text(spec["prompt"]), OutputSpec.text(), spec["max_tokens"])
        n_out = min(spec["max_tokens"], MAX_MODEL_LEN - len(spec["prompt"]))
        out.append({"prompt": list(spec["prompt"]), "output": output_token_ids(answer, n_out)})
    return out


class _Recording(VLLMv1Policy):
    """vLLM v1's policy, noting every batch it forms as (position, tokens) pairs."""

    def __init__(self) -> None:
        self.steps: list[list[list[int]]] = []

    def schedule(self, waiting, running, ctx):
        batch = super().schedule(waiting, running, ctx)
        self.steps.append([[seq.index, n] for seq, n in batch])
        return batch


def simulate_run(requests: Sequence[dict], run: dict) -> dict:
    """The simulator's decisions on `run` (same shape as the recorder's output)."""
    policy = _Recording()
    engine = SimulatedEngine(
        "H100-80GB",
        MODEL,
        policy,
        tokenizer=TokenIdText(),
        max_num_seqs=run["max_num_seqs"],
        max_num_batched_tokens=run["max_num_batched_tokens"],
        num_gpu_blocks_override=run["num_blocks"],
    )
    result = engine.run(run["name"], [_request(p, requests[i]) for p, i in enumerate(run["order"])])
    errors = [r.error for r in result.responses if r.error]
    if errors:
        raise ValueError(f"run {run['name']!r}: the simulator rejected requests: {errors[0]}")
    return {
        "name": run["name"],
        "cached_tokens": [r.cached_tokens for r in result.responses],
        "steps": policy.steps,
        "num_preemptions": engine.last_run_info["num_preemptions"],
    }


def _computed(steps: list[list[list[int]]]) -> int:
    return sum(n for step in steps for _, n in step)


def compare(vllm: dict, sim: dict) -> dict:
    """Agreement of the simulator's decisions with vLLM's on one run: requests whose cached
    tokens agree, steps whose batch agrees (same requests, same tokens, any order), the first
    step that differs (None if none), and the totals each side cached and computed."""
    cached_v, cached_s = vllm["cached_tokens"], sim["cached_tokens"]
    steps_v = [sorted(map(tuple, s)) for s in vllm["steps"]]
    steps_s = [sorted(map(tuple, s)) for s in sim["steps"]]
    same = [a == b for a, b in zip(steps_v, steps_s, strict=False)]
    first = next((i for i, ok in enumerate(same) if not ok), None)
    if first is None and len(steps_v) != len(steps_s):
        first = min(len(steps_v), len(steps_s))
    return {
        "requests": len(cached_v),
        "requests_agreeing": sum(a == b for a, b in zip(cached_v, cached_s, strict=True)),
        "cached_tokens_vllm": sum(cached_v),
        "cached_tokens_sim": sum(cached_s),
        "steps_vllm": len(steps_v),
        "steps_sim": len(steps_s),
        "steps_agreeing": sum(same),
        "first_differing_step": first,
        "computed_tokens_vllm": _computed(vllm["steps"]),
        "computed_tokens_sim": _computed(sim["steps"]),
        "preemptions_vllm": vllm["num_preemptions"],
        "preemptions_sim": sim["num_preemptions"],
        "exact": cached_v == cached_s and first is None,
    }
