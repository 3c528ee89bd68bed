"""The DuckDB warehouse stores exactly what an asset returned, even when columns change."""

import dagster as dg
import pandas as pd

from resources.warehouse import warehouse_io_manager


def test_tables_are_replaced_when_columns_or_types_change_and_empty_ones_are_kept(tmp_path):
    frames = iter(
        [
            pd.DataFrame({"a": [1, 2], "error": [None, None]}),
            pd.DataFrame({"a": [3], "error": ["HTTP 503"], "extra": ["x"]}),
            pd.DataFrame({"a": pd.Series([], dtype="int64")}),
        ]
    )

    @dg.asset(key=["g", "t"])
    def t() -> pd.DataFrame:
        return next(frames)

    @dg.asset(key=["g", "u"], ins={"t": dg.AssetIn(["g", "t"])})
    def u(t: pd.DataFrame) -> pd.DataFrame:
        return t.assign(n=len(t))

    io = warehouse_io_manager(str(tmp_path / "db" / "w.duckdb"))
    seen = []
    for _ in range(3):
        result = dg.materialize([t, u], resources={"io_manager": io})
        assert result.success
        seen.append(result.output_for_node("g__u"))
    assert seen[1]["error"].tolist() == ["HTTP 503"] and "extra" in seen[1]
    assert seen[2].empty and list(seen[2].columns) == ["a", "n"]
