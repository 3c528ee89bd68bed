"""Seeded synthetic tables with skewed (Zipf-like) value distributions, for the reordering
benchmark and tests. Text is generated from a fixed made-up syllable list, not copied."""

from __future__ import annotations

import numpy as np
import pandas as pd

_SYLLABLES = (
    "ka lo mi ne ru sa ti vo be da fe gi hu ja ko le ma no pi qu re si to u va we xi ya zo "
    "bra cle dri fro glu pla sno stu tri wre"
).split()

# (distinct values, mean words per value, Zipf exponent) per column, cycled for wider tables.
_COLUMN_SHAPES = (
    (4, 2, 1.2),
    (30, 3, 1.1),
    (200, 12, 1.0),
    (1_000, 6, 1.1),
    (5_000, 2, 0.9),
    (20_000, 8, 1.0),
    (50, 30, 1.3),
    (100_000, 4, 0.7),
    (10, 1, 0.8),
    (2_000, 20, 1.2),
)


def _phrases(rng: np.random.Generator, n: int, mean_words: int) -> np.ndarray:
    words = np.maximum(1, rng.poisson(mean_words, size=n))
    syllables = np.array(_SYLLABLES, dtype=object)
    out = np.empty(n, dtype=object)
    seen: set[str] = set()
    for i in range(n):
        while True:
            parts = syllables[rng.integers(0, len(syllables), size=words[i] * 2)]
            text = " ".join(a + b for a, b in zip(parts[::2], parts[1::2], strict=True))
            if text not in seen:
                break
            words[i] += 1
        seen.add(text)
        out[i] = text
    return out


def skewed_table(num_rows: int, num_cols: int = 10, seed: int = 0) -> pd.DataFrame:
    """`num_rows` x `num_cols` strings; column k draws from a Zipf-like distribution over
    `min(distinct, num_rows)` values whose lengths and skews differ between columns."""
    rng = np.random.default_rng(seed)
    columns = {}
    for k in range(num_cols):
        distinct, mean_words, exponent = _COLUMN_SHAPES[k % len(_COLUMN_SHAPES)]
        distinct = max(1, min(distinct, num_rows))
        probs = 1.0 / np.arange(1, distinct + 1) ** exponent
        codes = rng.choice(distinct, size=num_rows, p=probs / probs.sum())
        columns[f"c{k}"] = _phrases(rng, distinct, mean_words)[codes]
    return pd.DataFrame(columns)
