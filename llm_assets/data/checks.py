"""What every reader of the table loader (`llm_assets.data.tables`) shares: `InputError`, the
one-line error of bad input, and the rule for column names (`check_names`): non-blank and
unique, also as DuckDB compares names (ASCII case ignored)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from llm_assets.sql.syntax import duckdb_fold


class InputError(ValueError):
    """A problem with the user's input, stated in one line."""


def check_names(path: Path, names: Sequence[str], place: str) -> None:
    """Every column has a non-blank, unique name, also as DuckDB compares names (ASCII case
    ignored: `review` and `Review` are one column to any SQL); `place` ('line 1, column {}')
    locates one."""
    if not names:
        raise InputError(f"{path}: no columns (expected a header row or records)")
    seen: dict[str, int] = {}
    folded: dict[str, tuple[str, int]] = {}
    for number, name in enumerate(names, start=1):
        if not str(name).strip():
            raise InputError(
                f"{path}: {place.format(number)} has an empty name; every column needs a name"
            )
        if name in seen:
            raise InputError(
                f"{path}: {place.format(number)}: column name {name!r} appears twice (also "
                f"column {seen[name]}); column names must be unique"
            )
        twin, where = folded.setdefault(duckdb_fold(str(name)), (name, number))
        if where != number:
            raise InputError(
                f"{path}: {place.format(number)}: column name {name!r} differs from column "
                f"{where} ({twin!r}) only in case, and the SQL engine (DuckDB) compares column "
                "names case-insensitively, so no query could tell them apart; rename one"
            )
        seen[name] = number
