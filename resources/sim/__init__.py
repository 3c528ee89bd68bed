"""The embedded simulated vLLM engine: tokenizer, block cache, policies, cost model, answers.

`SimulatedEngine` (in `resources.sim.engine`) is the entry point; see its module docstring.
"""

from __future__ import annotations

from resources.sim.cost_model import (
    DEFAULT_EFFICIENCY,
    BatchShape,
    CostCoefficients,
    Efficiency,
    coefficients_from_profile,
    fit,
)
from resources.sim.engine import SimulatedEngine
from resources.sim.policies import POLICIES, get_policy
from resources.sim.profiles import HARDWARE, MODELS, Deployment, resolve_deployment
from resources.sim.tokenizer import ApproxTokenizer, Tokenizer, load_tokenizer

__all__ = [
    "DEFAULT_EFFICIENCY",
    "HARDWARE",
    "MODELS",
    "POLICIES",
    "ApproxTokenizer",
    "BatchShape",
    "CostCoefficients",
    "Deployment",
    "Efficiency",
    "SimulatedEngine",
    "Tokenizer",
    "coefficients_from_profile",
    "fit",
    "get_policy",
    "load_tokenizer",
    "resolve_deployment",
]
