"""The simulator against vLLM's own decisions, recorded by `benchmarks.vllm_conformance`.

`tests/fixtures/vllm_traces.json.gz` holds token sequences (Q1/Q2 prompts over the first rows of
movies_small.csv, Llama 3 tokenizer, file / GGR / shuffled order) and what vLLM's v1 scheduler
and KV-cache manager decided on them: each request's prefix-cache hit and the batch of every
step, at cache sizes from no eviction to heavy preemption. Replaying them needs no vLLM; a cache
or admission rule that drifts from vLLM's turns a run red. Re-record with
`make conformance` (or `python -m benchmarks.vllm_conformance --traces-only`).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from benchmarks.lib.conformance import compare, simulate_run

TRACES = Path(__file__).resolve().parents[2] / "fixtures" / "vllm_traces.json.gz"
TRACE = json.loads(gzip.decompress(TRACES.read_bytes()))


def test_the_trace_covers_eviction_and_preemption() -> None:
    runs = TRACE["runs"]
    assert TRACE["vllm_version"] and len(runs) >= 8
    assert any(r["num_preemptions"] > 0 for r in runs)
    assert any(r["num_blocks"] >= 10_000 for r in runs)


@pytest.mark.parametrize("run", TRACE["runs"], ids=lambda r: r["name"])
def test_simulator_decides_as_vllm(run: dict) -> None:
    sim = simulate_run(TRACE["requests"], run)
    result = compare(run, sim)
    assert sim["cached_tokens"] == run["cached_tokens"], result
    assert result["first_differing_step"] is None, result
    assert sim["num_preemptions"] == run["num_preemptions"]
