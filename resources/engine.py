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
from dataclasses import dataclass, field

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

    @property
    def token_hit_rate(self) -> float:
        """Cached prompt tokens / prompt tokens (0.0 for an empty run)."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclass(frozen=True)
class RunResult:
    responses: list[Response]
    stats: RunStats


class LLMEngine(ABC):
    """Anything that turns requests into responses: simulated, in-process vLLM, or HTTP."""

    name: str = "engine"

    @abstractmethod
    def run(self, relquery_id: str, requests: Sequence[Request]) -> RunResult:
        """Serve `requests` (one relQuery) in submission order; see the module invariants."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release held resources (GPU memory, HTTP pools). Safe to call twice."""
