"""The benchmark datasets as source assets: `movies/reviews`, `movies/movies`,
`products/reviews`, `products/metadata`, `squad/squad`. Seeded synthetic tables with the
papers' statistics by default, or real public files (`paths`). The benchmark queries read
them as upstream assets, read-only, like any user's query reads any asset."""

from pathlib import Path

import dagster as dg
import pandas as pd
from pydantic import Field

from llm_assets.data import (
    generate,
    load_amazon,
    load_movies_joined,
    load_rotten_tomatoes,
    load_squad_csv,
    load_squad_json,
)

DATASET_TABLES: dict[str, tuple[str, ...]] = {
    "movies": ("reviews", "movies"),
    "products": ("reviews", "metadata"),
    "squad": ("squad",),
}


class DatasetConfig(dg.Config):
    """Where a dataset comes from: the seeded generator, or real files."""

    size: int | None = Field(default=None, description="Rows to generate (None: the paper's size).")
    seed: int = Field(default=0, description="Generator seed.")
    paths: list[str] = Field(
        default_factory=list,
        description="Real files instead of generated data: movies: one joined CSV (like "
        "movies_small.csv) or [movies.csv, critic_reviews.csv]; products: [reviews.jsonl, "
        "metadata.jsonl]; squad: a SQuAD JSON or a flattened CSV.",
    )


def load_dataset(dataset: str, config: DatasetConfig) -> dict[str, pd.DataFrame]:
    """Generated tables, or the loader matching the given paths (ValueError otherwise)."""
    paths = config.paths
    if not paths:
        return generate(dataset, config.size, config.seed)
    if dataset == "movies" and len(paths) == 1:
        return load_movies_joined(paths[0])
    if dataset == "movies" and len(paths) == 2:
        return load_rotten_tomatoes(*paths)
    if dataset == "products" and len(paths) == 2:
        return load_amazon(*paths)
    if dataset == "squad" and len(paths) == 1:
        loader = load_squad_json if paths[0].endswith(".json") else load_squad_csv
        return loader(paths[0])
    raise ValueError(
        f"cannot load {dataset} from {paths}: movies takes 1 joined CSV or 2 Kaggle CSVs, "
        "products 2 JSON-lines files, squad 1 JSON or CSV"
    )


def dataset_assets(dataset: str) -> dg.AssetsDefinition:
    tables = DATASET_TABLES[dataset]

    @dg.multi_asset(
        name=f"{dataset}_source",
        outs={
            t: dg.AssetOut(key=[dataset, t], description=f"The {dataset} {t} table.")
            for t in tables
        },
        group_name="datasets",
        can_subset=False,
    )
    def _source(context: dg.AssetExecutionContext, config: DatasetConfig):
        frames = load_dataset(dataset, config)
        label = Path(config.paths[0]).name if config.paths else f"generated {dataset}"
        for t in tables:
            frame = frames[t].reset_index(drop=True)
            if frame.empty:
                origin = f"from {config.paths}" if config.paths else f"size={config.size}"
                raise ValueError(f"{dataset} table {t!r} has no rows ({origin}): nothing to query")
            meta = {"rows": len(frame), "data": label, "columns": ", ".join(frame.columns)}
            yield dg.Output(frame, output_name=t, metadata=meta)

    return _source


DATASET_ASSETS = [dataset_assets(d) for d in DATASET_TABLES]
