"""One request of `OpenAIEngine`: attempts, hard deadlines, retries, the circuit breaker.

`serve_request` always returns a `Response` (answered, or with `error` naming the attempts,
the deadline when it ran out, and the last failure) and whether its last failure was one
another attempt could have cured; see `resources.openai_engine` for the invariants. Failures
are counted per replica (`resources.openai_fleet.Replica`): the circuit breaker gives up a
replica, and the run stops when no replica is left (`RunState.give_up`). `post_once` is one
attempt: a POST whose whole reply (headers and body, at most `max_reply_bytes`) is read
inside the caller's hard `asyncio.timeout`, and validated; a plain-http one goes over the
worker's own HTTP/1.1 connection (the lean path, about 8x less client CPU than httpx, see
the section below), https, client auth and proxies through httpx.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import weakref
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from resources.engine import Request, Response
from resources.openai_fleet import Replica
from resources.openai_wire import (
    MalformedReply,
    UsageBounds,
    completion_from_reply,
    error_message,
    retry_after_s,
)

if TYPE_CHECKING:
    from resources.openai_engine import OpenAIEngine

__all__ = ["RequestFailed", "RunState", "failed_response", "post_once", "serve_request"]

log = logging.getLogger("resources.openai_engine")

RETRY_STATUSES = frozenset({408, 409, 429})
STOP_STATUSES = frozenset({401, 403})


class RequestFailed(Exception):
    """One attempt failed. `retryable`: another attempt may succeed; `dead`: the server gave
    no HTTP reply (counts toward the circuit breaker); `stop`: nothing more should be sent."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        dead: bool = False,
        stop: bool = False,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.dead = dead
        self.stop = stop
        self.retry_after_s = retry_after_s


@dataclass
class RunState:
    """What the workers of one `run` share (one event loop, so no locks)."""

    total: int
    stopped: asyncio.Event
    stop_reason: str | None = None
    done: int = 0
    replicas: list[Replica] = field(default_factory=list)

    def stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            self.stopped.set()

    def give_up(self, replica: Replica, reason: str) -> None:
        """Replica `replica` is dead; the run stops when it was the last one alive."""
        if replica.dead is not None:
            return
        replica.dead = reason
        live = [r for r in self.replicas if r.dead is None]
        if live:
            log.warning("replica %s given up (%s); %d left", replica.base_url, reason, len(live))
        elif len(self.replicas) == 1:
            self.stop(reason)
        else:
            self.stop(f"every replica failed (last: {reason})")


def usage_bounds(body: dict[str, Any]) -> UsageBounds:
    """What the request in `body` can cost: its prompt (or every message's content) and the
    `max_tokens` it sent (`resources.openai_wire.UsageBounds`)."""
    if isinstance(body.get("prompt"), str):
        text = body["prompt"]
    else:
        text = "".join(str(m.get("content", "")) for m in body.get("messages") or ())
    return UsageBounds.of(text, body.get("max_tokens"))


async def post_once(
    engine: OpenAIEngine,
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    request_id: str,
    headers: dict,
) -> Any:
    """One POST to `url`, body read in full; the validated `Completion`, else
    `RequestFailed`. Plain `http://` without client auth or a proxy goes over the lean path
    (`_post_lean`), anything else through `client`."""
    target = _lean_target(client, url)
    if target is None:
        status, reason, retry_after, data = await _post_httpx(engine, client, url, body, headers)
    else:
        status, reason, retry_after, data = await _post_lean(
            engine, client, target, url, body, headers
        )
    if status == 200:
        try:
            parsed = json.loads(data)
        except ValueError:
            shown = engine._redact(bytes(data[:120]).decode("utf-8", "replace"))
            raise RequestFailed(
                f"HTTP 200 with a body that is not JSON for request {request_id}: {shown!r}",
                retryable=True,
            ) from None
        try:
            return completion_from_reply(
                parsed, chat=engine.use_chat, request_id=request_id, bounds=usage_bounds(body)
            )
        except MalformedReply as exc:
            raise RequestFailed(
                f"HTTP 200 with a malformed completion: {engine._redact(str(exc))}",
                retryable=True,
            ) from None
    message = engine._redact(error_message(bytes(data), reason))
    raise RequestFailed(
        f"HTTP {status}: {message}",
        retryable=status in RETRY_STATUSES or status >= 500,
        stop=status in STOP_STATUSES,
        retry_after_s=retry_after_s(retry_after),
    )


async def _post_httpx(
    engine: OpenAIEngine,
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
                if len(data) > engine.max_reply_bytes:
                    raise RequestFailed(
                        f"reply body over max_reply_bytes={engine.max_reply_bytes}",
                        retryable=True,
                    )
            return reply.status_code, reply.reason_phrase, reply.headers.get("retry-after"), data
    except httpx.TimeoutException as exc:
        raise RequestFailed(
            f"timed out ({type(exc).__name__})", retryable=True, dead=True
        ) from None
    except httpx.HTTPError as exc:
        message = engine._redact(f"{type(exc).__name__}: {exc}")
        raise RequestFailed(f"connection error: {message}", retryable=True, dead=True) from None


async def serve_request(
    engine: OpenAIEngine,
    client: httpx.AsyncClient,
    request: Request,
    relquery_id: str,
    style: str,
    state: RunState,
    start: float,
    replica: Replica,
    headers: dict[str, str],
) -> tuple[Response, bool]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + engine.request_deadline_s
    body, url = engine.body(request, style), engine.endpoint_of(replica.base_url)
    retryable = False
    last, notes, tries, out_of_time = "not attempted", "", 0, False
    for attempt in range(engine.max_retries + 1):
        budget = min(engine.timeout_s, deadline - loop.time())
        if budget <= 0:
            out_of_time = True
            break
        tries += 1
        try:
            async with asyncio.timeout(budget):
                got = await post_once(engine, client, url, body, request.id, headers)
        except TimeoutError:
            failure = RequestFailed(
                f"timed out after {budget:.3g}s (no complete reply; hard wall-clock deadline)",
                retryable=True,
                dead=True,
            )
        except RequestFailed as exc:
            failure = exc
        else:
            replica.consecutive_dead = 0
            elapsed = time.perf_counter() - start
            if got.cached_tokens is None:
                engine._warn_no_cached_tokens(style)
            return Response(
                request.id,
                got.text,
                got.prompt_tokens,
                got.cached_tokens or 0,
                got.output_tokens,
                elapsed,
                elapsed,
                cached_tokens_known=got.cached_tokens is not None,
            ), False
        last, retryable = str(failure), failure.retryable
        _count_failure(engine, failure, state, last, replica)
        if state.stop_reason is not None or replica.dead is not None or not retryable:
            break
        if attempt == engine.max_retries:
            break
        delay = engine._backoff_s(attempt, failure.retry_after_s)
        if failure.retry_after_s is not None and failure.retry_after_s > engine.max_backoff_s:
            notes = (
                f" (the server asked to wait Retry-After {failure.retry_after_s:g}s, above "
                f"max_backoff_s={engine.max_backoff_s:g}s; waited {delay:g}s)"
            )
            log.warning("request %s: %s", request.id, notes.strip(" ()"))
        if loop.time() + delay >= deadline:
            out_of_time = True
            break
        log.info(
            "request %s attempt %d/%d failed (%s); retrying in %.2fs",
            request.id, attempt + 1, engine.max_retries + 1, last, delay,
        )  # fmt: skip
        try:
            await asyncio.wait_for(state.stopped.wait(), delay)
            break  # the run stopped while this request waited
        except TimeoutError:
            pass
    within = (
        f" within the request deadline of {engine.request_deadline_s:g}s" if out_of_time else ""
    )
    plural = "s" if tries != 1 else ""
    error = f"failed after {tries} attempt{plural}{within}: {last}{notes}"
    return failed_response(request.id, error, start), retryable


def _count_failure(
    engine: OpenAIEngine, failure: RequestFailed, state: RunState, last: str, replica: Replica
) -> None:
    if failure.stop:
        state.stop(f"stopped after {last} (check the API key; it is not shown)")
        return
    if not failure.dead:
        replica.consecutive_dead = 0
        return
    replica.consecutive_dead += 1
    n = engine.breaker_failures
    if n and replica.consecutive_dead >= n:
        state.give_up(
            replica,
            f"circuit breaker open after {n} consecutive connection failures or timeouts "
            f"at {replica.base_url} (last: {last})",
        )


def failed_response(request_id: str, error: str, start: float) -> Response:
    elapsed = time.perf_counter() - start
    return Response(request_id, "", 0, 0, 0, elapsed, elapsed, error=error)


# -- the lean HTTP/1.1 path ---------------------------------------------------------------------
#
# httpx costs about 1 ms of client CPU per request (its client, httpcore's pool and anyio
# wrappers around each read and write); one asyncio stream per worker and replica costs about
# a tenth of that (benchmarks/client_throughput.py). So a plain-http completion (no proxy, no
# auth on the client: what a fleet of local replicas is) goes over `_post_lean`: the request
# httpx would send (same JSON body and headers, without Accept-Encoding; a gzip or deflate
# reply is still decoded), a reply read in full (Content-Length, chunked, or until the server
# closes) within the caller's hard timeout and `max_reply_bytes`, and the connection kept for
# the worker's next request unless the reply or an error left it in doubt. Failures map as on
# the httpx path: no HTTP reply (refused, reset, closed, malformed) is a `connection error`
# (retryable, counts toward the breaker), a body over the cap is retryable. A kept connection
# the server closed while idle is replaced once, without counting a failure. Each worker
# task's connections close when the task ends.

_PROXY_VARS = ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")
_SKIPPED = frozenset(
    {"accept-encoding", "connection", "content-length", "host", "transfer-encoding"}
)
"""Headers the lean path writes itself (Host, Content-Length) or leaves out."""


@dataclass(frozen=True)
class _Target:
    host: str
    port: int
    path: str
    head: bytes
    """`POST path HTTP/1.1` and the Host header line."""


_TARGETS: dict[str, _Target] = {}


_DIRECT: weakref.WeakKeyDictionary[httpx.AsyncClient, bool] = weakref.WeakKeyDictionary()
"""Per client: whether its plain-http requests may go over the lean path (decided at its
first request, as httpx reads the proxy variables once, when the client is made)."""


def _lean_target(client: httpx.AsyncClient, url: str) -> _Target | None:
    """Where `url` goes over the lean path; None when it must go through httpx (https, auth
    on the client, a proxy in the environment)."""
    direct = _DIRECT.get(client)
    if direct is None:
        proxied = client.trust_env and any(os.environ.get(v) for v in _PROXY_VARS)
        direct = _DIRECT[client] = client.auth is None and not proxied
    if not direct or not url.startswith("http://"):
        return None
    target = _TARGETS.get(url)
    if target is None:
        parsed = httpx.URL(url)
        port = parsed.port or 80
        path = parsed.raw_path.decode("ascii")
        host = parsed.host
        netloc = f"[{host}]" if ":" in host else host
        netloc += f":{parsed.port}" if parsed.port else ""
        head = f"POST {path} HTTP/1.1\r\nHost: {netloc}\r\n".encode("ascii")
        target = _TARGETS.setdefault(url, _Target(host, port, path, head))
    return target


class _NoReply(Exception):
    """The connection ended (closed or reset) before a byte of the reply came."""


class _BadRequest(Exception):
    """The request cannot be written (a header with a line break)."""


class _BadReply(Exception):
    """The reply broke HTTP/1.1 (or the connection ended inside it)."""


class _TooLarge(Exception):
    """The reply body is over `max_reply_bytes`."""


class _Conn:
    """One kept-alive connection of a worker task."""

    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def stale(self) -> bool:
        return self.reader.at_eof() or self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class _Lane:
    """A worker task's kept connections (by URL) and its client's default headers."""

    __slots__ = ("client", "conns", "defaults")

    def __init__(self) -> None:
        self.conns: dict[str, _Conn] = {}
        self.client: httpx.AsyncClient | None = None
        self.defaults = b""

    def default_headers(self, client: httpx.AsyncClient) -> bytes:
        """`client`'s default headers as httpx would send them, less Accept-Encoding."""
        if client is not self.client:
            self.client = client
            self.defaults = b"".join(
                name + b": " + value + b"\r\n"
                for name, value in client.headers.raw
                if name.decode("latin-1").lower() not in _SKIPPED
            )
        return self.defaults

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()
        self.client = None


_LANES: weakref.WeakKeyDictionary[asyncio.Task, _Lane] = weakref.WeakKeyDictionary()


def _lane() -> _Lane:
    """The current task's `_Lane` (its connections close when the task ends)."""
    task = asyncio.current_task()
    assert task is not None
    lane = _LANES.get(task)
    if lane is None:
        lane = _LANES[task] = _Lane()
        task.add_done_callback(lambda _: lane.close())
    return lane


def _request_bytes(target: _Target, defaults: bytes, headers: dict, content: bytes) -> bytes:
    """The request as httpx would write it (Content-Type JSON unless given)."""
    lines = [target.head, defaults]
    typed = False
    for name, value in headers.items():
        lower = name.lower()
        if lower in _SKIPPED:
            continue
        line = f"{name}: {value}"
        if "\r" in line or "\n" in line:
            raise _BadRequest(f"illegal header {name!r}: a line break in the name or value")
        typed = typed or lower == "content-type"
        lines.append(line.encode() + b"\r\n")
    if not typed:
        lines.append(b"Content-Type: application/json\r\n")
    lines.append(b"Content-Length: %d\r\n\r\n" % len(content))
    lines.append(content)
    return b"".join(lines)


async def _post_lean(
    engine: OpenAIEngine,
    client: httpx.AsyncClient,
    target: _Target,
    url: str,
    body: dict[str, Any],
    headers: dict,
) -> tuple[int, str, str | None, bytes]:
    """The POST over the current task's connection to `target`: (status, reason,
    Retry-After, body); see the section comment."""
    lane = _lane()
    content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        payload = _request_bytes(
            target, lane.default_headers(client), headers, content.encode("utf-8")
        )
    except _BadRequest as exc:  # what httpx raises as LocalProtocolError
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
                conn = _Conn(reader, writer)
            try:
                conn.writer.write(payload)
                await conn.writer.drain()
            except (ConnectionResetError, BrokenPipeError) as exc:
                raise _NoReply(f"{type(exc).__name__}: {exc}") from None
            status, reason, reply_headers, data, keep = await _read_reply(
                conn.reader, engine.max_reply_bytes
            )
        except _NoReply as exc:
            conn.close()  # type: ignore[union-attr]
            conn = None
            if reused:  # the server closed the kept connection while it idled: once more
                reused = False
                continue
            message = engine._redact(str(exc))
            raise RequestFailed(f"connection error: {message}", retryable=True, dead=True) from None
        except _TooLarge:
            conn.close()  # type: ignore[union-attr]
            raise RequestFailed(
                f"reply body over max_reply_bytes={engine.max_reply_bytes}", retryable=True
            ) from None
        except (OSError, _BadReply) as exc:
            if conn is not None:
                conn.close()
            kind = "protocol error" if isinstance(exc, _BadReply) else type(exc).__name__
            message = engine._redact(f"{kind}: {exc}")
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


async def _read_reply(
    reader: asyncio.StreamReader, limit: int
) -> tuple[int, str, dict[str, str], bytes, bool]:
    """One HTTP/1.1 reply: (status, reason, headers by lower-case name, body, whether the
    connection may be kept)."""
    first = True
    while True:
        try:
            raw = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if first and not exc.partial:
                raise _NoReply("the server closed the connection without replying") from None
            raise _BadReply("the server closed the connection inside the reply headers") from None
        except (ConnectionResetError, BrokenPipeError) as exc:
            if first:
                raise _NoReply(f"{type(exc).__name__}: {exc}") from None
            raise
        except asyncio.LimitOverrunError:
            raise _BadReply("reply headers over 64 KiB") from None
        first = False
        lines = raw.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise _BadReply(f"malformed status line {lines[0][:80]!r}")
        status = int(code)
        if not 100 <= status < 200:
            break
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise _BadReply(f"malformed header line {line[:80]!r}")
        name, value = name.lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    keep = "close" not in tokens and (version == "HTTP/1.1" or "keep-alive" in tokens)
    try:
        if status in (204, 304):
            data = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            data = await _read_chunked(reader, limit)
        elif "content-length" in headers:
            length = int(headers["content-length"].split(",")[0])
            if length < 0:
                raise _BadReply(f"negative Content-Length {length}")
            if length > limit:
                raise _TooLarge
            data = await reader.readexactly(length)
        else:  # the body runs until the server closes the connection
            keep = False
            buffer = bytearray()
            while chunk := await reader.read(65536):
                buffer += chunk
                if len(buffer) > limit:
                    raise _TooLarge
            data = bytes(buffer)
    except asyncio.IncompleteReadError:
        raise _BadReply("the server closed the connection inside the reply body") from None
    except asyncio.LimitOverrunError:
        raise _BadReply("a chunk-size line over 64 KiB") from None
    except ValueError as exc:
        raise _BadReply(f"malformed reply framing: {exc}") from None
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        data = _decompress(data, encoding, limit)
    return status, reason, headers, data, keep


async def _read_chunked(reader: asyncio.StreamReader, limit: int) -> bytes:
    data = bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size < 0:
            raise _BadReply(f"negative chunk size {size}")
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                pass
            return bytes(data)
        if len(data) + size > limit:
            raise _TooLarge
        chunk = await reader.readexactly(size + 2)
        if chunk[-2:] != b"\r\n":
            raise _BadReply("a chunk not followed by CRLF")
        data += memoryview(chunk)[:-2]


def _decompress(data: bytes, encoding: str, limit: int) -> bytes:
    """A gzip or deflate body (not asked for, but allowed), at most `limit` bytes."""
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise _BadReply(f"unsupported Content-Encoding {encoding!r}")
    # gzip (or zlib-wrapped deflate, told apart by its header), else raw deflate
    for wbits in (47, -15) if encoding == "deflate" else (31,):
        try:
            out = zlib.decompressobj(wbits).decompress(data, limit + 1)
            break
        except zlib.error as exc:
            error = exc
    else:
        raise _BadReply(f"a {encoding} body that does not decompress: {error}")
    if len(out) > limit:
        raise _TooLarge
    return out
