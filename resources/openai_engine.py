"""Any OpenAI-compatible server (vLLM, llama.cpp's llama-server, SGLang, a hosted API, the
sim's server) as an `LLMEngine`.

`OpenAIEngine.run` is a plain synchronous call that drives an asyncio loop of
`max_concurrency` workers over one `httpx.AsyncClient` (`resources.openai_run.serve_run`);
this module holds the engine's settings, secrets and HTTP plumbing. Invariants:

- one `Response` per `Request`, in request order; every request ends answered or with an
  `error` naming why (attempts and the last status or exception; never the key);
- hard deadlines: one attempt (connect, send, headers AND body) ends within `timeout_s` of
  wall-clock time, one request within `request_deadline_s` across attempts and backoffs,
  however slowly the server drips its reply or however long its chunked body runs (the
  attempt is cancelled, not waited for read by read); a reply body over `max_reply_bytes` is
  cut off. So one request costs at most `min(request_deadline_s, (max_retries + 1) x
  (timeout_s + max_backoff_s))`;
- every HTTP 200 is validated (`resources.openai_wire.completion_from_reply`); a malformed one
  is retried like a 5xx and, if it stays malformed, becomes an error row for that request only,
  naming the request id; the run's other answers are returned as usual;
- retried: connection errors, timeouts, 408/409/429, 5xx, malformed 200s, with exponential
  backoff and jitter (`initial_backoff_s * 2**attempt` capped at `max_backoff_s`, times a
  uniform factor in [0.5, 1)), or the server's `Retry-After` capped at `max_backoff_s`; a
  `Retry-After` above the cap is logged and named in the request's error if it fails;
  other 4xx are final at once;
- fail fast: the first 401/403 (on `GET /models` before anything is sent, or on a completion),
  or a 404 saying the model does not exist (`openai_attempt.model_missing`), stops the run:
  no further request is sent, requests in flight are cancelled, and every unanswered request
  gets an error naming the one-line reason; `RunResult.stopped` carries it. Likewise after
  `breaker_failures` consecutive connection failures or timeouts at a server (a circuit
  breaker per replica; 0 disables it; any HTTP reply resets the count) when it is the last
  replica alive. On a server that accepts connections and never answers, a run therefore
  stops after about `ceil(breaker_failures / max_concurrency)` rounds of `timeout_s` (plus
  backoffs);
- replicas: `base_url` may list several servers (comma-separated, or `base_urls`); the
  run is planned over them by `resources.fleet_plan` (routing `affinity`: each prefix group
  on one replica, replicas balanced by token mass; `round_robin`: request i to replica
  i mod N) and served by `resources.openai_fleet`: each replica has `max_concurrency` lanes,
  an idle replica steals whole unstarted groups from the back of the busiest queue, and a
  replica given up (its circuit breaker, or `breaker_failures` requests in a row failing
  with a retryable error) has its unfinished requests moved to the others; the run stops
  only when no replica is left. Groups continuing the previous chunk of the same relQuery
  go back to the replica that served their start. `routing=router`: one URL (a router in
  front of the replicas) and each request carries its group's key in `routing_key_header`
  (what vllm-router's `consistent_hash` policy hashes);
- prefix affinity (`prefix_affinity=True`): inside a replica, a group is served in order by
  one worker, so on a server with per-slot caches (llama.cpp) it stays on one slot, and on
  vLLM its leader fills the cache before the rest arrive. A group longer than
  `ceil(n / max_concurrency)` (n: the replica's planned requests) is cut into pieces that
  start only after the group's first request was answered;
- `cached_tokens` comes from `usage.prompt_tokens_details.cached_tokens`; a server that does
  not report it counts 0 on the response, `RunStats.cached_tokens_unknown` counts those
  responses, and ONE warning per engine gives advice that fits the server style;
- secrets: the API key goes out only as an `Authorization: Bearer` header, URL credentials
  only as HTTP basic auth; `base_url`, `repr`/`str` and every error or log line show neither
  (`Redactor`: any 8+ character fragment of either, in any case, is masked);
- `max_tokens` (when set) replaces every request's output budget (the runner keys the cache
  on it); `max_model_len` is the server's context window, read once from `GET /models` (vLLM)
  or `GET /props` (llama.cpp), None when the server does not say;
- `RunStats.engine == "openai"`; `engine_time_s` is the measured wall makespan of the run;
  `ttft_s == finish_s` == seconds from the run's start until that response arrived.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from resources.engine import LLMEngine, Request, RunResult, RunStats
from resources.engine_config import OpenAIEngineConfig
from resources.fleet_plan import GROUP_MIN_CHARS, FleetPlan, plan_fleet
from resources.openai_probe import ServerInfo, probe_server
from resources.openai_run import serve_run
from resources.openai_wire import (
    NO_CACHED_TOKENS_ADVICE,
    SERVER_STYLES,
    Redactor,
    constrained_max_tokens,
    split_url_credentials,
    structured_fields,
)
from resources.redaction import secret_forms

__all__ = ["GROUP_MIN_CHARS", "SERVER_STYLES", "OpenAIEngine"]

log = logging.getLogger(__name__)

RELQUERY_HEADER = "X-Relquery-Id"

ProgressCallback = Callable[[int, int], None]


class _Secret:
    """A string that never shows itself in repr/str/format."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "'***'"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return "***"


class OpenAIEngine(LLMEngine):
    """Sends each request to `{base_url}/completions` (or `/chat/completions` with
    `use_chat=True`); see the module invariants."""

    name = "openai"

    def __init__(
        self,
        *args: Any,
        config: OpenAIEngineConfig | None = None,
        api_key: str | None = None,
        progress: ProgressCallback | None = None,
        **fields: Any,
    ) -> None:
        """`OpenAIEngine(base_url, model, **fields)` or `OpenAIEngine(config=...)`: the
        fields are `OpenAIEngineConfig`'s. Not config: `api_key` (a secret, kept apart and
        never shown) and `progress` (called with requests done, total)."""
        cfg = OpenAIEngineConfig.resolve(config, args, fields)
        if not cfg.urls() or not cfg.model:
            raise ValueError(
                f"OpenAIEngine needs base_url and model, got base_url="
                f"{'set' if cfg.urls() else None}, model={cfg.model!r}"
            )
        parts = [split_url_credentials(url) for url in cfg.urls()]
        if len({(user, password) for _, user, password in parts}) > 1:
            raise ValueError("the replicas' URLs carry different user:password@ credentials")
        _, user, password = parts[0]
        # a server may echo the key or the Basic header base64-encoded: those are secrets too
        self._redact = Redactor(secret_forms(api_key, user, password))
        for clean_url, _, _ in parts:
            if not clean_url.startswith(("http://", "https://")):
                raise ValueError(
                    f"base_url must start with http:// or https://, got {self._redact(clean_url)!r}"
                )
        self.config: OpenAIEngineConfig = cfg.model_copy(
            update={"base_url": None, "base_urls": None}
        )
        """The engine's settings (URLs dropped: the clean ones are `self.base_urls`)."""
        self.base_urls = [clean.rstrip("/") for clean, _, _ in parts]
        """Every replica's base URL, without credentials (one for a server or a router)."""
        self.base_url = self.base_urls[0]
        self.routing = "affinity" if cfg.routing == "auto" else cfg.routing
        self._tails: tuple[str, list[str | None]] = ("", [])
        self.max_concurrency = cfg.max_concurrency
        self.timeout_s = cfg.timeout_s
        self.max_retries = cfg.max_retries
        self.request_deadline_s = cfg.request_deadline_s
        self.send_priority = cfg.send_priority
        self.use_chat = cfg.use_chat
        self.server_style = cfg.server_style
        self.initial_backoff_s = cfg.initial_backoff_s
        self.max_backoff_s = cfg.max_backoff_s
        self.send_relquery_header = cfg.send_relquery_header
        self.progress = progress
        self.breaker_failures = cfg.breaker_failures
        self.prefix_affinity = cfg.prefix_affinity
        self.max_reply_bytes = cfg.max_reply_bytes
        self.probe = cfg.probe
        self._api_key = _Secret(api_key) if api_key else None
        self._basic = (_Secret(user or ""), _Secret(password or "")) if user or password else None
        self._rng = random.Random(cfg.seed)
        self._warned_no_cached = False
        self._info: ServerInfo | None = None
        self._info_lock = threading.Lock()
        self._ssl: ssl.SSLContext | None = None

    @property
    def model(self) -> str:
        return self.config.model or ""

    @property
    def hardware(self) -> str:
        return self.config.hardware

    @property
    def temperature(self) -> float:
        return self.config.temperature

    @property
    def max_tokens(self) -> int | None:
        return self.config.max_tokens

    @property
    def honours_priority(self) -> bool:
        """Whether priorities are sent (the server must schedule by them: vLLM's
        `--scheduling-policy priority`)."""
        return self.config.send_priority

    def __repr__(self) -> str:
        key = "'***'" if self._api_key is not None else "None"
        urls = ",".join(self.base_urls)
        return (
            f"OpenAIEngine(base_url={urls!r}, model={self.model!r}, api_key={key}, "
            f"max_concurrency={self.max_concurrency}, use_chat={self.use_chat}, "
            f"server_style={self.server_style!r})"
        )

    __str__ = __repr__

    # -- what the server is ----------------------------------------------------------------

    def server_info(self) -> ServerInfo:
        """What `GET /models` and `GET /props` say (once per engine; never raises): the first
        replica that answers (replicas of one deployment say the same)."""
        with self._info_lock:
            if self._info is None:
                self._info = ServerInfo()
                for url in self.base_urls if self.probe else ():
                    self._info = _run_coroutine(
                        lambda url=url: probe_server(
                            url,
                            self._headers(""),
                            self._auth(),
                            timeout_s=min(self.timeout_s, 10.0),
                            redact=self._redact,
                        )
                    )
                    if self._info.identity is not None or self._info.auth_error is not None:
                        break
            return self._info

    @property
    def resolved_style(self) -> str:
        """The server style in use (`auto` resolved by asking the server)."""
        if self.server_style != "auto":
            return self.server_style
        return self.server_info().style or "vllm"

    @property
    def max_model_len(self) -> int | None:
        """The server's context window in tokens, None when it does not say."""
        return self.server_info().max_model_len

    # -- HTTP plumbing ----------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return self.endpoint_of(self.base_url)

    def endpoint_of(self, base_url: str) -> str:
        """The completion URL under `base_url`."""
        return f"{base_url}/chat/completions" if self.use_chat else f"{base_url}/completions"

    @property
    def identity(self) -> str:
        """The server as it reports itself (`ServerInfo.identity`, asked once; "unknown"
        without an answer or with `probe=False`) and the endpoint: `vllm;completions`."""
        reported = self.server_info().identity or "unknown"
        return f"{reported};{'chat' if self.use_chat else 'completions'}"

    @property
    def num_replicas(self) -> int:
        """Replicas the client addresses itself (1 for a single server or a router)."""
        return len(self.base_urls)

    def _tls(self) -> ssl.SSLContext:
        """One TLS context per engine (loading the CA bundle costs ~70 ms; clients share it)."""
        with self._info_lock:
            if self._ssl is None:
                self._ssl = httpx.create_ssl_context()
            return self._ssl

    def _auth(self) -> httpx.BasicAuth | None:
        if self._basic is None:
            return None
        return httpx.BasicAuth(self._basic[0].get(), self._basic[1].get())

    def _headers(self, relquery_id: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key.get()}"
        if self.send_relquery_header and relquery_id:
            headers[RELQUERY_HEADER] = relquery_id
        return headers

    def body(self, request: Request, style: str | None = None) -> dict[str, Any]:
        """The JSON body sent for `request` (never holds the key)."""
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens or request.max_tokens,
            "temperature": self.temperature,
        }
        if self.use_chat:
            body["messages"] = [{"role": "user", "content": request.prompt}]
        else:
            body["prompt"] = request.prompt
        if self.send_priority:
            body["priority"] = request.priority
        style = style or (self.server_style if self.server_style != "auto" else "vllm")
        constraint = structured_fields(request.output, style)
        if constraint:
            body["max_tokens"] = constrained_max_tokens(request.output, body["max_tokens"])
        body.update(constraint)
        return body

    def _backoff_s(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_backoff_s)
        base = min(self.max_backoff_s, self.initial_backoff_s * (2**attempt))
        return base * (0.5 + 0.5 * self._rng.random())

    # -- one request ------------------------------------------------------------------------

    def _warn_no_cached_tokens(self, style: str) -> None:
        if self._warned_no_cached:
            return
        self._warned_no_cached = True
        log.warning(
            "server at %s does not report usage.prompt_tokens_details.cached_tokens; cached "
            "tokens are recorded as unknown (%s)",
            self.base_url,
            NO_CACHED_TOKENS_ADVICE.get(style, NO_CACHED_TOKENS_ADVICE["none"]),
        )

    # -- a run ------------------------------------------------------------------------------

    def run(self, relquery_id: str, requests: Sequence[Request]) -> RunResult:
        requests = list(requests)
        start = time.perf_counter()
        info = self.server_info() if requests else ServerInfo()
        style = self.server_style if self.server_style != "auto" else (info.style or "vllm")
        responses, stopped = _run_coroutine(
            lambda: serve_run(self, relquery_id, requests, style, info, start)
        )
        makespan = time.perf_counter() - start
        errors = sum(1 for r in responses if r.error is not None)
        if errors:
            log.warning("relquery %s: %d of %d requests failed", relquery_id, errors, len(requests))
        stats = RunStats.from_responses(
            responses,
            engine=self.name,
            model=self.model,
            hardware=self.hardware,
            engine_time_s=makespan,
            wall_time_s=makespan,
        )
        return RunResult(responses=responses, stats=stats, stopped=stopped)

    def plan(self, relquery_id: str, requests: list[Request]) -> FleetPlan:
        """Which replica serves which requests (`resources.fleet_plan`); a router or a
        single server is a fleet of one. Groups continuing an earlier chunk of the same
        relQuery go back to the replica that served their start."""
        tails = self._tails[1] if self._tails[0] == relquery_id else []
        return plan_fleet(
            [r.prompt for r in requests],
            self.num_replicas,
            routing="round_robin" if self.routing == "round_robin" else "affinity",
            outputs=[self.max_tokens or r.max_tokens for r in requests],
            tails=tails,
        )

    def close(self) -> None:
        """Nothing to release between runs (each run opens and closes its own client)."""


def _run_coroutine(make: Callable[[], Any]) -> Any:
    """Run the coroutine `make()` to completion from synchronous code, also when the calling
    thread already runs an event loop (then in a fresh thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="openai") as pool:
        return pool.submit(lambda: asyncio.run(make())).result()
