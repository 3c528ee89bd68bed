"""llama.cpp's `llama-server` for a test or a benchmark: the project's own process wrapper
(`resources.llama_cpp.server.LlamaServer`: 127.0.0.1, a free port, never outliving its
owner, host prompt cache off) answering to `ALIAS`, plus what only measurements need:

- `metrics()` reads the Prometheus counters of `/metrics` (`benchmarks.lib.prom`, the one
  parser; `llamacpp:` prefix removed), e.g.
  `prompt_tokens_cached_total` (prompt tokens reused from a slot's cache, summed over every
  completion) and `prompt_tokens_total` (prompt tokens computed);
- `tokenize(text)` is the server's own tokenization, without BOS.
"""

from __future__ import annotations

from benchmarks.lib.prom import scrape
from resources.llama_cpp.server import LlamaServer as _Server

ALIAS = "random-llama3"
"""The model name the server answers to (`--alias`)."""


def one_slot_cached(token_ids: list[list[int]]) -> list[int]:
    """Cached tokens per request, sent one at a time to one slot with the host prompt cache off:
    the longest common prefix with the previous request's tokens (BOS included), less one when
    the whole prompt matches (llama.cpp always computes at least one token)."""
    cached, previous = [], []
    for ids in token_ids:
        common = 0
        for a, b in zip(previous, ids, strict=False):
            if a != b:
                break
            common += 1
        cached.append(min(common, len(ids) - 1))
        previous = ids
    return cached


class LlamaServer(_Server):
    """`resources.llama_cpp.server.LlamaServer` answering to `ALIAS` unless told otherwise,
    with its Prometheus counters."""

    def __init__(self, binary, model, *, alias: str = ALIAS, **options) -> None:
        super().__init__(binary, model, alias=alias, **options)

    def metrics(self) -> dict[str, float]:
        """Counters and gauges of `/metrics`, by name without the `llamacpp:` prefix."""
        return {
            name.removeprefix("llamacpp:"): value
            for name, value in scrape(f"{self.url}/metrics").items()
            if name.startswith("llamacpp:")
        }
