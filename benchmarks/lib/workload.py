"""relQuery serving workloads as in relserve.txt §5.1: templated LLM calls over a movie table.

A workload is `num_relqueries` relQueries (paper: 100), each
- from one of five templates drawn uniformly (`TEMPLATES`: filtering, classification, rating,
  summarization, open question; output limits 5, 10, 5, 50 and 100 tokens, as the paper's),
- over a window of n consecutive rows of a movie-review table (a user selecting rows of a
  sheet), n uniform in [`min_requests`, `max_requests`] (paper: 1-100), the window's start
  uniform over the table (paper: the first 10k rows of each dataset),
- arriving by a Poisson process of `rate` relQueries per second (exponential gaps).

The table is `llm_assets.data.movie_reviews` (reviews joined with their movie; the project's
one synthetic Rotten Tomatoes shape).

Invariants: the same config gives the same workload. The relQuery contents depend on `seed`
only and the arrivals on `seed` and `rate`, through unit-rate gaps scaled by 1 / `rate`: every
rate of one seed serves the same relQueries in the same order, only closer together (common
random numbers across loads). Arrivals are non-decreasing and start after 0.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from llm_assets.data.movies import movie_reviews
from llm_assets.output_spec import OutputSpec
from resources.engine import Request
from resources.sim.relquery import RelQuery

__all__ = ["TABLE_COLUMNS", "TEMPLATES", "RelQueryTemplate", "WorkloadConfig", "generate_workload"]

TABLE_COLUMNS = ("movie_title", "movie_info", "review_content", "review_type")
"""The movie table's columns the templates may render."""


@dataclass(frozen=True)
class RelQueryTemplate:
    """A task template zeta of relserve.txt Definition 2.1, with its output limit OL."""

    kind: str
    instruction: str
    fields: tuple[str, ...]
    """Table columns rendered after the instruction, in this order (`name: value` lines)."""
    output: OutputSpec
    max_tokens: int
    """OL: the output limit of every request of a relQuery from this template."""

    def render(self, row: dict[str, str]) -> str:
        lines = [self.instruction]
        lines.extend(f"{f}: {row[f]}" for f in self.fields)
        lines.append("Answer:")
        return "\n".join(lines)


TEMPLATES: tuple[RelQueryTemplate, ...] = (
    RelQueryTemplate(
        "filtering",
        "Decide whether this movie is suitable for children based on its synopsis and the "
        "user's review. Answer Yes or No and nothing else.",
        ("movie_info", "review_content"),
        OutputSpec.choice(["Yes", "No"]),
        5,
    ),
    RelQueryTemplate(
        "classification",
        "Categorize the sentiment of the user's review of a movie as Negative, Positive, or "
        "Neutral. Output only the category.",
        ("review_content",),
        OutputSpec.choice(["Negative", "Positive", "Neutral"]),
        10,
    ),
    RelQueryTemplate(
        "rating",
        "Predict the user's rating (1 to 5) for the movie given the user's review and the "
        "movie's synopsis. Output only the digit and nothing else.",
        ("review_content", "movie_info"),
        OutputSpec.number(1, 5),
        5,
    ),
    RelQueryTemplate(
        "summarization",
        "Summarize the user's review of the movie within 20 words, mentioning the movie.",
        ("movie_title", "movie_info", "review_content"),
        OutputSpec.text(),
        50,
    ),
    RelQueryTemplate(
        "open",
        "Who are the most likely audiences for this movie, given its synopsis and a user's "
        "review? Explain briefly.",
        ("movie_info", "review_content"),
        OutputSpec.text(),
        100,
    ),
)
"""The five relQuery types of relserve.txt Table 5 over the movie table."""


@dataclass(frozen=True)
class WorkloadConfig:
    """One serving trace."""

    rate: float = 1.0
    """Poisson arrival rate, relQueries per second (> 0)."""
    num_relqueries: int = 100
    """RelQueries in the trace (paper: 100)."""
    min_requests: int = 1
    """Fewest requests (rows) per relQuery."""
    max_requests: int = 100
    """Most requests (rows) per relQuery (paper: sizes in 1-100)."""
    table_rows: int = 10_000
    """Rows of the movie-review table the windows are drawn from (paper: first 10k rows)."""
    seed: int = 0
    """Seeds the table, the relQuery contents and the arrivals."""

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError(f"rate must be > 0 relQueries per second, got {self.rate}")
        if self.num_relqueries < 1:
            raise ValueError(f"num_relqueries must be >= 1, got {self.num_relqueries}")
        if not 1 <= self.min_requests <= self.max_requests:
            raise ValueError(
                "need 1 <= min_requests <= max_requests, got "
                f"min_requests={self.min_requests} max_requests={self.max_requests}"
            )
        if self.table_rows < self.max_requests:
            raise ValueError(
                f"table_rows ({self.table_rows}) must be >= max_requests ({self.max_requests})"
            )


def generate_workload(config: WorkloadConfig) -> list[RelQuery]:
    """The relQueries of one trace, in arrival order (see the module docstring)."""
    table = movie_reviews(config.table_rows, seed=config.seed)
    rows = table[list(TABLE_COLUMNS)].astype(str).to_dict("records")
    content = random.Random(f"relquery-content-{config.seed}")
    gaps = random.Random(f"relquery-arrivals-{config.seed}")
    out: list[RelQuery] = []
    t = 0.0
    for i in range(config.num_relqueries):
        template = content.choice(TEMPLATES)
        n = content.randint(config.min_requests, config.max_requests)
        start = content.randrange(len(rows) - n + 1)
        t += gaps.expovariate(1.0) / config.rate
        rid = f"rq{i:03d}-{template.kind}"
        requests = [
            Request(
                id=f"{rid}/{start + j}",
                prompt=template.render(rows[start + j]),
                max_tokens=template.max_tokens,
                output=template.output,
            )
            for j in range(n)
        ]
        out.append(RelQuery(rid, requests, t))
    return out
