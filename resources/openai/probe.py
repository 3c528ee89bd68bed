"""What an OpenAI-compatible server says about itself before any completion is sent.

`probe_server(base_url, ...)` asks `GET {base_url}/models` and `GET {root}/props` (root =
the URL without its trailing `/v1`), each once and within `timeout_s` of wall-clock time
(body included; `/props` is skipped when `/models` got no reply), and never raises:

- `auth_error`: set when `/models` answers 401 or 403 (the key is wrong: nothing should be
  sent), with the server's message redacted;
- `max_model_len`: the context window: vLLM's `data[].max_model_len` for the model, else
  llama.cpp's `default_generation_settings.n_ctx` from `/props`, else `meta.n_ctx_train`
  from `/models`; None when the server says nothing;
- `style`: "llamacpp" when `/props` answers like llama.cpp's `llama-server`, "vllm" when
  `/models` names vLLM as the owner, else None (unknown);
- `identity`: who answers, as the server reports itself: the `owned_by` values of `/models`
  (sorted, `,`-joined: "vllm", "llamacpp", "llm-assets-sim", "openai", ...), then the model
  ids it lists in brackets (sorted: `vllm[meta-llama/Llama-2-7b-hf]`), plus `+props` when
  `/props` answers as llama.cpp; None when `/models` got no reply. Replicas of one deployment
  report the same identity; the response cache keys answers by it, and a fleet whose
  replicas report different ones is refused (`resources.openai.roster`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from resources.openai.wire import error_message

__all__ = ["ServerInfo", "probe_server"]


@dataclass(frozen=True)
class ServerInfo:
    style: str | None = None
    max_model_len: int | None = None
    auth_error: str | None = None
    identity: str | None = None
    no_reply: str | None = None
    """Why `GET /models` got no HTTP reply (a connection error, a timeout), else None."""


def _positive_int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


async def _get(client: httpx.AsyncClient, url: str, timeout_s: float):
    """(status, parsed JSON or None, body) of `GET url`, else why there was no reply (a
    string); a hard wall-clock bound of `timeout_s`, body included."""
    try:
        async with asyncio.timeout(timeout_s):
            reply = await client.get(url)
    except TimeoutError:
        return f"timed out after {timeout_s:g}s"
    except httpx.HTTPError as exc:
        return f"connection error: {type(exc).__name__}: {exc}"
    try:
        data = reply.json()
    except ValueError:
        data = None
    return reply.status_code, data, reply.content


async def probe_server(
    base_url: str,
    headers: dict[str, str],
    auth: httpx.Auth | None,
    *,
    timeout_s: float,
    redact: Callable[[str], str],
) -> ServerInfo:
    """What the server at `base_url` says about itself (see the module docstring)."""
    timeout = httpx.Timeout(timeout_s)
    async with httpx.AsyncClient(timeout=timeout, headers=headers, auth=auth) as client:
        models = await _get(client, f"{base_url}/models", timeout_s)
        if isinstance(models, str):  # no reply at all: do not wait for a dead server twice
            return ServerInfo(no_reply=redact(models))
        if models[0] in (401, 403):
            message = redact(error_message(models[2], "unauthorized"))
            return ServerInfo(auth_error=f"HTTP {models[0]} from GET /models: {message}")
        props = await _get(client, f"{base_url.removesuffix('/v1')}/props", timeout_s)
        props = None if isinstance(props, str) else props
    style, window = None, None
    owners: set[str] = set()
    ids: set[str] = set()
    if props is not None and props[0] == 200 and isinstance(props[1], dict):
        settings = props[1].get("default_generation_settings")
        if isinstance(settings, dict):
            style = "llamacpp"
            window = _positive_int(settings.get("n_ctx"))
    if models[0] == 200 and isinstance(models[1], dict):
        entries = models[1].get("data")
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict):
                continue
            if entry.get("owned_by") == "vllm" and style is None:
                style = "vllm"
            if isinstance(entry.get("owned_by"), str):
                owners.add(entry["owned_by"])
            if isinstance(entry.get("id"), str):
                ids.add(entry["id"])
            meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
            window = (
                window
                or _positive_int(entry.get("max_model_len"))
                or _positive_int(meta.get("n_ctx_train"))
            )
    identity = ",".join(sorted(owners)) or "?"
    if ids:
        identity += f"[{','.join(sorted(ids))}]"
    if style == "llamacpp":
        identity += "+props"
    return ServerInfo(style=style, max_model_len=window, identity=identity)
