"""Where asset tables live: one DuckDB file under $LLM_ASSETS_HOME.

Each materialization is stored as its own version, `<prefix>."<name>__r_<run id>"` (a
partition adds `__p_<hash>` to the name; a run over several partitions, a backfill packed by
`BackfillPolicy.multi_run`, stores its one table under the hash of its keys), and the view
`<prefix>."<name>"` points at the latest one (what a user queries). A partitioned asset's
view is every live partition's latest rows at once, with the partition key(s) in
`_partition` (`resources.warehouse.slots`: a partition whose landed file is gone is retired);
each slot's own latest is the view `<prefix>."<name>__p_<hash>"`.

A step reads the version its upstream step wrote in the run Dagster names as the source (this
run, or the parent run of a re-execution); only an upstream asset that is not part of the run
is read as its latest. So runs of one lineage at once never read each other's rows, and a
version that is gone is an error, never a fallback. The last `keep_versions` versions per
table are kept, plus every version whose run is not seen finished by the instance that
prunes: a run of another Dagster instance sharing the home (another `DAGSTER_HOME`, an
ephemeral instance) cannot be seen, so its versions are kept until `unknown_run_keep_s` old
(`resources.warehouse.liveness`). An output replaces nothing in
place, so a table whose columns change between runs (another source file) or an empty result
are stored as returned.

DuckDB allows one writing process per file, and one attachment of it per process: a
connection that finds the file locked (another process) or attached (another thread) retries
for `lock_wait_s`; each holds it for one read or one write.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import dagster as dg
import duckdb
import pandas as pd
import pyarrow as pa
from dagster._core.execution.context.output import RUN_ID_PLACEHOLDER
from sqlglot import exp

from resources.duckdb_names import case_twin, duckdb_fold
from resources.home import llm_assets_home
from resources.storage import storage_guard
from resources.warehouse.liveness import Liveness
from resources.warehouse.slots import reconcile, record_slot

VERSIONS = "_llm_assets_versions"
CATALOG = "llm-assets-warehouse"
"""The name the file is attached under: no query name (an identifier) can collide with it; an
asset key whose prefix is this name (any case) would be ambiguous in DuckDB, and is refused."""
RESERVED_SCHEMAS = frozenset({"information_schema", "pg_catalog", "memory", "system", "temp"})
"""Schema names DuckDB keeps for itself, compared as DuckDB does (`duckdb_fold`): its system
schemas cannot hold a table, and a view in a schema named like one of its built-in catalogs
fails to bind even fully qualified. An asset whose schema is one of them is refused."""


def _table(schema: str, name: str, catalog: str | None = None) -> exp.Table:
    """`"catalog"."schema"."name"`: fully qualified, so a query named like the database file
    (schema `warehouse` in `warehouse.duckdb`) is not ambiguous."""
    return exp.table_(
        exp.to_identifier(name, quoted=True),
        db=exp.to_identifier(schema, True),
        catalog=exp.to_identifier(catalog, True) if catalog else None,
    )


def _quoted(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect="duckdb")


class WarehouseIOManager(dg.ConfigurableIOManager):
    """DataFrames (and Arrow tables) of every asset as versioned DuckDB tables."""

    database: str
    keep_versions: int = 3
    lock_wait_s: float = 120.0
    unknown_run_keep_s: float = 86400.0
    """How long a version stays when its run belongs to another Dagster instance (its state
    is invisible here): a run of another instance that lasts longer may lose its tables."""

    # ---- naming ------------------------------------------------------------------------

    @staticmethod
    def _slot(key: dg.AssetKey, partitions: list[str]) -> tuple[str, str]:
        """(schema, table) of an asset for the partitions a run covers (none: unpartitioned;
        one: that partition's slot; several: one slot for the run's range)."""
        schema = "_".join(key.path[:-1]) or "public"
        if duckdb_fold(schema) in RESERVED_SCHEMAS:
            raise ValueError(
                f"asset {key.to_user_string()}: its warehouse schema {schema!r} is a name DuckDB "
                f"reserves ({', '.join(sorted(RESERVED_SCHEMAS))}); rename the key's prefix"
            )
        if duckdb_fold(schema) == duckdb_fold(CATALOG):
            raise ValueError(
                f"asset {key.to_user_string()}: its warehouse schema {schema!r} is the name the "
                "warehouse file is attached under, which DuckDB cannot tell from it; rename the "
                "key's prefix"
            )
        name = key.path[-1]
        if partitions:
            name += "__p_" + hashlib.sha1("\n".join(partitions).encode()).hexdigest()[:12]
        return schema, name

    @staticmethod
    def _partitions(context: dg.OutputContext | dg.InputContext) -> list[str]:
        return list(context.asset_partition_keys) if context.has_asset_partitions else []

    @staticmethod
    def _version(name: str, run_id: str) -> str:
        return f"{name}__r_{run_id.replace('-', '')}"

    def _t(self, schema: str, name: str) -> exp.Table:
        return _table(schema, name, catalog=CATALOG)

    def _connect(self) -> duckdb.DuckDBPyConnection:
        with storage_guard(self.database, "the warehouse"):  # a full disk is one line
            return self._attach()

    def _attach(self) -> duckdb.DuckDBPyConnection:
        Path(self.database).parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.lock_wait_s
        attach = f"ATTACH {exp.Literal.string(self.database).sql()} AS {_quoted(CATALOG)}"
        while True:
            con = duckdb.connect()
            try:
                con.execute(attach)
                con.execute(f"USE {_quoted(CATALOG)}")
                return con
            except (duckdb.IOException, duckdb.ResourceInUseException) as exc:
                # another process holds the file lock, or another thread of this one has it
                # attached: both are short-lived, wait for them
                con.close()
                busy = isinstance(exc, duckdb.ResourceInUseException) or "lock" in str(exc).lower()
                if not busy or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    # ---- IO ------------------------------------------------------------------------------

    def handle_output(self, context: dg.OutputContext, obj) -> None:
        if obj is None:
            return
        # Two runs replacing one view at once conflict in DuckDB's catalog: retry.
        for attempt in range(50):
            try:
                with storage_guard(self.database, "the warehouse"):
                    return self._store(context, obj)
            except duckdb.TransactionException:
                if attempt == 49:
                    raise
                time.sleep(0.1 * (1 + attempt % 5))

    def _store(self, context: dg.OutputContext, obj) -> None:
        schema, name = self._slot(context.asset_key, self._partitions(context))
        version = self._version(name, context.run_id)
        frame = obj if isinstance(obj, pa.Table | pd.DataFrame) else pd.DataFrame(obj)
        twins = case_twin(frame.column_names if isinstance(frame, pa.Table) else frame.columns)
        if twins is not None:  # DuckDB would silently store the second as `<name>_1`
            raise ValueError(
                f"{context.asset_key.to_user_string()}: columns {twins[0]!r} and {twins[1]!r} "
                "differ only in case, which DuckDB cannot keep apart; rename one"
            )
        con = self._connect()
        try:
            con.execute(
                exp.Create(
                    this=exp.Table(
                        this=exp.to_identifier(schema, True),
                        db=exp.to_identifier(CATALOG, True),
                    ),
                    kind="SCHEMA",
                    exists=True,
                ).sql(dialect="duckdb")
            )
            con.register("_llm_assets_obj", frame)
            select = exp.select("*").from_("_llm_assets_obj")
            con.execute(
                exp.Create(
                    this=self._t(schema, version), kind="TABLE", replace=True, expression=select
                ).sql(dialect="duckdb")
            )
            con.unregister("_llm_assets_obj")
            latest = exp.select("*").from_(self._t(schema, version))
            con.execute(
                exp.Create(
                    this=self._t(schema, name), kind="VIEW", replace=True, expression=latest
                ).sql(dialect="duckdb")
            )
            partitions = self._partitions(context)
            self._prune(con, schema, name, version, context.run_id, self._liveness(context))
            if partitions:
                asset = context.asset_key.path[-1]
                record_slot(con, schema, asset, name, list(partitions), self._t)
        finally:
            con.close()
        context.add_output_metadata(
            {"dagster/row_count": len(frame), "table": f"{schema}.{version}"}
        )

    def _liveness(self, context: dg.OutputContext) -> Liveness:
        return Liveness(_instance(context), self.unknown_run_keep_s)

    def _prune(self, con, schema, name, version, run_id, liveness: Liveness) -> None:
        """Record `version` (with the writing instance) and drop the versions of `name` beyond
        the newest `keep_versions` that `liveness` says may go (finished runs only)."""
        con.execute(
            f"CREATE TABLE IF NOT EXISTS {VERSIONS} "
            "(schema_name VARCHAR, slot VARCHAR, version VARCHAR, created DOUBLE)"
        )
        con.execute(f"ALTER TABLE {VERSIONS} ADD COLUMN IF NOT EXISTS run_id VARCHAR")
        con.execute(f"ALTER TABLE {VERSIONS} ADD COLUMN IF NOT EXISTS instance_id VARCHAR")
        con.execute(
            f"INSERT INTO {VERSIONS} (schema_name, slot, version, created, run_id, instance_id) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [schema, name, version, time.time(), run_id, liveness.identity],
        )
        old = con.execute(
            f"SELECT version, run_id, instance_id, created FROM {VERSIONS} "
            "WHERE schema_name = ? AND slot = ? ORDER BY created DESC OFFSET ?",
            [schema, name, self.keep_versions],
        ).fetchall()
        for stale, stale_run, writer, created in old:
            if not liveness.may_drop(stale_run, writer, created):
                continue  # a live run may still read it; a later write prunes it
            drop = exp.Drop(tables=[self._t(schema, stale)], kind="TABLE", exists=True)
            con.execute(drop.sql(dialect="duckdb"))
            con.execute(
                f"DELETE FROM {VERSIONS} WHERE schema_name = ? AND version = ?", [schema, stale]
            )

    def reconcile_partitions(self, schema: str, live: list[str]) -> dict[str, list[str]]:
        """Retire the partitions of `schema`'s assets whose landed file is not in `live` (they
        stop contributing rows to the union views); `warehouse.slots.reconcile`."""
        for attempt in range(50):
            con = self._connect()
            try:
                return reconcile(con, schema, live, self._t)
            except duckdb.TransactionException:
                if attempt == 49:
                    raise
                time.sleep(0.1 * (1 + attempt % 5))
            finally:
                con.close()
        raise AssertionError("unreachable")

    def load_input(self, context: dg.InputContext) -> pd.DataFrame:
        key = context.asset_key
        partitions = self._partitions(context)
        schema, name = self._slot(key, partitions)
        source_run = _source_run(context)
        table = self._version(name, source_run) if source_run else name
        con = self._connect()
        try:
            sql = exp.select("*").from_(self._t(schema, table)).sql(dialect="duckdb")
            return con.execute(sql).df()
        except duckdb.CatalogException as exc:
            where = f" for partition(s) {partitions}" if partitions else ""
            if source_run:
                raise dg.Failure(
                    f"{key.to_user_string()}{where}: the table run {source_run} wrote "
                    f"({schema}.{table}) is gone from the warehouse, so this step stops rather "
                    "than read another run's rows; rerun the whole selection"
                ) from None
            raise dg.Failure(
                f"{key.to_user_string()} has no stored table yet{where}: materialize it first "
                "(select it with its downstream assets)"
            ) from exc
        finally:
            con.close()


def _source_run(context: dg.InputContext) -> str | None:
    """The run whose output this input is, as Dagster planned it (this run, or the parent of
    a re-execution); None when the upstream asset is not part of the run (read its latest)."""
    upstream = context.upstream_output
    if upstream is None:
        return None
    try:
        run_id = upstream.run_id
    except dg.DagsterInvariantViolationError:
        return None
    # Dagster builds the context of an asset outside the run (and of `build_output_context`)
    # without a run: its run id is then this placeholder
    return None if run_id == RUN_ID_PLACEHOLDER else run_id


def _instance(context: dg.OutputContext):
    """The Dagster instance of the run writing this output; None outside a run."""
    try:
        return context.step_context.instance
    except (dg.DagsterInvariantViolationError, AttributeError):
        return None


def warehouse_io_manager(database: str | None = None) -> WarehouseIOManager:
    return WarehouseIOManager(database=database or str(llm_assets_home() / "warehouse.duckdb"))
