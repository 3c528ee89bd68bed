"""Which shard each row of a stage is planned in, so that planning scales out (DESIGN.md
section 9): the table is cut on the field GGR puts first, by a stable hash of its value.

>>> import pandas as pd
>>> table = pd.DataFrame({"genre": ["drama", "anime", "drama", "noir"], "id": ["1", "2", "3", "4"]})
>>> shard_key(table, ["genre", "id"])
'genre'
>>> shards = shard_rows(table, "genre", 2)
>>> bool(shards[0] == shards[2])  # both drama rows: one shard, whatever the shard count
True
>>> check_num_shards(0)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: num_shards must be a whole number from 1 to 4096, got 0

Invariants (`tests/llm_assets/optimizer/test_shards.py` holds them by property):
- every row lands in exactly one shard, a number in [0, num_shards);
- rows whose key value (rendered as the prompts render it, `table.render_cell`) is equal, or
  with `prefix_chars` whose first `prefix_chars` characters are equal, land in the same shard:
  a group of rows sharing the leading field's value never spans two shards. Exact duplicates
  (equal in every field, key included) are therefore in one shard, so per-shard dedup is the
  whole table's dedup;
- the shard of a value depends on the value and `num_shards` only (`stable_hash`: BLAKE2b of
  its UTF-8 bytes, not Python's per-process salted `hash`): the same in every process, worker
  and run, whatever the other rows are, so each machine can shard its own slice of a table.

Which field is the key changes only how many prefix hits the shards' plans can share, never
which rows are planned or how they are answered.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import numpy as np

from llm_assets.optimizer.fields import leftover_scores
from llm_assets.optimizer.table import TableLike, encode, num_rows

MAX_SHARDS = 4096
"""More shards than this is refused (each is a task; a table that wants more wants machines
with more memory, not more tasks)."""
KEY_SAMPLE_ROWS = 200_000
"""`shard_key` scores the fields on a seeded sample of at most this many rows."""

__all__ = [
    "KEY_SAMPLE_ROWS",
    "MAX_SHARDS",
    "assign_shards",
    "check_num_shards",
    "shard_key",
    "shard_positions",
    "shard_rows",
    "stable_hash",
]


def check_num_shards(num_shards: object) -> int:
    """`num_shards` as an int in [1, MAX_SHARDS]; a ValueError naming it otherwise."""
    if (
        isinstance(num_shards, bool)
        or not isinstance(num_shards, int | np.integer)
        or not 1 <= num_shards <= MAX_SHARDS
    ):
        raise ValueError(
            f"num_shards must be a whole number from 1 to {MAX_SHARDS}, got {num_shards!r}"
        )
    return int(num_shards)


def stable_hash(values: Iterable[str]) -> np.ndarray:
    """uint64 per string: the first 8 bytes (little-endian) of BLAKE2b over its UTF-8 bytes
    (lone surrogates kept, `surrogatepass`). The same in every process and Python version.

    >>> int(stable_hash(["drama"])[0])
    13222706444115469365
    """
    digest = hashlib.blake2b
    return np.fromiter(
        (
            int.from_bytes(
                digest(v.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little"
            )
            for v in values
        ),
        dtype=np.uint64,
    )


def assign_shards(
    values: Sequence[str], num_shards: int, prefix_chars: int | None = None
) -> np.ndarray:
    """Shard (int32 in [0, num_shards)) of each string of `values`: `stable_hash` of the
    value, or of its first `prefix_chars` characters, modulo `num_shards`."""
    num_shards = check_num_shards(num_shards)
    if prefix_chars is not None and prefix_chars < 1:
        raise ValueError(f"prefix_chars must be >= 1 or None, got {prefix_chars}")
    keys = values if prefix_chars is None else (v[:prefix_chars] for v in values)
    hashes = stable_hash(keys)
    return (hashes % np.uint64(num_shards)).astype(np.int32)


def shard_key(
    table: TableLike, fields: Sequence[str], sample_rows: int = KEY_SAMPLE_ROWS, seed: int = 0
) -> str:
    """The field GGR puts first: the head of its leftover order (`fields.leftover_scores`:
    the hits a field earns leading a sorted block on its own), the order GGR sorts the table
    in before cutting it into pieces (`GGRConfig.chunk_rows`), so rows sharing its value are
    the rows GGR plans together. Ties go to the earlier of `fields`, as in GGR. Scored on a
    seeded sample of `sample_rows` rows of a larger table (the whole table otherwise)."""
    if not fields:
        raise ValueError("shard_key needs at least one field")
    n = num_rows(table)
    if n > sample_rows:
        picked = np.sort(np.random.default_rng(seed).choice(n, size=sample_rows, replace=False))
        table = table.take(picked) if hasattr(table, "column_names") else table.iloc[picked]
    scores = leftover_scores(encode(table, list(fields)))
    return list(fields)[int(np.argmax(scores))]


def shard_rows(
    table: TableLike, key: str, num_shards: int, prefix_chars: int | None = None
) -> np.ndarray:
    """Shard of every row of `table` (`assign_shards` of its rendered `key` cell); each
    distinct value is hashed once."""
    coded = encode(table, [key])
    per_value = assign_shards(coded.uniques[0], num_shards, prefix_chars)
    return per_value[coded.codes[:, 0]] if len(per_value) else np.zeros(0, dtype=np.int32)


def shard_positions(shards: np.ndarray, num_shards: int) -> list[np.ndarray]:
    """Per shard, the positions of its rows, ascending (a partition of range(len(shards)))."""
    order = np.argsort(shards, kind="stable")
    bounds = np.searchsorted(shards[order], np.arange(num_shards + 1))
    return [order[bounds[s] : bounds[s + 1]] for s in range(num_shards)]
