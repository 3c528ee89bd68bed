"""Pure helpers of `benchmarks.quality`: SQuAD scoring, Wilson intervals, agreement between
two runs' answers, parse rate and the seeded sample of whole contexts.

Scoring follows the official SQuAD v2 evaluation script, with the project's one normalisation
and token F1 (`llm_assets.pipeline.quality`: lower case, punctuation and the articles a/an/the
removed, whitespace collapsed); exact match and token F1 take the best score over the
acceptable answers.

>>> normalize_answer("The  Norman-Conquest!")
'normanconquest'
>>> exact_match("the France", ["France", "in France"])
True
>>> round(token_f1("in northern France", ["France"]), 3)
0.5
>>> [round(x, 4) for x in wilson(0, 10)]
[0.0, 0.2775]
>>> agreement({"a": "yes", "b": "no"}, {"a": "yes", "b": "yes"})["same"]
1
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from llm_assets.pipeline.quality import normalize_answer
from llm_assets.pipeline.quality import token_f1 as answer_f1

Z95 = 1.959963984540054
"""The standard normal quantile of a two-sided 95% interval."""


def exact_match(prediction: str | None, answers: Sequence[str]) -> bool:
    """Whether the normalised prediction equals any normalised acceptable answer (no
    prediction, or no acceptable answer, matches nothing)."""
    if prediction is None:
        return False
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(a) for a in answers)


def token_f1(prediction: str | None, answers: Sequence[str]) -> float:
    """SQuAD token F1 of the prediction against its best acceptable answer (0.0 without a
    prediction or without acceptable answers)."""
    if prediction is None or not answers:
        return 0.0
    return max(answer_f1(prediction, a) for a in answers)


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion k/n (n = 0: the whole of [0, 1])."""
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # at k = 0 (k = n) the bound is exactly 0 (1); rounding would leave it a hair inside
    lo = 0.0 if k == 0 else max(0.0, centre - half)
    hi = 1.0 if k == n else min(1.0, centre + half)
    return lo, hi


def share(k: int, n: int) -> dict:
    """k of n as a rate with its 95% Wilson interval (rate None when n = 0)."""
    lo, hi = wilson(k, n)
    return {"k": int(k), "n": int(n), "rate": k / n if n else None, "lo": lo, "hi": hi}


def mean_interval(values: Iterable[float], z: float = Z95) -> dict:
    """Mean of per-row scores in [0, 1] with a normal-approximation 95% interval, clipped to
    [0, 1] (n < 2: the whole of [0, 1])."""
    xs = np.asarray(list(values), dtype=float)
    n = len(xs)
    if n == 0:
        return {"mean": None, "n": 0, "lo": 0.0, "hi": 1.0}
    mean = float(xs.mean())
    if n < 2:
        return {"mean": mean, "n": n, "lo": 0.0, "hi": 1.0}
    half = z * float(xs.std(ddof=1)) / math.sqrt(n)
    return {"mean": mean, "n": n, "lo": max(0.0, mean - half), "hi": min(1.0, mean + half)}


def agreement(answers: Mapping[str, str | None], reference: Mapping[str, str | None]) -> dict:
    """The share of rows whose answer equals the reference's (exact string equality; a row
    that failed in both, None in both, counts as the same), with its Wilson interval and the
    keys of the rows that differ. Both must answer the same rows."""
    if answers.keys() != reference.keys():
        only = sorted(set(answers) ^ set(reference))[:5]
        raise ValueError(f"the two runs cover different rows (e.g. {only})")
    differ = sorted(k for k in reference if answers[k] != reference[k])
    return share(len(reference) - len(differ), len(reference)) | {
        "same": len(reference) - len(differ),
        "differ": differ,
    }


def parse_rate(answers: Sequence[str | None], violations: Sequence[str | None]) -> dict:
    """Answers in the output spec's allowed form / answers (requests that did not fail:
    answer not None), as `share` with `k`, `n` and `rate`."""
    if len(answers) != len(violations):
        raise ValueError(f"{len(answers)} answers but {len(violations)} violations")
    answered = [v for a, v in zip(answers, violations, strict=True) if a is not None]
    return share(sum(1 for v in answered if v is None), len(answered))


def sample_contexts(
    frame: pd.DataFrame, rows: int, seed: int = 0, key: str = "context"
) -> pd.DataFrame:
    """`rows` rows of `frame` (all of it when it has fewer), chosen as whole groups of equal
    `key` in a seeded random order of the groups; only the last group may be cut short to
    make the count exact. Within a group rows keep their file order; the groups follow each
    other in the sampled order. The result's index is 0..rows-1."""
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    groups = list(frame.groupby(key, sort=False).indices.values())  # first-appearance order
    order = np.random.default_rng(seed).permutation(len(groups))
    taken: list[np.ndarray] = []
    total = 0
    for g in order:
        if total >= rows:
            break
        part = groups[g][: rows - total]
        taken.append(part)
        total += len(part)
    positions = np.concatenate(taken) if taken else np.array([], dtype=np.int64)
    return frame.iloc[positions].reset_index(drop=True)


def mcnemar_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value of paired binary outcomes: `b` rows right only under
    one condition, `c` right only under the other (1.0 when no row differs)."""
    if b < 0 or c < 0:
        raise ValueError(f"need b, c >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_difference(scores: Sequence[float], reference: Sequence[float], z: float = Z95):
    """Mean per-row difference `scores - reference` (same rows, same order) with a normal
    95% interval; with 0/1 scores also the exact McNemar p-value (`mcnemar_p`)."""
    if len(scores) != len(reference):
        raise ValueError(f"{len(scores)} scores but {len(reference)} reference scores")
    d = np.asarray(scores, dtype=float) - np.asarray(reference, dtype=float)
    n = len(d)
    out: dict = {"delta": float(d.mean()) if n else None, "n": n, "lo": -1.0, "hi": 1.0}
    if n >= 2:
        half = z * float(d.std(ddof=1)) / math.sqrt(n)
        out |= {"lo": max(-1.0, out["delta"] - half), "hi": min(1.0, out["delta"] + half)}
    binary = all(x in (0.0, 1.0) for x in (*scores, *reference))
    if binary:
        out["mcnemar_p"] = mcnemar_p(int((d > 0).sum()), int((d < 0).sum()))
    return out
