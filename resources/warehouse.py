"""Where asset tables live: one DuckDB file under $LLM_ASSETS_HOME (dagster-duckdb).

dagster-duckdb appends into an existing table and skips empty DataFrames, so a table whose
columns or types change between runs (another source file, error strings where there were
none) fails to write, and an empty result is never stored. Here an unpartitioned output
replaces its table instead: every materialization stores exactly what the asset returned.
"""

from pathlib import Path

import dagster as dg
import pandas as pd
from dagster_duckdb_pandas import DuckDBPandasIOManager, DuckDBPandasTypeHandler

from resources.home import llm_assets_home


class ReplacingPandasTypeHandler(DuckDBPandasTypeHandler):
    def handle_output(self, context: dg.OutputContext, table_slice, obj: pd.DataFrame, connection):
        if context.has_partition_key:
            return super().handle_output(context, table_slice, obj, connection)
        connection.register("_llm_assets_obj", obj)
        try:
            connection.execute(
                f"create or replace table {table_slice.schema}.{table_slice.table} "
                "as select * from _llm_assets_obj"
            )
        finally:
            connection.unregister("_llm_assets_obj")
        context.add_output_metadata({"dagster/row_count": len(obj)})


class WarehouseIOManager(DuckDBPandasIOManager):
    """DataFrames of every asset as DuckDB tables `<key prefix>.<name>`; creates the
    database's folder on first use."""

    @staticmethod
    def type_handlers():
        return [ReplacingPandasTypeHandler()]

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        Path(self.database).parent.mkdir(parents=True, exist_ok=True)
        super().setup_for_execution(context)


def warehouse_io_manager(database: str | None = None) -> WarehouseIOManager:
    return WarehouseIOManager(database=database or str(llm_assets_home() / "warehouse.duckdb"))
