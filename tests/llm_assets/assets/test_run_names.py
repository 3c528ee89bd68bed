"""MLflow run names: the switches first (original and GGR runs of one stage differ where the
UI cuts the name), then the stage and the data by file name, never an absolute path."""

from llm_assets.assets.definition import QueryDefinition
from llm_assets.assets.tracking import run_name, short_data_label
from llm_assets.pipeline.options import QueryOptions

SQL = (
    "SELECT r.id, LLM('Sentiment of {review}', r.review) AS s "
    "FROM reviews r JOIN movies m ON r.id = m.id"
)


def test_run_names_start_with_the_method_differ_and_hold_no_absolute_path(tmp_path):
    reviews, movies = tmp_path / "data" / "reviews.tsv", tmp_path / "movies.csv"
    qdef = QueryDefinition.build("q1", SQL, {"reviews": str(reviews), "movies": str(movies)})
    data = qdef.data_label()
    assert str(tmp_path) in data  # what the run's `data` param keeps
    names = {
        method: run_name(QueryOptions(method=method), "q1/llm_outputs", data)
        for method in ("original", "ggr")
    }
    two_files = "movies=movies.csv, reviews=reviews.tsv"
    assert names["ggr"] == f"ggr dedup pushdown · q1/llm_outputs · {two_files}"
    assert names["original"].startswith("original dedup pushdown · ")
    assert names["ggr"][:3] != names["original"][:3]
    for name in names.values():
        assert str(tmp_path) not in name and "/data/" not in name
    off = QueryOptions(method="original", dedup=False, pushdown=False)
    assert run_name(off, "q3/llm_outputs_2", "reviews=/srv/x/r.csv").startswith(
        "original no-dedup no-pushdown · q3/llm_outputs_2 · r.csv"
    )


def test_short_data_labels_keep_tables_assets_and_landed_files():
    assert short_data_label("reviews=/home/me/reviews.tsv") == "reviews.tsv"
    assert short_data_label("reviews=asset:movies/reviews") == "asset:movies/reviews"
    assert short_data_label("t=duckdb:/srv/w.duckdb:items") == "duckdb:w.duckdb:items"
    assert short_data_label("reviews=a.csv..z.csv (12 files)") == "a.csv..z.csv (12 files)"
    assert short_data_label("reviews=/in/*.csv") == "*.csv"
    assert short_data_label("ladder label") == "ladder label"  # a `data_label` option as given
