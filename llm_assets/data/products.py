"""Synthetic Amazon-review-like tables with the column statistics of the paper's Products data
(DESIGN.md section 7; `llm_queries_relational.txt` Table 4).

At the full size (15,014 reviews): 144 products; description averages 283 characters;
reviewText averages 382 characters with 12,932 distinct values (2,082 rows are exact copies of
another review of the same product, with the same verified and overall values: real Amazon
data has many exact duplicate reviews, and dedup must find them); Format has 16 values
averaging about 8.9 characters; verified is True on round(15,014 * 8,874 / 15,000) = 8,882 rows;
overall is an int 1..5 skewed towards 5. Smaller sizes scale the counts proportionally (at
least 2 products). All text is made up (`llm_assets.data.text`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from llm_assets.data.text import (
    exact_flags,
    lognormal_lengths,
    match_weighted_mean,
    scaled_count,
    skewed_counts,
    unique_texts,
)

FULL_NUM_ROWS = 15_014
FULL_NUM_PRODUCTS = 144
FULL_DISTINCT_REVIEWS = 12_932
VERIFIED_SHARE = 8_874 / 15_000
DESCRIPTION_MEAN_CHARS = 283
REVIEW_MEAN_CHARS = 382
POPULARITY_EXPONENT = 0.9
OVERALL_PROBABILITIES = (0.04, 0.04, 0.09, 0.21, 0.62)
"""Share of ratings 1, 2, 3, 4, 5."""

FORMATS = (
    "Audio CD",
    "MP3 Music",
    "Vinyl LP",
    "Cassette",
    "Box Set",
    "Import CD",
    "Streaming",
    "Digital EP",
    "Single CD",
    "Blu-ray",
    "DVD Audio",
    "Mini Disc",
    "LP Record",
    "Deluxe Edition",
    "Limited Vinyl",
    "Remastered CD",
)
"""The 16 Format values, most common first (generic labels averaging 9.4 characters; the
shorter common ones dominate, so the average per product is ~8.8 and per review row 8.5-9.1
over seeds 0-4, against the paper's 8.93)."""

_FORMAT_WEIGHTS = np.array([30, 30, 5, 5, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2], dtype=float)


def products(num_rows: int = FULL_NUM_ROWS, seed: int = 0) -> dict[str, pd.DataFrame]:
    """`{"reviews": ..., "metadata": ...}` with the Products statistics scaled to `num_rows`.

    reviews: asin, reviewText, verified (bool), overall (int 1..5), review_id. Rows are in a
    random (seeded) order; review_id is 0..num_rows-1 in row order; every asin is a key of
    `metadata`. metadata: asin (unique), description (unique), Format (one of `FORMATS`; every
    value used when there are at least 16 products); every product has at least one review
    when num_rows >= the number of products. Same (num_rows, seed) gives identical frames.
    """
    if num_rows < 1:
        raise ValueError(f"num_rows must be >= 1, got {num_rows}")
    rng = np.random.default_rng([seed, 2])
    num_products = scaled_count(FULL_NUM_PRODUCTS, FULL_NUM_ROWS, num_rows, minimum=2)
    num_distinct = min(num_rows, scaled_count(FULL_DISTINCT_REVIEWS, FULL_NUM_ROWS, num_rows))
    num_copies = num_rows - num_distinct

    asins = _asins(rng, num_products)
    per_product = skewed_counts(rng, num_distinct, num_products, POPULARITY_EXPONENT)
    product_of_distinct = np.repeat(np.arange(num_products), per_product)
    review_lengths = lognormal_lengths(rng, num_distinct, REVIEW_MEAN_CHARS, 0.9, minimum=8)
    texts = np.array(unique_texts(rng, review_lengths), dtype=object)
    overall = rng.choice(np.arange(1, 6), size=num_distinct, p=OVERALL_PROBABILITIES)
    source = rng.choice(num_distinct, size=num_copies, replace=True)
    group = np.concatenate([np.arange(num_distinct), source])
    copies = np.bincount(source, minlength=num_distinct)
    verified = exact_flags(rng, 1 + copies, round(num_rows * VERIFIED_SHARE))

    group = group[rng.permutation(num_rows)]
    product_of_row = product_of_distinct[group]
    reviews = pd.DataFrame(
        {
            "asin": np.array(asins, dtype=object)[product_of_row],
            "reviewText": texts[group],
            "verified": verified[group],
            "overall": overall[group].astype(np.int64),
            "review_id": np.arange(num_rows, dtype=np.int64),
        }
    )

    rows_per_product = np.bincount(product_of_row, minlength=num_products)
    lengths = lognormal_lengths(rng, num_products, DESCRIPTION_MEAN_CHARS, 0.6, minimum=30)
    lengths = match_weighted_mean(lengths, rows_per_product, DESCRIPTION_MEAN_CHARS, minimum=30)
    metadata = pd.DataFrame(
        {
            "asin": asins,
            "description": unique_texts(rng, lengths),
            "Format": _formats(rng, num_products),
        }
    )
    return {"reviews": reviews, "metadata": metadata}


def _asins(rng: np.random.Generator, n: int) -> list[str]:
    """`n` distinct 10-character identifiers: 'B' + 9 of [0-9A-Z], or (a fifth) 10 digits."""
    alphabet = np.array(list("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        if rng.random() < 0.2:
            asin = "".join(alphabet[rng.integers(0, 10, size=10)])
        else:
            asin = "B" + "".join(alphabet[rng.integers(0, len(alphabet), size=9)])
        if asin not in seen:
            seen.add(asin)
            out.append(asin)
    return out


def _formats(rng: np.random.Generator, n: int) -> list[str]:
    """A Format per product: each of the first min(n, 16) values once, the rest weighted
    towards the common formats, in a random order."""
    k = min(n, len(FORMATS))
    weights = _FORMAT_WEIGHTS[:k] / _FORMAT_WEIGHTS[:k].sum()
    index = np.concatenate([np.arange(k), rng.choice(k, size=n - k, p=weights)])
    return [FORMATS[i] for i in rng.permutation(index)]
