"""Synthetic Rotten Tomatoes-like tables with the column statistics of the paper's Movies data
(DESIGN.md section 7; `llm_queries_relational.txt` Table 5).

At the full size (15,018 reviews): 68 movies; movie_info averages 407 characters; review_content
averages 132 characters with 14,977 distinct values (41 reviews are exact copies of another
review of the same movie, with the same review_type); review_type is 'Fresh' on
round(15,018 * 10,461 / 15,008) = 10,468 rows and 'Rotten' on the rest (average length 5.3).
Smaller sizes scale the counts proportionally (at least 2 movies). All text is made up
(`llm_assets.data.text`).
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
    title_phrases,
    unique_texts,
)

FULL_NUM_ROWS = 15_018
FULL_NUM_MOVIES = 68
FULL_DISTINCT_REVIEWS = 14_977
FRESH_SHARE = 10_461 / 15_008
MOVIE_INFO_MEAN_CHARS = 407
REVIEW_MEAN_CHARS = 132
POPULARITY_EXPONENT = 0.8
"""Zipf exponent of reviews per movie: the most reviewed movie has ~8x the median's reviews."""


def movies(num_rows: int = FULL_NUM_ROWS, seed: int = 0) -> dict[str, pd.DataFrame]:
    """`{"reviews": ..., "movies": ...}` with the Movies statistics scaled to `num_rows` reviews.

    reviews: rotten_tomatoes_link, review_content, review_type ('Fresh' | 'Rotten'), review_id.
    Rows are in a random (seeded) order, not grouped by movie, like a file in arrival order;
    review_id is 0..num_rows-1 in row order. Every rotten_tomatoes_link is a key of `movies`.
    movies: rotten_tomatoes_link (unique), movie_title (unique), movie_info (unique); every
    movie has at least one review when num_rows >= the number of movies. Same (num_rows, seed)
    gives identical frames.
    """
    if num_rows < 1:
        raise ValueError(f"num_rows must be >= 1, got {num_rows}")
    rng = np.random.default_rng([seed, 1])
    num_movies = scaled_count(FULL_NUM_MOVIES, FULL_NUM_ROWS, num_rows, minimum=2)
    num_distinct = min(num_rows, scaled_count(FULL_DISTINCT_REVIEWS, FULL_NUM_ROWS, num_rows))
    num_copies = num_rows - num_distinct

    titles = title_phrases(rng, num_movies, 1, 4)
    links = [_link(rng, t) for t in titles]

    # Distinct reviews, grouped by movie with a skewed popularity; then exact copies.
    per_movie = skewed_counts(rng, num_distinct, num_movies, POPULARITY_EXPONENT)
    movie_of_distinct = np.repeat(np.arange(num_movies), per_movie)
    review_lengths = lognormal_lengths(rng, num_distinct, REVIEW_MEAN_CHARS, 0.5, minimum=12)
    contents = unique_texts(rng, review_lengths)
    source = rng.choice(num_distinct, size=num_copies, replace=False)
    group = np.concatenate([np.arange(num_distinct), source])  # distinct review of each row
    copies = np.bincount(source, minlength=num_distinct)
    fresh = exact_flags(rng, 1 + copies, round(num_rows * FRESH_SHARE))

    order = rng.permutation(num_rows)
    group = group[order]
    movie_of_row = movie_of_distinct[group]
    contents_arr = np.array(contents, dtype=object)
    reviews = pd.DataFrame(
        {
            "rotten_tomatoes_link": np.array(links, dtype=object)[movie_of_row],
            "review_content": contents_arr[group],
            "review_type": np.where(fresh[group], "Fresh", "Rotten").astype(object),
            "review_id": np.arange(num_rows, dtype=np.int64),
        }
    )

    rows_per_movie = np.bincount(movie_of_row, minlength=num_movies)
    info_lengths = lognormal_lengths(rng, num_movies, MOVIE_INFO_MEAN_CHARS, 0.35, minimum=80)
    info_lengths = match_weighted_mean(
        info_lengths, rows_per_movie, MOVIE_INFO_MEAN_CHARS, minimum=80
    )
    movie_table = pd.DataFrame(
        {
            "rotten_tomatoes_link": links,
            "movie_title": titles,
            "movie_info": unique_texts(rng, info_lengths),
        }
    )
    return {"reviews": reviews, "movies": movie_table}


def movie_reviews(num_rows: int = FULL_NUM_ROWS, seed: int = 0) -> pd.DataFrame:
    """`movies(num_rows, seed)`'s reviews joined with their movie: one row per review, in the
    reviews' order, with the columns of both tables (movie_title, movie_info, review_content,
    review_type, ...). The one synthetic movie-review table the benchmarks and the simulator's
    workloads render prompts from."""
    tables = movies(num_rows, seed)
    return tables["reviews"].merge(
        tables["movies"], on="rotten_tomatoes_link", how="left", sort=False, validate="m:1"
    )


def _link(rng: np.random.Generator, title: str) -> str:
    """'m/<slug>' or, for about a fifth of the movies, 'm/<7 digits>-<slug>'."""
    slug = "_".join(title.lower().split())
    if rng.random() < 0.2:
        return f"m/{int(rng.integers(1_000_000, 10_000_000))}-{slug}"
    return f"m/{slug}"
