"""Seeded synthetic tables shaped like the tables GGR lost on in the independent evaluation
(issue 14): made-up words, real shapes. Each is a pandas DataFrame of strings, columns in the
order a file would have them.

- `claims`: FEVER-like: numeric id, 3-way label, claim sentences that lead with an entity
  (many claims per entity, all distinct), evidence as near-unique JSON of about 75 chars.
- `reviews`: file order leads with a movie link and short categoricals; one ~260-char
  near-unique review text (where column statistics put the text first).
- `critics16`: 16 columns: short categoricals, near-functional dependencies (movie -> title,
  rating, genre with a little noise), a JSON-ish column and a long near-unique text.
- `movie_info12`: 12 columns of movie metadata, long info text shared by a movie's rows, some
  columns nearly functionally dependent on the movie.

The two tables GGR still lost on to the authors' GGR by a hair in issue 24 (item 4):
- `claims_rows`: `claims` where each row has its own id (sequential, as the rows of a file are
  numbered), so the id and the evidence JSON are both all-distinct (10k rows in the issue).
- `rt_movies`: one row per movie, 12 columns: a long description, a mostly empty critics
  consensus, two release dates (often empty), genre lists, runtime and rating numbers
  (1,560 rows in the issue).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

_SYLLABLES = "ka lo mi ne ru sa ti vo be da fe gi hu ja ko le ma no pi re si to va we zo".split()
_VERBS = (
    "is a",
    "was born in",
    "starred in",
    "is the capital of",
    "won the",
    "directed",
    "was released in",
    "is part of",
    "played for",
    "wrote",
    "is located in",
    "founded",
)


def _words(rng: np.random.Generator, n: int, low: int, high: int, title: bool = False) -> list:
    """n made-up phrases of low..high words (two syllables each)."""
    syl = np.array(_SYLLABLES, dtype=object)
    counts = rng.integers(low, high + 1, size=n)
    parts = syl[rng.integers(0, len(syl), size=(n, 2 * high))]
    out = []
    for i in range(n):
        words = [parts[i, 2 * k] + parts[i, 2 * k + 1] for k in range(counts[i])]
        out.append(" ".join(w.capitalize() for w in words) if title else " ".join(words))
    return out


def _pick(rng: np.random.Generator, pool: list, n: int, skew: float = 1.1) -> np.ndarray:
    """n draws from `pool` with Zipf-like weights."""
    weights = 1.0 / np.arange(1, len(pool) + 1) ** skew
    return np.asarray(pool, dtype=object)[rng.choice(len(pool), size=n, p=weights / weights.sum())]


def _noisy(rng: np.random.Generator, values: np.ndarray, pool: list, rate: float) -> np.ndarray:
    """`values` with a fraction `rate` replaced by random picks: a near-functional dependency."""
    out = values.copy()
    flip = rng.random(len(values)) < rate
    out[flip] = np.asarray(pool, dtype=object)[rng.integers(0, len(pool), size=int(flip.sum()))]
    return out


def claims(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n_claims = max(n * 10 // 22, 2)  # a claim has about 2.2 evidence rows, as in FEVER
    entities = _words(rng, max(n_claims // 6, 2), 1, 3, title=True)
    entity = _pick(rng, entities, n_claims, skew=0.8)
    verb = _pick(rng, list(_VERBS), n_claims, skew=0.5)
    objects = _words(rng, n_claims, 2, 5)
    claim = np.array(
        [f"{e} {v} {o}." for e, v, o in zip(entity, verb, objects, strict=True)], dtype=object
    )
    ids = rng.choice(np.arange(1, 250_000), size=n_claims, replace=False).astype(str)
    label = _pick(rng, ["SUPPORTS", "REFUTES", "NOT ENOUGH INFO"], n_claims, skew=0.3)
    which = np.sort(rng.integers(0, n_claims, size=n))
    pages = [e.replace(" ", "_") for e in entity[which]]
    evidence = [
        json.dumps([[[int(a), int(b), p, int(s)]]])
        for a, b, p, s in zip(
            rng.integers(10_000, 300_000, n),
            rng.integers(10_000, 300_000, n),
            pages,
            rng.integers(0, 40, n),
            strict=True,
        )
    ]
    return pd.DataFrame(
        {"id": ids[which], "label": label[which], "claim": claim[which], "evidence": evidence}
    )


def reviews(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    movies = [f"m/{w.replace(' ', '_')}" for w in _words(rng, max(n // 40, 2), 2, 4)]
    critics = _words(rng, max(n // 20, 2), 2, 2, title=True)
    publishers = _words(rng, 300, 1, 3, title=True)
    link = _pick(rng, movies, n, skew=0.7)
    critic = _pick(rng, critics, n)
    return pd.DataFrame(
        {
            "rotten_tomatoes_link": link,
            "critic_name": critic,
            "top_critic": _pick(rng, ["False", "True"], n, skew=2.0),
            "publisher_name": _noisy(rng, critic.copy(), publishers, 1.0),
            "review_type": _pick(rng, ["Fresh", "Rotten"], n, skew=0.5),
            "review_score": _pick(rng, ["3/5", "4/5", "2/5", "B", "A-", "3.5/4", ""], n),
            "review_date": _pick(
                rng, [f"20{y:02d}-{m:02d}-01" for y in range(20) for m in range(1, 13)], n
            ),
            "review_content": [" ".join(_words(rng, 1, 30, 45)) for _ in range(n)],
        }
    )


def critics16(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    movies = _words(rng, max(n // 30, 2), 2, 4, title=True)
    movie = _pick(rng, movies, n, skew=0.9)
    index = {m: k for k, m in enumerate(movies)}
    genres = _words(rng, 20, 1, 2)
    genre_of = np.asarray(genres, dtype=object)[[index[m] % 20 for m in movie]]
    rating_of = np.asarray(["G", "PG", "PG-13", "R", "NR"], dtype=object)[
        [index[m] % 5 for m in movie]
    ]
    directors = _words(rng, max(n // 60, 2), 2, 2, title=True)
    director_of = np.asarray(directors, dtype=object)[[index[m] % len(directors) for m in movie]]
    return pd.DataFrame(
        {
            "review_id": rng.choice(np.arange(10**6), size=n, replace=False).astype(str),
            "movie_title": movie,
            "rating": _noisy(rng, rating_of, ["G", "PG", "R"], 0.02),
            "genre": _noisy(rng, genre_of, genres, 0.03),
            "director": _noisy(rng, director_of, directors, 0.01),
            "critic": _pick(rng, _words(rng, 500, 2, 2, title=True), n),
            "top_critic": _pick(rng, ["False", "True"], n, skew=2.0),
            "publisher": _pick(rng, _words(rng, 200, 1, 3, title=True), n),
            "review_type": _pick(rng, ["Fresh", "Rotten"], n, skew=0.5),
            "score": _pick(rng, ["3/5", "4/5", "2/5", "B", "A-", ""], n),
            "year": _pick(rng, [str(y) for y in range(1990, 2021)], n, skew=0.3),
            "runtime": [f"{90 + index[m] % 60} min" for m in movie],
            "streaming": _pick(rng, ["Netflix", "Hulu", "Prime", "None"], n, skew=0.6),
            "tags": [
                json.dumps({"g": g, "k": int(k)})
                for g, k in zip(genre_of, rng.integers(0, 9, n), strict=True)
            ],
            "audience": _pick(rng, [f"{k}%" for k in range(40, 100)], n, skew=0.2),
            "review": [" ".join(_words(rng, 1, 15, 30)) for _ in range(n)],
        }
    )


def movie_info12(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    movies = _words(rng, max(n // 25, 2), 2, 4, title=True)
    info = {m: " ".join(_words(rng, 1, 40, 60)) for m in movies}
    movie = _pick(rng, movies, n, skew=0.8)
    index = {m: k for k, m in enumerate(movies)}
    studios = _words(rng, 40, 1, 2, title=True)
    return pd.DataFrame(
        {
            "movie_title": movie,
            "movie_info": [info[m] for m in movie],
            "content_rating": _noisy(
                rng,
                np.asarray([["G", "PG", "PG-13", "R"][index[m] % 4] for m in movie], dtype=object),
                ["NR"],
                0.02,
            ),
            "genres": [f"Drama, {['Comedy', 'Action', 'Horror'][index[m] % 3]}" for m in movie],
            "directors": [_SYLLABLES[index[m] % 25].capitalize() + " Dirk" for m in movie],
            "studio": _noisy(
                rng,
                np.asarray([studios[index[m] % 40] for m in movie], dtype=object),
                studios,
                0.05,
            ),
            "original_release_date": [
                f"19{50 + index[m] % 50}-0{1 + index[m] % 9}-15" for m in movie
            ],
            "runtime": [str(80 + index[m] % 70) for m in movie],
            "tomatometer_status": _pick(rng, ["Fresh", "Rotten", "Certified-Fresh"], n, skew=0.5),
            "tomatometer_rating": _pick(rng, [str(k) for k in range(100)], n, skew=0.1),
            "audience_count": rng.integers(0, 10**6, size=n).astype(str),
            "critics_consensus": _pick(rng, [""] + _words(rng, 300, 8, 14), n, skew=1.5),
        }
    )


def claims_rows(n: int, seed: int = 0) -> pd.DataFrame:
    return claims(n, seed).assign(id=[str(100_000 + i) for i in range(n)])


_GENRES = [
    "Drama",
    "Comedy",
    "Action & Adventure",
    "Horror",
    "Documentary",
    "Art House & International",
    "Mystery & Suspense",
    "Romance",
    "Kids & Family",
]
# Share of empty cells per column of `rt_movies`.
_RT_EMPTY = {
    "critics_consensus": 0.9,
    "movie_info": 0.04,
    "streaming_release_date": 0.4,
    "original_release_date": 0.14,
    "runtime": 0.04,
    "directors": 0.02,
    "tomatometer_rating": 0.02,
}


def rt_movies(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    titles = _words(rng, n, 1, 4, title=True)
    genres = [
        ", ".join(sorted(set(_pick(rng, _GENRES, int(rng.integers(1, 4)), skew=0.8))))
        for _ in range(n)
    ]

    def dates() -> list[str]:
        years, months, days = (
            rng.integers(1950, 2020, n),
            rng.integers(1, 13, n),
            rng.integers(1, 29, n),
        )
        return [f"{y}-{m:02d}-{d:02d}" for y, m, d in zip(years, months, days, strict=True)]

    frame = pd.DataFrame(
        {
            "rotten_tomatoes_link": [f"m/{t.lower().replace(' ', '_')}" for t in titles],
            "movie_title": titles,
            "movie_info": [" ".join(_words(rng, 1, 25, 70)) for _ in range(n)],
            "critics_consensus": [" ".join(_words(rng, 1, 10, 25)) for _ in range(n)],
            "content_rating": _pick(rng, ["R", "NR", "PG-13", "PG", "G", "NC17"], n, skew=0.7),
            "genres": genres,
            "directors": _pick(rng, _words(rng, n // 2, 2, 2, title=True), n, skew=0.3),
            "original_release_date": dates(),
            "streaming_release_date": dates(),
            "runtime": rng.integers(70, 160, n).astype(str),
            "production_company": _pick(rng, [""] + _words(rng, 120, 1, 3, title=True), n),
            "tomatometer_rating": rng.integers(0, 101, n).astype(str),
        }
    )
    empty = np.random.default_rng(seed + 9)
    for column, rate in _RT_EMPTY.items():
        frame.loc[empty.random(n) < rate, column] = ""
    return frame


SHAPES = {
    "claims": claims,
    "reviews": reviews,
    "critics16": critics16,
    "movie_info12": movie_info12,
    "claims_rows": claims_rows,
    "rt_movies": rt_movies,
}
