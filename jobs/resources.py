"""Resources per environment (`LLM_ASSETS_ENGINE=sim|vllm|openai|llama_cpp`): the code
location binds `llm_assets.default_resources`, defined in `llm_assets/assets/defaults.py` (one
path for the code location, the tests and a hand-written `llm_query_assets`)."""

from llm_assets.assets.defaults import (
    ENVIRONMENTS,
    default_resources,
    engine_for,
    get_environment,
)

__all__ = ["ENVIRONMENTS", "engine_for", "get_environment", "resources_for"]


def resources_for(env: str) -> dict:
    """Every resource a query's assets need for environment `env` (`sim`, `vllm`, `openai`,
    `llama_cpp`)."""
    return default_resources(env)
