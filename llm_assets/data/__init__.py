"""Datasets for the benchmark queries: seeded synthetic generators with the papers' column
statistics (`movies`, `products`, `squad`) and loaders for the real public files.

Every generator and loader returns `dict[str, pandas.DataFrame]` keyed by table name:
movies -> reviews, movies; products -> reviews, metadata; squad -> squad.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from llm_assets.data.loaders import (
    load_amazon,
    load_movies_joined,
    load_rotten_tomatoes,
    load_squad_csv,
    load_squad_json,
    load_table,
)
from llm_assets.data.movies import movie_reviews, movies
from llm_assets.data.products import products
from llm_assets.data.squad import squad

DATASETS: dict[str, Callable[..., dict[str, pd.DataFrame]]] = {
    "movies": movies,
    "products": products,
    "squad": squad,
}
"""Generator per dataset name; each is called as `generator(size, seed=seed)`."""


def generate(name: str, size: int | None = None, seed: int = 0) -> dict[str, pd.DataFrame]:
    """The synthetic dataset `name` with `size` rows (movies, products: reviews; squad:
    answerable questions), or the paper's size when `size` is None. Deterministic in
    (name, size, seed)."""
    try:
        generator = DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; valid names: {sorted(DATASETS)}") from None
    if size is None:
        return generator(seed=seed)
    return generator(size, seed=seed)


__all__ = [
    "DATASETS",
    "generate",
    "load_amazon",
    "load_movies_joined",
    "load_rotten_tomatoes",
    "load_squad_csv",
    "load_squad_json",
    "load_table",
    "movie_reviews",
    "movies",
    "products",
    "squad",
]
