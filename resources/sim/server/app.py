"""The application: a parsed HTTP request in, a `Reply` out (no sockets here).

Routes: `POST /v1/completions`, `POST /v1/chat/completions`, `GET /v1/models`, `GET /health`,
`GET /metrics` (Prometheus text with vLLM's metric names, `metrics.py`; no key needed, as on
vLLM), `GET /sim/faults`. `/v1/*` needs `Authorization: Bearer <key>` when `ServerConfig.api_key` is
set (401 otherwise); an unknown route is 404, a wrong method 405, a `model` other than the served
one 404 (vLLM's "The model `x` does not exist.").

A completion call is validated (`protocol.py`), bounded by the context window, offered to the
fault injector (`faults.py`), then queued to the batcher (`batcher.py`). The context window is
checked here, before anything is queued, with vLLM's wording: `max_tokens` above
`max_model_len` is a 400 naming `max_tokens`; prompt tokens + `max_tokens` above it is a 400
naming `input_tokens` ("This model's maximum context length is N tokens. However, you requested
K output tokens and your prompt contains at least P input tokens, for a total of at least P+K
tokens. ..."). So no request reaches the engine asking for more than the window, and a huge
`max_tokens` costs one token count, not an answer.

Replies speak what a vLLM server started with `--enable-prompt-tokens-details` speaks:
`usage = {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details:
{cached_tokens}}`, `finish_reason` ("stop" or "length") and `stop_reason` (the stop string met)
per choice; plus a `sim` object (simulated `ttft_s`, `finish_s`, batch size): the simulated
engine's clock, which no HTTP client could otherwise see.
"""

from __future__ import annotations

import hmac
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from resources.engine import RELQUERY_HEADER, LLMEngine, Request, Response
from resources.sim.server.batcher import EngineBatcher, EngineFailure
from resources.sim.server.errors import ApiError, bad_request
from resources.sim.server.faults import FaultConfig, FaultInjector
from resources.sim.server.metrics import CONTENT_TYPE, ServedTotals, render
from resources.sim.server.protocol import ParsedCall, parse_call
from resources.sim.server.stops import cut_at_stop, tokens_through_stop

__all__ = ["EngineFacts", "Reply", "ServerConfig", "SimApp", "engine_facts"]

log = logging.getLogger(__name__)

DEFAULT_RELQUERY_ID = "http"


@dataclass(frozen=True)
class ServerConfig:
    """How the server speaks; the engine's own settings live on the engine."""

    served_model_name: str = "llama-2-7b"
    """The only `model` requests may name (others get 404); what `/v1/models` lists."""
    batch_window_s: float = 0.005
    """How long after the oldest queued request the dispatcher waits for more to coalesce."""
    max_batch_requests: int = 256
    """Most engine requests in one coalesced batch (a single multi-prompt call may exceed it)."""
    default_max_tokens: int = 16
    """`max_tokens` when a request does not give one (vLLM's completions default; vLLM's chat
    default would be the rest of the window, which the sim's filler text would always fill)."""
    enable_prompt_tokens_details: bool = True
    """Report `usage.prompt_tokens_details.cached_tokens`, like vLLM's flag of that name."""
    api_key: str | None = field(default=None, repr=False)
    """When set, `/v1/*` requires `Authorization: Bearer <api_key>` (never logged)."""
    max_body_bytes: int = 64 * 1024 * 1024
    """Largest request body accepted (413 above)."""
    faults: FaultConfig = field(default_factory=FaultConfig)
    """Injected faults and latency for completion calls (none by default)."""

    def __post_init__(self) -> None:
        if self.batch_window_s < 0:
            raise ValueError(f"batch_window_s must be >= 0, got {self.batch_window_s}")
        if self.max_batch_requests < 1:
            raise ValueError(f"max_batch_requests must be >= 1, got {self.max_batch_requests}")
        if self.default_max_tokens < 1:
            raise ValueError(f"default_max_tokens must be >= 1, got {self.default_max_tokens}")


@dataclass
class Reply:
    """What goes back on the wire: a status, a JSON body (None for an empty one), headers."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    fault: str | None = None
    """A wire fault the transport carries out instead of a plain reply: "hang", "drop" or
    "malformed" (status faults are plain replies)."""
    text: str | None = None
    """A plain-text body sent instead of `body` (its Content-Type goes in `headers`)."""

    def encoded(self) -> bytes:
        if self.text is not None:
            return self.text.encode("utf-8")
        return b"" if self.body is None else json.dumps(self.body).encode("utf-8")


def error_reply(exc: ApiError) -> Reply:
    return Reply(exc.status, exc.body())


# ---------------------------------------------------------------------------------------------
# What the server needs to know about its engine


@dataclass(frozen=True)
class EngineFacts:
    """The engine's model name, context window, token counter and answer preview (each None
    when the engine does not declare it: the checks that need it are then skipped)."""

    model: str | None = None
    max_model_len: int | None = None
    count_tokens: Callable[[str], int] | None = None
    preview: Callable[[Request], str] | None = None
    """The answer the engine will give to a request (the simulated engine's are pure)."""


def engine_facts(engine: LLMEngine) -> EngineFacts:
    """The one place the server reads its engine's declared model, window and tokenizer.

    An engine that declares no window (`max_model_len` None, e.g. a test double) gets no
    window check; only the simulated engine, whose answers are pure, gets stop planning.
    """
    from resources.sim.answers import placeholder_answer
    from resources.sim.engine import SimulatedEngine

    preview = None
    if isinstance(engine, SimulatedEngine):  # its answers are placeholder_answer's

        def preview(request: Request) -> str:
            return placeholder_answer(request.prompt, request.output, request.max_tokens)

    return EngineFacts(
        model=engine.model,
        max_model_len=engine.max_model_len,
        count_tokens=engine.count_tokens,
        preview=preview,
    )


def check_context_window(prompt_tokens: int, max_tokens: int, max_model_len: int) -> None:
    """vLLM's 400s when a request cannot fit the context window (see the module docstring)."""
    if max_tokens > max_model_len:
        raise bad_request(
            f"max_tokens={max_tokens} cannot be greater than max_model_len={max_model_len}. "
            "Please request fewer output tokens.",
            "max_tokens",
            max_tokens,
        )
    if prompt_tokens + max_tokens > max_model_len:
        raise bad_request(
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {max_tokens} output tokens and your prompt contains at least "
            f"{prompt_tokens} input tokens, for a total of at least "
            f"{prompt_tokens + max_tokens} tokens. Please reduce the length of the input prompt "
            "or the number of requested output tokens.",
            "input_tokens",
            prompt_tokens,
        )


# ---------------------------------------------------------------------------------------------
# The application


class SimApp:
    """Routes requests to the batcher and shapes OpenAI-style replies."""

    def __init__(self, engine: LLMEngine, config: ServerConfig | None = None) -> None:
        self.engine = engine
        self.config = config or ServerConfig()
        self.facts = engine_facts(engine)
        self.batcher = EngineBatcher(
            engine,
            window_s=self.config.batch_window_s,
            max_batch_requests=self.config.max_batch_requests,
        )
        self._ids = itertools.count(1)
        self._ids_lock = threading.Lock()
        self.created = int(time.time())
        self.faults = FaultInjector(self.config.faults)
        """The fault draws of this server (`faults.counts`; also `GET /sim/faults`)."""
        self.served = ServedTotals(prefix_caching=engine.enable_prefix_caching is not False)
        """Token totals of the replies sent (`GET /metrics`)."""

    def _next_id(self) -> int:
        with self._ids_lock:
            return next(self._ids)

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        """Answer one request. Every failure is a `Reply` with an error body, never a raise."""
        try:
            return self._route(method, path.split("?", 1)[0].rstrip("/") or "/", headers, body)
        except ApiError as exc:
            return error_reply(exc)
        except EngineFailure as exc:
            return error_reply(ApiError(500, f"engine failure: {exc}"))
        except Exception as exc:  # a bug here must not kill the connection thread
            log.exception("unhandled error on %s %s", method, path)
            return error_reply(ApiError(500, f"internal error: {type(exc).__name__}: {exc}"))

    def _route(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        routes = {
            "/health": ("GET", self._health),
            "/metrics": ("GET", self._metrics),
            "/v1/models": ("GET", self._models),
            "/sim/faults": ("GET", self._fault_counts),
            "/v1/completions": ("POST", self._completions),
            "/v1/chat/completions": ("POST", self._chat),
        }
        if path not in routes:
            raise ApiError(404, f"no route {path!r}; routes are {sorted(routes)}", "path")
        allowed, handler = routes[path]
        if method != allowed:
            raise ApiError(405, f"{path} accepts {allowed}, not {method}", "method")
        if path.startswith("/v1/"):
            self._authorize(headers)
        return handler(headers, body)

    def _authorize(self, headers: dict[str, str]) -> None:
        key = self.config.api_key
        if key is None:
            return
        given = headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {key}".encode()):
            raise ApiError(401, "missing or invalid API key (Authorization: Bearer ...)")

    def _health(self, headers: dict[str, str], body: bytes) -> Reply:
        return Reply(200, None)

    def _metrics(self, headers: dict[str, str], body: bytes) -> Reply:
        text = render(self.config.served_model_name, self.served, self.batcher.load())
        return Reply(200, headers={"Content-Type": CONTENT_TYPE}, text=text)

    def _fault_counts(self, headers: dict[str, str], body: bytes) -> Reply:
        return Reply(200, self.faults.snapshot())

    def _models(self, headers: dict[str, str], body: bytes) -> Reply:
        model: dict[str, Any] = {
            "id": self.config.served_model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "llm-assets-sim",
        }
        if self.facts.max_model_len is not None:  # as vLLM's /v1/models: the context window
            model["max_model_len"] = self.facts.max_model_len
        return Reply(200, {"object": "list", "data": [model]})

    def _completions(self, headers: dict[str, str], body: bytes) -> Reply:
        return self._serve(headers, body, chat=False)

    def _chat(self, headers: dict[str, str], body: bytes) -> Reply:
        return self._serve(headers, body, chat=True)

    def _serve(self, headers: dict[str, str], raw: bytes, *, chat: bool) -> Reply:
        try:
            body = json.loads(raw.decode("utf-8")) if raw else None
        except (UnicodeDecodeError, ValueError) as exc:
            raise bad_request(f"request body is not valid JSON ({exc})", "body") from None
        except RecursionError:  # nesting deeper than the JSON parser can follow
            raise bad_request("request body is nested too deeply to parse", "body") from None
        call = parse_call(body, chat=chat, default_max_tokens=self.config.default_max_tokens)
        model = body.get("model")
        if model is not None and model != self.config.served_model_name:
            raise ApiError(404, f"The model `{model}` does not exist.", "model")
        call_id = self._next_id()
        requests = [self._request(f"{call_id}-{i}", p, call) for i, p in enumerate(call.prompts)]
        injected = self._injected(call_id, chat)
        if injected is not None:
            return injected
        relquery_id = headers.get(RELQUERY_HEADER.lower()) or DEFAULT_RELQUERY_ID
        responses, batch_size = self.batcher.submit(relquery_id, requests)
        failed = [r for r in responses if r.error is not None]
        if failed:
            raise ApiError(400, f"the engine rejected the request: {failed[0].error}", "prompt")
        reply = self._completion_body(call_id, call, responses, batch_size, chat=chat)
        self.served.add(responses, reply["usage"]["completion_tokens"])  # before the client sees it
        return Reply(200, reply)

    def _request(self, request_id: str, prompt: str, call: ParsedCall) -> Request:
        """The engine request for one prompt: checked against the context window, and asking
        only for the tokens through the first stop string when the answer is known."""
        facts = self.facts
        if facts.max_model_len is not None and facts.count_tokens is not None:
            check_context_window(facts.count_tokens(prompt), call.max_tokens, facts.max_model_len)
        request = Request(request_id, prompt, call.max_tokens, call.output, call.priority)
        if call.stop and facts.preview is not None and facts.count_tokens is not None:
            preview = facts.preview

            def answer(k: int) -> str:
                return preview(Request(request_id, prompt, k, call.output))

            needed = tokens_through_stop(answer, facts.count_tokens, call.max_tokens, call.stop)
            request = Request(request_id, prompt, needed, call.output, call.priority)
        return request

    def _injected(self, call_id: int, chat: bool) -> Reply | None:
        """The fault this call draws, as a `Reply` (None: serve it). Sleeps the latency."""
        fault, delay_s = self.faults.draw()
        if delay_s > 0:
            time.sleep(delay_s)
        if fault is None:
            return None
        if fault == "status":
            status = self.config.faults.status
            return error_reply(ApiError(status, f"injected fault: HTTP {status}"))
        stand_in = {  # a completion-shaped body that never touched the engine
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{call_id}",
            "object": "chat.completion" if chat else "text_completion",
            "model": self.config.served_model_name,
            "choices": [{"index": 0, "text": "injected fault", "finish_reason": "stop"}],
        }
        return Reply(200, stand_in, fault=fault)

    def _choice(
        self, index: int, response: Response, call: ParsedCall, chat: bool
    ) -> tuple[dict[str, Any], int]:
        """(the choice object, its completion tokens)."""
        cut = cut_at_stop(response.text, call.stop, call.include_stop_str_in_output)
        tokens = response.output_tokens
        if cut.stop is not None:
            finish = "stop"
            if self.facts.count_tokens is not None:  # generated through the stop, not past it
                tokens = min(tokens, max(1, self.facts.count_tokens(cut.through)))
        else:
            finish = "length" if response.output_tokens >= call.max_tokens else "stop"
        choice: dict[str, Any] = {
            "index": index,
            "finish_reason": finish,
            "stop_reason": cut.stop,
            "logprobs": None,
        }
        if chat:
            choice["message"] = {"role": "assistant", "content": cut.text}
        else:
            choice["text"] = cut.text
        return choice, tokens

    def _completion_body(
        self,
        call_id: int,
        call: ParsedCall,
        responses: list[Response],
        batch_size: int,
        *,
        chat: bool,
    ) -> dict[str, Any]:
        choices, counts = zip(
            *(self._choice(i, r, call, chat) for i, r in enumerate(responses)), strict=True
        )
        prompt_tokens = sum(r.prompt_tokens for r in responses)
        completion_tokens = sum(counts)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if self.config.enable_prompt_tokens_details:
            usage["prompt_tokens_details"] = {
                "cached_tokens": sum(r.cached_tokens for r in responses)
            }
        return {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{call_id}",
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.config.served_model_name,
            "choices": list(choices),
            "usage": usage,
            "sim": {
                "ttft_s": [r.ttft_s for r in responses],
                "finish_s": [r.finish_s for r in responses],
                "batch_size": batch_size,
            },
        }

    def close(self) -> None:
        self.batcher.close()
