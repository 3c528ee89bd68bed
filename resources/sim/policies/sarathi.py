"""`sarathi`: Sarathi-Serve (Agrawal et al., OSDI'24; relserve.txt §5.1 baseline "Sarathi").

Stall-free batching with a fixed token budget: every iteration first gives each running request
its next token (decodes, then the next chunk of a partly prefilled prompt), then fills what is
left of the budget with chunks of waiting prompts in FCFS order. Decodes never wait behind a
prefill (stall-free); long prompts are split across iterations (chunked prefill). This is the
batch formation of `vllm-v1` (`resources.sim.policies.vllm_v1`); what makes it Sarathi-Serve is
the budget: `token_budget` tokens per iteration (Sarathi-Serve's 512 for tight latency targets)
instead of vLLM v1's 8,192, unless the engine is given `max_num_batched_tokens` explicitly.
"""

from __future__ import annotations

from resources.sim.policies.vllm_v1 import VLLMv1Policy

__all__ = ["DEFAULT_TOKEN_BUDGET", "SarathiPolicy"]

DEFAULT_TOKEN_BUDGET = 512
"""Sarathi-Serve's token budget for strict latency targets."""


class SarathiPolicy(VLLMv1Policy):
    """Sarathi-Serve (see the module docstring)."""

    name = "sarathi"

    def __init__(self, token_budget: int = DEFAULT_TOKEN_BUDGET) -> None:
        if token_budget < 1:
            raise ValueError(f"token_budget must be >= 1, got {token_budget}")
        self.token_budget = token_budget
        """Tokens per iteration (decodes plus prefill chunks)."""
