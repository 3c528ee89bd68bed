"""Any OpenAI-compatible server (vLLM, SGLang, a hosted API, the sim's server) as an `LLMEngine`.

`OpenAIEngine.run` is a plain synchronous call: a thread pool of `max_concurrency` workers
shares one `httpx.Client` (its pool holds as many connections). Invariants:

- one `Response` per `Request`, in request order; a request that still fails after
  `max_retries` retries, or when its `request_deadline_s` runs out, comes back with `error`
  naming the number of attempts and the last status or exception (never the key);
- retried: connection errors (refused, reset, dropped mid-response), timeouts, 408/409/429,
  5xx and HTTP 200 replies whose body is not a well-formed completion (malformed JSON), with
  exponential backoff and jitter (`initial_backoff_s * 2**attempt`, capped at `max_backoff_s`,
  times a uniform factor in [0.5, 1)), or the server's `Retry-After` when it gives one (capped
  at `max_backoff_s`); other 4xx are final at once (the request itself is wrong);
- `request_deadline_s` bounds one request's total time across attempts and backoffs, counted
  from its first attempt (time queued behind other requests of the run does not count): each
  attempt's timeout is cut to the time left, and no retry starts whose backoff would end past
  the deadline;
- `cached_tokens` comes from `usage.prompt_tokens_details.cached_tokens`; a server that does not
  report it (vLLM without `--enable-prompt-tokens-details`, many hosted APIs) counts 0 and
  earns ONE warning per engine;
- the API key goes out only as an `Authorization: Bearer` header; it is in no log line, no
  `repr`/`str` of the engine, and no error message (server messages echoing it are redacted);
- `priority` is sent only with `send_priority=True` (vLLM accepts it only under priority
  scheduling); structured outputs are sent as vLLM's `structured_outputs` object by default
  (`structured_outputs_for`: a number range travels as a regex, since vLLM has no number
  constraint, and is checked again downstream by `OutputSpec.violation`).
- `RunStats.engine == "openai"`; `engine_time_s` is the measured wall makespan of the run;
  `ttft_s == finish_s` == seconds from the run's start until that response arrived (responses
  are not streamed).
"""

from __future__ import annotations

import email.utils
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import httpx

from resources.engine import LLMEngine, Request, Response, RunResult
from resources.vllm_engine import stats_from_responses, structured_outputs_for

__all__ = ["STRUCTURED_OUTPUT_STYLES", "OpenAIEngine", "RequestFailed"]

log = logging.getLogger(__name__)

STRUCTURED_OUTPUT_STYLES: tuple[str, ...] = ("structured_outputs", "guided", "none")
"""How an `OutputSpec` travels: vLLM >= 0.10's `structured_outputs` object, the older
`guided_choice`/`guided_regex`/`guided_json` fields, or not at all (plain hosted APIs)."""

RETRY_STATUSES = frozenset({408, 409, 429})
RELQUERY_HEADER = "X-Relquery-Id"

ProgressCallback = Callable[[int, int], None]


class RequestFailed(Exception):
    """One attempt failed; `retryable` says whether another attempt may succeed."""

    def __init__(self, message: str, *, retryable: bool, retry_after_s: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after_s = retry_after_s


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


def _retry_after_s(value: str | None) -> float | None:
    """Seconds from a `Retry-After` header (delta seconds or an HTTP date), None if absent."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class OpenAIEngine(LLMEngine):
    """Sends each request to `{base_url}/completions` (or `/chat/completions` with
    `use_chat=True`) with bounded concurrency, retries and per-request timeouts."""

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        max_concurrency: int = 16,
        timeout_s: float = 60.0,
        max_retries: int = 5,
        send_priority: bool = False,
        use_chat: bool = False,
        *,
        structured_output_style: str = "structured_outputs",
        temperature: float = 0.0,
        initial_backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        hardware: str = "remote",
        send_relquery_header: bool = False,
        progress: ProgressCallback | None = None,
        seed: int | None = None,
        request_deadline_s: float | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if request_deadline_s is not None and request_deadline_s <= 0:
            raise ValueError(f"request_deadline_s must be > 0 or None, got {request_deadline_s}")
        if initial_backoff_s < 0 or max_backoff_s < 0:
            raise ValueError(
                f"backoff must be >= 0, got initial={initial_backoff_s} max={max_backoff_s}"
            )
        if structured_output_style not in STRUCTURED_OUTPUT_STYLES:
            raise ValueError(
                f"unknown structured_output_style {structured_output_style!r}; "
                f"expected one of {STRUCTURED_OUTPUT_STYLES}"
            )
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.request_deadline_s = request_deadline_s
        self.send_priority = send_priority
        self.use_chat = use_chat
        self.structured_output_style = structured_output_style
        self.temperature = temperature
        self.initial_backoff_s = initial_backoff_s
        self.max_backoff_s = max_backoff_s
        self.hardware = hardware
        self.send_relquery_header = send_relquery_header
        self.progress = progress
        self._api_key = _Secret(api_key) if api_key else None
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()
        self._warned_no_cached = False
        self._warn_lock = threading.Lock()
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()

    def __repr__(self) -> str:
        key = "'***'" if self._api_key is not None else "None"
        return (
            f"OpenAIEngine(base_url={self.base_url!r}, model={self.model!r}, api_key={key}, "
            f"max_concurrency={self.max_concurrency}, use_chat={self.use_chat})"
        )

    __str__ = __repr__

    # -- HTTP plumbing ----------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return (
            f"{self.base_url}/chat/completions" if self.use_chat else f"{self.base_url}/completions"
        )

    def _http(self) -> httpx.Client:
        with self._client_lock:
            if self._client is None:
                limits = httpx.Limits(
                    max_connections=self.max_concurrency,
                    max_keepalive_connections=self.max_concurrency,
                )
                self._client = httpx.Client(timeout=httpx.Timeout(self.timeout_s), limits=limits)
            return self._client

    def _headers(self, relquery_id: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key.get()}"
        if self.send_relquery_header:
            headers[RELQUERY_HEADER] = relquery_id
        return headers

    def _redact(self, text: str) -> str:
        if self._api_key is not None and self._api_key.get():
            text = text.replace(self._api_key.get(), "***")
        return text

    def body(self, request: Request) -> dict[str, Any]:
        """The JSON body sent for `request` (never holds the key)."""
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "temperature": self.temperature,
        }
        if self.use_chat:
            body["messages"] = [{"role": "user", "content": request.prompt}]
        else:
            body["prompt"] = request.prompt
        if self.send_priority:
            body["priority"] = request.priority
        structured = structured_outputs_for(request.output)
        if structured is not None and self.structured_output_style == "structured_outputs":
            body["structured_outputs"] = structured
        elif structured is not None and self.structured_output_style == "guided":
            ((kind, value),) = structured.items()
            if kind == "json_object":
                body["response_format"] = {"type": "json_object"}
            else:
                body[f"guided_{kind}"] = value
        return body

    def _backoff_s(self, attempt: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return min(retry_after_s, self.max_backoff_s)
        base = min(self.max_backoff_s, self.initial_backoff_s * (2**attempt))
        with self._rng_lock:
            return base * (0.5 + 0.5 * self._rng.random())

    def _attempt(
        self, request: Request, relquery_id: str, start: float, timeout_s: float
    ) -> Response:
        """One POST; the `Response` on a well-formed 200, else `RequestFailed`."""
        try:
            reply = self._http().post(
                self.endpoint,
                json=self.body(request),
                headers=self._headers(relquery_id),
                timeout=httpx.Timeout(timeout_s),
            )
        except httpx.TimeoutException as exc:
            raise RequestFailed(
                f"timed out after {timeout_s:.3g}s ({type(exc).__name__})", retryable=True
            ) from None
        except httpx.HTTPError as exc:
            message = self._redact(f"{type(exc).__name__}: {exc}")
            raise RequestFailed(f"connection error: {message}", retryable=True) from None
        if reply.status_code == 200:
            try:
                data = reply.json()
            except ValueError:
                raise RequestFailed(
                    f"HTTP 200 with a body that is not JSON: {self._redact(reply.text)[:120]!r}",
                    retryable=True,
                ) from None
            try:
                return self._response(request, data, time.perf_counter() - start)
            except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
                raise RequestFailed(
                    f"HTTP 200 with a malformed completion ({type(exc).__name__}: {exc}): "
                    f"{self._redact(str(data))[:200]}",
                    retryable=True,
                ) from None
        retryable = reply.status_code in RETRY_STATUSES or reply.status_code >= 500
        raise RequestFailed(
            f"HTTP {reply.status_code}: {self._redact(_error_message(reply))}",
            retryable=retryable,
            retry_after_s=_retry_after_s(reply.headers.get("retry-after")),
        )

    # -- one request, then a run -----------------------------------------------------------

    def _serve_one(self, request: Request, relquery_id: str, start: float) -> Response:
        last = "not attempted"
        deadline = (
            None if self.request_deadline_s is None else time.monotonic() + self.request_deadline_s
        )
        out_of_time = False
        tries = 0
        for attempt in range(self.max_retries + 1):
            timeout_s = self.timeout_s
            if deadline is not None:
                timeout_s = min(timeout_s, deadline - time.monotonic())
                if timeout_s <= 0:
                    out_of_time = True
                    break
            tries += 1
            try:
                return self._attempt(request, relquery_id, start, timeout_s)
            except RequestFailed as exc:
                last = str(exc)
                if not exc.retryable or attempt == self.max_retries:
                    break
                delay = self._backoff_s(attempt, exc.retry_after_s)
                if deadline is not None and time.monotonic() + delay >= deadline:
                    out_of_time = True
                    break
                log.info(
                    "request %s attempt %d/%d failed (%s); retrying in %.2fs",
                    request.id,
                    attempt + 1,
                    self.max_retries + 1,
                    last,
                    delay,
                )
                time.sleep(delay)
        elapsed = time.perf_counter() - start
        within = (
            f" within the request deadline of {self.request_deadline_s:g}s" if out_of_time else ""
        )
        return Response(
            request.id,
            "",
            0,
            0,
            0,
            elapsed,
            elapsed,
            error=f"failed after {tries} attempt{'s' if tries != 1 else ''}{within}: {last}",
        )

    def _response(self, request: Request, data: dict[str, Any], elapsed: float) -> Response:
        choice = data["choices"][0]
        if self.use_chat:
            text = (choice.get("message") or {}).get("content") or ""
        else:
            text = choice.get("text") or ""
        usage = data.get("usage") or {}
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        details = usage.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens")
        if cached is None:
            self._warn_no_cached_tokens()
            cached = 0
        cached = max(0, min(int(cached), prompt_tokens))
        return Response(
            id=request.id,
            text=text,
            prompt_tokens=prompt_tokens,
            cached_tokens=cached,
            output_tokens=int(usage.get("completion_tokens") or 0),
            ttft_s=elapsed,
            finish_s=elapsed,
        )

    def _warn_no_cached_tokens(self) -> None:
        with self._warn_lock:
            if self._warned_no_cached:
                return
            self._warned_no_cached = True
        log.warning(
            "server at %s does not report usage.prompt_tokens_details.cached_tokens; counting "
            "0 cached tokens (start vLLM with --enable-prompt-tokens-details)",
            self.base_url,
        )

    def run(self, relquery_id: str, requests: Sequence[Request]) -> RunResult:
        requests = list(requests)
        total = len(requests)
        start = time.perf_counter()
        responses: list[Response | None] = [None] * total
        if requests:
            workers = min(self.max_concurrency, total)
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="openai") as pool:
                futures = {
                    pool.submit(self._serve_one, req, relquery_id, start): i
                    for i, req in enumerate(requests)
                }
                for done, future in enumerate(as_completed(futures), start=1):
                    responses[futures[future]] = future.result()
                    if self.progress is not None:
                        self.progress(done, total)
        makespan = time.perf_counter() - start
        final = [r for r in responses if r is not None]
        assert len(final) == total
        errors = sum(1 for r in final if r.error is not None)
        if errors:
            log.warning("relquery %s: %d of %d requests failed", relquery_id, errors, total)
        stats = stats_from_responses(
            final,
            engine=self.name,
            model=self.model,
            hardware=self.hardware,
            engine_time_s=makespan,
            wall_time_s=makespan,
        )
        return RunResult(responses=final, stats=stats)

    def close(self) -> None:
        """Close the HTTP connection pool. Safe to call twice; a later `run` reopens it."""
        with self._client_lock:
            if self._client is not None:
                self._client.close()
                self._client = None


def _error_message(reply: httpx.Response) -> str:
    """The server's error message (OpenAI or vLLM shape), else the start of the body."""
    try:
        data = reply.json()
    except ValueError:
        return reply.text[:200] or reply.reason_phrase
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:500]
        if isinstance(error, str):
            return error[:500]
        if data.get("message"):
            return str(data["message"])[:500]
    return str(data)[:200]
