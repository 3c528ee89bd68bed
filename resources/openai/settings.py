"""What the requests of an `OpenAIEngine` run need of the engine, handed down instead of the
engine itself: its settings (`OpenAIEngineConfig`, URLs removed), the replicas' clean URLs,
the secrets (kept apart, never shown) and the HTTP plumbing built from them (headers, basic
auth, one TLS context, the request body, the backoff). `resources.openai.run`, `request` and
`attempt` read only this; nothing here imports them.

Invariants: the API key leaves only as `Authorization: Bearer`, URL credentials only as HTTP
basic auth; `redact` masks any 8+ character fragment of either, and of their base64 forms
(`resources.redaction`), in every error or log line.
"""

from __future__ import annotations

import logging
import random
import ssl
import threading
from collections.abc import Callable
from typing import Any

import httpx

from resources.configs import OpenAIEngineConfig
from resources.engine import RELQUERY_HEADER, Request
from resources.openai.wire import (
    NO_CACHED_TOKENS_ADVICE,
    Redactor,
    constrained_max_tokens,
    split_url_credentials,
    structured_fields,
)
from resources.redaction import secret_forms

__all__ = ["RELQUERY_HEADER", "ClientSettings", "ProgressCallback"]

log = logging.getLogger("resources.openai.engine")

ProgressCallback = Callable[[int, int], None]


def _replica_key(url: str) -> tuple[str, str, int | None, str]:
    """What makes two base URLs one server: scheme, host (any case), port (the scheme's
    default when absent) and path."""
    parsed = httpx.URL(url)
    default = {"http": 80, "https": 443}.get(parsed.scheme)
    return parsed.scheme, parsed.host.lower(), parsed.port or default, parsed.path.rstrip("/")


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


class ClientSettings:
    """`cfg`'s settings, secrets and HTTP plumbing; see the module invariants. Raises a
    one-line ValueError for a missing URL or model, a URL that is not http(s), a replica
    listed twice (`A,A,B`) and replicas whose URLs carry different credentials."""

    def __init__(
        self,
        cfg: OpenAIEngineConfig,
        api_key: str | None = None,
        progress: ProgressCallback | None = None,
    ) -> None:
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
        self.redact = Redactor(secret_forms(api_key, user, password))
        for clean_url, _, _ in parts:
            if not clean_url.startswith(("http://", "https://")):
                raise ValueError(
                    f"base_url must start with http:// or https://, got {self.redact(clean_url)!r}"
                )
        self.config: OpenAIEngineConfig = cfg.model_copy(
            update={"base_url": None, "base_urls": None}
        )
        """The engine's settings (URLs dropped: the clean ones are `base_urls`)."""
        self.base_urls = [clean.rstrip("/") for clean, _, _ in parts]
        """Every replica's base URL, without credentials (one for a server or a router)."""
        keys = [_replica_key(url) for url in self.base_urls]
        twice = [url for url, key in zip(self.base_urls, keys, strict=True) if keys.count(key) > 1]
        if twice:
            raise ValueError(
                f"base_url lists the replica {self.redact(twice[0])!r} more than once; list "
                "each replica once (more requests in flight at one server: max_concurrency)"
            )
        self.routing = "affinity" if cfg.routing == "auto" else cfg.routing
        self.progress = progress
        self.has_api_key = api_key is not None
        self._api_key = _Secret(api_key) if api_key else None
        self._basic = (_Secret(user or ""), _Secret(password or "")) if user or password else None
        self._rng = random.Random(cfg.seed)
        self._warned_no_cached = False
        self._lock = threading.Lock()
        self._ssl: ssl.SSLContext | None = None

    def tls(self) -> ssl.SSLContext:
        """One TLS context per engine (loading the CA bundle costs ~70 ms; clients share it)."""
        with self._lock:
            if self._ssl is None:
                self._ssl = httpx.create_ssl_context()
            return self._ssl

    def auth(self) -> httpx.BasicAuth | None:
        if self._basic is None:
            return None
        return httpx.BasicAuth(self._basic[0].get(), self._basic[1].get())

    def headers(self, relquery_id: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key.get()}"
        if self.config.send_relquery_header and relquery_id:
            headers[RELQUERY_HEADER] = relquery_id
        return headers

    def endpoint_of(self, base_url: str) -> str:
        """The completion URL under `base_url`."""
        chat = self.config.use_chat
        return f"{base_url}/chat/completions" if chat else f"{base_url}/completions"

    def body(self, request: Request, style: str | None = None) -> dict[str, Any]:
        """The JSON body sent for `request` (never holds the key)."""
        cfg = self.config
        body: dict[str, Any] = {
            "model": cfg.model or "",
            "max_tokens": cfg.max_tokens or request.max_tokens,
            "temperature": cfg.temperature,
        }
        if cfg.use_chat:
            body["messages"] = [{"role": "user", "content": request.prompt}]
        else:
            body["prompt"] = request.prompt
        if cfg.send_priority:
            body["priority"] = request.priority
        style = style or (cfg.server_style if cfg.server_style != "auto" else "vllm")
        constraint = structured_fields(request.output, style)
        if constraint:
            body["max_tokens"] = constrained_max_tokens(request.output, body["max_tokens"])
        body.update(constraint)
        return body

    def backoff_s(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt `attempt + 1`: the server's Retry-After capped at
        `max_backoff_s`, else `initial_backoff_s * 2**attempt` capped, times a uniform
        factor in [0.5, 1)."""
        cap = self.config.max_backoff_s
        if retry_after is not None:
            return min(retry_after, cap)
        base = min(cap, self.config.initial_backoff_s * (2**attempt))
        return base * (0.5 + 0.5 * self._rng.random())

    def warn_no_cached_tokens(self, style: str) -> None:
        """One warning per engine that the server does not report cached tokens."""
        if self._warned_no_cached:
            return
        self._warned_no_cached = True
        log.warning(
            "server at %s does not report usage.prompt_tokens_details.cached_tokens; cached "
            "tokens are recorded as unknown (%s)",
            self.base_urls[0],
            NO_CACHED_TOKENS_ADVICE.get(style, NO_CACHED_TOKENS_ADVICE["none"]),
        )
