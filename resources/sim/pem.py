"""RelServe's Priority Estimation Model (relserve.txt §4.2): batch-time predictors, batch
decomposition (Algorithm 1), PEM (Eq. 10), the sampled cache-miss ratio (Eq. 11), and the static
priority of vLLM-SP (Eq. 6-7). Pure functions of numbers: shared by the simulated engine's
policies and by `benchmarks.lib.relquery_waves` (the vLLM path).

Eq. 9, the linear batch-time predictors:
    L_prefill(p) = alpha_p * utok(p) + beta_p      (utok: uncached input tokens of the batch)
    L_decode(d)  = alpha_d * req(d)  + beta_d      (req: requests in the decode batch)
`LinearPredictors.fit(coefficients)` fits them by least squares to batch times of the engine's
cost model on a grid of typical batches ("several offline runs").

Algorithm 1 (`batch_decompose`), with two readings where the listing is loose:
- line 4 flushes when the KV capacity `cap` or `max_num_seqs` would be exceeded and lets every
  request on the GPU decode to completion; the listing never resets `accum`, which would flush
  after every later request, so it is reset with `p` and `d` (line 8);
- a request that is already running (prefilled) has utok = 0 and takes no place in a prefill
  batch, but it stays in its decode batch for the output steps it still has to generate;
  otherwise a relQuery in its tail would be estimated at 0 seconds. A decode group whose
  members have `rem_i` steps left costs sum over steps of L_decode = alpha_d * sum(rem_i) +
  beta_d * max(rem_i), which is Algorithm 1's OL * L_decode(d) when every rem_i = OL.

Eq. 6-7 (`static_priority`): ReqPrio(r) = L1(tok(r)) + L2(OL(r)), Prio(R) = sum over R.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import mul

import numpy as np

from resources.sim.cost_model import BatchShape, CostCoefficients

__all__ = [
    "STATIC_MAPPINGS",
    "Decomposition",
    "LinearPredictors",
    "batch_decompose",
    "cache_miss_ratio",
    "pem",
    "pem_decoding",
    "pem_of",
    "pem_queued",
    "static_priority",
]

STATIC_MAPPINGS: tuple[str, ...] = ("linear", "identity")
"""Choices of L1/L2 in Eq. 6: "linear" (L1 = alpha_p * tok, L2 = alpha_d * OL: the marginal
seconds one request adds to a prefill and to its decode steps, from the same Eq. 9 fit as
RelServe, as ALISE's linear functions) or "identity" (L1 = tok, L2 = OL, as the
length-ranking methods)."""


@dataclass(frozen=True)
class LinearPredictors:
    """Eq. 9's slopes and intercepts (seconds per token / request, seconds per batch)."""

    alpha_p: float
    """Seconds per uncached input token of a prefill batch."""
    beta_p: float
    """Seconds per prefill batch (intercept)."""
    alpha_d: float
    """Seconds per request of a decode batch."""
    beta_d: float
    """Seconds per decode batch (intercept)."""

    def prefill(self, utok: float) -> float:
        """L_prefill of a batch with `utok` uncached tokens."""
        return self.alpha_p * utok + self.beta_p

    def decode(self, num_requests: float) -> float:
        """L_decode of a batch of `num_requests` requests."""
        return self.alpha_d * num_requests + self.beta_d

    @classmethod
    def fit(
        cls,
        coefficients: CostCoefficients,
        prompt_len: int = 256,
        context_len: int = 288,
        max_num_batched_tokens: int = 2048,
        max_num_seqs: int = 256,
    ) -> LinearPredictors:
        """Least-squares fit of Eq. 9 to the cost model's times of typical batches.

        Prefill batches pack whole prompts of `prompt_len` tokens (the last one cut) up to
        1..`max_num_batched_tokens` tokens; decode batches hold 1..`max_num_seqs` requests
        reading `context_len` KV entries each. ValueError on non-positive sizes.
        """
        for name, value in (
            ("prompt_len", prompt_len),
            ("context_len", context_len),
            ("max_num_batched_tokens", max_num_batched_tokens),
            ("max_num_seqs", max_num_seqs),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        xs, ys = [], []
        for utok in np.unique(np.linspace(16, max_num_batched_tokens, 32).astype(int)):
            full, rest = divmod(int(utok), prompt_len)
            chunks = [(prompt_len, 0)] * full + ([(rest, 0)] if rest else [])
            xs.append(utok)
            ys.append(coefficients.time(BatchShape(prefill=chunks)))
        alpha_p, beta_p = np.polyfit(np.array(xs, float), np.array(ys), 1)
        xs, ys = [], []
        for n in np.unique(np.linspace(1, max_num_seqs, 32).astype(int)):
            xs.append(n)
            ys.append(coefficients.time(BatchShape(decode=[context_len] * int(n))))
        alpha_d, beta_d = np.polyfit(np.array(xs, float), np.array(ys), 1)
        return cls(
            float(max(alpha_p, 0.0)),
            float(max(beta_p, 0.0)),
            float(max(alpha_d, 0.0)),
            float(max(beta_d, 0.0)),
        )


@dataclass(frozen=True)
class Decomposition:
    """Algorithm 1's output: uncached tokens of each prefill batch, and each decode group's
    remaining output steps per member (a group decodes together to completion)."""

    prefill_tokens: list[float]
    decode_groups: list[list[int]]


def batch_decompose(
    utoks: Sequence[float],
    remaining: Sequence[int],
    cap: float,
    max_num_seqs: int,
    max_num_batched_tokens: int,
) -> Decomposition:
    """Algorithm 1 over requests in scheduling order (see the module docstring).

    `utoks[i]` are request i's uncached input tokens (0 for a running request), `remaining[i]`
    its output steps left. Invariants: every request with utok > 0 is in exactly one prefill
    batch, every request in exactly one decode group; no prefill batch exceeds
    `max_num_batched_tokens` unless a single request does; no group exceeds `max_num_seqs`.

    >>> batch_decompose([100, 100, 100], [5, 5, 5], cap=1000, max_num_seqs=2,
    ...                 max_num_batched_tokens=150)
    Decomposition(prefill_tokens=[100, 100, 100], decode_groups=[[5, 5], [5]])
    """
    if len(utoks) != len(remaining):
        raise ValueError(f"utoks and remaining differ in length: {len(utoks)} != {len(remaining)}")
    prefills: list[float] = []
    groups: list[list[int]] = []
    p_tok: float = 0
    p_n = 0
    d: list[int] = []
    accum: float = 0
    for u, rem in zip(utoks, remaining, strict=True):
        if d and (u + accum > cap or len(d) + 1 > max_num_seqs):  # lines 4-8
            if p_n:
                prefills.append(p_tok)
            groups.append(d)
            p_tok, p_n, d, accum = 0, 0, [], 0
        if u > 0:
            if p_n and u + p_tok > max_num_batched_tokens:  # lines 9-10
                prefills.append(p_tok)
                p_tok, p_n = 0, 0
            p_tok += u
            p_n += 1
        d.append(rem)  # line 11
        accum += u
    if p_n:  # lines 12-15
        prefills.append(p_tok)
    if d:
        groups.append(d)
    return Decomposition(prefills, groups)


def pem_of(decomposition: Decomposition, predictors: LinearPredictors) -> float:
    """Eq. 10: the predicted seconds of a decomposition."""
    pr = predictors
    total = sum(pr.prefill(t) for t in decomposition.prefill_tokens)
    for group in decomposition.decode_groups:
        total += pr.alpha_d * sum(group) + pr.beta_d * max(group)
    return total


def pem(
    utoks: Sequence[float],
    remaining: Sequence[int],
    predictors: LinearPredictors,
    cap: float,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    decoding: Sequence[int] = (),
) -> float:
    """Eq. 10: PEM(R_t) = sum of L_prefill over P + sum of L_decode over D, with P and D from
    Algorithm 1 (`batch_decompose`), computed in one pass without building the batches (equal
    to `pem_of(batch_decompose(...))`). `decoding` are the remaining steps of requests already
    running, placed first with utok 0 (the same as prefixing them to `remaining` with zeros in
    `utoks`). 0.0 for a relQuery with nothing left."""
    if len(decoding) > max_num_seqs:
        utoks = [0.0] * len(decoding) + list(utoks)
        remaining = list(decoding) + list(remaining)
        decoding = ()
    return pem_decoding(
        len(decoding),
        sum(decoding),
        max(decoding, default=0),
        utoks,
        remaining,
        predictors,
        cap,
        max_num_seqs,
        max_num_batched_tokens,
    )


def pem_decoding(
    d_n: int,
    d_sum: int,
    d_max: int,
    utoks: Sequence[float],
    remaining: Sequence[int],
    predictors: LinearPredictors,
    cap: float,
    max_num_seqs: int,
    max_num_batched_tokens: int,
) -> float:
    """`pem` with the running requests given as their count `d_n` (<= `max_num_seqs`), total
    remaining steps `d_sum` and largest remaining steps `d_max` (what the updater keeps)."""
    ap, bp, ad, bd = predictors.alpha_p, predictors.beta_p, predictors.alpha_d, predictors.beta_d
    total = 0.0
    p_tok = 0.0
    p_n = 0
    accum = 0.0
    for u, rem in zip(utoks, remaining, strict=True):
        if d_n and (u + accum > cap or d_n + 1 > max_num_seqs):
            if p_n:
                total += ap * p_tok + bp
            total += ad * d_sum + bd * d_max
            p_tok, p_n, d_n, d_sum, d_max, accum = 0.0, 0, 0, 0, 0, 0.0
        if u > 0:
            if p_n and u + p_tok > max_num_batched_tokens:
                total += ap * p_tok + bp
                p_tok, p_n = 0.0, 0
            p_tok += u
            p_n += 1
        d_n += 1
        d_sum += rem
        if rem > d_max:
            d_max = rem
        accum += u
    if p_n:
        total += ap * p_tok + bp
    if d_n:
        total += ad * d_sum + bd * d_max
    return total


def pem_queued(
    d_n: int,
    d_sum: int,
    d_max: int,
    tokens: Sequence[int],
    tokens_sum: int,
    remaining: Sequence[int],
    remaining_sum: int,
    remaining_max: int,
    ratio: float,
    predictors: LinearPredictors,
    cap: float,
    max_num_seqs: int,
    max_num_batched_tokens: int,
) -> float:
    """`pem_decoding` with utoks = [t * ratio for t in `tokens`] (Eq. 11), bit for bit, for
    a caller that keeps the sums `tokens_sum` and `remaining_sum` and the largest remaining
    `remaining_max` of its (unchanged) waiting requests.

    When every request fits one decode group (`d_n + len(tokens) <= max_num_seqs` and the
    uncached tokens stay well below `cap`), Algorithm 1's line-4 flush never fires: only the
    prefill packing (lines 9-11) walks the requests, and the decode group's sum and maximum come
    from the kept figures; the floating-point operations are the same, in the same order, as
    `pem_decoding`'s. Otherwise this is `pem_decoding`."""
    n = len(tokens)
    if not n or d_n + n > max_num_seqs or tokens_sum * ratio * (1.0 + 1e-9) >= cap:
        return pem_decoding(
            d_n,
            d_sum,
            d_max,
            [t * ratio for t in tokens],
            remaining,
            predictors,
            cap,
            max_num_seqs,
            max_num_batched_tokens,
        )
    ap, bp = predictors.alpha_p, predictors.beta_p
    total = 0.0
    if ratio > 0.0:
        # Every u > 0. A batch's running sum p_tok is `accumulate` from its first request (the
        # same additions in the same order), non-decreasing, so its first sum over the budget
        # (`bisect`) is where line 9 flushes; its first request always joins.
        utoks = list(map(mul, tokens, repeat(ratio, n)))  # = t * ratio, bit for bit
        start = 0
        while start < n:
            sums = list(accumulate(utoks[start:]))
            size = bisect_right(sums, max_num_batched_tokens) or 1
            total += ap * sums[size - 1] + bp
            start += size
    else:
        p_tok = 0.0
        p_n = 0
        for t in tokens:
            u = t * ratio
            if u > 0:
                if p_n and u + p_tok > max_num_batched_tokens:
                    total += ap * p_tok + bp
                    p_tok, p_n = 0.0, 0
                p_tok += u
                p_n += 1
        if p_n:
            total += ap * p_tok + bp
    d_sum += remaining_sum
    if remaining_max > d_max:
        d_max = remaining_max
    return total + (predictors.alpha_d * d_sum + predictors.beta_d * d_max)


def cache_miss_ratio(samples: Iterable[tuple[int, int]]) -> float:
    """Eq. 11: sum of uncached tokens / sum of tokens over sampled (tok, utok) pairs.

    1.0 (assume nothing cached) when the sample is empty or has no tokens.

    >>> cache_miss_ratio([(100, 40), (100, 60)])
    0.5
    """
    tok = utok = 0
    for t, u in samples:
        tok += t
        utok += u
    return utok / tok if tok > 0 else 1.0


def static_priority(
    tokens: Iterable[int],
    output_limits: Iterable[int],
    predictors: LinearPredictors | None = None,
    mapping: str = "linear",
) -> float:
    """Eq. 6-7: Prio(R) = sum over requests of L1(tok(r)) + L2(OL(r)), computed once.

    `mapping` is one of `STATIC_MAPPINGS`; "linear" needs `predictors`.

    >>> static_priority([10, 20], [5, 5], mapping="identity")
    40.0
    """
    if mapping not in STATIC_MAPPINGS:
        raise ValueError(f"unknown mapping {mapping!r}; expected one of {list(STATIC_MAPPINGS)}")
    tok = float(sum(tokens))
    out = float(sum(output_limits))
    if mapping == "identity":
        return tok + out
    if predictors is None:
        raise ValueError("mapping='linear' needs the Eq. 9 predictors, got predictors=None")
    return predictors.alpha_p * tok + predictors.alpha_d * out


class FittedPredictors:
    """`LinearPredictors` (Eq. 9) fitted to a schedule context's cost model, refitted only
    when the context's coefficients object changes. Call it with the context."""

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self._predictors: LinearPredictors | None = None
        self._fitted_for: object = None

    def __call__(self, ctx) -> LinearPredictors:
        if self._predictors is None or self._fitted_for is not ctx.coefficients:
            if ctx.coefficients is None:
                raise ValueError(f"{self.policy} needs ctx.coefficients (the engine's cost model)")
            self._predictors = LinearPredictors.fit(
                ctx.coefficients,
                max_num_batched_tokens=ctx.max_num_batched_tokens,
                max_num_seqs=ctx.max_num_seqs,
            )
            self._fitted_for = ctx.coefficients
        return self._predictors
