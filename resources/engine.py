"""The engine layer's records and the `LLMEngine` interface (DESIGN.md section 3).

Invariants every engine keeps:
- `run` returns exactly one `Response` per `Request`, in request order, with the same `id`;
  a request that fails is returned with `error` set, never dropped.
- `cached_tokens <= prompt_tokens` on every response; `RunStats.from_responses` sums them
  over the run (the one place run totals are computed; `RunStats.__add__` adds two runs).
- `engine_time_s` is simulated seconds for the simulated engine, measured seconds otherwise.

The contract is explicit: what callers may ask an engine is declared on `LLMEngine` (abstract
where every engine must answer, a documented default where one is sane), never looked up with
`getattr`.
"""

from __future__ import annotations

import functools
import operator
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace

from llm_assets.output_spec import OutputSpec

__all__ = [
    "RELQUERY_HEADER",
    "EngineWrapper",
    "GpuRental",
    "LLMEngine",
    "OutputSpec",
    "Request",
    "Response",
    "RunResult",
    "RunStats",
]

RELQUERY_HEADER = "X-Relquery-Id"
"""The HTTP header that carries a request's relQuery id from a client to an OpenAI-compatible
server (the sim server schedules by it; `LLMEngine.run`'s `relquery_id`)."""


@dataclass(frozen=True, slots=True)
class Request:
    """One LLM call: a fully rendered prompt and what its answer may be."""

    id: str
    prompt: str
    max_tokens: int = 16
    output: OutputSpec = field(default_factory=OutputSpec.text)
    priority: int = 0
    """Lower runs earlier (vLLM's convention) under priority scheduling."""


@dataclass(frozen=True, slots=True)
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
    replica: str | None = None
    """Which server answered (its base URL, never its credentials); None for an in-process
    engine and for an error."""

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

    @classmethod
    def from_responses(
        cls,
        responses: Sequence[Response],
        *,
        engine: str,
        model: str,
        hardware: str,
        engine_time_s: float,
        wall_time_s: float,
    ) -> RunStats:
        """The totals of one run's `responses`: tokens of answered responses only (a failed
        request's tokens are not billed; the simulated engine reports the length of a prompt
        it rejected, which it never computed), `errors` counts the failed ones."""
        ok = [r for r in responses if r.error is None]
        return cls(
            engine=engine,
            model=model,
            hardware=hardware,
            n_requests=len(responses),
            prompt_tokens=sum(r.prompt_tokens for r in ok),
            cached_tokens=sum(r.cached_tokens for r in ok),
            output_tokens=sum(r.output_tokens for r in ok),
            engine_time_s=engine_time_s,
            wall_time_s=wall_time_s,
            errors=len(responses) - len(ok),
            cached_tokens_unknown=sum(1 for r in ok if not r.cached_tokens_known),
        )

    @classmethod
    def empty(cls, engine: str, model: str, hardware: str, wall_time_s: float = 0.0) -> RunStats:
        """The totals of a run that served nothing."""
        labels = {"engine": engine, "model": model, "hardware": hardware}
        return cls.from_responses((), **labels, engine_time_s=0.0, wall_time_s=wall_time_s)

    def __add__(self, other: RunStats) -> RunStats:
        """Totals of two runs (engine, model and hardware of the first): the one place run
        totals are added up. Times add: the runs are taken to be sequential."""
        mine, theirs = asdict(self), asdict(other)
        return replace(self, **{f: mine[f] + theirs[f] for f in _ADDITIVE})

    @staticmethod
    def total(runs: Iterable[RunStats | None]) -> RunStats | None:
        """The sum of `runs` (`+`), skipping None; None when there is none."""
        present = [r for r in runs if r is not None]
        return functools.reduce(operator.add, present) if present else None


_ADDITIVE = tuple(f.name for f in fields(RunStats) if f.name not in ("engine", "model", "hardware"))
"""The `RunStats` fields that add up over runs (every one but the three labels)."""


@dataclass(frozen=True)
class RunResult:
    responses: list[Response]
    stats: RunStats
    stopped: str | None = None
    """Set when the engine stopped before serving everything (bad credentials, a dead
    server): the one-line reason; the runner then sends nothing more."""


@dataclass(frozen=True)
class GpuRental:
    """What a self-hosted engine rents: `num_gpus` GPUs named as in
    `llm_assets.optimizer.cost.GPU_USD_PER_HOUR`; its cost is that price x engine time."""

    gpu: str
    num_gpus: int = 1


class LLMEngine(ABC):
    """Anything that turns requests into responses: simulated, in-process vLLM, or HTTP.

    Every attribute a caller may read is declared here. Abstract ones (`name`, `model`,
    `hardware`, `run`) every engine answers (a class attribute is enough for a constant);
    the rest have a default that is right for an engine that does not know better.
    """

    @property
    @abstractmethod
    def name(self) -> str:
        """Engine kind, as `RunStats.engine` and the response cache key it ("sim", "vllm", ...)."""

    @property
    @abstractmethod
    def model(self) -> str:
        """Name of the model that answers (part of the response cache key)."""

    @property
    @abstractmethod
    def hardware(self) -> str:
        """What it runs on, for reports ("L4", "2xH200", "remote", ...)."""

    @property
    def max_model_len(self) -> int | None:
        """Context window in tokens (prompt + output), None when unknown."""
        return None

    @property
    def enable_prefix_caching(self) -> bool | None:
        """Whether the engine reuses the KV cache of shared prompt prefixes, None when unknown."""
        return None

    @property
    def temperature(self) -> float:
        """Sampling temperature of every request (a different one is a different answer)."""
        return 0.0

    @property
    def max_tokens(self) -> int | None:
        """An output budget that replaces every request's `max_tokens`, None to keep theirs."""
        return None

    @property
    def honours_priority(self) -> bool:
        """Whether `Request.priority` reaches the engine's scheduler (vLLM's priority
        scheduling); False: priorities are ignored and only submission order counts."""
        return False

    @property
    def gpu_rental(self) -> GpuRental | None:
        """The GPUs a run rents when the engine's cost is GPU time (self-hosted pricing);
        None when it is priced per token (a hosted API) or unknown."""
        return None

    @property
    def identity(self) -> str:
        """Who answers, beyond `name` and `model`, for the response cache: "" for an engine in
        this process; a remote engine names the server as it reports itself and the endpoint,
        so answers of different servers never mix (identical replicas share one identity)."""
        return ""

    @property
    def num_replicas(self) -> int:
        """Engine replicas one `run` spreads its requests over (1 for one server, a router or
        an in-process engine); the runner sends that many chunks' worth per call."""
        return 1

    def count_tokens(self, text: str) -> int:
        """Prompt tokens of `text` as this engine counts them; the default is the built-in
        approximation of the Llama 3 tokenizer (`resources.sim.tokenizer.ApproxTokenizer`)."""
        return _approx_tokenizer().count(text)

    def token_ids(self, text: str) -> Sequence[int]:
        """Token ids of `text` as this engine's prefix cache sees them (the planner scores
        candidate orders in whole `kv_block_size` blocks of these): `token_encoder(text)`."""
        return self.token_encoder(text)

    @property
    def token_encoder(self) -> Callable[[str], Sequence[int]]:
        """`token_ids` as a function that pickles without the engine (planning ships it to
        other processes: sharded planning's Ray tasks); the default is the approximation
        `count_tokens` uses, so `len(token_ids(t)) == count_tokens(t)`."""
        return _approx_tokenizer().encode

    @property
    def kv_block_size(self) -> int:
        """Tokens per KV-cache block, the unit a prefix-cache hit comes in; the default is
        vLLM's (`block_size` 16 on CUDA)."""
        return 16

    @property
    def tokens_within_chars(self) -> bool:
        """True when `count_tokens(text) <= len(text)` for every text, so a prompt of at most
        L characters fits L tokens without being counted (the planner's context-window fit
        then counts only longer prompts). False unless the engine knows it."""
        return False

    @abstractmethod
    def run(self, relquery_id: str, requests: Sequence[Request]) -> RunResult:
        """Serve `requests` (one relQuery) in submission order; see the module invariants."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release held resources (GPU memory, HTTP pools). Safe to call twice."""


class EngineWrapper(LLMEngine):
    """An engine that passes everything to `inner` (subclasses watch or change `run`)."""

    def __init__(self, inner: LLMEngine) -> None:
        self.inner = inner

    name = property(lambda self: self.inner.name)
    model = property(lambda self: self.inner.model)
    hardware = property(lambda self: self.inner.hardware)
    max_model_len = property(lambda self: self.inner.max_model_len)
    enable_prefix_caching = property(lambda self: self.inner.enable_prefix_caching)
    temperature = property(lambda self: self.inner.temperature)
    max_tokens = property(lambda self: self.inner.max_tokens)
    honours_priority = property(lambda self: self.inner.honours_priority)
    gpu_rental = property(lambda self: self.inner.gpu_rental)
    num_replicas = property(lambda self: self.inner.num_replicas)
    identity = property(lambda self: self.inner.identity)
    tokens_within_chars = property(lambda self: self.inner.tokens_within_chars)
    kv_block_size = property(lambda self: self.inner.kv_block_size)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    @property
    def token_encoder(self) -> Callable[[str], Sequence[int]]:
        return self.inner.token_encoder

    def run(self, relquery_id: str, requests: Sequence[Request]) -> RunResult:
        return self.inner.run(relquery_id, requests)

    def close(self) -> None:
        self.inner.close()


@functools.cache
def _approx_tokenizer():
    from resources.sim.tokenizer import ApproxTokenizer

    return ApproxTokenizer()
