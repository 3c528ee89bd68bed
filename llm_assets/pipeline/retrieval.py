"""Retrievers for `similarity_search(column, k => k)`: the k nearest corpus texts per query,
and a semantic join's top-k blocking (`nearest_pairs`).

`TfidfRetriever` (default) needs no model download: scikit-learn TF-IDF vectors, cosine
similarity (the vectors are L2-normalised, so a dot product), ties broken by corpus order.
`EmbeddingRetriever` uses a sentence-transformers model when that optional package and the
model are available locally; it is never imported unless asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

RETRIEVERS = ("tfidf", "embedding")


class TfidfRetriever:
    """Invariant: `search` returns, per query, k distinct corpus indices by descending score."""

    def __init__(self, corpus: Sequence[str]):
        from sklearn.feature_extraction.text import TfidfVectorizer

        if len(corpus) == 0:
            raise ValueError("the retrieval corpus is empty: no value to search")
        self.corpus = list(corpus)
        self.vectorizer = TfidfVectorizer(sublinear_tf=True, stop_words="english")
        self.matrix = self.vectorizer.fit_transform(self.corpus)

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        return (self.vectorizer.transform(list(queries)) @ self.matrix.T).toarray()

    def search(self, queries: Sequence[str], k: int, batch: int = 2048) -> np.ndarray:
        """(len(queries), min(k, corpus size)) corpus indices."""
        k = min(k, len(self.corpus))
        out = np.empty((len(queries), k), dtype=np.int64)
        for start in range(0, len(queries), batch):
            scores = self.scores(queries[start : start + batch])
            # stable sort on -score keeps corpus order among ties
            out[start : start + batch] = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return out


class EmbeddingRetriever(TfidfRetriever):
    """Sentence-embedding retriever (optional: `pip install sentence-transformers` and a
    locally available model)."""

    def __init__(self, corpus: Sequence[str], model: str = "all-MiniLM-L6-v2"):
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ImportError(
                "the embedding retriever needs sentence-transformers: pip install "
                "sentence-transformers (and a local model); or use retriever='tfidf'"
            ) from exc
        if len(corpus) == 0:
            raise ValueError("the retrieval corpus is empty: no value to search")
        self.corpus = list(corpus)
        self.model = SentenceTransformer(model)
        self.matrix = self.model.encode(self.corpus, normalize_embeddings=True)

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        return self.model.encode(list(queries), normalize_embeddings=True) @ self.matrix.T


def build_retriever(kind: str, corpus: Sequence[str]) -> TfidfRetriever:
    if kind == "tfidf":
        return TfidfRetriever(corpus)
    if kind == "embedding":
        return EmbeddingRetriever(corpus)
    raise ValueError(f"unknown retriever {kind!r}; expected one of {list(RETRIEVERS)}")


def retrieve(query, tables, rows, retriever: str):
    """`rows` with the k nearest corpus values of each of `query`'s retrievals as columns
    `name_1..name_k`. The corpus is the retrieval's distinct non-null corpus values over the
    whole source table (`query.render.corpus_sql`, on a locked DuckDB connection); a DuckDB
    error is a one-line ValueError naming the retrieval."""
    import duckdb

    from llm_assets.pipeline.connection import as_arrow, locked_connection
    from llm_assets.query.render import corpus_sql

    out = rows.copy()
    for retrieval in query.retrievals:
        source = next(s for s in query.sources if s.alias == retrieval.corpus_column.split(".")[0])
        con = locked_connection()
        try:
            con.register("_corpus", as_arrow(tables[source.table]))
            sql = corpus_sql(query, retrieval.name, tables={source.table: "_corpus"})
            corpus = [v for (v,) in con.execute(sql).fetchall()]
        except duckdb.Error as exc:
            raise ValueError(f"retrieval {retrieval.name!r}: {exc}") from exc
        finally:
            con.close()
        index = build_retriever(retriever, corpus)
        column = query.output_names()[retrieval.query_column]
        hits = index.search(out[column].fillna("").tolist(), retrieval.k)
        for j in range(hits.shape[1]):
            out[f"{retrieval.name}_{j + 1}"] = [index.corpus[i] for i in hits[:, j]]
    return out


def nearest_pairs(con, block, relations, retriever: str = "tfidf"):
    """A semantic join's top-k candidate pairs (`query.parts.TopK`) as a pyarrow table of
    `TOP_K_QUERY`, `TOP_K_CORPUS` source row numbers: each row of the query side with a
    non-null query value, paired with the `block.k` rows of the corpus side (every row with a
    non-null value; all of them when fewer) whose values `retriever` scores nearest, ties in
    row order. `relations` maps each alias to its relation on `con`, with a `SOURCE_ROW`."""
    import pyarrow as pa
    from sqlglot import exp

    from llm_assets.query.model import SOURCE_ROW
    from llm_assets.query.parts import split_column
    from llm_assets.query.render import TOP_K_CORPUS, TOP_K_QUERY
    from llm_assets.sql.syntax import column_node, render, table

    def rows(column: str) -> tuple[np.ndarray, list[str]]:
        alias, name = split_column(column)
        value, row = column_node(None, name), column_node(None, SOURCE_ROW)
        select = (
            exp.select(row, value.copy())
            .from_(table(relations[alias]))
            .where(exp.Not(this=exp.Is(this=value, expression=exp.null())))
            .order_by(row.copy())
        )
        got = con.execute(render(select)).fetchnumpy()
        return np.asarray(got[SOURCE_ROW], dtype=np.int64), [str(v) for v in got[name]]

    query_rows, queries = rows(block.query_column)
    corpus_rows, corpus = rows(block.corpus_column)
    if not queries or not corpus:
        hits = np.empty((len(queries), 0), dtype=np.int64)
    else:
        try:
            hits = build_retriever(retriever, corpus).search(queries, block.k)
        except ValueError as exc:
            raise ValueError(f"{block.show()}: {exc}") from exc
    return pa.table(
        {
            TOP_K_QUERY: np.repeat(query_rows, hits.shape[1]),
            TOP_K_CORPUS: corpus_rows[hits.ravel()],
        }
    )
