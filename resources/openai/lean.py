"""The lean HTTP/1.1 path of one attempt: the request bytes, a worker task's kept
connections and one reply read and framed in full.

httpx costs about 1 ms of client CPU per request (its client, httpcore's pool and anyio
wrappers around each read and write); one asyncio stream per worker and replica costs about
a tenth of that (benchmarks/client_throughput.py). So a plain-http completion (no proxy, no
auth on the client: what a fleet of local replicas is; `lean_target`) goes over this path
(`resources.openai.attempt._post_lean` sends it and maps its failures): the request httpx
would send (same JSON body and headers, without Accept-Encoding; a gzip or deflate reply is
still decoded; `request_bytes`), a reply read in full (Content-Length, chunked, or until the
server closes; `read_reply`) within the caller's hard timeout and `max_reply_bytes`, and the
connection kept for the worker's next request unless the reply or an error left it in doubt.
Failures are told apart by exception: no HTTP reply (refused, reset, closed: `NoReply`), a
reply that broke HTTP/1.1 (`BadReply`), a body over the cap (`TooLarge`), a request that
cannot be written (`BadRequest`). Each worker task's connections (`task_lane`) close when the
task ends.
"""

from __future__ import annotations

import asyncio
import os
import weakref
import zlib
from dataclasses import dataclass

import httpx

_PROXY_VARS = ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")
_SKIPPED = frozenset(
    {"accept-encoding", "connection", "content-length", "host", "transfer-encoding"}
)
"""Headers the lean path writes itself (Host, Content-Length) or leaves out."""


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    path: str
    head: bytes
    """`POST path HTTP/1.1` and the Host header line."""


_TARGETS: dict[str, Target] = {}


_DIRECT: weakref.WeakKeyDictionary[httpx.AsyncClient, bool] = weakref.WeakKeyDictionary()
"""Per client: whether its plain-http requests may go over the lean path (decided at its
first request, as httpx reads the proxy variables once, when the client is made)."""


def lean_target(client: httpx.AsyncClient, url: str) -> Target | None:
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
        target = _TARGETS.setdefault(url, Target(host, port, path, head))
    return target


class NoReply(Exception):
    """The connection ended (closed or reset) before a byte of the reply came."""


class BadRequest(Exception):
    """The request cannot be written (a header with a line break)."""


class BadReply(Exception):
    """The reply broke HTTP/1.1 (or the connection ended inside it)."""


class TooLarge(Exception):
    """The reply body is over `max_reply_bytes`."""


class Conn:
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
        self.conns: dict[str, Conn] = {}
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


def task_lane() -> _Lane:
    """The current task's `_Lane` (its connections close when the task ends)."""
    task = asyncio.current_task()
    assert task is not None
    lane = _LANES.get(task)
    if lane is None:
        lane = _LANES[task] = _Lane()
        task.add_done_callback(lambda _: lane.close())
    return lane


def request_bytes(target: Target, defaults: bytes, headers: dict, content: bytes) -> bytes:
    """The request as httpx would write it (Content-Type JSON unless given)."""
    lines = [target.head, defaults]
    typed = False
    for name, value in headers.items():
        lower = name.lower()
        if lower in _SKIPPED:
            continue
        line = f"{name}: {value}"
        if "\r" in line or "\n" in line:
            raise BadRequest(f"illegal header {name!r}: a line break in the name or value")
        typed = typed or lower == "content-type"
        lines.append(line.encode() + b"\r\n")
    if not typed:
        lines.append(b"Content-Type: application/json\r\n")
    lines.append(b"Content-Length: %d\r\n\r\n" % len(content))
    lines.append(content)
    return b"".join(lines)


async def read_reply(
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
                raise NoReply("the server closed the connection without replying") from None
            raise BadReply("the server closed the connection inside the reply headers") from None
        except (ConnectionResetError, BrokenPipeError) as exc:
            if first:
                raise NoReply(f"{type(exc).__name__}: {exc}") from None
            raise
        except asyncio.LimitOverrunError:
            raise BadReply("reply headers over 64 KiB") from None
        first = False
        lines = raw.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise BadReply(f"malformed status line {lines[0][:80]!r}")
        status = int(code)
        if not 100 <= status < 200:
            break
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadReply(f"malformed header line {line[:80]!r}")
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
                raise BadReply(f"negative Content-Length {length}")
            if length > limit:
                raise TooLarge
            data = await reader.readexactly(length)
        else:  # the body runs until the server closes the connection
            keep = False
            buffer = bytearray()
            while chunk := await reader.read(65536):
                buffer += chunk
                if len(buffer) > limit:
                    raise TooLarge
            data = bytes(buffer)
    except asyncio.IncompleteReadError:
        raise BadReply("the server closed the connection inside the reply body") from None
    except asyncio.LimitOverrunError:
        raise BadReply("a chunk-size line over 64 KiB") from None
    except ValueError as exc:
        raise BadReply(f"malformed reply framing: {exc}") from None
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
            raise BadReply(f"negative chunk size {size}")
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                pass
            return bytes(data)
        if len(data) + size > limit:
            raise TooLarge
        chunk = await reader.readexactly(size + 2)
        if chunk[-2:] != b"\r\n":
            raise BadReply("a chunk not followed by CRLF")
        data += memoryview(chunk)[:-2]


def _decompress(data: bytes, encoding: str, limit: int) -> bytes:
    """A gzip or deflate body (not asked for, but allowed), at most `limit` bytes."""
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise BadReply(f"unsupported Content-Encoding {encoding!r}")
    # gzip (or zlib-wrapped deflate, told apart by its header), else raw deflate
    for wbits in (47, -15) if encoding == "deflate" else (31,):
        try:
            out = zlib.decompressobj(wbits).decompress(data, limit + 1)
            break
        except zlib.error as exc:
            error = exc
    else:
        raise BadReply(f"a {encoding} body that does not decompress: {error}")
    if len(out) > limit:
        raise TooLarge
    return out
