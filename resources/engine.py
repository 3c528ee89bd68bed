"""The engine layer's records and the `LLMEngine` interface (DESIGN.md section 3).

Invariants every engine keeps:
- `run` returns exactly one `Response` per `Request`, in request order, with the same `id`;
  a request that fails is returned with `error` set, never dropped.
- `cached_tokens <= prompt_tokens` on every response; `RunStats` sums them over the run.
- `engine_time_s` is simulated seconds for the simulated engine, measured seconds otherwise.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from llm_assets.output_spec import OutputSpec

__all__ = ["LLMEngine", "OutputSpec", "Request", "Response", "RunResult", "RunStats"]


@dataclass(frozen=True)
class Request:
    """One LLM call: a fully rendered prompt and what its answer may be."""

    id: str
    prompt: str
    max_tokens: int = 16
    output: OutputSpec = field(default_factory=OutputSpec.text)
    priority: int = 0
    """Lower runs earlier (vLLM's convention) under priority scheduling."""


@dataclass(frozen=True)
class Response:
    """The answer to one `Request` (or why there is none: `error`)."""

    id: str
    text: str
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    ttft_s: float
    """Seconds from the run's start to this request's first output token."""
    finish_s: float
    """Seconds from the run's start to this request's last output token."""
    error: str | None = None
    cached_tokens_known: bool = True
    """False when the server did not report cached tokens (`cached_tokens` is then 0)."""

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class RunStats:
    """Totals of one `LLMEngine.run` (one relQuery)."""

    engine: str
    model: str
    hardware: str
    n_requests: int
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    engine_time_s: float
    wall_time_s: float
    errors: int = 0
    cached_tokens_unknown: int = 0
    """Answered requests whose server did not report cached tokens (counted as 0 in
    `cached_tokens`): when > 0, `token_hit_rate` is unknown, not 0."""

    @property
    def token_hit_rate(self) -> float:
        """Cached prompt tokens / prompt tokens (0.0 for an empty run)."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def cached_tokens_reported(self) -> bool:
        """Whether every answered request's cached tokens were reported by the engine."""
        return self.cached_tokens_unknown == 0

    def __add__(self, other: RunStats) -> RunStats:
        """Totals of two runs (engine, model and hardware of the first): the one place run
        totals are added up. Times add: the runs are taken to be sequential."""
        return replace(
            self,
            **{
                f: getattr(self, f) + getattr(other, f)
                for f in (
                    "n_requests",
                    "prompt_tokens",
                    "cached_tokens",
                    "output_tokens",
                    "engine_time_s",
                    "wall_time_s",
                    "errors",
                    "cached_tokens_unknown",
                )
            },
        )


@dataclass(frozen=True)
class RunResult:
    responses: list[Response]
    stats: RunStats
    stopped: str | None = None
    """Set when the engine stopped before serving everything (bad credentials, a dead
    server): the one-line reason; the runner then sends nothing more."""


class LLMEngine(ABC):
    """Anything that turns requests into responses: simulated, in-process vLLM, or HTTP."""

    name: str = "engine"

    @abstractmethod
    def run(self, relquery_id: str, requests: Sequence[Request]) -> RunResult:
        """Serve `requests` (one relQuery) in submission order; see the module invariants."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release held resources (GPU memory, HTTP pools). Safe to call twice."""
