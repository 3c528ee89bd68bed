"""The planner's tokenizer for a fleet: the server's own through `/tokenize`, else the sim's.

`plan_tokenizer(base_url, style, prompts, ...)` returns `(tokenize, block_size)` for
`resources.openai.placement.plan_fleet`:

- a server that answers `POST {root}/tokenize` (vLLM: `{"model", "prompt"}`; llama.cpp:
  `{"content"}`; both answer `{"tokens": [...]}`) tokenizes every prompt of the run itself,
  `concurrency` at a time, within `timeout_s` each: the planner then cuts groups where the
  engine's cache does. If the first prompt gets no such answer (404, an error, a timeout),
  the server is not asked again and the approximate tokenizer is used for every prompt;
  if any later one fails, every prompt is approximated too (two token lists are compared
  only when one tokenizer made both);
- otherwise (the sim server, which tokenizes with `ApproxTokenizer` unless started with a
  tokenizer file) the sim's `ApproxTokenizer`, which is exactly the sim's default one.

`block_size`: 16 (vLLM's default `block_size` on CUDA, the sim's), 1 for llama.cpp, whose
slots reuse any matching token prefix.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import httpx

from resources.sim.tokenizer import ApproxTokenizer

__all__ = ["plan_tokenizer"]


async def _tokens(
    client: httpx.AsyncClient, url: str, body: dict, timeout_s: float
) -> list[int] | None:
    try:
        async with asyncio.timeout(timeout_s):
            reply = await client.post(url, json=body)
        tokens = reply.json().get("tokens") if reply.status_code == 200 else None
    except (httpx.HTTPError, TimeoutError, ValueError, AttributeError):
        return None
    ok = isinstance(tokens, list) and all(isinstance(t, int) for t in tokens)
    return tokens if ok else None


async def _remote(
    base_url: str, style: str, model: str | None, prompts: Sequence[str], headers: dict,
    auth: httpx.Auth | None, timeout_s: float, concurrency: int,
) -> dict[str, list[int]]:  # fmt: skip
    url = f"{base_url.removesuffix('/v1')}/tokenize"
    body = {"content": ""} if style == "llamacpp" else {"model": model, "prompt": ""}
    key = "content" if style == "llamacpp" else "prompt"
    unique = list(dict.fromkeys(prompts))
    out: dict[str, list[int]] = {}
    async with httpx.AsyncClient(headers=headers, auth=auth) as client:
        first = await _tokens(client, url, {**body, key: unique[0]}, timeout_s)
        if first is None:
            return out
        out[unique[0]] = first
        gate = asyncio.Semaphore(max(1, concurrency))

        async def one(prompt: str) -> None:
            async with gate:
                tokens = await _tokens(client, url, {**body, key: prompt}, timeout_s)
            if tokens is not None:
                out[prompt] = tokens

        await asyncio.gather(*(one(p) for p in unique[1:]))
    return out if len(out) == len(unique) else {}


def plan_tokenizer(
    base_url: str,
    style: str,
    prompts: Sequence[str],
    *,
    model: str | None = None,
    headers: dict | None = None,
    auth: httpx.Auth | None = None,
    timeout_s: float = 10.0,
    concurrency: int = 16,
    ask_server: bool = True,
) -> tuple[Callable[[str], Sequence[int]], int]:
    """`(tokenize, block_size)` for planning `prompts` on the server at `base_url` (see the
    module docstring); `prompts` must hold every text `tokenize` will be asked (the run's
    prompts and the previous chunk's tails); `ask_server=False` skips `/tokenize`."""
    approx = ApproxTokenizer().encode
    block_size = 1 if style == "llamacpp" else 16
    if not ask_server or not prompts:
        return approx, block_size
    ask = lambda: _remote(  # noqa: E731
        base_url, style, model, prompts, headers or {}, auth, timeout_s, concurrency
    )
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        known = asyncio.run(ask())
    else:  # called from inside an event loop: ask from a fresh thread's loop
        with ThreadPoolExecutor(max_workers=1) as pool:
            known = pool.submit(lambda: asyncio.run(ask())).result()
    if not known:
        return approx, block_size
    return known.__getitem__, block_size
