"""Hypothesis strategies for the two table shapes GGR trailed the authors' QuickGreedy on in
public tables (issue 34 item 6), drawn cell by cell from small pools so that values repeat,
share prefixes and are prefixes of each other:

- `claims_tables`: fact-checking claims (FEVER-like): an id (one per claim, repeated on its
  evidence rows, or one per row, sequential), a verdict label, a claim that leads with an
  entity, JSON-ish evidence naming a page and line numbers, a short page title.
- `movie_tables`: one row per movie, a dozen columns: a link and a title, a long
  description made of stock phrases, a mostly empty critics consensus, short categoricals,
  dates and short numbers that are prefixes of each other (ratings, runtimes, years), many
  empty cells.
"""

import pandas as pd
from hypothesis import strategies as st

ENTITIES = ["Ryan Gosling", "Ryan Seacrest", "Roman Atwood", "History of art", "Adrienne Bailon"]
VERBS = ["is a", "is an actor.", "was born in", "starred in", "won the"]
OBJECTS = ["film", "films", "Canada", "Canadian", "award", "1990", "199", "art", ""]
LABELS = ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"]

PHRASES = [
    "A young man",
    "A young woman",
    "returns home",
    "to find",
    "his family",
    "her family",
    "in danger.",
    "falls in love",
    "with a stranger.",
    "",
]
NUMBERS = ["", "1", "10", "100", "9", "90", "95", "98", "7", "70", "75"]
YEARS = ["", "199", "1999", "2001", "2010", "201"]
TITLES = ["Up", "Upside", "Us", "Her", "Heat", "Heaven", "It", "It 2"]


_CLAIM = st.tuples(
    st.sampled_from(ENTITIES),
    st.sampled_from(VERBS),
    st.sampled_from(OBJECTS),
    st.sampled_from(LABELS),
    st.lists(
        st.tuples(
            st.sampled_from(["", "Canada", "Film", None]),  # None: the claim's entity
            st.sampled_from([0, 1, 10, 12]),
            st.sampled_from([100, 1000, 10452, 104520]),
        ),
        min_size=1,
        max_size=3,
    ),
)


@st.composite
def claims_tables(draw, max_claims: int = 26) -> pd.DataFrame:
    """Claims with 1-3 evidence rows each (see the module docstring)."""
    n_claims = draw(st.integers(min_value=1, max_value=max_claims))
    per_row_ids = draw(st.booleans())
    first_id = draw(st.sampled_from([7, 98, 100, 1000, 99_990]))
    rows = []
    for k in range(n_claims):
        entity, verb, obj, label, evidence_rows = draw(_CLAIM)
        for page, line, annotation in evidence_rows:
            page = entity.replace(" ", "_") if page is None else page
            evidence = (
                "[[[" + f'{annotation}, {annotation + line}, "{page}", {line}' + "]]]"
                if label != "NOT ENOUGH INFO"
                else f"[[[{annotation}, null, null, null]]]"
            )
            row_id = first_id + (len(rows) if per_row_ids else k)
            rows.append([str(row_id), label, f"{entity} {verb} {obj}", evidence, page])
    return pd.DataFrame(rows, columns=["id", "label", "claim", "evidence", "page"])


def _blank(values: list[str], empty: int) -> st.SearchStrategy:
    """A value of `values`, or "" in about `empty` draws of 10."""
    return st.sampled_from([""] * (empty * len(values)) + values * (10 - empty))


_DATES = [f"{y}-{m}-01" for y in YEARS[1:] for m in ("01", "1")]
_MOVIE_ROW = st.tuples(
    st.sampled_from(TITLES),
    st.one_of(st.just(()), *[st.lists(st.sampled_from(PHRASES), min_size=4, max_size=10)] * 9),
    _blank(["A triumph.", "A triumph of style."], 9),
    st.sampled_from(["R", "NR", "PG", "PG-13", "G"]),
    st.sampled_from(["Drama", "Drama, Comedy", "Comedy", "Horror"]),
    _blank(["Ang Lee", "Ang", "Lee Ang"], 3),
    _blank(_DATES, 2),
    _blank(_DATES, 4),
    st.sampled_from(NUMBERS),
    st.sampled_from(NUMBERS),
    st.sampled_from(YEARS),
)


@st.composite
def movie_tables(draw, max_rows: int = 33) -> pd.DataFrame:
    """One row per movie, 12 columns (see the module docstring)."""
    n = draw(st.integers(min_value=1, max_value=max_rows))
    rows = []
    for k in range(n):
        title, words, *rest = draw(_MOVIE_ROW)
        title = f"{title} {k}"
        link = "m/" + title.lower().replace(" ", "_")
        rows.append([link, title, " ".join(words), *rest])
    columns = [
        "rotten_tomatoes_link",
        "movie_title",
        "movie_info",
        "critics_consensus",
        "content_rating",
        "genres",
        "directors",
        "original_release_date",
        "streaming_release_date",
        "runtime",
        "tomatometer_rating",
        "year",
    ]
    return pd.DataFrame(rows, columns=columns)
