"""One user-declared LLM query: what the factory and the component build a lineage from."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import dagster as dg
from pydantic import BaseModel, ConfigDict, Field, field_validator

from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.sources import SourceSpec
from llm_assets.query.model import LLMQuery
from llm_assets.query.parts import LLMCall
from llm_assets.sql.compiler import compile_sql
from llm_assets.sql.syntax import duckdb_fold
from resources.warehouse.store import RESERVED_SCHEMAS

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class LandingSpec(BaseModel):
    """A folder whose files each become a partition of the query: the sensor runs each new
    file alone once it has settled (`settle_seconds`), at most `max_runs_per_tick` per look; a
    backfill of many runs `max_partitions_per_run` files at a time, each run planning and
    reordering its files as one table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    folder: str = Field(description="Watched folder; each new file is one partition.")
    table: str | None = Field(
        None, description="The source table a landed file replaces (default: the only one)."
    )
    suffixes: list[str] = Field(
        [".csv", ".tsv", ".parquet", ".jsonl", ".ndjson", ".json", ".csv.gz", ".tsv.gz"],
        description="Files with other suffixes are reported and ignored.",
    )
    minimum_interval_seconds: int = Field(30, description="Seconds between sensor looks.")
    running: bool = Field(
        False, description="Start the sensor running (Dagster starts sensors stopped)."
    )
    max_partitions_per_run: int = Field(
        8,
        description="Most landed files one run reads, plans and reorders as one table (at "
        "least 1): a backfill of K files becomes ceil(K / this) runs "
        "(`BackfillPolicy.multi_run`).",
    )

    settle_seconds: float = Field(
        5.0,
        description="A file is launched once its size and modification time have stood still "
        "this long: seen unchanged by two sensor looks this far apart, or last modified this "
        "long ago. 0 launches a file at first sight (for producers that write under a temporary "
        "name and rename).",
    )
    max_runs_per_tick: int = Field(
        20,
        description="Most runs one sensor look asks for (at least 1); further ready files are "
        "asked for by the next looks, oldest first.",
    )

    @field_validator("max_partitions_per_run", "max_runs_per_tick")
    @classmethod
    def _at_least_one(cls, value: int, info) -> int:
        # a validator, not Field(ge=1): Dagster's component schema rejects annotated bounds
        if value < 1:
            raise ValueError(f"{info.field_name} must be at least 1, got {value}")
        return value

    @field_validator("settle_seconds")
    @classmethod
    def _not_negative(cls, value: float) -> float:
        if value < 0:
            raise ValueError(f"settle_seconds must be 0 or more, got {value}")
        return value


@dataclass(frozen=True)
class QueryDefinition:
    """`name` is the asset group and key prefix of the lineage (`name/filtered`, ...), and
    the warehouse schema of its tables: an identifier, not one DuckDB reserves
    (`resources.warehouse.store.RESERVED_SCHEMAS`, any case)."""

    name: str
    sql: str
    sources: Mapping[str, SourceSpec]
    options: QueryOptions = field(default_factory=QueryOptions)
    engine_key: str = "llm_engine"
    landing: LandingSpec | None = None
    description: str | None = None
    label_column: str | None = None
    """A column of a source holding each row's expected answer (`alias.column` where several
    sources have it): the last LLM stage reports accuracy against it. Never sent to the model
    unless the query's templates read it (`llm_assets.pipeline.quality`)."""

    def __post_init__(self) -> None:
        if NAME.fullmatch(self.name) is None:
            raise ValueError(
                f"query name {self.name!r} must be a Python-like identifier (letters, digits, _)"
            )
        if duckdb_fold(self.name) in RESERVED_SCHEMAS:
            raise ValueError(
                f"query name {self.name!r} is reserved: the warehouse stores a query's tables "
                f"in a DuckDB schema of its name, and DuckDB keeps "
                f"{', '.join(sorted(RESERVED_SCHEMAS))} for itself; choose another name"
            )
        missing = sorted({s.table for s in self.query.sources} - set(self.sources))
        if missing:
            raise ValueError(
                f"query {self.name!r}: no source for table(s) {missing}; "
                f"declared sources: {sorted(self.sources)}"
            )
        if self.landing is not None and self.landed_table not in self.sources:
            raise ValueError(
                f"query {self.name!r}: landing.table {self.landed_table!r} is not a source"
            )

    @classmethod
    def build(
        cls,
        name: str,
        sql: str,
        sources: Mapping[str, Any],
        *,
        engine_key: str = "llm_engine",
        landing: LandingSpec | Mapping | str | None = None,
        description: str | None = None,
        label_column: str | None = None,
        **options: Any,
    ) -> QueryDefinition:
        """From the loose forms users write (paths as strings, dicts, option keywords)."""
        if isinstance(landing, str):
            landing = LandingSpec(folder=landing)
        elif isinstance(landing, Mapping):
            landing = LandingSpec.model_validate(dict(landing))
        return cls(
            name=name,
            sql=sql,
            sources={t: SourceSpec.parse(s) for t, s in sources.items()},
            options=QueryOptions.model_validate(options),
            engine_key=engine_key,
            landing=landing,
            description=description,
            label_column=label_column,
        )

    @cached_property
    def query(self) -> LLMQuery:
        return compile_sql(self.sql, name=self.name)

    @property
    def landed_table(self) -> str | None:
        if self.landing is None:
            return None
        if self.landing.table:
            return self.landing.table
        tables = sorted(self.sources)
        if len(tables) != 1:
            raise ValueError(
                f"query {self.name!r} reads {tables}: say which one landed files replace "
                "with landing.table"
            )
        return tables[0]

    @cached_property
    def partitions_def(self) -> dg.DynamicPartitionsDefinition | None:
        if self.landing is None:
            return None
        return dg.DynamicPartitionsDefinition(name=f"{self.name}_files")

    @property
    def backfill_policy(self) -> dg.BackfillPolicy | None:
        """Partitioned assets: a backfill of K files is ceil(K / max_partitions_per_run) runs."""
        if self.landing is None:
            return None
        return dg.BackfillPolicy.multi_run(self.landing.max_partitions_per_run)

    def key(self, name: str) -> dg.AssetKey:
        return dg.AssetKey([self.name, name])

    def source_key(self, table: str) -> dg.AssetKey:
        spec = self.sources[table]
        return dg.AssetKey(spec.asset_path) if spec.asset else self.key(f"source_{table}")

    @property
    def reorders_filters(self) -> bool:
        """Whether the lineage decides its LLM stages' order at run time (`llm_filter_order`):
        several LLM filters and `order_llm_filters` on."""
        from llm_assets.planning import filter_calls

        return self.options.order_llm_filters and len(filter_calls(self.query)) >= 2

    def run_order(self, filter_order=None) -> tuple[LLMCall, ...]:
        """The LLM calls in the order the stages run them: as written, or (several LLM
        filters) the order `filter_order` (the `llm_filter_order` asset: a `call` column)
        chose this run, then the other calls as written."""
        if filter_order is None:
            return self.query.llm_calls
        from llm_assets.planning import in_order

        return in_order(self.query, list(filter_order["call"])).llm_calls

    @property
    def engine_kind(self) -> str:
        """The asset kind of `llm_outputs`: the engine the code location binds
        (`LLM_ASSETS_ENGINE`: sim, openai or vllm), read when the definitions load."""
        return os.environ.get("LLM_ASSETS_ENGINE") or "sim"

    @property
    def base(self) -> str:
        """The relation the LLM stages read: `retrieved` for retrieval queries, `pairs` for a
        semantic join (its candidate pairs), else `filtered`."""
        if self.query.retrievals:
            return "retrieved"
        return "pairs" if self.query.semantic_joins else "filtered"

    @staticmethod
    def stage_suffix(k: int) -> str:
        return "" if k == 0 else f"_{k + 1}"

    def data_label(self, partitions: Sequence[str] = ()) -> str:
        """What the data is: each table's file, DuckDB table or asset (and the landed files)."""
        parts = []
        landed = partitions_label(partitions)
        for table, spec in sorted(self.sources.items()):
            label = landed if landed and table == self.landed_table else spec.label
            parts.append(f"{table}={label}")
        return ", ".join(parts)


def partitions_label(keys: Sequence[str]) -> str:
    """The landed files of a run: `a.csv`, `a.csv+b.csv`, or `a.csv..z.csv (12 files)`.

    >>> partitions_label(["a.csv"]), partitions_label(["a.csv", "b.csv", "c.csv"])
    ('a.csv', 'a.csv..c.csv (3 files)')
    """
    if len(keys) <= 2:
        return "+".join(keys)
    return f"{keys[0]}..{keys[-1]} ({len(keys)} files)"
