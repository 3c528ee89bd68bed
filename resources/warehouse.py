"""Where asset tables live: one DuckDB file under $LLM_ASSETS_HOME (dagster-duckdb)."""

from pathlib import Path

import dagster as dg
from dagster_duckdb_pandas import DuckDBPandasIOManager

from resources.tracking import llm_assets_home


class WarehouseIOManager(DuckDBPandasIOManager):
    """DataFrames of every asset as DuckDB tables `<key prefix>.<name>`; creates the
    database's folder on first use."""

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        Path(self.database).parent.mkdir(parents=True, exist_ok=True)
        super().setup_for_execution(context)


def warehouse_io_manager(database: str | None = None) -> WarehouseIOManager:
    return WarehouseIOManager(database=database or str(llm_assets_home() / "warehouse.duckdb"))
