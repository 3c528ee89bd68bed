"""`fcfs`: vLLM v0's scheduler (FCFS, prefill first, whole prompts), the paper's "vLLM" baseline.

The same policy as `vllm-v0` (`resources.sim.policies.vllm_v0`) under the name relserve.txt
§5.1 uses; both names stay registered. Requests are admitted in arrival order (then submission
order), so a relQuery that arrives behind a long one waits for all of it to be admitted.
"""

from __future__ import annotations

from resources.sim.policies.vllm_v0 import VLLMv0Policy

__all__ = ["FCFSPolicy"]


class FCFSPolicy(VLLMv0Policy):
    """vLLM v0 FCFS (see `VLLMv0Policy`)."""

    name = "fcfs"
