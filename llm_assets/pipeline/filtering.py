"""The `filtered` relation: the join of the sources in DuckDB, every row numbered, with the
reason a pushed-down predicate removes it (`run_filtered`), on a connection that sees only the
registered tables (`locked_connection`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp

from llm_assets.optimizer.table import TRANSIENT
from llm_assets.pipeline.connection import as_arrow, locked_connection
from llm_assets.pipeline.rows import ROW
from llm_assets.query.model import LLMQuery
from llm_assets.query.render import post_llm_predicates, pre_llm_sql
from llm_assets.sql.compiler import check_columns


def predicate_only_columns(query: LLMQuery) -> dict[str, list[str]]:
    """Per source alias, the columns only non-LLM predicates read. They are the ones typed
    for SQL (`rating > 3` on a text file); every other column keeps the file's text, so a
    prompt, a projection or a join key sees the value exactly as written."""
    other = {c for c in query.projection if "." in c}
    other |= set(query.aggregate.group_by if query.aggregate else ())
    other |= {c for key in query.shape.order_by for c in key.columns}  # sorted as text
    other |= {f for call in query.llm_calls for f in call.fields if "." in f}
    other |= {c for r in query.retrievals for c in (r.query_column, r.corpus_column)}
    for j in query.joins:
        other |= {f"{j.left_alias}.{j.left_column}", f"{j.right_alias}.{j.right_column}"}
    blocks = [j.top_k for j in query.semantic_joins if j.top_k is not None]
    other |= {c for b in blocks for c in (b.query_column, b.corpus_column)}
    out: dict[str, list[str]] = {}
    for p in query.predicates:
        for column in p.columns:
            alias, name = column.split(".", 1)
            if column not in other and name not in out.setdefault(alias, []):
                out[alias].append(name)
    return out


def _typed_view(name: str, raw: str, table: pa.Table, columns: Sequence[str]) -> str:
    """`CREATE VIEW name AS SELECT * REPLACE (TRY_CAST(c AS T) AS c, ...) FROM raw` for the
    text columns whose values all read as a DuckDB type (built from the AST)."""
    from llm_assets.data.sql_types import predicate_types

    text = [c for c in columns if c in table.column_names]
    types = {c: t for c, t in predicate_types(table, text).items() if t != "VARCHAR"}
    star = exp.Star()
    if types:
        star = exp.Star(
            replace=[
                exp.alias_(
                    exp.TryCast(this=exp.column(c, quoted=True), to=exp.DataType.build(t)),
                    c,
                    quoted=True,
                )
                for c, t in types.items()
            ]
        )
    select = exp.select(star).from_(exp.to_identifier(raw, quoted=True))
    view = exp.Create(this=exp.to_identifier(name, quoted=True), kind="VIEW", expression=select)
    return view.sql(dialect="duckdb")


def _columns(table: pa.Table | pd.DataFrame) -> list[str]:
    return table.column_names if isinstance(table, pa.Table) else list(table.columns)


PAIR = "_pair_"
"""In a semantic join's `filtered`: `_pair_<alias>` is the pair's row number in that source."""


SOURCE_ROWS = "_src_"
"""In `filtered` (not a semantic join's): `_src_<i>` is the row's row number in source i."""


def source_row_column(query: LLMQuery, alias: str) -> str:
    """The column of `filtered` holding each row's row number in source `alias`'s table:
    `_pair_<alias>` in a semantic join, else `_src_<i>` (i: the alias's place in the query)."""
    if query.semantic_joins:
        return f"{PAIR}{alias}"
    return f"{SOURCE_ROWS}{[s.alias for s in query.sources].index(alias)}"


def pair_sides(query: LLMQuery, pairs: pd.DataFrame) -> dict[str, int]:
    """Per source alias, how many of its rows a semantic join's candidate `pairs` hold."""
    return {s.alias: int(pairs[f"{PAIR}{s.alias}"].nunique()) for s in query.sources}


def count_pairs(con: duckdb.DuckDBPyConnection, inner: str) -> int:
    """The rows of the pre-LLM relation `inner` (SQL built from the query model), counted by
    DuckDB without materialising them (a cross product's count is the product of its sides)."""
    select = exp.select(exp.func("COUNT", exp.Star())).from_(
        exp.paren(sqlglot.parse_one(inner, read="duckdb")).as_("_pairs")
    )
    return int(con.execute(select.sql(dialect="duckdb")).fetchone()[0])


def check_pairs(
    query: LLMQuery,
    con: duckdb.DuckDBPyConnection,
    inner: str,
    tables: Mapping[str, pa.Table | pd.DataFrame],
    max_pairs: int | None,
) -> int:
    """The number of candidate pairs of a semantic join (`count_pairs`); over `max_pairs` it
    is a one-line ValueError naming the count, each table's size and the ways to bring it
    down, raised before any pair is materialised or any request is sent."""
    n = count_pairs(con, inner)
    if max_pairs is not None and n > max_pairs:
        sizes = " x ".join(f"{s.table} ({len(tables[s.table]):,} rows)" for s in query.sources)
        blocks = [j.top_k.show() for j in query.semantic_joins if j.top_k is not None]
        blocked = f", blocked by {' and '.join(blocks)}," if blocks else ""
        ways = (
            "a smaller k"
            if blocks
            else "an equi-key in ON (a.k = b.k AND LLM(...) = 'yes'), top-k blocking "
            "(b.y IN similarity_search(a.x, k => 5))"
        )
        raise ValueError(
            f"query {query.name!r}: the semantic join of {sizes}{blocked} has {n:,} candidate "
            f"pairs, over max_pairs={max_pairs:,}; bring it down with {ways}, a WHERE filter "
            f"on either table, or raise max_pairs"
        )
    return n


def run_filtered(
    query: LLMQuery,
    tables: Mapping[str, pa.Table | pd.DataFrame],
    pushdown: bool,
    max_pairs: int | None = None,
    retriever: str = "tfidf",
    source_rows: bool = False,
) -> pd.DataFrame:
    """`filtered_rows`, with any DuckDB error of the pre-LLM SQL (one the predicate type check
    did not foresee) as a one-line ValueError naming the query: the CLI, `run_query` and the
    `filtered` asset all stop on it before anything is sent."""
    try:
        return filtered_rows(query, tables, pushdown, max_pairs, retriever, source_rows)
    except duckdb.Error as exc:
        first = " ".join(str(exc).splitlines()[0].split())
        raise ValueError(f"query {query.name!r}: the SQL before the LLM failed: {first}") from exc


def filtered_rows(
    query: LLMQuery,
    tables: Mapping[str, pa.Table | pd.DataFrame],
    pushdown: bool,
    max_pairs: int | None = None,
    retriever: str = "tfidf",
    source_rows: bool = False,
) -> pd.DataFrame:
    """Every row of the join of the sources, numbered `_row` in stored order (by row number in
    the largest source, then in the others; never sorted on values, so the FIFO baseline sees
    the data as stored), with `_skip`: with `pushdown`, the reason a non-LLM predicate removes
    the row before any LLM call (evaluated in DuckDB), else None.

    Runs on `locked_connection()`: the user's SQL reaches only the registered tables. A source
    with columns but no row (a header-only file) is a ValueError: the run would ask nothing.

    A semantic join's rows are its candidate pairs (with `pushdown`, those its predicates
    keep; with top-k blocking, only each row's nearest by `retriever`: `nearest_pairs`),
    counted first and refused over `max_pairs` (`check_pairs`); each row keeps its source rows
    as `_pair_<alias>`; with `source_rows`, every row keeps them (`source_row_column`: a
    label column is read by them, `quality.with_labels`)."""
    check_columns(query, {t: list(_columns(frame)) for t, frame in tables.items()})
    empty = sorted({s.table for s in query.sources if len(tables[s.table]) == 0})
    if empty:
        raise ValueError(
            f"query {query.name!r}: table {empty[0]!r} has columns but no rows (a header-only "
            "file?): there is nothing to ask the LLM"
        )
    con = locked_connection()
    typed = predicate_only_columns(query)
    size = {s.alias: len(tables[s.table]) for s in query.sources}
    by_size = sorted(range(len(query.sources)), key=lambda i: -size[query.sources[i].alias])
    try:
        inner, arrows, rows = _register_joined(con, query, tables, typed, pushdown, retriever)
        semantic = bool(query.semantic_joins)
        if semantic:
            check_pairs(query, con, inner, tables, max_pairs)
        skip = _skip_reason(query) if pushdown and not semantic else exp.null()
        order = [exp.column(rows[query.sources[i].alias], quoted=True) for i in by_size]
        taken = passed_through_text(query, arrows, typed, rows)
        kept = passed_through_typed(query, arrows, rows)
        taken = {**taken, **kept}
        star = exp.Star(except_=[exp.column(c, quoted=True) for c in taken] or None)
        sql = (
            exp.select(star, exp.alias_(skip, "_skip", quoted=True))
            .from_(exp.paren(sqlglot.parse_one(inner, read="duckdb")).as_("_joined"))
            .order_by(*order)
        )
        frame = fetch_frame(con, sql.sql(dialect="duckdb"))
    finally:
        con.close()
    parts = {c: frame[c] for c in frame.columns}
    for name, (column, index) in taken.items():
        if name in kept:  # its Arrow type kept, so it renders as the table holds it
            values = pc.take(column, pa.array(frame[index].to_numpy(), pa.int64()))
            parts[name] = pd.Series(pd.arrays.ArrowExtensionArray(values), copy=False)
        else:
            parts[name] = pd.Series(take_text(column, frame[index].to_numpy()), copy=False)
    del frame
    names = query.output_names()
    columns = [names[c] for c in query.columns_needed()] + list(rows.values()) + ["_skip"]
    dropped = [] if query.semantic_joins or source_rows else list(rows.values())
    keep = [c for c in columns if c not in dropped]
    frame = pd.DataFrame({c: parts.pop(c) for c in keep}, copy=False)  # no column copied
    del parts
    if query.semantic_joins:  # each pair's source rows, for the no-duplicate-pair check
        frame = frame.rename(columns={v: f"{PAIR}{alias}" for alias, v in rows.items()})
    frame["_skip"] = frame["_skip"].astype(object).where(frame["_skip"].notna(), None)
    frame.insert(0, ROW, np.arange(len(frame), dtype=np.int64))
    pa.default_memory_pool().release_unused()  # what converting to pandas left in Arrow's pool
    return frame


def _register_joined(
    con: duckdb.DuckDBPyConnection,
    query: LLMQuery,
    tables: Mapping[str, pa.Table | pd.DataFrame],
    typed: Mapping[str, Sequence[str]],
    pushdown: bool,
    retriever: str,
) -> tuple[str, dict[str, pa.Table], dict[str, str]]:
    """Register on `con` each source (its `typed` columns typed, rows numbered `_src_row`)
    and each top-k blocking's nearest pairs; (the pre-LLM SQL over them, each table as
    Arrow, each alias's source-row output column)."""
    from llm_assets.pipeline.retrieval import nearest_pairs

    relation, arrows = {}, {}
    for i, source in enumerate(query.sources):
        if source.table in relation:
            continue
        table = arrows[source.table] = as_arrow(tables[source.table])
        table = table.append_column("_src_row", pa.array(np.arange(len(table), dtype=np.int64)))
        con.register(f"_raw{i}", table)
        con.execute(_typed_view(f"_t{i}", f"_raw{i}", table, typed.get(source.alias, ())))
        relation[source.table] = f"_t{i}"
    rows = {s.alias: f"{SOURCE_ROWS}{i}" for i, s in enumerate(query.sources)}
    pairs = {}
    by_alias = {s.alias: relation[s.table] for s in query.sources}
    for n, join in enumerate(j for j in query.semantic_joins if j.top_k is not None):
        pairs[join.alias] = f"_top_k{n}"
        con.register(pairs[join.alias], nearest_pairs(con, join.top_k, by_alias, retriever))
    # a semantic join's rows are its candidate pairs: with pushdown its predicates remove
    # pairs before they exist (no skipped row per removed pair of a cross product)
    semantic = bool(query.semantic_joins)
    inner = pre_llm_sql(
        query, semantic and pushdown, tables=relation, source_row_columns=rows, pairs=pairs
    )
    return inner, arrows, rows


def candidate_pairs(
    query: LLMQuery,
    tables: Mapping[str, pa.Table | pd.DataFrame],
    pushdown: bool,
    max_pairs: int | None,
    retriever: str = "tfidf",
) -> int | None:
    """The candidate pairs of `query`'s semantic join counted as `filtered_rows` counts them,
    none materialised, and refused over `max_pairs` in its one line (`check_pairs`): what
    definition load checks. None without a semantic join or with an empty source (the run
    refuses that); a DuckDB error is a one-line ValueError as in `run_filtered`."""
    if not query.semantic_joins or any(len(tables[s.table]) == 0 for s in query.sources):
        return None
    con = locked_connection()
    try:
        typed = predicate_only_columns(query)
        inner, _, _ = _register_joined(con, query, tables, typed, pushdown, retriever)
        return check_pairs(query, con, inner, tables, max_pairs)
    except duckdb.Error as exc:
        first = " ".join(str(exc).splitlines()[0].split())
        raise ValueError(f"query {query.name!r}: the SQL before the LLM failed: {first}") from exc
    finally:
        con.close()


def passed_through_text(
    query: LLMQuery,
    arrows: Mapping[str, pa.Table],
    typed: Mapping[str, Sequence[str]],
    rows: Mapping[str, str],
) -> dict[str, tuple[pa.ChunkedArray, str]]:
    """Output name -> (its source's column, the output column numbering that source's rows)
    for each text column the pre-LLM relation passes through as the file has it (not typed
    for a predicate): `filtered_rows` takes those from the loaded table by row number, so
    DuckDB joins, filters and sorts row numbers, never the text."""
    table_of = {s.alias: s.table for s in query.sources}
    out = {}
    for qualified, name in query.output_names().items():
        alias, column = qualified.split(".", 1)
        arrow = arrows[table_of[alias]]
        kind = arrow.schema.field(column).type
        if column in typed.get(alias, ()) or not (
            pa.types.is_string(kind) or pa.types.is_large_string(kind)
        ):
            continue
        out[name] = (arrow.column(column), rows[alias])
    return out


def _converts_lossily(kind: pa.DataType) -> bool:
    """An Arrow type whose values DuckDB's `.df()` changes (a date becomes a midnight
    timestamp, a timestamp moves to the session's zone, a decimal becomes a float and loses
    its scale, binary a `bytearray`, a duration pandas' `0 days 00:00:05`)."""
    return (
        pa.types.is_date(kind)
        or pa.types.is_timestamp(kind)
        or pa.types.is_decimal(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_fixed_size_binary(kind)
        or pa.types.is_duration(kind)
    )


def passed_through_typed(
    query: LLMQuery, arrows: Mapping[str, pa.Table], rows: Mapping[str, str]
) -> dict[str, tuple[pa.ChunkedArray, str]]:
    """As `passed_through_text`, for the columns whose type `.df()` would change
    (`_converts_lossily`): `filtered_rows` takes them by row number with their Arrow type
    (pandas' ArrowDtype), so a prompt renders `2024-02-29`, `1.10`, the timestamp in its own
    zone (`optimizer.table.render_cell`), never the converted value."""
    table_of = {s.alias: s.table for s in query.sources}
    out = {}
    for qualified, name in query.output_names().items():
        alias, column = qualified.split(".", 1)
        arrow = arrows[table_of[alias]]
        if _converts_lossily(arrow.schema.field(column).type):
            out[name] = (arrow.column(column), rows[alias])
    return out


def take_text(column: pa.ChunkedArray, rows: np.ndarray) -> np.ndarray:
    """`column`'s values at `rows`, as `fetch_frame` gives a text column (`text_objects`)."""
    return text_objects(pc.take(column, pa.array(rows, pa.int64()), memory_pool=TRANSIENT))


SAMPLE = 4096
"""Values `text_objects` samples to tell a column of repeated values from a distinct one."""


def text_objects(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A text column as pandas holds text: an object array of str, None for null. When a
    sample spread over the column repeats values, equal values share one str (coded by
    Arrow's dictionary: a 30-value column of 10M rows is 30 strings); otherwise each value
    is its own str. Arrow's `to_pandas` makes the same array in ~3x the memory and ~7x the
    time for short strings (8M ids: +1.8 GB, 4 s; here +0.55 GB, 0.6 s)."""
    n = len(column)
    if n == 0:
        return np.empty(0, dtype=object)
    picks = np.unique(np.linspace(0, n - 1, min(n, SAMPLE)).astype(np.int64))
    sample = column.take(pa.array(picks)).to_pylist()
    if len(set(sample)) > len(sample) // 2:  # mostly distinct: one str per value
        return column.to_numpy(zero_copy_only=False)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks(memory_pool=TRANSIENT)
    coded = pc.dictionary_encode(column, memory_pool=TRANSIENT)
    values = np.empty(len(coded.dictionary) + 1, dtype=object)  # the last one: null
    values[:-1] = coded.dictionary.to_pylist()
    return values[coded.indices.fill_null(-1).to_numpy(zero_copy_only=False)]


def fetch_frame(con: duckdb.DuckDBPyConnection, sql: str, drop: Sequence[str] = ()) -> pd.DataFrame:
    """The rows of `sql` less its `drop` columns, exactly as `.df()` gives them (columns,
    order, dtypes, values), in less memory: the result is materialised once in DuckDB, its
    text columns reach pandas through Arrow (`text_objects`: a column of repeated values
    shares one str per value, where `.df()` makes one per cell: a 12-value column of 10M rows
    is 10M strings) and the other columns through `.df()`, so non-text types convert as
    DuckDB converts them."""
    con.execute(f"CREATE TEMP TABLE _result AS {sql}")
    try:
        relation = con.table("_result")
        names, types = relation.columns, [str(t) for t in relation.types]
        keep = [c for c in names if c not in set(drop)]
        if len(set(names)) != len(names):  # duplicate names: let DuckDB's `.df()` decide
            return con.sql("SELECT * FROM _result").df().drop(columns=list(drop))
        text = [c for c, t in zip(names, types, strict=True) if c in keep and t == "VARCHAR"]
        other = [c for c in keep if c not in text]

        def select(columns: Sequence[str]) -> str:
            picked = [exp.column(c, quoted=True) for c in columns]
            return exp.select(*picked).from_("_result").sql(dialect="duckdb")

        parts: dict[str, pd.Series | np.ndarray] = {}
        if other:
            typed = con.sql(select(other)).df()
            parts.update({c: typed[c] for c in other})
            del typed
        if text:
            arrow = con.sql(select(text)).to_arrow_table()
            for c in text:
                parts[c] = pd.Series(text_objects(arrow.column(c)), copy=False)
            del arrow
        return pd.DataFrame({c: parts[c] for c in keep}, copy=False) if keep else pd.DataFrame()
    finally:
        con.execute("DROP TABLE IF EXISTS _result")


def _skip_reason(query: LLMQuery) -> exp.Expression:
    """CASE WHEN (p1) IS NULL THEN 'predicate p1 is null (unknown)' WHEN NOT (p1) THEN
    'predicate p1 is false' ... END over output names: the first predicate that removes the
    row, or NULL."""
    case = exp.Case()
    for sql in post_llm_predicates(query, False):
        predicate = exp.paren(sqlglot.parse_one(sql, read="duckdb"))
        unknown = exp.Is(this=predicate.copy(), expression=exp.null())
        case = case.when(unknown, exp.Literal.string(f"predicate {sql} is null (unknown)"))
        case = case.when(exp.not_(predicate), exp.Literal.string(f"predicate {sql} is false"))
    return case if query.predicates else exp.null()
