"""Speed of the one table loader (`llm_assets.data.tables.load_table`) on 100,000 rows x 8
text columns, as UTF-8 CSV, as cp1252 TSV (decoded and re-encoded on the way) and as JSON
lines, with `pandas.read_csv(dtype=str, keep_default_na=False)` on the same CSV for reference.

    python -m benchmarks.loader [--rows N] [--repeats K] [--json PATH]

Each figure is the median of K timed loads (after one warm-up). Writes JSON and markdown
(default `benchmarks/results/loader.{json,md}`).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd

from llm_assets.data.tables import load_table

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "loader.json"
WORDS = ["good", "bad", "caf\u00e9", "\u201cgreat\u201d", 'say "hi", ok', "0042", "TRUE", "NaN"]


def write_files(folder: Path, rows: int) -> dict[str, Path]:
    """The same seeded table (some nulls, quotes, delimiters, numeric-looking text) in three
    files."""
    rng = random.Random(0)
    columns = [f"c{i}" for i in range(8)]
    cells = [
        [
            None if rng.random() < 0.05 else f"{rng.choice(WORDS)} {rng.randint(0, 999)}"
            for _ in columns
        ]
        for _ in range(rows)
    ]
    frame = pd.DataFrame(cells, columns=columns)
    paths = {
        "csv_utf8": folder / "t.csv",
        "tsv_cp1252": folder / "t.tsv",
        "jsonl": folder / "t.jsonl",
    }
    frame.to_csv(paths["csv_utf8"], index=False)
    frame.to_csv(paths["tsv_cp1252"], index=False, sep="\t", encoding="cp1252")
    frame.to_json(paths["jsonl"], orient="records", lines=True, force_ascii=False)
    return paths


def median_seconds(load, repeats: int) -> float:
    load()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        load()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        paths = write_files(Path(folder), args.rows)
        results = {
            name: {
                "bytes": path.stat().st_size,
                "median_s": median_seconds(lambda p=path: load_table(p), args.repeats),
            }
            for name, path in paths.items()
        }
        results["pandas_read_csv_dtype_str"] = {
            "bytes": paths["csv_utf8"].stat().st_size,
            "median_s": median_seconds(
                lambda: pd.read_csv(paths["csv_utf8"], dtype=str, keep_default_na=False),
                args.repeats,
            ),
        }
    report = {
        "rows": args.rows,
        "columns": 8,
        "repeats": args.repeats,
        "machine": platform.platform(),
        "results": results,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        f"# Loader speed: {args.rows:,} rows x 8 text columns (median of {args.repeats})",
        "",
        "| file | MB | median s |",
        "|---|---|---|",
        *(
            f"| {name} | {r['bytes'] / 1e6:.1f} | {r['median_s']:.3f} |"
            for name, r in results.items()
        ),
        "",
        "`python -m benchmarks.loader`; pandas is the reference, not a path of the project.",
    ]
    args.json.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
