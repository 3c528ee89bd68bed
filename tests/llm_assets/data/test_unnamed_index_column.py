"""A CSV or TSV whose first header name is empty (the row index pandas' `to_csv` and R's
`write.csv` write) is read as it is: that column is named `column0` (as DuckDB's `read_csv`
names it), its values exact as written, and a query can use it (issue 35, item 3: such a file
could not be read without editing it). Any other empty name stays refused."""

import pandas as pd
import pytest

from llm_assets.data.tables import InputError, load_table
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.run import run_query
from llm_assets.sql.compiler import compile_sql
from resources.sim.engine import SimulatedEngine

FRAME = pd.DataFrame({"review": ["good", "a,b", None], "rating": ["007", "3/5", "TRUE"]})


def test_pandas_to_csv_with_its_index_is_read_as_written(tmp_path):
    path = tmp_path / "reviews.csv"
    FRAME.set_axis(["10", "011", "x"]).to_csv(path)  # header ",review,rating"
    assert path.read_text().startswith(",review,rating\n")
    table = load_table(path).to_pandas()
    assert table.columns.tolist() == ["column0", "review", "rating"]
    assert table["column0"].tolist() == ["10", "011", "x"]
    assert table["review"].tolist() == ["good", "a,b", None]
    assert table["rating"].tolist() == ["007", "3/5", "TRUE"]


def test_r_write_csv_quoted_empty_name_in_a_tsv(tmp_path):
    path = tmp_path / "reviews.tsv"
    path.write_text('""\t"review"\n"1"\t"fine"\n"2"\t"bad"\n')
    table = load_table(path).to_pandas()
    assert table.columns.tolist() == ["column0", "review"]
    assert table["column0"].tolist() == ["1", "2"]


def test_a_query_selects_the_unnamed_column(tmp_path):
    path = tmp_path / "reviews.csv"
    FRAME.to_csv(path)
    sql = "SELECT r.column0, LLM('Summarize {review}', r.review) AS s FROM reviews r"
    run = run_query(
        compile_sql(sql, name="q"), {"reviews": load_table(path)}, QueryOptions(), SimulatedEngine()
    )
    status = run.result.set_index("column0")["status"].to_dict()
    assert status == {"0": "answered", "1": "answered", "2": "skipped"}  # row 2: null review


@pytest.mark.parametrize("header", ["a,,b", ", ,b", " ,a"], ids=["middle", "blank", "space"])
def test_another_empty_name_is_still_refused(tmp_path, header):
    path = tmp_path / "t.csv"
    path.write_text(f"{header}\n1,2,3\n" if header.count(",") == 2 else f"{header}\n1,2\n")
    with pytest.raises(InputError, match="has an empty name"):
        load_table(path)
