"""One attempt of a request of `OpenAIEngine`: a POST whose whole reply (headers and body, at
most `max_reply_bytes`) is read inside the caller's hard `asyncio.timeout`, then validated
(`post_once`).

A plain-http attempt goes over the worker's own HTTP/1.1 connection (the lean path,
`resources.openai.lean`, about 8x less client CPU than httpx), https, client auth and proxies
through httpx; both map their failures alike to `RequestFailed`: no HTTP reply (refused,
reset, closed, malformed, timed out) is a retryable `connection error` that counts toward the
circuit breaker (`dead`), a body over the cap is retryable. A kept lean connection the server
closed while idle is replaced once, without counting a failure. An HTTP 200 must hold a valid
completion within the request's usage bounds (`usage_bounds`, `resources.openai.wire`), else
it is retried like a 5xx; 408/409/429 and 5xx are retryable, 401/403 stop the run, and so
does a 404 saying the model does not exist (`model_missing`), other statuses are final. No
reply, a 5xx, a malformed 200 and an oversized body count toward the circuit breaker
(`counts`); a 5xx saying no worker stands behind the server (a router with every backend
down, `NO_WORKERS`) gives the replica up at once (`gone`).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx

from resources.openai.lean import (
    BadReply,
    BadRequest,
    Conn,
    NoReply,
    Target,
    TooLarge,
    lean_target,
    read_reply,
    request_bytes,
    task_lane,
)
from resources.openai.settings import ClientSettings
from resources.openai.wire import (
    MalformedReply,
    UsageBounds,
    completion_from_reply,
    error_message,
    retry_after_s,
)

__all__ = ["RequestFailed", "post_once", "usage_bounds"]

RETRY_STATUSES = frozenset({408, 409, 429})
STOP_STATUSES = frozenset({401, 403})
# vLLM / SGLang "The model `x` does not exist.", OpenAI "... does not exist or you do not have
# access to it." (code model_not_found), llama.cpp's router "model is not found"
MODEL_MISSING = re.compile(r"\bmodel\b.*?(?:does not exist|not found)|model_not_found", re.I)
# vllm-router / sgl-router "No available workers", "no workers", "No healthy workers"
NO_WORKERS = re.compile(r"\bno (?:available |healthy )?(?:workers?|backends?|upstreams?)\b", re.I)


class RequestFailed(Exception):
    """One attempt failed. `retryable`: another attempt may succeed; `dead`: the server gave
    no HTTP reply; `counts`: the replica gave no answer it could give (no reply, a 5xx, a
    malformed 200: counts toward the circuit breaker; default `dead`); `gone`: why the
    replica should be given up at once (nothing stands behind it), else None; `stop`:
    nothing more should be sent, and what the user should check (the API key, the model
    name), else None."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        dead: bool = False,
        stop: str | None = None,
        retry_after_s: float | None = None,
        counts: bool | None = None,
        gone: str | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.dead = dead
        self.counts = dead if counts is None else counts
        self.gone = gone
        self.stop = stop
        self.retry_after_s = retry_after_s


def model_missing(status: int, message: str, body: bytes) -> bool:
    """The server says the requested model does not exist: a 404 in vLLM's, OpenAI's or
    llama.cpp's wording (`MODEL_MISSING`); every request of the run would get the same."""
    return status == 404 and MODEL_MISSING.search(f"{message} {body[:2000]!r}") is not None


def usage_bounds(body: dict[str, Any]) -> UsageBounds:
    """What the request in `body` can cost: its prompt (or every message's content) and the
    `max_tokens` it sent (`resources.openai.wire.UsageBounds`)."""
    if isinstance(body.get("prompt"), str):
        text = body["prompt"]
    else:
        text = "".join(str(m.get("content", "")) for m in body.get("messages") or ())
    return UsageBounds.of(text, body.get("max_tokens"))


async def post_once(
    settings: ClientSettings,
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    request_id: str,
    headers: dict,
) -> Any:
    """One POST to `url`, body read in full; the validated `Completion`, else
    `RequestFailed`. Plain `http://` without client auth or a proxy goes over the lean path
    (`_post_lean`), anything else through `client`."""
    target = lean_target(client, url)
    if target is None:
        status, reason, retry_after, data = await _post_httpx(settings, client, url, body, headers)
    else:
        status, reason, retry_after, data = await _post_lean(
            settings, client, target, url, body, headers
        )
    if status == 200:
        try:
            parsed = json.loads(data)
        except ValueError:
            shown = settings.redact(bytes(data[:120]).decode("utf-8", "replace"))
            raise RequestFailed(
                f"HTTP 200 with a body that is not JSON for request {request_id}: {shown!r}",
                retryable=True,
                counts=True,
            ) from None
        try:
            return completion_from_reply(
                parsed,
                chat=settings.config.use_chat,
                request_id=request_id,
                bounds=usage_bounds(body),
            )
        except MalformedReply as exc:
            raise RequestFailed(
                f"HTTP 200 with a malformed completion: {settings.redact(str(exc))}",
                retryable=True,
                counts=True,
            ) from None
    message = settings.redact(error_message(bytes(data), reason))
    stop = None
    if status in STOP_STATUSES:
        stop = "check the API key; it is not shown"
    elif model_missing(status, message, bytes(data)):
        stop = f"check the model name {settings.config.model!r}"
    gone = None
    if status >= 500 and NO_WORKERS.search(message) is not None:
        gone = f"no worker behind the server (HTTP {status}: {message})"
    raise RequestFailed(
        f"HTTP {status}: {message}",
        retryable=status in RETRY_STATUSES or status >= 500,
        stop=stop,
        retry_after_s=retry_after_s(retry_after),
        counts=status >= 500,
        gone=gone,
    )


async def _post_httpx(
    settings: ClientSettings,
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    headers: dict,
) -> tuple[int, str, str | None, bytes]:
    """The POST through httpx: (status, reason, Retry-After, body)."""
    try:
        async with client.stream("POST", url, json=body, headers=headers) as reply:
            data = bytearray()
            async for chunk in reply.aiter_bytes():
                data += chunk
                if len(data) > settings.config.max_reply_bytes:
                    raise RequestFailed(
                        f"reply body over max_reply_bytes={settings.config.max_reply_bytes}",
                        retryable=True,
                        counts=True,
                    )
            return reply.status_code, reply.reason_phrase, reply.headers.get("retry-after"), data
    except httpx.TimeoutException as exc:
        raise RequestFailed(
            f"timed out ({type(exc).__name__})", retryable=True, dead=True
        ) from None
    except httpx.HTTPError as exc:
        message = settings.redact(f"{type(exc).__name__}: {exc}")
        raise RequestFailed(f"connection error: {message}", retryable=True, dead=True) from None


async def _post_lean(
    settings: ClientSettings,
    client: httpx.AsyncClient,
    target: Target,
    url: str,
    body: dict[str, Any],
    headers: dict,
) -> tuple[int, str, str | None, bytes]:
    """The POST over the current task's connection to `target`: (status, reason,
    Retry-After, body); see `resources.openai.lean`."""
    lane = task_lane()
    content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        payload = request_bytes(
            target, lane.default_headers(client), headers, content.encode("utf-8")
        )
    except BadRequest as exc:  # what httpx raises as LocalProtocolError
        raise RequestFailed(f"connection error: {exc}", retryable=True, dead=True) from None
    conn = lane.conns.pop(url, None)
    if conn is not None and conn.stale():
        conn.close()
        conn = None
    reused = conn is not None
    while True:
        try:
            if conn is None:
                reader, writer = await asyncio.open_connection(target.host, target.port)
                conn = Conn(reader, writer)
            try:
                conn.writer.write(payload)
                await conn.writer.drain()
            except (ConnectionResetError, BrokenPipeError) as exc:
                raise NoReply(f"{type(exc).__name__}: {exc}") from None
            status, reason, reply_headers, data, keep = await read_reply(
                conn.reader, settings.config.max_reply_bytes
            )
        except NoReply as exc:
            conn.close()  # type: ignore[union-attr]
            conn = None
            if reused:  # the server closed the kept connection while it idled: once more
                reused = False
                continue
            message = settings.redact(str(exc))
            raise RequestFailed(f"connection error: {message}", retryable=True, dead=True) from None
        except TooLarge:
            conn.close()  # type: ignore[union-attr]
            raise RequestFailed(
                f"reply body over max_reply_bytes={settings.config.max_reply_bytes}",
                retryable=True,
                counts=True,
            ) from None
        except (OSError, BadReply) as exc:
            if conn is not None:
                conn.close()
            kind = "protocol error" if isinstance(exc, BadReply) else type(exc).__name__
            message = settings.redact(f"{kind}: {exc}")
            raise RequestFailed(f"connection error: {message}", retryable=True, dead=True) from None
        except BaseException:  # cancelled (the hard timeout, the run stopping): state unknown
            if conn is not None:
                conn.close()
            raise
        if keep:
            lane.conns[url] = conn
        else:
            conn.close()
        return status, reason, reply_headers.get("retry-after"), data
