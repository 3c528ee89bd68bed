"""The tables `python -m benchmarks.fleet` and `benchmarks.ray_blocks` send.

    tables = build_tables(rows=400)

Each is planned ONCE by the product's own stage functions
(`llm_assets.pipeline.run.run_query(..., send=False)`: filter, retrieval, dedup, GGR reorder,
prompt rendering against the simulated engine's context window), and every strategy then sends
exactly that list of requests, in that order:

- `movies`: Q1 over `../shared/data/movies_small.csv` (real Rotten Tomatoes reviews joined with
  movie info, 51 movies; a seeded sample of `rows` reviews; the paper-shaped synthetic table
  where the file is absent), the harness's system prompt: each movie's long description is
  shared by its reviews;
- `rag`: Q5 over synthetic SQuAD-like questions, each with its 3 TF-IDF nearest contexts;
- `products`: Q1 over a seeded sample of `rows` reviews of the full-size synthetic Amazon-like
  table (144 products) joined with product descriptions. Sampling a large table keeps its many
  prefix groups; a table generated at 600 rows would have 6 products;
- `claims`: a FEVER-like table of one short field (a claim of ~10 words) behind a short
  instruction: nothing but the instruction is shared, every request is its own prefix group;
- `critics` (short prefix, issue 34): `Does the critic {critic} of {publisher} praise the
  acting in this review? {review}` over a seeded sample of the real reviews of
  `movies_small.csv`, each review given a critic and the critic's publisher from a seeded
  generator (`critics_frame`: 60 critics over 14 publishers, names of 8-25 characters): the
  rows of one critic share about 50 characters, one or two KV blocks, before a long
  distinct review;
- `factcheck` (short prefix, decode-bound, issue 34): two short verdict fields (the fact
  checker, its rating) before a claim built from a row of `contributions.csv` (FEC
  individual contributions: name, city, occupation, employer, amount, committee, date),
  the answer a verdict and one sentence (`max_tokens` 64).

"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.lib.fault_setup import MODEL
from resources.engine import Request

__all__ = ["TABLES", "PlannedTable", "build_tables", "claims_frame", "plan_table"]

_Source = tuple[Any, dict[str, pd.DataFrame], str, str]
"""What a table's builder gives: its query, its tables, the system prompt, a description."""

TABLES = ("movies", "rag", "products", "claims", "critics", "factcheck")
CONTRIBUTIONS_CSV = Path(__file__).resolve().parents[3] / "shared" / "data" / "contributions.csv"
CRITICS_TEMPLATE = ("Does the critic {critic} of {publisher} praise the acting in this review? "
                    "{review}")  # fmt: skip
FACTCHECK_TEMPLATE = ("Fact checker: {checker}. Rating: {rating}. Is the rating right about this "
                      "claim? Answer with the rating and one sentence. Claim: {claim}")  # fmt: skip
MOVIES_CSV = Path(__file__).resolve().parents[3] / "shared" / "data" / "movies_small.csv"
"""Real reviews joined with movie info (1,019 rows, 51 movies); a synthetic table with the
paper's Movies statistics is used where the file is absent."""

CLAIMS_INSTRUCTION = (
    "Classify the claim as SUPPORTED, REFUTED or NOT ENOUGH INFO from what is known about "
    "its subject. Answer with the label only: {claim}"
)
_SUBJECTS = (
    "Nikolaj Coster-Waldau", "The Beatles", "Marie Curie", "Mount Kilimanjaro", "Toyota",
    "The Amazon River", "Serena Williams", "Python", "The Eiffel Tower", "Ada Lovelace",
    "Brazil", "Jupiter", "The Great Gatsby", "Nelson Mandela", "Mozart", "Tokyo", "Netflix",
    "The Louvre", "Albert Einstein", "Lake Baikal", "Frida Kahlo", "The Nile", "Honda",
    "Leonardo da Vinci", "Canada", "Mars", "Hamlet", "Barack Obama", "Beethoven", "Sydney",
)  # fmt: skip
_VERBS = (
    "was born in", "worked with", "is located in", "won an award in", "was founded in",
    "is older than", "appeared in", "was written before", "is larger than", "lived in",
    "collaborated with", "is famous for", "was renamed in", "visited", "is part of",
)  # fmt: skip
_OBJECTS = (
    "1865", "the Fox Broadcasting Company", "Africa", "Paris", "a documentary", "1923",
    "South America", "the United Nations", "Vienna", "the Pacific Ocean", "a novel",
    "the 20th century", "Japan", "the Olympic Games", "London", "a famous painting",
    "the Roman Empire", "2001", "an opera", "the solar system", "a television series",
)  # fmt: skip


def claims_frame(num_rows: int, seed: int = 0) -> pd.DataFrame:
    """`claims(id, claim)`: FEVER-like short claims ("<subject> <verb> <object>."), a subject
    spread over several claims as in FEVER, about 1 in 20 a repeat of an earlier claim."""
    rng = np.random.default_rng(seed)
    claims: list[str] = []
    for _ in range(num_rows):
        if claims and rng.random() < 0.05:
            claims.append(claims[int(rng.integers(len(claims)))])
            continue
        claims.append(
            f"{_SUBJECTS[int(rng.integers(len(_SUBJECTS)))]} "
            f"{_VERBS[int(rng.integers(len(_VERBS)))]} "
            f"{_OBJECTS[int(rng.integers(len(_OBJECTS)))]}."
        )
    return pd.DataFrame({"id": [f"c{i}" for i in range(num_rows)], "claim": claims})


_FIRST = ("Ann", "Bob", "Carla", "Dmitri", "Eve", "Farid", "Grace", "Hiro", "Ines", "Jon",
          "Kemal", "Lena", "Marta", "Nils", "Olu", "Priya", "Quentin", "Rosa", "Sven",
          "Tomoko")  # fmt: skip
_LAST = ("Lee", "Marsh", "Dupont-Smith", "O'Brien", "Nakamura", "Okafor", "Rossi", "Varga",
         "Whitfield", "Castellanos", "Ng", "Bergström")  # fmt: skip
_PUBLISHERS = ("Variety", "The Guardian", "Slate", "Rolling Stone", "IndieWire", "Time Out",
               "The New York Times", "Empire", "Vulture", "NPR", "The Atlantic", "Screen Daily",
               "Little White Lies", "RogerEbert.com")  # fmt: skip


def critics_frame(rows: int, seed: int = 0) -> pd.DataFrame:
    """`reviews(critic, publisher, review)`: `rows` non-empty reviews of `movies_small.csv`
    (seeded sample), each by one of 60 seeded critics, each critic writing for one publisher."""
    rng = np.random.default_rng(seed)
    pick = lambda names: names[int(rng.integers(len(names)))]  # noqa: E731
    critics = sorted({f"{pick(_FIRST)} {pick(_LAST)}" for _ in range(200)})[:60]
    home = {c: _PUBLISHERS[int(rng.integers(len(_PUBLISHERS)))] for c in critics}
    reviews = pd.read_csv(MOVIES_CSV)["review_content"].dropna().astype(str)
    reviews = reviews[reviews.str.len() > 20].reset_index(drop=True)
    picked = reviews.sample(min(rows, len(reviews)), random_state=seed).tolist()
    who = [critics[int(rng.integers(len(critics)))] for _ in picked]
    return pd.DataFrame({"critic": who, "publisher": [home[c] for c in who], "review": picked})


_CHECKERS = ("PolitiFact", "FactCheck.org", "Snopes", "AFP Fact Check", "Full Fact",
             "Lead Stories")  # fmt: skip
_RATINGS = ("True", "Mostly True", "Half True", "Mostly False", "False", "Pants on Fire")


def factcheck_frame(rows: int, seed: int = 0) -> pd.DataFrame:
    """`checks(checker, rating, claim)`: `rows` claims, each a sentence from one row of
    `contributions.csv` (a seeded sample), with a seeded checker and rating."""
    rng = np.random.default_rng(seed)
    frame = pd.read_csv(CONTRIBUTIONS_CSV, dtype=str).fillna("")
    frame = frame.sample(min(rows, len(frame)), random_state=seed)
    claims = [
        f"{r.NAME.strip().title()} of {r.CITY.title()}, {r.STATE}, {r.OCCUPATION.lower()} at "
        f"{r.EMPLOYER.title()}, gave ${r.TRANSACTION_AMT} to committee {r.CMTE_ID} "
        f"(candidate {r.CAND_ID or 'none'}) on {r.TRANSACTION_DT}."
        for r in frame.itertuples()
    ]
    return pd.DataFrame({
        "checker": [_CHECKERS[int(rng.integers(len(_CHECKERS)))] for _ in claims],
        "rating": [_RATINGS[int(rng.integers(len(_RATINGS)))] for _ in claims],
        "claim": claims,
    })  # fmt: skip


@dataclass(frozen=True)
class PlannedTable:
    """One table's request plan (dedup + GGR, the product's stage functions)."""

    name: str
    what: str
    rows: int
    """Rows of the joined table the query ran over."""
    requests: list[Request]
    """Requests in plan order (what every strategy sends)."""
    mean_prompt_tokens: float


def _sample(tables: dict[str, pd.DataFrame], table: str, rows: int, seed: int):
    """`tables` with `table` cut to a seeded sample of `rows` rows (all when it has fewer):
    a day's slice of a large table keeps its many prefix groups, where a table generated
    small would have a handful."""
    frame = tables[table]
    if rows < len(frame):
        frame = frame.sample(rows, random_state=seed).reset_index(drop=True)
    return {**tables, table: frame}


def _movies(rows: int, seed: int) -> _Source:
    from llm_assets.benchmark_queries import SYSTEM_PROMPTS, compile_query
    from llm_assets.data import generate, load_movies_joined

    query, system = compile_query("q1", "movies"), SYSTEM_PROMPTS["q1"]["movies"]
    if MOVIES_CSV.exists():
        tables = _sample(load_movies_joined(MOVIES_CSV), "reviews", rows, seed)
        what = (f"Q1 (movies): {MOVIES_CSV.name} (real Rotten Tomatoes reviews joined with "
                "movie info), harness system prompt")  # fmt: skip
    else:
        tables = _sample(generate("movies", seed=seed), "reviews", rows, seed)
        what = "Q1 (movies): synthetic reviews joined with movie info, harness system prompt"
    return query, tables, system, what


def _rag(rows: int, seed: int) -> _Source:
    from llm_assets.benchmark_queries import SYSTEM_PROMPTS, compile_query
    from llm_assets.data import generate

    what = "Q5 (RAG): synthetic SQuAD-like questions with their 3 nearest contexts (TF-IDF)"
    return (
        compile_query("q5", "squad"),
        generate("squad", rows, seed),
        SYSTEM_PROMPTS["q5"]["squad"],
        what,
    )


def _products(rows: int, seed: int) -> _Source:
    from llm_assets.benchmark_queries import SYSTEM_PROMPTS, compile_query
    from llm_assets.data import generate

    tables = _sample(generate("products", seed=seed), "reviews", rows, seed)
    what = ("Q1 (products): synthetic Amazon-like reviews joined with product descriptions, "
            "harness system prompt")  # fmt: skip
    return compile_query("q1", "products"), tables, SYSTEM_PROMPTS["q1"]["products"], what


_PAPER_TABLES: dict[str, Callable[[int, int], _Source]] = {
    "movies": _movies, "rag": _rag, "products": _products,
}  # fmt: skip
"""The paper's queries: table name -> (query, tables, system prompt, description) at `rows`."""

_SQL_TABLES: dict[str, tuple[str, str, tuple[str, ...], Callable[..., pd.DataFrame], str]] = {
    "claims": (
        f"SELECT LLM('{CLAIMS_INSTRUCTION}', c.claim) FROM claims c", "claims", ("id", "claim"),
        claims_frame, "claims (short prefix): one ~10-word claim behind a ~30-token instruction",
    ),
    "critics": (
        f"SELECT LLM('{CRITICS_TEMPLATE}', r.critic, r.publisher, r.review) FROM reviews r",
        "reviews", ("critic", "publisher", "review"), critics_frame,
        "critics (short prefix): a seeded critic and publisher (~50 characters) before a real "
        "review of movies_small.csv",
    ),
    "factcheck": (
        f"SELECT LLM('{FACTCHECK_TEMPLATE}', c.checker, c.rating, c.claim) FROM checks c",
        "checks", ("checker", "rating", "claim"), factcheck_frame,
        "factcheck (short prefix, decode-bound): checker and rating before a claim from a "
        "contributions.csv row, 64-token answers",
    ),
}  # fmt: skip
"""Tables of one LLM-SQL query each: name -> (SQL, table, its columns, its frame builder
`(rows, seed)`, description)."""

MAX_TOKENS = {"factcheck": 64}
"""Answer lengths other than the query's own: factcheck's verdict and one sentence."""


def plan_table(name: str, rows: int, seed: int = 0) -> PlannedTable:
    """Plan table `name` (one of `TABLES`) at `rows` rows with the product's planner."""
    from llm_assets.pipeline.options import QueryOptions
    from llm_assets.pipeline.run import run_query
    from llm_assets.pipeline.send import requests_from_plan
    from llm_assets.sql.compiler import compile_sql
    from resources.sim.engine import SimulatedEngine

    if name in _PAPER_TABLES:
        query, tables, system, what = _PAPER_TABLES[name](rows, seed)
    elif name in _SQL_TABLES:
        sql, table, columns, frame, what = _SQL_TABLES[name]
        query = compile_sql(sql, name=name, tables={table: columns})
        tables, system = {table: frame(rows, seed)}, ""
    else:
        raise ValueError(f"unknown table {name!r}; expected one of {list(TABLES)}")
    engine = SimulatedEngine("L4", MODEL)  # the sim server's tokenizer and context window
    options = QueryOptions(system_prompt=system)  # dedup + GGR (the defaults)
    run = run_query(query, tables, options, engine, send=False)
    stage = run.stages[0]
    requests = requests_from_plan(stage.plan, stage.call)
    if name in MAX_TOKENS:
        requests = [dataclasses.replace(r, max_tokens=MAX_TOKENS[name]) for r in requests]
    if not requests:
        raise ValueError(f"table {name!r} at {rows} rows planned no request")
    tokens = [engine.count_tokens(r.prompt) for r in requests]
    return PlannedTable(name, what, len(run.base), requests, sum(tokens) / len(tokens))


def build_tables(
    rows: int, names: Sequence[str] = TABLES, seed: int = 0
) -> dict[str, PlannedTable]:
    """Every table of `names` planned at `rows` rows (RAG: `rows` questions)."""
    return {name: plan_table(name, rows, seed) for name in names}
