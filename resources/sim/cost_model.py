"""Batch-time cost model (InferMax, `infermax_cost_scheduling.txt` section 3.2) and its fit.

One iteration (batch) takes

    t = a * tokens + b * sum(c^2 + 2*m*c over prefill chunks) + d * sum(m over decodes)
        + e * prefill_requests + f

where a prefill chunk computes `c` new tokens of a request with `m` tokens already in its KV
cache, and a decode reads the `m` KV entries of its context. The terms are: linear layers
(compute-bound, per token; plus the tensor-parallel all-reduces), prefill attention (quadratic),
decode attention (memory-bound KV reads), a per-prefill-request kernel overhead, and a fixed cost
per iteration (reading the weights once, plus the engine's step overhead).

`coefficients_from_profile` derives a..f from a `Deployment` and ONE set of global efficiency
constants (`Efficiency`); `fit(rows)` refits a..f by least squares from measured
`(BatchShape, seconds)` rows. Invariant: every derived coefficient is >= 0 and times are
machine-independent (pure arithmetic on the batch composition).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from resources.sim.profiles import Deployment

__all__ = [
    "DEFAULT_EFFICIENCY",
    "TIMING_PROFILES",
    "BatchShape",
    "CostCoefficients",
    "Efficiency",
    "coefficients_from_profile",
    "cuda_graph_sizes",
    "fit",
    "get_timing_profile",
    "padded_tokens",
]


@dataclass(frozen=True)
class Efficiency:
    """Fractions of datasheet peaks that real kernels reach; one set for every GPU and model."""

    matmul: float = 0.40
    """Share of peak FLOP/s the linear layers reach in prefill-sized batches."""
    attention: float = 0.30
    """Share of peak FLOP/s the prefill attention kernel reaches."""
    memory: float = 0.80
    """Share of datasheet memory bandwidth reached reading weights and KV."""
    interconnect: float = 0.70
    """Share of GPU-to-GPU bandwidth reached by the tensor-parallel all-reduces."""
    step_overhead_s: float = 0.004
    """Fixed per-iteration cost outside the GPU kernels (scheduling, sampling, launch)."""
    prefill_request_overhead_s_per_layer: float = 5e-6
    """Extra attention-kernel cost per prefill request and layer (InferMax's linear term)."""
    async_scheduling: bool = False
    """The engine forms step k+1's batch while step k runs on the GPU (vLLM's `AsyncScheduler`),
    so a request that arrives while the engine is busy joins one step later than it would in a
    synchronous loop (`SimulatedEngine` applies it; an idle engine schedules at once)."""
    cuda_graphs: bool = False
    """Batches of up to the largest captured size run as CUDA graphs, their tokens padded up to
    the next captured size (`cuda_graph_sizes`, `padded_tokens`): the linear layers compute the
    padding rows too."""


DEFAULT_EFFICIENCY = Efficiency()

# Today's vLLM (0.21-0.32, V1 engine: CUDA graphs, FlashAttention 3 / FlashInfer, async output
# processing), calibrated on published measurements, each with what it pins:
# - memory 0.81 and step overhead 0.55 ms: solve `weights / (bandwidth * memory) + overhead`
#   for two single-request decode speeds of Llama-3.1-8B in BF16 (16.06 GB of weights):
#   6.48 ms per output token on an H100-80GB (InferenceBench concurrency sweep, vLLM 0.21.0,
#   https://yobitelcomm.github.io/bench/recipes/concurrency-sweep/) and 75 tokens/s on an
#   A100-40GB (J. Musgrave, "vLLM throughput-latency sweep on NVIDIA A100", vLLM 0.23.0,
#   1024-token inputs, 128-token outputs, https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on);
# - matmul 0.70: moved towards the same A100 sweep's 6.6x throughput at 8 concurrent requests
#   over one (the ratio grows with it); 0.70 is the most we accept, since the cost model adds
#   a prefill chunk's matmul time to a memory-bound decode step instead of overlapping the two,
#   so it reaches 5.9x there (`benchmarks.fidelity` reports the gap and every other point).
# The rest keep the early-2024 values (no published figure we found pins them apart).
# Two engine behaviours of today's vLLM, from its code (no coefficient to fit):
# - async scheduling, on by default (vllm/config/vllm.py: `async_scheduling` None -> True unless
#   an incompatible option is set; `EngineCore.step_with_batch_queue` schedules and launches
#   step k+1 before blocking on step k; PR vllm-project/vllm#19970 notes TTFT rises a little as a
#   new request waits one more step); the delay is on arrivals only: step k's tokens, a first
#   token included, are returned as soon as step k+1 is launched, not after it runs
#   (benchmarks/results/async_first_token.md: the code, and the H200 per-step timings);
# - CUDA graphs in FULL_AND_PIECEWISE mode, every batch of up to the largest capture size padded
#   to the next captured size (vllm/config/compilation.py, `cudagraph_capture_sizes`).
# Already priced for every profile: decode attention reads each running request's whole KV
# cache (d, memory-bound) and a prefill chunk sharing a step with decodes adds its time to the
# step (chunked-prefill interference). Not modelled: the engine's per-step CPU work grows with
# the batch (the scheduler alone ~13 us per running request in vLLM 0.27.1, simllm PRs #204 and
# #205, a study its authors left uncertified), but async scheduling runs it beside the GPU
# step: ~1 ms at 64 requests against a ~7 ms step for an 8B model on an H100, never the pace.
CURRENT_EFFICIENCY = Efficiency(
    matmul=0.70, memory=0.81, step_overhead_s=0.00055, async_scheduling=True, cuda_graphs=True
)

TIMING_PROFILES: dict[str, Efficiency] = {
    "vllm-2024": DEFAULT_EFFICIENCY,
    "vllm-2026": CURRENT_EFFICIENCY,
}
"""Timing profiles by name: "vllm-2024" is the early-2024 vLLM both papers ran (a fixed 4 ms
step overhead, 40% of peak in the linear layers; `benchmarks.fidelity` checks (a)-(d) against
the papers' figures) and the default; "vllm-2026" is today's vLLM (see `CURRENT_EFFICIENCY`;
`benchmarks.fidelity` checks it against the measurements it cites)."""


def get_timing_profile(name: str) -> Efficiency:
    """The `Efficiency` of a timing profile by name; ValueError lists the names."""
    try:
        return TIMING_PROFILES[name]
    except KeyError:
        raise ValueError(
            f"unknown timing profile {name!r}; expected one of {sorted(TIMING_PROFILES)}"
        ) from None


def cuda_graph_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> tuple[int, ...]:
    """vLLM's default CUDA-graph capture sizes (vllm/config/vllm.py `_set_cudagraph_sizes`):
    ``[1, 2, 4] + range(8, 256, 8) + range(256, top + 1, 16)`` with
    ``top = min(2 * max_num_seqs, 512)``, none above `max_num_batched_tokens`."""
    top = min(2 * max_num_seqs, 512, max_num_batched_tokens)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]
    return tuple(s for s in sizes if s <= top)


def padded_tokens(tokens: int, sizes: Sequence[int]) -> int:
    """`tokens` padded up to the next captured size; unchanged above the largest (eager)."""
    i = bisect.bisect_left(sizes, tokens)
    return sizes[i] if i < len(sizes) else tokens


@dataclass(frozen=True)
class BatchShape:
    """What one iteration computes: the cost model's inputs."""

    prefill: Sequence[tuple[int, int]] = field(default_factory=tuple)
    """(c, m) per prefill chunk: c new tokens with m tokens already in context."""
    decode: Sequence[int] = field(default_factory=tuple)
    """m (context length read) per decoding request; each computes one token."""

    def features(self) -> tuple[float, float, float, float, float]:
        """(tokens, sum(c^2 + 2mc), sum(m) over decodes, prefill requests, 1)."""
        tokens = sum(c for c, _ in self.prefill) + len(self.decode)
        attn = sum(c * c + 2 * m * c for c, m in self.prefill)
        return (float(tokens), float(attn), float(sum(self.decode)), float(len(self.prefill)), 1.0)


@dataclass(frozen=True)
class CostCoefficients:
    """The five coefficients, in seconds per unit of their term."""

    a: float
    """Per token processed (prefill or decode)."""
    b: float
    """Per unit of c^2 + 2mc over prefill chunks."""
    d: float
    """Per KV entry read by a decode."""
    e: float
    """Per prefill request in the batch."""
    f: float
    """Per iteration."""

    def batch_time(
        self, tokens: float, attention_units: float, decode_kv: float, prefill_requests: float
    ) -> float:
        return (
            self.a * tokens
            + self.b * attention_units
            + self.d * decode_kv
            + self.e * prefill_requests
            + self.f
        )

    def time(self, batch: BatchShape) -> float:
        """Seconds for one iteration of `batch`."""
        tokens, attn, kv, n_prefill, _ = batch.features()
        return self.batch_time(tokens, attn, kv, n_prefill)

    def as_array(self) -> np.ndarray:
        return np.array([self.a, self.b, self.d, self.e, self.f])


def coefficients_from_profile(
    deployment: Deployment, efficiency: Efficiency = DEFAULT_EFFICIENCY
) -> CostCoefficients:
    """Derive a..f from datasheet peaks (per GPU, work split over `tensor_parallel_size`).

    a: 2 * matmul_params FLOPs per token at `matmul` x peak, plus (TP > 1) two ring all-reduces
       of the hidden state per layer at `interconnect` x link bandwidth;
    b: attention FLOPs are 2 * layers * heads * head_dim per unit of c^2 + 2mc;
    d: KV bytes per token at `memory` x bandwidth;
    e: `prefill_request_overhead_s_per_layer` x layers;
    f: weight bytes at `memory` x bandwidth, plus `step_overhead_s`.
    """
    hw, mp, tp = deployment.hardware, deployment.model, deployment.tensor_parallel_size
    flops = hw.peak_flops * tp
    bandwidth = hw.memory_bandwidth * efficiency.memory * tp
    a = 2.0 * mp.matmul_params / (flops * efficiency.matmul)
    if tp > 1:
        allreduce_bytes = 2 * mp.num_layers * mp.hidden_size * mp.bytes_per_param
        a += (
            allreduce_bytes
            * 2
            * (tp - 1)
            / tp
            / (hw.interconnect_bandwidth * efficiency.interconnect)
        )
    b = 2.0 * mp.num_layers * mp.num_heads * mp.head_dim / (flops * efficiency.attention)
    d = mp.kv_bytes_per_token / bandwidth
    e = efficiency.prefill_request_overhead_s_per_layer * mp.num_layers
    f = mp.weight_bytes / bandwidth + efficiency.step_overhead_s
    return CostCoefficients(a=a, b=b, d=d, e=e, f=f)


def fit(rows: Iterable[tuple[BatchShape, float]]) -> CostCoefficients:
    """Least-squares fit of a..f to measured `(batch, seconds)` rows.

    Needs at least five rows whose features span the five terms (mix prefill-only,
    decode-only and mixed batches of varied sizes); ValueError otherwise.
    """
    rows = list(rows)
    x = np.array([shape.features() for shape, _ in rows], dtype=float).reshape(-1, 5)
    y = np.array([seconds for _, seconds in rows], dtype=float)
    if len(rows) < 5 or np.linalg.matrix_rank(x) < 5:
        raise ValueError(
            f"fit needs >= 5 rows spanning all five terms, got {len(rows)} rows of rank "
            f"{np.linalg.matrix_rank(x) if len(rows) else 0}; mix prefill, decode and mixed batches"
        )
    # Scale columns so the solve is well conditioned (features span ~12 orders of magnitude).
    scale = np.abs(x).max(axis=0)
    coef, *_ = np.linalg.lstsq(x / scale, y, rcond=None)
    a, b, d, e, f = (coef / scale).tolist()
    return CostCoefficients(a=a, b=b, d=d, e=e, f=f)
