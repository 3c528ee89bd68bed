import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from llm_assets.data import (
    load_amazon,
    load_movies_joined,
    load_rotten_tomatoes,
    load_squad_csv,
    load_squad_json,
    load_table,
)
from llm_assets.data.loaders import placeholder_review_type

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data"
needs_shared = pytest.mark.skipif(
    not SHARED.is_dir(), reason=f"shared data folder {SHARED} is absent (project cloned alone)"
)


def write_jsonl(path, records, gz=False):
    text = "".join(json.dumps(r) + "\n" for r in records)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# --- Rotten Tomatoes ----------------------------------------------------------------------


def test_load_rotten_tomatoes(tmp_path):
    movies_csv = tmp_path / "rotten_tomatoes_movies.csv"
    reviews_csv = tmp_path / "rotten_tomatoes_critic_reviews.csv"
    pd.DataFrame(
        {
            "rotten_tomatoes_link": ["m/a", "m/b", "m/a"],
            "movie_title": ["A", "B", "A again"],
            "movie_info": ["info a", None, "other"],
            "genres": ["x", "y", "z"],
        }
    ).to_csv(movies_csv, index=False)
    pd.DataFrame(
        {
            "rotten_tomatoes_link": ["m/a", "m/b", "m/a"],
            "critic_name": ["p", "q", "r"],
            "review_type": ["Fresh", "Rotten", "Fresh"],
            "review_content": ["good", None, "fine"],
        }
    ).to_csv(reviews_csv, index=False)
    data = load_rotten_tomatoes(movies_csv, reviews_csv)
    movies, reviews = data["movies"], data["reviews"]
    assert list(movies["rotten_tomatoes_link"]) == ["m/a", "m/b"]
    assert list(movies["movie_info"]) == ["info a", None]  # nulls stay null
    assert "genres" in movies.columns and "critic_name" in reviews.columns
    assert list(reviews["review_content"]) == ["good", None, "fine"]
    assert list(reviews["review_id"]) == [0, 1, 2]


def test_missing_column_names_column_file_and_found_columns(tmp_path):
    movies_csv = tmp_path / "m.csv"
    reviews_csv = tmp_path / "r.csv"
    pd.DataFrame({"rotten_tomatoes_link": ["m/a"], "movie_title": ["A"]}).to_csv(
        movies_csv, index=False
    )
    pd.DataFrame({"rotten_tomatoes_link": ["m/a"]}).to_csv(reviews_csv, index=False)
    with pytest.raises(ValueError, match=r"m\.csv: missing required column\(s\) \['movie_info'\]"):
        load_rotten_tomatoes(movies_csv, reviews_csv)
    with pytest.raises(
        ValueError, match=r"found columns: \['rotten_tomatoes_link', 'movie_title'\]"
    ):
        load_rotten_tomatoes(movies_csv, reviews_csv)


def test_load_movies_joined_fills_a_deterministic_placeholder(tmp_path):
    csv = tmp_path / "joined.csv"
    pd.DataFrame(
        {
            "rotten_tomatoes_link": ["m/a", "m/b", "m/a", "m/a"],
            "review_content": ["x", "y", "x", None],
            "movie_title": ["A", "B", "A", "A"],
            "movie_info": ["ia", "ib", "ia", "ia"],
            "id": [10, 11, 12, 13],
        }
    ).to_csv(csv, index=False)
    data = load_movies_joined(csv)
    reviews, movies = data["reviews"], data["movies"]
    assert list(movies.columns) == ["rotten_tomatoes_link", "movie_title", "movie_info"]
    assert len(movies) == 2
    assert list(reviews.columns) == [
        "rotten_tomatoes_link",
        "review_content",
        "review_type",
        "review_id",
        "id",
    ]
    assert reviews.attrs["placeholder_columns"] == ["review_type"]
    assert reviews["review_type"][0] == reviews["review_type"][2]
    assert reviews["review_type"][0] == placeholder_review_type("m/a", "x")
    assert set(reviews["review_type"]) <= {"Fresh", "Rotten"}


def test_placeholder_share_is_near_the_papers():
    labels = [placeholder_review_type("m/x", str(i)) for i in range(20_000)]
    assert abs(labels.count("Fresh") / 20_000 - 10_461 / 15_008) < 0.015


@needs_shared
def test_load_shared_movies_small():
    data = load_movies_joined(SHARED / "movies_small.csv")
    reviews, movies = data["reviews"], data["movies"]
    assert len(reviews) == 1_019 and len(movies) == 51
    assert set(reviews["rotten_tomatoes_link"]) == set(movies["rotten_tomatoes_link"])
    assert reviews["review_content"].map(type).isin([str, type(None)]).all()
    assert reviews["review_content"].isna().sum() == 225  # empty cells in the file stay null
    assert 0.6 < (reviews["review_type"] == "Fresh").mean() < 0.8


# --- Amazon -------------------------------------------------------------------------------

REVIEWS = [
    {"asin": "B1", "reviewText": "great", "verified": True, "overall": 5.0, "summary": "s"},
    {"asin": "B1", "verified": False, "overall": 3.0, "style": {"Format:": " Audio CD"}},
    {"asin": "B2", "reviewText": "meh", "verified": "false", "overall": 2},
]
METADATA = [
    {"asin": "B1", "description": ["Great CD", "", "for babies"], "format": "MP3 Music"},
    {"asin": "B2", "description": "plain", "format": "Vinyl"},
    {"asin": "B1", "description": ["duplicate"], "format": "X"},
]


@pytest.mark.parametrize("gz", [False, True])
def test_load_amazon(tmp_path, gz):
    suffix = ".json.gz" if gz else ".jsonl"
    reviews_path = write_jsonl(tmp_path / f"reviews{suffix}", REVIEWS, gz)
    metadata_path = write_jsonl(tmp_path / f"meta{suffix}", METADATA, gz)
    data = load_amazon(reviews_path, metadata_path)
    reviews, metadata = data["reviews"], data["metadata"]
    assert list(reviews["reviewText"]) == ["great", None, "meh"]
    assert list(reviews["verified"]) == [True, False, False]
    assert reviews["overall"].dtype == "int64" and list(reviews["overall"]) == [5, 3, 2]
    assert list(reviews["review_id"]) == [0, 1, 2]
    assert "summary" in reviews.columns
    assert list(metadata["asin"]) == ["B1", "B2"]
    assert list(metadata["description"]) == ["Great CD for babies", "plain"]
    assert list(metadata["Format"]) == ["MP3 Music", "Vinyl"]


def test_load_amazon_python_literal_metadata_and_format_from_style(tmp_path):
    reviews_path = write_jsonl(tmp_path / "r.jsonl", REVIEWS)
    metadata_path = tmp_path / "meta.json"
    metadata_path.write_text(
        "{'asin': 'B1', 'description': 'd1'}\n\n{'asin': 'B2', 'description': 'd2'}\n"
    )
    metadata = load_amazon(reviews_path, metadata_path)["metadata"]
    assert list(metadata["Format"]) == ["Audio CD", ""]


def test_load_amazon_missing_column(tmp_path):
    reviews_path = write_jsonl(tmp_path / "r.jsonl", [{"asin": "B1", "reviewText": "x"}])
    metadata_path = write_jsonl(tmp_path / "m.jsonl", METADATA)
    with pytest.raises(
        ValueError, match=r"r\.jsonl: missing required column\(s\) \['verified', 'overall'\]"
    ):
        load_amazon(reviews_path, metadata_path)


def test_load_amazon_bad_line(tmp_path):
    reviews_path = tmp_path / "r.jsonl"
    reviews_path.write_text('{"asin": "B1"}\nnot json\n')
    with pytest.raises(ValueError, match=r"r\.jsonl: line 2, column 1: invalid JSON"):
        load_amazon(reviews_path, reviews_path)


# --- SQuAD --------------------------------------------------------------------------------


def squad_document(version_two=True):
    qa = {"id": "q1", "question": "Who?", "answers": [{"text": "Ann", "answer_start": 0}] * 2}
    impossible = {
        "id": "q2",
        "question": "Why?",
        "answers": [],
        "plausible_answers": [{"text": "Ann", "answer_start": 0}],
        "is_impossible": True,
    }
    if version_two:
        qa["is_impossible"] = False
    qas = [qa, impossible] if version_two else [qa]
    return {
        "version": "v2.0" if version_two else "1.1",
        "data": [{"title": "T", "paragraphs": [{"context": "Ann came.", "qas": qas}]}],
    }


@pytest.mark.parametrize("version_two", [True, False])
def test_load_squad_json(tmp_path, version_two):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(squad_document(version_two)))
    frame = load_squad_json(path)["squad"]
    assert list(frame.columns) == ["id", "title", "context", "question", "answers", "is_impossible"]
    assert frame["answers"][0] == '["Ann", "Ann"]'
    assert frame["is_impossible"].dtype == bool
    assert list(frame["is_impossible"]) == ([False, True] if version_two else [False])
    if version_two:
        assert frame["answers"][1] == "[]"


def test_load_squad_json_rejects_other_json(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"rows": []}')
    with pytest.raises(ValueError, match=r"missing required key 'data'.*\['rows'\]"):
        load_squad_json(path)


def test_load_squad_csv_roundtrip(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(squad_document()))
    frame = load_squad_json(path)["squad"]
    csv = tmp_path / "squad.csv"
    frame.to_csv(csv, index=False)
    pd.testing.assert_frame_equal(load_squad_csv(csv)["squad"], frame)


@needs_shared
def test_load_shared_squad_csv():
    frame = load_squad_csv(SHARED / "squad_v2_dev_half.csv")["squad"]
    assert len(frame) == 6_078
    assert frame["is_impossible"].sum() == 3_168
    assert frame["context"].nunique() == 646
    answerable = frame[~frame["is_impossible"]]
    assert all(json.loads(a) for a in answerable["answers"])


# --- any table ----------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_load_table_renames(tmp_path, suffix):
    path = tmp_path / f"t{suffix}"
    frame = pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})
    if suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path)
    loaded = load_table(path, {"b": "review_content"})
    assert list(loaded.columns) == ["a", "review_content"]
    with pytest.raises(
        ValueError, match=r"missing required column\(s\) \['c'\]; found columns: \['a', 'b'\]"
    ):
        load_table(path, {"c": "d"})


def test_load_table_unknown_format(tmp_path):
    (tmp_path / "t.xlsx").write_text("x")
    with pytest.raises(ValueError, match=r"unsupported input .*t\.xlsx: expected one of \.csv"):
        load_table(tmp_path / "t.xlsx")


@needs_shared
def test_load_shared_table():
    frame = load_table(SHARED / "contributions.csv", {"CMTE_ID": "committee"})
    assert len(frame) == 15_000 and "committee" in frame.columns


def test_joined_movies_and_squad_tables_also_load_from_parquet(tmp_path):
    from llm_assets.data import load_movies_joined, load_squad_csv

    joined = pd.DataFrame(
        {
            "rotten_tomatoes_link": ["m/a", "m/a", "m/b"],
            "review_content": ["good", "bad", "ok"],
            "movie_title": ["A", "A", "B"],
            "movie_info": ["about a", "about a", "about b"],
        }
    )
    joined.to_parquet(tmp_path / "movies.parquet")
    tables = load_movies_joined(tmp_path / "movies.parquet")
    assert len(tables["reviews"]) == 3 and len(tables["movies"]) == 2
    squad = pd.DataFrame(
        {
            "id": ["1"],
            "title": ["T"],
            "context": ["c"],
            "question": ["q?"],
            "answers": ["[]"],
            "is_impossible": [False],
        }
    )
    squad.to_parquet(tmp_path / "squad.parquet")
    assert load_squad_csv(tmp_path / "squad.parquet")["squad"]["is_impossible"].tolist() == [False]
