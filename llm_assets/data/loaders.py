"""Loaders for real public files, returning the same table and column names as the synthetic
generators (`movies`, `products`, `squad`).

Common rules: every file is read through `llm_assets.data.tables.load_table` (text columns
exactly as written, nulls stay null so `null_policy` can see them); extra columns are kept; a
missing required column raises ValueError naming the column and the file and listing the
columns found; `review_id` is added as 0..n-1 in file order when the file has none.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pandas as pd

from llm_assets.data import tables

MOVIE_COLUMNS = ("rotten_tomatoes_link", "movie_title", "movie_info")
REVIEW_COLUMNS = ("rotten_tomatoes_link", "review_content", "review_type")
AMAZON_REVIEW_COLUMNS = ("asin", "reviewText", "verified", "overall")
SQUAD_COLUMNS = ("id", "title", "context", "question", "answers", "is_impossible")
PLACEHOLDER_FRESH_SHARE = 10_461 / 15_008
"""Share of placeholder 'Fresh' labels `load_movies_joined` assigns (the paper's share)."""


def require_columns(frame: pd.DataFrame, required: Iterable[str], source: str | Path) -> None:
    """Raise ValueError unless every name in `required` is a column of `frame`."""
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ValueError(
            f"{source}: missing required column(s) {missing}; found columns: {list(frame.columns)}"
        )


def _frame(path: str | Path) -> pd.DataFrame:
    """The file as a DataFrame through the one loader (text as written, nulls as None)."""
    return tables.load_table(path).to_pandas()


def _with_review_id(frame: pd.DataFrame) -> pd.DataFrame:
    if "review_id" not in frame.columns:
        frame["review_id"] = range(len(frame))
    return frame


# --- Rotten Tomatoes ----------------------------------------------------------------------


def load_rotten_tomatoes(
    movies_csv: str | Path, reviews_csv: str | Path
) -> dict[str, pd.DataFrame]:
    """The Kaggle "Rotten Tomatoes movies and critic reviews" files
    (`rotten_tomatoes_movies.csv`, `rotten_tomatoes_critic_reviews.csv`) as
    `{"reviews": ..., "movies": ...}`.

    reviews keeps file order (review_id = 0..n-1 unless present); movies keeps the first row
    per rotten_tomatoes_link. Reviews whose link is not a movie are kept (an inner join drops
    them).
    """
    movie_frame = _frame(movies_csv)
    require_columns(movie_frame, MOVIE_COLUMNS, movies_csv)
    review_frame = _frame(reviews_csv)
    require_columns(review_frame, REVIEW_COLUMNS, reviews_csv)
    movie_frame = movie_frame.drop_duplicates("rotten_tomatoes_link").reset_index(drop=True)
    return {"reviews": _with_review_id(review_frame), "movies": movie_frame}


def placeholder_review_type(link: str, content: str) -> str:
    """'Fresh' or 'Rotten', a deterministic function of (link, content): the BLAKE2b hash of
    both, as a fraction of 2**64, below `PLACEHOLDER_FRESH_SHARE` means 'Fresh'. Not a real
    critic label; it only lets the Fresh predicate run with the paper's selectivity."""
    digest = hashlib.blake2b(f"{link}\x1f{content}".encode(), digest_size=8).digest()
    return "Fresh" if int.from_bytes(digest, "big") / 2**64 < PLACEHOLDER_FRESH_SHARE else "Rotten"


def load_movies_joined(csv: str | Path) -> dict[str, pd.DataFrame]:
    """An already joined reviews-and-movies CSV or Parquet file (e.g.
    `shared/data/movies_small.csv`: columns rotten_tomatoes_link, review_content, movie_title,
    movie_info, id) split into
    `{"reviews": ..., "movies": ...}`.

    movies: the first row per rotten_tomatoes_link of (rotten_tomatoes_link, movie_title,
    movie_info). reviews: every row, in file order, with rotten_tomatoes_link, review_content,
    review_type, review_id and any other column (e.g. `id`). When the file has no
    review_type, it is a PLACEHOLDER: `placeholder_review_type(link, content)` per row
    (deterministic, ~69.7% 'Fresh', identical rows get identical labels), and
    `reviews.attrs["placeholder_columns"]` is `["review_type"]` (a null link or content hashes
    as '').
    """
    frame = _frame(csv)
    require_columns(frame, ("rotten_tomatoes_link", "review_content", *MOVIE_COLUMNS[1:]), csv)
    movie_frame = (
        frame[list(MOVIE_COLUMNS)].drop_duplicates("rotten_tomatoes_link").reset_index(drop=True)
    )
    reviews = frame.drop(columns=list(MOVIE_COLUMNS[1:]))
    placeholder = "review_type" not in reviews.columns
    if placeholder:
        reviews["review_type"] = [
            placeholder_review_type(link or "", content or "")
            for link, content in zip(
                reviews["rotten_tomatoes_link"], reviews["review_content"], strict=True
            )
        ]
    reviews = _with_review_id(reviews)
    first = ["rotten_tomatoes_link", "review_content", "review_type", "review_id"]
    reviews = reviews[first + [c for c in reviews.columns if c not in first]]
    reviews.attrs["placeholder_columns"] = ["review_type"] if placeholder else []
    return {"reviews": reviews, "movies": movie_frame}


# --- Amazon -------------------------------------------------------------------------------


def read_json_lines(path: str | Path) -> Iterator[dict]:
    """Records of a JSON-lines file, gzipped or not (detected from the content). Lines that
    are Python dict literals (the 2014 Amazon metadata dumps) are accepted too; blank lines
    are skipped. Only for the Amazon metadata, whose description lists need their structure;
    every other file goes through `tables.load_table`."""
    with open(path, "rb") as probe:
        gzipped = probe.read(2) == b"\x1f\x8b"
    opener = gzip.open if gzipped else open
    with opener(path, "rt", encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                try:
                    record = ast.literal_eval(line)
                except (ValueError, SyntaxError) as error:
                    raise ValueError(
                        f"{path}:{number}: not a JSON object: {line[:80]!r}"
                    ) from error
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object, got {line[:80]!r}")
            yield record


def _join_text(value: object) -> str:
    """A description that may be a list of strings: non-empty parts joined by a space."""
    if isinstance(value, list | tuple):
        return " ".join(str(v).strip() for v in value if str(v).strip())
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    return str(value)


def _style_format(style: object) -> str | None:
    if isinstance(style, str) and style.startswith("{"):
        style = json.loads(style)  # the loader keeps nested values as JSON text
    if isinstance(style, dict):
        value = style.get("Format:", style.get("Format"))
        return None if value is None else str(value).strip()
    return None


def _to_bool(values: pd.Series) -> pd.Series:
    def one(v: object) -> bool:
        if isinstance(v, str):
            return v.strip().lower() in ("true", "1", "yes", "t", "y")
        return bool(v) if not pd.isna(v) else False

    return values.map(one).astype(bool)


def load_amazon(reviews_jsonl: str | Path, metadata_jsonl: str | Path) -> dict[str, pd.DataFrame]:
    """Amazon review data (JSON lines, optionally gzipped) as `{"reviews": ..., "metadata":
    ...}`.

    reviews: asin, reviewText (null when absent), verified (bool), overall (int 1..5), review_id
    (0..n-1 in file order) and the other fields. metadata: asin (first record per asin),
    description (a list of strings is joined by spaces), Format (from a `Format` or `format`
    field; when the metadata has neither, the most common `style["Format:"]` of the asin's
    reviews, '' if none) and the other fields.
    """
    reviews = _frame(reviews_jsonl)
    require_columns(reviews, AMAZON_REVIEW_COLUMNS, reviews_jsonl)
    reviews["verified"] = _to_bool(reviews["verified"])
    overall = pd.to_numeric(reviews["overall"], errors="coerce")
    if overall.isna().any():
        bad = reviews["overall"][overall.isna()].iloc[0]
        raise ValueError(f"{reviews_jsonl}: 'overall' must be a number 1..5, got {bad!r}")
    reviews["overall"] = overall.round().astype("int64")
    reviews = _with_review_id(reviews)

    metadata = pd.DataFrame.from_records(list(read_json_lines(metadata_jsonl)))
    require_columns(metadata, ("asin", "description"), metadata_jsonl)
    metadata = metadata.drop_duplicates("asin").reset_index(drop=True)
    metadata["asin"] = metadata["asin"].astype(str)
    metadata["description"] = metadata["description"].map(_join_text)
    if "Format" in metadata.columns:
        metadata["Format"] = metadata["Format"].map(_join_text)
    elif "format" in metadata.columns:
        metadata["Format"] = metadata.pop("format").map(_join_text)
    elif "style" in reviews.columns:
        styles = reviews.assign(_format=reviews["style"].map(_style_format)).dropna(
            subset=["_format"]
        )
        by_asin = styles.groupby("asin")["_format"].agg(lambda s: s.value_counts().index[0])
        metadata["Format"] = metadata["asin"].map(by_asin).fillna("")
    else:
        raise ValueError(
            f"{metadata_jsonl}: missing required column 'Format' (or 'format', or a 'style' "
            f"field in {reviews_jsonl}); found columns: {list(metadata.columns)}"
        )
    return {"reviews": reviews, "metadata": metadata}


# --- SQuAD --------------------------------------------------------------------------------


def load_squad_json(path: str | Path) -> dict[str, pd.DataFrame]:
    """The official SQuAD v1.1 / v2.0 JSON (`{"data": [{"title", "paragraphs": [{"context",
    "qas": [...]}]}]}`) as `{"squad": DataFrame[id, title, context, question, answers,
    is_impossible]}`, one row per question in file order. answers is the JSON list of the
    answer texts (`[]` for unanswerable questions; plausible_answers are dropped);
    is_impossible is False where the field is absent (v1.1)."""
    with open(path, encoding="utf-8") as f:
        document = json.load(f)
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        found = list(document) if isinstance(document, dict) else type(document).__name__
        raise ValueError(f"{path}: missing required key 'data' (a list); found: {found}")
    rows = []
    for article in document["data"]:
        title = article.get("title", "")
        for paragraph in article.get("paragraphs", []):
            context = paragraph["context"]
            for qa in paragraph.get("qas", []):
                answers = [a["text"] for a in qa.get("answers", [])]
                rows.append(
                    (
                        str(qa["id"]),
                        title,
                        context,
                        qa["question"],
                        json.dumps(answers, ensure_ascii=False),
                        bool(qa.get("is_impossible", False)),
                    )
                )
    frame = pd.DataFrame(rows, columns=list(SQUAD_COLUMNS))
    frame["is_impossible"] = frame["is_impossible"].astype(bool)
    return {"squad": frame}


def load_squad_csv(path: str | Path) -> dict[str, pd.DataFrame]:
    """A flattened SQuAD CSV or Parquet file (one row per question, e.g.
    `shared/data/squad_v2_dev_half.csv`) as `{"squad": ...}`; is_impossible becomes bool
    (strings 'True'/'False' accepted), answers stays the file's text (missing: '[]')."""
    frame = _frame(path)
    require_columns(frame, SQUAD_COLUMNS, path)
    frame["answers"] = frame["answers"].fillna("[]").astype(str)
    frame["is_impossible"] = _to_bool(frame["is_impossible"])
    return {"squad": frame}


# --- any table ----------------------------------------------------------------------------


def load_table(path: str | Path, column_mapping: Mapping[str, str] | None = None) -> pd.DataFrame:
    """`tables.load_table(path)` as a DataFrame, with columns renamed by `column_mapping` (file
    name -> our name). Every key of the mapping must be a column of the file."""
    frame = _frame(path)
    if column_mapping:
        require_columns(frame, column_mapping.keys(), path)
        frame = frame.rename(columns=dict(column_mapping))
    return frame
