"""The benchmark LLM queries (DESIGN.md section 7; `llm_queries_relational.txt` section 7.1.2).

`QUERIES[query][dataset]` is the SQL text; `compile_query(query, dataset)` compiles it.
Movies and SQuAD are the queries of DESIGN.md section 7 verbatim (Q3 written out as SQL: Q2's
LLM filter, then Q1's LLM projection on the rows that pass). The Products variants follow the
paper's description of them (section 7.3): Q1 asks whether the quality a review infers matches
the advertised description; Q2 filters on `r.verified = True` and the same LLM filter as Movies;
Q3 combines them; Q4 averages the satisfaction score per `asin`.

Tables (bound to DuckDB relations by the caller):
- movies: `reviews(rotten_tomatoes_link, review_content, review_type)`,
  `movies(rotten_tomatoes_link, movie_title, movie_info)`;
- products: `reviews(asin, reviewText, verified, overall)`, `metadata(asin, description)`;
- squad: `squad(id, title, context, question, answers, is_impossible)`.

>>> sorted(QUERIES), sorted(QUERIES["q1"])
(['q1', 'q2', 'q3', 'q4', 'q5'], ['movies', 'products'])
>>> [c.name for c in compile_query("q3", "movies").llm_calls]
['llm_1', 'llm_2']
"""

from __future__ import annotations

from llm_assets.query.model import LLMQuery
from llm_assets.sql.compiler import compile_sql

DATASETS: tuple[str, ...] = ("movies", "products", "squad")

TABLES: dict[str, dict[str, tuple[str, ...]]] = {
    "movies": {
        "reviews": ("rotten_tomatoes_link", "review_content", "review_type"),
        "movies": ("rotten_tomatoes_link", "movie_title", "movie_info"),
    },
    "products": {
        "reviews": ("asin", "reviewText", "verified", "overall"),
        "metadata": ("asin", "description"),
    },
    "squad": {
        "squad": ("id", "title", "context", "question", "answers", "is_impossible"),
    },
}
"""Dataset -> table name used in FROM -> its columns."""

_MOVIES_Q1 = "Recommend movies for the user based on {movie_info} and {review_content}"
_MOVIES_Q2 = (
    "Analyze whether this movie would be suitable for kids based on {movie_info} "
    "and {review_content}"
)
_MOVIES_Q4 = (
    "Rate a satisfaction score between 0 (bad) and 5 (good) based on {review_content} "
    "and {movie_info}: "
)
_PRODUCTS_Q1 = (
    "Analyze whether the product quality inferred from the review {reviewText} "
    "matches the quality advertised in the product {description}"
)
_PRODUCTS_Q2 = (
    "Analyze whether this product would be suitable for kids based on {description} "
    "and {reviewText}"
)
_PRODUCTS_Q4 = (
    "Rate a satisfaction score between 0 (bad) and 5 (good) based on {reviewText} "
    "and {description}: "
)

_MOVIES_JOIN = "reviews r JOIN movies m ON r.rotten_tomatoes_link = m.rotten_tomatoes_link"
_PRODUCTS_JOIN = "reviews r JOIN metadata p ON r.asin = p.asin"

QUERIES: dict[str, dict[str, str]] = {
    "q1": {
        "movies": f"""SELECT LLM('{_MOVIES_Q1}',
           m.movie_info, r.review_content)
FROM {_MOVIES_JOIN};""",
        "products": f"""SELECT LLM('{_PRODUCTS_Q1}',
           r.reviewText, p.description)
FROM {_PRODUCTS_JOIN};""",
    },
    "q2": {
        "movies": f"""SELECT m.movie_title
FROM movies m JOIN reviews r ON r.rotten_tomatoes_link = m.rotten_tomatoes_link
WHERE LLM('{_MOVIES_Q2}',
          m.movie_info, r.review_content) = 'Yes'
  AND r.review_type = 'Fresh';""",
        "products": f"""SELECT r.asin
FROM {_PRODUCTS_JOIN}
WHERE LLM('{_PRODUCTS_Q2}',
          p.description, r.reviewText) = 'Yes'
  AND r.verified = True;""",
    },
    "q3": {
        "movies": f"""SELECT LLM('{_MOVIES_Q1}',
           m.movie_info, r.review_content)
FROM {_MOVIES_JOIN}
WHERE LLM('{_MOVIES_Q2}',
          m.movie_info, r.review_content) = 'Yes'
  AND r.review_type = 'Fresh';""",
        "products": f"""SELECT LLM('{_PRODUCTS_Q1}',
           r.reviewText, p.description)
FROM {_PRODUCTS_JOIN}
WHERE LLM('{_PRODUCTS_Q2}',
          p.description, r.reviewText) = 'Yes'
  AND r.verified = True;""",
    },
    "q4": {
        "movies": f"""SELECT m.movie_title, AVG(LLM('{_MOVIES_Q4}',
                               r.review_content, m.movie_info)) AS avg_score
FROM {_MOVIES_JOIN} GROUP BY m.movie_title;""",
        "products": f"""SELECT r.asin, AVG(LLM('{_PRODUCTS_Q4}',
                        r.reviewText, p.description)) AS avg_score
FROM {_PRODUCTS_JOIN} GROUP BY r.asin;""",
    },
    "q5": {
        "squad": """SELECT LLM('Given the following {context}, answer this {question}',
           similarity_search(s.question, k => 3), s.question)
FROM squad s WHERE NOT s.is_impossible;""",
    },
}
"""Query name -> dataset -> LLM-SQL text."""


def pairs() -> list[tuple[str, str]]:
    """Every (query, dataset) pair with a SQL text, in registry order."""
    return [(q, d) for q, by_dataset in QUERIES.items() for d in by_dataset]


def compile_query(query: str, dataset: str) -> LLMQuery:
    """The compiled `LLMQuery` named `query` (e.g. `q2`) for `dataset` (e.g. `movies`).

    Raises ValueError listing the valid query names, or the datasets that query supports.
    """
    if query not in QUERIES:
        raise ValueError(f"unknown query {query!r}; expected one of {sorted(QUERIES)}")
    by_dataset = QUERIES[query]
    if dataset not in by_dataset:
        raise ValueError(
            f"query {query!r} has no variant for dataset {dataset!r}; "
            f"expected one of {sorted(by_dataset)}"
        )
    return compile_sql(by_dataset[dataset], name=query, tables=TABLES[dataset])


# ---- system prompts ---------------------------------------------------------------------
# The paper's harness sends a system prompt before each query's instruction: with it, the
# instruction part of a prompt is 172 (Movies) / 141 (Products) tokens for Q1 and 166 / 112
# for Q4, Q1's being the longest (llm_queries_relational.txt section 7.3). Ours are our own
# words, sized so that system prompt + instruction count 164 / 137 (Q1) and 153 / 115 (Q4)
# tokens with the simulator's tokenizer (152 / 123 and 144 / 107 with Llama 3's; the paper
# counted with Llama 2's, which splits English into more tokens). Q2, Q3 and Q5 get the
# general preamble alone (about 100 tokens with the instruction): their lengths are not
# published.

_PREAMBLE = (
    "You are a careful data analyst working through a table one row at a time. Each request "
    "gives you an instruction followed by the fields of a single row, one field per line. Use "
    "only the information in those fields; do not invent facts that are not there. Keep the "
    "answer short and in exactly the format the instruction asks for, with no preamble, "
    "no explanation and no apology."
)
_RECOMMEND = (
    " The user wrote the review below about a movie they watched. Think about what the "
    "review says they liked or disliked, and about the genre, tone and themes described in "
    "the movie information, then suggest films this user would probably enjoy next. Prefer "
    "well known titles, name each film once, and separate titles with commas."
)
_MATCH = (
    " Compare what the customer says about the product they received with what the seller "
    "promises in the description, and answer whether the two agree."
)
_RATE_MOVIE = (
    " A satisfaction score summarises how happy the reviewer was with the movie, judged "
    "from the tone of the review and what it praises or criticises. Answer with one number "
    "only, using a decimal point if needed."
)
_RATE_PRODUCT = " Answer with one number only."

SYSTEM_PROMPTS: dict[str, dict[str, str]] = {
    "q1": {"movies": _PREAMBLE + _RECOMMEND, "products": _PREAMBLE + _MATCH},
    "q2": {"movies": _PREAMBLE, "products": _PREAMBLE},
    "q3": {"movies": _PREAMBLE, "products": _PREAMBLE},
    "q4": {"movies": _PREAMBLE + _RATE_MOVIE, "products": _PREAMBLE + _RATE_PRODUCT},
    "q5": {"squad": _PREAMBLE},
}
"""Query -> dataset -> the harness's system prompt (sent before the instruction)."""
