"""An OpenAI-compatible HTTP server in front of one shared simulated engine.

    python -m resources.sim.server --host 127.0.0.1 --port 8000 [--gpu L4] [--model llama-2-7b]
        [--policy vllm-v1] [--no-prefix-cache] [--batch-window-ms 5] [--api-key KEY]
        [--api-key-env VAR] [--fault-rate 0.1 --fault-status 503] [--fault-latency-ms 200]
        [--fault-latency-jitter-ms 100] [--fault-hang-rate 0.05] [--fault-drop-rate 0.05]
        [--fault-malformed-rate 0.05] [--fault-seed 0]

Routes: `POST /v1/completions`, `POST /v1/chat/completions`, `GET /v1/models`, `GET /health`.
It speaks what a vLLM server started with `--enable-prompt-tokens-details` speaks:

- `usage = {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details:
  {cached_tokens}}` (leave the details out with `--disable-prompt-tokens-details`);
- `max_tokens` (default 16), an integer `priority` (lower runs earlier; the engine's policy
  decides whether it matters), structured outputs as vLLM takes them (`structured_outputs:
  {"choice"|"regex"|"json"|"json_object": ...}`, the older `guided_choice` / `guided_regex` /
  `guided_json` fields, and `response_format` `json_object` / `json_schema`), mapped to an
  `OutputSpec`;
- errors as `{"error": {"message", "type", "param", "code"}}`, 400 naming the bad field, 404 for
  an unknown model or route, 401 for a missing/wrong key when `--api-key` is set.
Each response also carries a `sim` object (simulated `ttft_s`, `finish_s`, batch size): the
simulated engine's clock, which no HTTP client could otherwise see.

Admission and coalescing (`EngineBatcher`): handler threads never call the engine. Each HTTP
request becomes a ticket in one FIFO queue (queue order = arrival order); a single dispatcher
thread takes the oldest ticket, waits until `batch_window_s` after its arrival for more, and
runs every queued ticket of the same relQuery (header `X-Relquery-Id`, default "http"), in
arrival order, as ONE `engine.run` batch. Batches run one at a time against the engine's
persistent prefix cache. Hence:
- the engine sees the requests exactly in arrival order, as if an in-process caller had
  submitted them in that order in consecutive `run` calls;
- a client sending one request at a time reproduces the in-process engine's token accounting
  on the same requests run one per `run` call; a client whose requests all land within one
  window reproduces one in-process `run` of the whole list; in between, the accounting equals
  in-process runs of the same consecutive slices (concurrent clients decide arrival order);
- multi-prompt completions (`prompt: [..]`) stay together in one batch, in order.
The simulated engine caches a prompt block only once an iteration has computed it, so requests
of one batch do not hit each other's new blocks while a later batch hits them all: over HTTP the
hit rate depends on how arrivals were cut into batches, as it does on a real vLLM server.

Fault injection (`FaultConfig`, `ServerConfig.faults`, the `--fault-*` flags) applies to
completion calls only (`/v1/completions`, `/v1/chat/completions`; never `/health`,
`/v1/models` or `/sim/faults`), after the call has been authorized and validated and BEFORE it
reaches the engine. Each call draws one seeded uniform number that picks at most one fault:
an error status (`--fault-rate`, `--fault-status`), a hang (`--fault-hang-rate`: no answer
until the client gives up and closes, or `--fault-max-hang-s`), a dropped connection
(`--fault-drop-rate`: headers and half a body, then close) or a malformed body
(`--fault-malformed-rate`: HTTP 200 with truncated JSON). `--fault-latency-ms` (plus up to
`--fault-latency-jitter-ms`) delays every completion call before the draw. Invariant: a
faulted call never reaches the engine, so it advances neither the prefix cache nor the token
accounting; the client's retry is the engine's first sight of that request. `SimApp.handle`
decides the fault (a `Reply` with `fault` set); `_Handler.write_reply` carries it out on the
wire. `GET /sim/faults` returns how many calls were drawn and how many of each fault were
injected.

For tests: `with serve_in_thread(gpu="L4") as base_url: ...` starts a real server on a free
loopback port in a background thread and yields `http://127.0.0.1:PORT/v1`.
"""

from __future__ import annotations

import argparse
import hmac
import itertools
import json
import logging
import os
import random
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from llm_assets.output_spec import OutputSpec
from resources.engine import LLMEngine, Request, Response

__all__ = [
    "FAULT_KINDS",
    "ApiError",
    "EngineBatcher",
    "FaultConfig",
    "FaultInjector",
    "Reply",
    "ServerConfig",
    "SimApp",
    "SimServer",
    "build_engine",
    "main",
    "parse_output_spec",
    "render_chat",
    "serve_in_thread",
]

log = logging.getLogger(__name__)

DEFAULT_RELQUERY_ID = "http"
RELQUERY_HEADER = "X-Relquery-Id"
STRUCTURED_KEYS: tuple[str, ...] = ("choice", "regex", "json", "json_object")
UNSUPPORTED_STRUCTURED_KEYS: tuple[str, ...] = ("grammar", "structural_tag")
LEGACY_GUIDED_KEYS: tuple[str, ...] = ("guided_choice", "guided_regex", "guided_json")
CHAT_ROLES: tuple[str, ...] = ("system", "developer", "user", "assistant", "tool")
FAULT_KINDS: tuple[str, ...] = ("status", "hang", "drop", "malformed")
"""The faults a completion call can draw (latency is not drawn: it applies to every call)."""


# ---------------------------------------------------------------------------------------------
# Configuration and wire records


@dataclass(frozen=True)
class FaultConfig:
    """Faults injected into completion calls (see the module docstring). All off by default.

    The four rates are probabilities of disjoint outcomes of one draw per call, so their sum
    must be at most 1; a call that draws none of them is served normally.
    """

    rate: float = 0.0
    """Share of completion calls answered with `status` instead of a completion."""
    status: int = 503
    """The error status of `rate` (an HTTP error status, 400-599; e.g. 429, 500, 503)."""
    latency_ms: float = 0.0
    """Fixed delay added before every completion call is served (or faulted)."""
    latency_jitter_ms: float = 0.0
    """Extra delay drawn uniformly from [0, latency_jitter_ms] per call, on top of latency_ms."""
    hang_rate: float = 0.0
    """Share of calls never answered: the connection stays open, silent, until the client
    closes it (its timeout) or `max_hang_s` passes, then it is closed without a reply."""
    max_hang_s: float = 300.0
    """Longest a hung call holds its connection and thread."""
    drop_rate: float = 0.0
    """Share of calls whose reply is cut: status, headers and half the body, then close."""
    malformed_rate: float = 0.0
    """Share of calls answered HTTP 200 with a body that is not valid JSON."""
    seed: int | None = 0
    """Seed of the fault draws (None: a fresh random seed). Under concurrent clients the draws
    are taken in arrival order, so which call gets which fault depends on the arrival order."""

    def __post_init__(self) -> None:
        for name in ("rate", "hang_rate", "drop_rate", "malformed_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"fault {name} must be in [0, 1], got {value}")
        total = self.rate + self.hang_rate + self.drop_rate + self.malformed_rate
        if total > 1.0 + 1e-9:
            raise ValueError(
                f"fault rates must sum to at most 1, got {total:g} (rate={self.rate}, "
                f"hang_rate={self.hang_rate}, drop_rate={self.drop_rate}, "
                f"malformed_rate={self.malformed_rate})"
            )
        if not 400 <= self.status <= 599:
            raise ValueError(
                f"fault status must be an HTTP error status 400-599, got {self.status}"
            )
        if self.latency_ms < 0 or self.latency_jitter_ms < 0:
            raise ValueError(
                f"fault latency must be >= 0, got latency_ms={self.latency_ms} "
                f"latency_jitter_ms={self.latency_jitter_ms}"
            )
        if self.max_hang_s <= 0:
            raise ValueError(f"fault max_hang_s must be > 0, got {self.max_hang_s}")

    @property
    def enabled(self) -> bool:
        """Whether any fault or latency is configured."""
        return bool(
            self.rate
            or self.hang_rate
            or self.drop_rate
            or self.malformed_rate
            or self.latency_ms
            or self.latency_jitter_ms
        )


class FaultInjector:
    """Draws the fault of each completion call from `FaultConfig` (thread-safe, seeded).

    `counts` holds `calls` (draws taken) and one counter per `FAULT_KINDS` entry.
    """

    def __init__(self, config: FaultConfig) -> None:
        self.config = config
        self._rng = random.Random(config.seed)
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {"calls": 0, **{kind: 0 for kind in FAULT_KINDS}}

    def draw(self) -> tuple[str | None, float]:
        """(the fault of the next call or None, its added latency in seconds)."""
        c = self.config
        if not c.enabled:
            with self._lock:
                self.counts["calls"] += 1
            return None, 0.0
        with self._lock:
            u = self._rng.random()
            jitter = self._rng.random() * c.latency_jitter_ms if c.latency_jitter_ms else 0.0
            fault: str | None = None
            edge = 0.0
            for kind, share in zip(
                FAULT_KINDS, (c.rate, c.hang_rate, c.drop_rate, c.malformed_rate), strict=True
            ):
                edge += share
                if u < edge:
                    fault = kind
                    break
            self.counts["calls"] += 1
            if fault is not None:
                self.counts[fault] += 1
        return fault, (c.latency_ms + jitter) / 1000.0

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)


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
    """`max_tokens` when a request does not give one (OpenAI's completions default)."""
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


class ApiError(Exception):
    """An error the server answers with (OpenAI's error body); `param` names the bad field."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    @property
    def error_type(self) -> str:
        return {
            400: "BadRequestError",
            401: "AuthenticationError",
            404: "NotFoundError",
            405: "MethodNotAllowedError",
            413: "RequestTooLargeError",
            429: "RateLimitError",
            502: "BadGatewayError",
            503: "ServiceUnavailableError",
            504: "GatewayTimeoutError",
        }.get(self.status, "InternalServerError" if self.status >= 500 else "BadRequestError")

    def reply(self) -> Reply:
        body = {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.status,
            }
        }
        return Reply(self.status, body)


@dataclass
class Reply:
    """What goes back on the wire: a status, a JSON body (None for an empty one), headers."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    fault: str | None = None
    """A wire fault `_Handler.write_reply` carries out instead of a plain reply: "hang",
    "drop" or "malformed" (status faults are plain replies)."""

    def encoded(self) -> bytes:
        return b"" if self.body is None else json.dumps(self.body).encode("utf-8")


# ---------------------------------------------------------------------------------------------
# Pure request parsing


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, message, param)


def _spec_from_structured(so: Any, where: str) -> OutputSpec | None:
    """OutputSpec from vLLM's `structured_outputs` object (None when it sets nothing)."""
    if so is None:
        return None
    if not isinstance(so, dict):
        raise _bad(f"{where} must be an object, got {type(so).__name__}", where)
    for key in UNSUPPORTED_STRUCTURED_KEYS:
        if so.get(key) is not None:
            raise _bad(
                f"{where}.{key} is not supported by the simulated engine; "
                f"use one of {list(STRUCTURED_KEYS)}",
                f"{where}.{key}",
            )
    given = [k for k in STRUCTURED_KEYS if so.get(k) not in (None, False)]
    if len(given) > 1:
        raise _bad(f"{where} sets {given}; set exactly one of {list(STRUCTURED_KEYS)}", where)
    if not given:
        return None
    key = given[0]
    return _spec_from_kind(key, so[key], f"{where}.{key}")


def _spec_from_kind(key: str, value: Any, param: str) -> OutputSpec:
    if key == "choice":
        if (
            not isinstance(value, list)
            or not value
            or not all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in value)
        ):
            raise _bad(f"{param} must be a non-empty list of strings, got {value!r:.200}", param)
        return OutputSpec.choice([str(v) for v in value])
    if key == "regex":
        if not isinstance(value, str) or not value:
            raise _bad(f"{param} must be a non-empty regex string, got {value!r:.200}", param)
        try:
            return OutputSpec.regex(value)
        except Exception as exc:  # re.error and friends
            raise _bad(f"{param} is not a valid regex ({exc}): {value!r:.200}", param) from exc
    if key == "json":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise _bad(f"{param} is a string but not valid JSON ({exc})", param) from exc
        if not isinstance(value, dict):
            raise _bad(f"{param} must be a JSON schema object, got {value!r:.200}", param)
        return OutputSpec.json(value)
    if key == "json_object":
        if value is not True:
            raise _bad(f"{param} must be true when given, got {value!r}", param)
        return OutputSpec.json()
    raise _bad(f"unknown structured output kind {key!r}", param)  # pragma: no cover


def _spec_from_response_format(rf: Any) -> OutputSpec | None:
    if rf is None:
        return None
    kinds = ("text", "json_object", "json_schema")
    if not isinstance(rf, dict) or rf.get("type") not in kinds:
        raise _bad(
            f"response_format.type must be one of {list(kinds)}, got {rf!r:.200}",
            "response_format.type",
        )
    if rf["type"] == "text":
        return None
    if rf["type"] == "json_object":
        return OutputSpec.json()
    js = rf.get("json_schema")
    if not isinstance(js, dict) or not isinstance(js.get("schema", {}), dict):
        raise _bad(
            "response_format.json_schema must be an object with a 'schema' object",
            "response_format.json_schema",
        )
    return OutputSpec.json(js.get("schema") or {})


def parse_output_spec(body: dict[str, Any]) -> OutputSpec:
    """The `OutputSpec` a request body asks for (text when it asks for none).

    Accepts vLLM's `structured_outputs`, the older `guided_*` fields and `response_format`;
    giving more than one constraint is a 400 naming the fields.
    """
    found: list[tuple[str, OutputSpec]] = []
    spec = _spec_from_structured(body.get("structured_outputs"), "structured_outputs")
    if spec is not None:
        found.append(("structured_outputs", spec))
    for legacy in LEGACY_GUIDED_KEYS:
        if body.get(legacy) is not None:
            found.append((legacy, _spec_from_kind(legacy[len("guided_") :], body[legacy], legacy)))
    spec = _spec_from_response_format(body.get("response_format"))
    if spec is not None:
        found.append(("response_format", spec))
    if len(found) > 1:
        names = [name for name, _ in found]
        raise _bad(f"request sets several output constraints {names}; give one", names[1])
    return found[0][1] if found else OutputSpec.text()


def _int_field(body: dict[str, Any], name: str, default: int, minimum: int | None) -> int:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"{name} must be an integer, got {value!r:.100}", name)
    if minimum is not None and value < minimum:
        raise _bad(f"{name} must be >= {minimum}, got {value}", name)
    return value


def _message_text(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise _bad(
                    f"{param}[{i}] must be a text part {{'type': 'text', 'text': ...}}",
                    f"{param}[{i}]",
                )
            if not isinstance(part.get("text"), str):
                raise _bad(f"{param}[{i}].text must be a string", f"{param}[{i}].text")
            texts.append(part["text"])
        return "".join(texts)
    raise _bad(f"{param} must be a string or a list of text parts", param)


def render_chat(messages: Any) -> str:
    """One prompt from chat messages, deterministically: `<|role|>\\ncontent\\n` per message,
    then `<|assistant|>\\n` (the generation prompt). Equal message lists give equal prompts, so
    a shared system message is a shared prefix.

    >>> render_chat([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    '<|system|>\\nBe brief.\\n<|user|>\\nHi\\n<|assistant|>\\n'
    """
    if not isinstance(messages, list) or not messages:
        raise _bad("messages must be a non-empty list of {role, content} objects", "messages")
    parts = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _bad(f"messages[{i}] must be an object", f"messages[{i}]")
        role = message.get("role")
        if role not in CHAT_ROLES:
            raise _bad(
                f"messages[{i}].role must be one of {list(CHAT_ROLES)}, got {role!r:.50}",
                f"messages[{i}].role",
            )
        text = _message_text(message.get("content"), f"messages[{i}].content")
        parts.append(f"<|{role}|>\n{text}\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)


@dataclass(frozen=True)
class ParsedCall:
    """A validated completions / chat call: its prompts and how to answer them."""

    prompts: tuple[str, ...]
    max_tokens: int
    output: OutputSpec
    priority: int


def parse_call(body: Any, *, chat: bool, default_max_tokens: int) -> ParsedCall:
    """Validate a completions (`chat=False`) or chat completions body; 400 names the field."""
    if not isinstance(body, dict):
        raise _bad("request body must be a JSON object", "body")
    if body.get("stream"):
        raise _bad("stream=true is not supported by the simulated server", "stream")
    n = _int_field(body, "n", 1, 1)
    if n != 1:
        raise _bad(f"n must be 1 (the simulated server returns one choice), got {n}", "n")
    if chat:
        prompts: tuple[str, ...] = (render_chat(body.get("messages")),)
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            prompts = (prompt,)
        elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            prompts = tuple(prompt)
        else:
            raise _bad(
                "prompt must be a string or a non-empty list of strings "
                f"(token ids are not supported), got {prompt!r:.100}",
                "prompt",
            )
    max_name = "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens"
    max_tokens = _int_field(body, max_name, default_max_tokens, 1)
    priority = _int_field(body, "priority", 0, None)
    return ParsedCall(prompts, max_tokens, parse_output_spec(body), priority)


# ---------------------------------------------------------------------------------------------
# Admission: arrival-order queue, coalesced batches, one engine run at a time


class EngineFailure(RuntimeError):
    """The engine raised while serving a batch; every ticket of that batch gets it."""


@dataclass
class _Ticket:
    relquery_id: str
    requests: list[Request]
    arrived: float
    done: threading.Event = field(default_factory=threading.Event)
    responses: list[Response] | None = None
    batch_size: int = 0
    error: str | None = None


class EngineBatcher:
    """Feeds one engine from many threads: FIFO admission, coalesced batches, serial runs.

    Invariants: tickets reach the engine in `submit` order; a batch holds consecutive tickets
    of one relQuery; `engine.run` is never called concurrently; every ticket is answered
    (responses, or the engine's exception as `EngineFailure`), also when the batcher closes.
    """

    def __init__(
        self, engine: LLMEngine, *, window_s: float = 0.005, max_batch_requests: int = 256
    ) -> None:
        self.engine = engine
        self.window_s = window_s
        self.max_batch_requests = max_batch_requests
        self.batches_run = 0
        """How many `engine.run` calls were made (for tests and logs)."""
        self.tickets_admitted = 0
        """How many `submit` calls have joined the queue (their admission order is final)."""
        self._pending: deque[_Ticket] = deque()
        self._cv = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="sim-batcher", daemon=True)
        self._thread.start()

    def submit(self, relquery_id: str, requests: Sequence[Request]) -> tuple[list[Response], int]:
        """Serve `requests` (kept together, in order); returns (responses, batch size)."""
        ticket = _Ticket(relquery_id, list(requests), time.monotonic())
        with self._cv:
            if self._closed:
                raise EngineFailure("the server is shutting down")
            self._pending.append(ticket)
            self.tickets_admitted += 1
            self._cv.notify_all()
        ticket.done.wait()
        if ticket.error is not None:
            raise EngineFailure(ticket.error)
        assert ticket.responses is not None
        return ticket.responses, ticket.batch_size

    def _take_batch(self) -> list[_Ticket]:
        with self._cv:
            while not self._pending and not self._closed:
                self._cv.wait()
            if not self._pending:
                return []
            deadline = self._pending[0].arrived + self.window_s
            while not self._closed:
                queued = sum(len(t.requests) for t in self._pending)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or queued >= self.max_batch_requests:
                    break
                self._cv.wait(remaining)
            if not self._pending:  # closed while waiting: close() answered them
                return []
            first = self._pending.popleft()
            batch, size = [first], len(first.requests)
            while self._pending:
                nxt = self._pending[0]
                if nxt.relquery_id != first.relquery_id:
                    break
                if size + len(nxt.requests) > self.max_batch_requests:
                    break
                batch.append(self._pending.popleft())
                size += len(nxt.requests)
            return batch

    def _loop(self) -> None:
        while True:
            batch = self._take_batch()
            if not batch:
                return
            self._run_batch(batch)

    def _run_batch(self, batch: list[_Ticket]) -> None:
        requests = [r for t in batch for r in t.requests]
        try:
            result = self.engine.run(batch[0].relquery_id, requests)
            by_id = {r.id: r for r in result.responses}
            missing = [r.id for r in requests if r.id not in by_id]
            if missing:
                raise RuntimeError(f"engine returned no response for {missing[:5]}")
        except Exception as exc:  # answer every waiting ticket, keep serving
            log.exception("engine failed on a batch of %d requests", len(requests))
            for ticket in batch:
                ticket.error = f"{type(exc).__name__}: {exc}"
                ticket.done.set()
            return
        finally:
            self.batches_run += 1
        for ticket in batch:
            ticket.responses = [by_id[r.id] for r in ticket.requests]
            ticket.batch_size = len(requests)
            ticket.done.set()

    def close(self) -> None:
        """Stop after the batch in flight; tickets still queued get an error. Idempotent."""
        with self._cv:
            self._closed = True
            leftover = list(self._pending)
            self._pending.clear()
            self._cv.notify_all()
        for ticket in leftover:
            ticket.error = "the server is shutting down"
            ticket.done.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)


# ---------------------------------------------------------------------------------------------
# The application: parsed HTTP request -> Reply (no sockets here)


class SimApp:
    """Routes requests to the batcher and shapes OpenAI-style replies."""

    def __init__(self, engine: LLMEngine, config: ServerConfig | None = None) -> None:
        self.engine = engine
        self.config = config or ServerConfig()
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

    def _next_id(self) -> int:
        with self._ids_lock:
            return next(self._ids)

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        """Answer one request. Every failure is a `Reply` with an error body, never a raise."""
        try:
            return self._route(method, path.split("?", 1)[0].rstrip("/") or "/", headers, body)
        except ApiError as exc:
            return exc.reply()
        except EngineFailure as exc:
            return ApiError(500, f"engine failure: {exc}").reply()
        except Exception as exc:  # a bug here must not kill the connection thread
            log.exception("unhandled error on %s %s", method, path)
            return ApiError(500, f"internal error: {type(exc).__name__}: {exc}").reply()

    def _route(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Reply:
        routes = {
            "/health": ("GET", self._health),
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
        expected = f"Bearer {key}"
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise ApiError(401, "missing or invalid API key (Authorization: Bearer ...)")

    def _health(self, headers: dict[str, str], body: bytes) -> Reply:
        return Reply(200, None)

    def _fault_counts(self, headers: dict[str, str], body: bytes) -> Reply:
        return Reply(200, self.faults.snapshot())

    def _injected(self, call_id: int, chat: bool) -> Reply | None:
        """The fault this call draws, as a `Reply` (None: serve it). Sleeps the latency."""
        fault, delay_s = self.faults.draw()
        if delay_s > 0:
            time.sleep(delay_s)
        if fault is None:
            return None
        if fault == "status":
            status = self.config.faults.status
            return ApiError(status, f"injected fault: HTTP {status}").reply()
        stand_in = {  # a completion-shaped body that never touched the engine
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{call_id}",
            "object": "chat.completion" if chat else "text_completion",
            "model": self.config.served_model_name,
            "choices": [{"index": 0, "text": "injected fault", "finish_reason": "stop"}],
        }
        return Reply(200, stand_in, fault=fault)

    def _models(self, headers: dict[str, str], body: bytes) -> Reply:
        model = {
            "id": self.config.served_model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "llm-assets-sim",
        }
        deployment = getattr(self.engine, "deployment", None)
        if deployment is not None:  # as vLLM's /v1/models: the context window
            model["max_model_len"] = deployment.model.max_model_len
        return Reply(200, {"object": "list", "data": [model]})

    def _json_body(self, body: bytes) -> Any:
        try:
            return json.loads(body.decode("utf-8")) if body else None
        except (UnicodeDecodeError, ValueError) as exc:
            raise _bad(f"request body is not valid JSON ({exc})", "body") from exc

    def _check_model(self, body: Any) -> None:
        if not isinstance(body, dict):
            return
        model = body.get("model")
        if model is not None and model != self.config.served_model_name:
            raise ApiError(
                404,
                f"The model {model!r} does not exist; this server serves "
                f"{[self.config.served_model_name]}",
                "model",
            )

    def _completions(self, headers: dict[str, str], body: bytes) -> Reply:
        return self._serve(headers, self._json_body(body), chat=False)

    def _chat(self, headers: dict[str, str], body: bytes) -> Reply:
        return self._serve(headers, self._json_body(body), chat=True)

    def _serve(self, headers: dict[str, str], body: Any, *, chat: bool) -> Reply:
        call = parse_call(body, chat=chat, default_max_tokens=self.config.default_max_tokens)
        self._check_model(body)
        relquery_id = headers.get(RELQUERY_HEADER.lower()) or DEFAULT_RELQUERY_ID
        call_id = self._next_id()
        injected = self._injected(call_id, chat)
        if injected is not None:
            return injected
        requests = [
            Request(
                id=f"{call_id}-{i}",
                prompt=prompt,
                max_tokens=call.max_tokens,
                output=call.output,
                priority=call.priority,
            )
            for i, prompt in enumerate(call.prompts)
        ]
        responses, batch_size = self.batcher.submit(relquery_id, requests)
        failed = [r for r in responses if r.error is not None]
        if failed:
            raise ApiError(400, f"the engine rejected the request: {failed[0].error}", "prompt")
        return Reply(200, self._completion_body(call_id, call, responses, batch_size, chat=chat))

    def _completion_body(
        self,
        call_id: int,
        call: ParsedCall,
        responses: list[Response],
        batch_size: int,
        *,
        chat: bool,
    ) -> dict[str, Any]:
        choices = []
        for index, response in enumerate(responses):
            finish = "length" if response.output_tokens >= call.max_tokens else "stop"
            choice: dict[str, Any] = {"index": index, "finish_reason": finish, "logprobs": None}
            if chat:
                choice["message"] = {"role": "assistant", "content": response.text}
            else:
                choice["text"] = response.text
            choices.append(choice)
        prompt_tokens = sum(r.prompt_tokens for r in responses)
        completion_tokens = sum(r.output_tokens for r in responses)
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
            "choices": choices,
            "usage": usage,
            "sim": {
                "ttft_s": [r.ttft_s for r in responses],
                "finish_s": [r.finish_s for r in responses],
                "batch_size": batch_size,
            },
        }

    def close(self) -> None:
        self.batcher.close()


# ---------------------------------------------------------------------------------------------
# The wire: stdlib threading HTTP server


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], app: SimApp) -> None:
        self.app = app
        self.stopping = threading.Event()
        """Set on close: hung handlers let their connections go."""
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up mid-reply is routine: log it, do not print a traceback."""
        log.debug("connection from %s ended with an error", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    """Reads one request, asks `SimApp.handle`, writes the `Reply` (keep-alive, HTTP/1.1)."""

    protocol_version = "HTTP/1.1"
    server_version = "llm-assets-sim"
    timeout = 300
    """Seconds an idle keep-alive connection is kept before its thread lets it go."""
    server: _HTTPServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            length = int(headers.get("content-length", "0") or 0)
        except ValueError:
            self.write_reply(ApiError(400, "Content-Length is not an integer").reply())
            return
        if length > self.server.app.config.max_body_bytes:
            self.close_connection = True
            self.write_reply(
                ApiError(
                    413,
                    f"body of {length} bytes exceeds the limit "
                    f"{self.server.app.config.max_body_bytes}",
                ).reply()
            )
            return
        body = self.rfile.read(length) if length > 0 else b""
        self.write_reply(self.server.app.handle(method, self.path, headers, body))

    def write_reply(self, reply: Reply) -> None:
        if reply.fault == "hang":
            self._hang()
            return
        payload = reply.encoded()
        if reply.fault == "malformed":
            payload = payload[: max(1, len(payload) // 2)]  # valid framing, truncated JSON
        self.send_response(reply.status)
        if reply.body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        if reply.fault == "drop":
            self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        self.wfile.write(payload)

    def _hang(self) -> None:
        """Answer nothing until the client hangs up, `max_hang_s` passes or the server stops;
        then close the connection without a reply."""
        self.close_connection = True
        deadline = time.monotonic() + self.server.app.config.faults.max_hang_s
        while time.monotonic() < deadline and not self.server.stopping.is_set():
            try:
                readable, _, _ = select.select([self.connection], [], [], 0.1)
                if readable and not self.connection.recv(1, socket.MSG_PEEK):
                    return  # the client closed its end
            except OSError:
                return
            if readable:
                time.sleep(0.1)  # the client sent more bytes: keep ignoring them

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Request lines go to `logging` at DEBUG; headers (and so keys) are never logged."""
        log.debug("%s - %s", self.address_string(), format % args)


# ---------------------------------------------------------------------------------------------
# Engine construction, lifecycle, CLI


def build_engine(
    gpu: str = "L4",
    model: str = "llama-2-7b",
    policy: str = "vllm-v1",
    enable_prefix_caching: bool = True,
    **kwargs: Any,
) -> LLMEngine:
    """A `SimulatedEngine` (imported here, so this module loads without the simulator) with
    `vllm serve`'s default batch budgets unless `usage` or the budgets are given."""
    from resources.sim.engine import SimulatedEngine

    kwargs.setdefault("usage", "serve")
    return SimulatedEngine(
        gpu=gpu,
        model=model,
        policy=policy,
        enable_prefix_caching=enable_prefix_caching,
        **kwargs,
    )


class SimServer:
    """A running (or startable) sim server: `start()` serves in a daemon thread, `close()`
    stops it and the batcher (and the engine when `owns_engine`). Usable as a context manager."""

    def __init__(
        self,
        engine: LLMEngine,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        config: ServerConfig | None = None,
        owns_engine: bool = False,
    ) -> None:
        self.engine = engine
        self.owns_engine = owns_engine
        self.app = SimApp(engine, config)
        self._httpd = _HTTPServer((host, port), self.app)
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def host(self) -> str:
        return self._httpd.server_address[0]

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """The root URL (`/health` lives here)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (ends in `/v1`), what `OpenAIEngine(base_url=...)` takes."""
        return f"{self.url}/v1"

    def start(self) -> SimServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"sim-server-{self.port}",
                daemon=True,
            )
            self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._httpd.serve_forever()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._httpd.stopping.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=10)
        self._httpd.server_close()
        self.app.close()
        if self.owns_engine:
            self.engine.close()

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def serve_in_thread(
    engine: LLMEngine | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    config: ServerConfig | None = None,
    **engine_kwargs: Any,
) -> Iterator[str]:
    """Serve in a background thread on a free port (port=0); yield the `/v1` base URL.

    Without `engine`, builds `SimulatedEngine(**engine_kwargs)` (gpu, model, policy,
    enable_prefix_caching, ...); the served model name defaults to the engine's model.
    """
    owns_engine = engine is None
    if engine is not None and engine_kwargs:
        raise TypeError(f"engine given; unexpected engine settings {sorted(engine_kwargs)}")
    if config is None:
        name = engine_kwargs.get("model") if owns_engine else _engine_model(engine)
        config = ServerConfig(served_model_name=name or ServerConfig.served_model_name)
    if engine is None:
        engine = build_engine(**engine_kwargs)
    with SimServer(engine, host=host, port=port, config=config, owns_engine=owns_engine) as server:
        yield server.base_url


def _engine_model(engine: LLMEngine) -> str | None:
    """The engine's model name (`engine.model`, or `engine.model.name` for a profile)."""
    model = getattr(engine, "model", None)
    if isinstance(model, str):
        return model
    name = getattr(model, "name", None)
    return name if isinstance(name, str) else None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m resources.sim.server",
        description="OpenAI-compatible HTTP server backed by the simulated engine.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (0 picks a free one)")
    p.add_argument("--gpu", default="L4", help="simulated GPU profile (default L4)")
    p.add_argument("--model", default="llama-2-7b", help="simulated model (default llama-2-7b)")
    p.add_argument("--policy", default="vllm-v1", help="scheduling policy (default vllm-v1)")
    p.add_argument("--no-prefix-cache", action="store_true", help="disable prefix caching")
    p.add_argument("--tokenizer", default=None, help="tokenizer.json / tiktoken file (optional)")
    p.add_argument("--max-num-seqs", type=int, default=256, help="most sequences per batch")
    p.add_argument(
        "--max-num-batched-tokens", type=int, default=None, help="token budget per iteration"
    )
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="default 0.9")
    p.add_argument("--served-model-name", default=None, help="model name clients must send")
    p.add_argument(
        "--batch-window-ms",
        type=float,
        default=5.0,
        help="coalescing window after the oldest queued request (default 5)",
    )
    p.add_argument(
        "--max-batch-requests",
        type=int,
        default=256,
        help="most requests per engine batch (default 256)",
    )
    p.add_argument(
        "--disable-prompt-tokens-details",
        action="store_true",
        help="do not report usage.prompt_tokens_details.cached_tokens",
    )
    p.add_argument("--api-key", default=None, help="require this Bearer key on /v1/*")
    p.add_argument(
        "--api-key-env",
        default=None,
        metavar="VAR",
        help="require the Bearer key held by environment variable VAR (keeps the key out of "
        "the process list); an error if VAR is unset or empty",
    )
    f = p.add_argument_group("fault injection (completion calls only; all off by default)")
    f.add_argument(
        "--fault-rate",
        type=float,
        default=0.0,
        help="share of completion calls answered with --fault-status instead (e.g. 0.1)",
    )
    f.add_argument(
        "--fault-status",
        type=int,
        default=503,
        help="HTTP status of --fault-rate, 400-599 (default 503; e.g. 429, 500)",
    )
    f.add_argument(
        "--fault-latency-ms",
        type=float,
        default=0.0,
        help="fixed delay before every completion call is served (default 0)",
    )
    f.add_argument(
        "--fault-latency-jitter-ms",
        type=float,
        default=0.0,
        help="extra delay per call, uniform in [0, this] (default 0)",
    )
    f.add_argument(
        "--fault-hang-rate",
        type=float,
        default=0.0,
        help="share of calls never answered until the client gives up (default 0)",
    )
    f.add_argument(
        "--fault-max-hang-s",
        type=float,
        default=300.0,
        help="longest a hung call holds its connection before closing it (default 300)",
    )
    f.add_argument(
        "--fault-drop-rate",
        type=float,
        default=0.0,
        help="share of calls cut mid-response: headers and half the body, then close",
    )
    f.add_argument(
        "--fault-malformed-rate",
        type=float,
        default=0.0,
        help="share of calls answered HTTP 200 with a body that is not valid JSON",
    )
    f.add_argument(
        "--fault-seed",
        type=int,
        default=0,
        help="seed of the fault draws (default 0; draws follow arrival order)",
    )
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return p


def _api_key(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str | None:
    if args.api_key is not None and args.api_key_env is not None:
        parser.error("give --api-key or --api-key-env, not both")
    if args.api_key_env is None:
        return args.api_key
    key = os.environ.get(args.api_key_env)
    if not key:
        parser.error(
            f"--api-key-env {args.api_key_env}: that environment variable is unset or empty"
        )
    return key


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    api_key = _api_key(args, parser)
    try:
        faults = FaultConfig(
            rate=args.fault_rate,
            status=args.fault_status,
            latency_ms=args.fault_latency_ms,
            latency_jitter_ms=args.fault_latency_jitter_ms,
            hang_rate=args.fault_hang_rate,
            max_hang_s=args.fault_max_hang_s,
            drop_rate=args.fault_drop_rate,
            malformed_rate=args.fault_malformed_rate,
            seed=args.fault_seed,
        )
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    engine = build_engine(
        gpu=args.gpu,
        model=args.model,
        policy=args.policy,
        enable_prefix_caching=not args.no_prefix_cache,
        tokenizer=args.tokenizer,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        gpu_memory_utilization=args.gpu_memory_utilization,
    )
    config = ServerConfig(
        served_model_name=args.served_model_name or args.model,
        batch_window_s=args.batch_window_ms / 1000.0,
        max_batch_requests=args.max_batch_requests,
        enable_prompt_tokens_details=not args.disable_prompt_tokens_details,
        api_key=api_key,
        faults=faults,
    )
    server = SimServer(engine, host=args.host, port=args.port, config=config, owns_engine=True)
    log.info(
        "sim server on %s (gpu=%s model=%s policy=%s prefix_cache=%s faults=%s)",
        server.base_url,
        args.gpu,
        args.model,
        args.policy,
        not args.no_prefix_cache,
        faults if faults.enabled else "off",
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
