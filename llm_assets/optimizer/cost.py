"""Dollar cost of an LLM run under several pricing models, from one dated pricing table.

Pure (no I/O, imports nothing of ours). Three kinds of pricing:

- ``hosted`` (OpenAI style): input $/Mtok, cached input at a discount, output $/Mtok;
- ``anthropic`` (Anthropic style): uncached input is written to the cache at a premium
  (cache writes cost more than plain input), cached input is read at a discount, output $/Mtok.
  We assume every prompt is sent with caching on, so every uncached prompt token is a cache write;
- ``self_hosted``: GPU $/hour x hours of engine time x number of GPUs (what renting the engine's
  GPUs for the run costs; tokens are free).

`cost_usd(...)` returns one entry per pricing model, keyed ``cost_usd_<pricing>``.

The prices are public list prices as of `PRICING_DATE` (on-demand, USD, no volume discounts);
they change often: update the table and the date together. Invariants: every price is >= 0;
a cached token never costs more than an uncached one under hosted pricing; all costs are
linear in their inputs and 0 for an empty run.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "GPU_USD_PER_HOUR",
    "PRICING",
    "PRICING_DATE",
    "TokenPricing",
    "cost_usd",
    "gpu_usd_per_hour",
    "self_hosted_usd",
    "token_cost_usd",
]

PRICING_DATE = "2026-11"
"""Month the prices below were last checked."""

GPU_USD_PER_HOUR: dict[str, float] = {
    # On-demand list prices per GPU-hour. L4: Google Cloud g2-standard-4 (1x L4), us-central1,
    # ~$0.71/h. A100-40GB: Lambda on-demand 1x A100 40GB SXM, $1.29/h. H100-80GB: Lambda
    # on-demand H100 SXM, $2.99/h. H200: typical neocloud on-demand H200 SXM, ~$3.79/h.
    "L4": 0.71,
    "A100-40GB": 1.29,
    "H100-80GB": 2.99,
    "H200": 3.79,
}
"""GPU rental price in USD per GPU-hour, by GPU name (the simulated engine's hardware names)."""


@dataclass(frozen=True)
class TokenPricing:
    """Per-token prices of a hosted model, in USD per million tokens."""

    style: str
    """`hosted` (OpenAI style) or `anthropic` (cache writes at a premium)."""
    input_per_mtok: float
    """Uncached prompt tokens (hosted) / plain input (anthropic, unused when caching is on)."""
    cached_input_per_mtok: float
    """Prompt tokens served from the provider's prompt cache (a cache read)."""
    output_per_mtok: float
    """Generated tokens."""
    cache_write_per_mtok: float | None = None
    """Anthropic style: uncached prompt tokens written to the cache (1.25x input for 5 min TTL)."""

    def __post_init__(self) -> None:
        if self.style not in ("hosted", "anthropic"):
            raise ValueError(
                f"unknown pricing style {self.style!r}; expected 'hosted' or 'anthropic'"
            )
        if self.style == "anthropic" and self.cache_write_per_mtok is None:
            raise ValueError("anthropic-style pricing needs cache_write_per_mtok")


PRICING: dict[str, TokenPricing] = {
    # OpenAI API pricing page (gpt-4o-mini: $0.15 in, $0.075 cached in, $0.60 out per Mtok;
    # gpt-4.1-mini: $0.40 in, $0.10 cached in, $1.60 out).
    "openai_gpt4o_mini": TokenPricing("hosted", 0.15, 0.075, 0.60),
    "openai_gpt41_mini": TokenPricing("hosted", 0.40, 0.10, 1.60),
    # Anthropic pricing page (Claude Haiku 3.5: $0.80 in, $1.00 5-min cache write, $0.08 cache
    # read, $4 out; Claude Sonnet 4: $3 in, $3.75 write, $0.30 read, $15 out).
    "anthropic_haiku": TokenPricing("anthropic", 0.80, 0.08, 4.00, cache_write_per_mtok=1.00),
    "anthropic_sonnet": TokenPricing("anthropic", 3.00, 0.30, 15.00, cache_write_per_mtok=3.75),
}
"""Hosted token pricing by name; each yields a `cost_usd_<name>` entry."""


def _check_counts(prompt_tokens: int, cached_tokens: int, output_tokens: int) -> None:
    if min(prompt_tokens, cached_tokens, output_tokens) < 0:
        raise ValueError(
            f"token counts must be >= 0, got prompt={prompt_tokens} cached={cached_tokens} "
            f"output={output_tokens}"
        )
    if cached_tokens > prompt_tokens:
        raise ValueError(f"cached_tokens={cached_tokens} exceeds prompt_tokens={prompt_tokens}")


def token_cost_usd(
    pricing: TokenPricing, prompt_tokens: int, cached_tokens: int, output_tokens: int
) -> float:
    """USD for one run's tokens under one hosted pricing."""
    _check_counts(prompt_tokens, cached_tokens, output_tokens)
    uncached = prompt_tokens - cached_tokens
    uncached_price = (
        pricing.cache_write_per_mtok if pricing.style == "anthropic" else pricing.input_per_mtok
    )
    return (
        uncached * uncached_price
        + cached_tokens * pricing.cached_input_per_mtok
        + output_tokens * pricing.output_per_mtok
    ) / 1e6


def gpu_usd_per_hour(gpu: str) -> float:
    """Price of one GPU-hour; ValueError naming the valid GPUs for an unknown name."""
    try:
        return GPU_USD_PER_HOUR[gpu]
    except KeyError:
        raise ValueError(
            f"unknown gpu {gpu!r}; expected one of {sorted(GPU_USD_PER_HOUR)}"
        ) from None


def self_hosted_usd(engine_time_s: float, gpu: str, n_gpus: int = 1) -> float:
    """GPU rental for `engine_time_s` seconds on `n_gpus` GPUs of type `gpu`."""
    if engine_time_s < 0 or n_gpus < 1:
        raise ValueError(f"need engine_time_s >= 0 and n_gpus >= 1, got {engine_time_s}, {n_gpus}")
    return gpu_usd_per_hour(gpu) * n_gpus * engine_time_s / 3600.0


def cost_usd(
    prompt_tokens: int,
    cached_tokens: int,
    output_tokens: int,
    engine_time_s: float,
    gpu: str = "L4",
    n_gpus: int = 1,
) -> dict[str, float]:
    """Cost of one run under every pricing model: `cost_usd_<name>` for each entry of `PRICING`
    plus `cost_usd_self_hosted` (GPU rental for the engine time).

    >>> costs = cost_usd(1_000_000, 0, 0, 3600.0, gpu="L4")
    >>> costs["cost_usd_openai_gpt4o_mini"], costs["cost_usd_self_hosted"]
    (0.15, 0.71)
    """
    out = {
        f"cost_usd_{name}": token_cost_usd(p, prompt_tokens, cached_tokens, output_tokens)
        for name, p in PRICING.items()
    }
    out["cost_usd_self_hosted"] = self_hosted_usd(engine_time_s, gpu, n_gpus)
    return out
