"""The resources a query's assets need, chosen in one place (`LLM_ASSETS_ENGINE=sim|vllm|openai`,
sim by default): what the code location (`jobs/`) binds, and what a hand-written
`llm_query_assets` needs to materialize:

    defs = llm_query_assets("my_reviews", SQL, sources={"reviews": "reviews.tsv"})
    dg.materialize([*defs.assets, *defs.asset_checks], resources=default_resources("sim"))

The engine comes from `resources.llm_resources.engine_resource`, the one way from the
environment to an engine (`llm-assets run` takes it too); endpoints and secrets are read when
a run starts, never at import:
- vllm: LLM_ASSETS_VLLM_MODEL (weights path or model id);
- openai: LLM_ASSETS_OPENAI_BASE_URL, LLM_ASSETS_OPENAI_MODEL, LLM_ASSETS_OPENAI_API_KEY
  (optional: a keyless local server needs none) and LLM_ASSETS_OPENAI_<OPTION> for any
  tuning option of `OpenAIEngineResource`.
"""

import os

import dagster as dg

from llm_assets.assets.options import QueryOptionsResource
from resources.expectations import GXValidator
from resources.home import llm_assets_home
from resources.llm_resources import (
    ENGINE_KINDS,
    LLMEngineResource,
    ResponseCacheResource,
    engine_resource,
)
from resources.tracking import MLflowTracker
from resources.warehouse.store import warehouse_io_manager

ENVIRONMENTS = ENGINE_KINDS


def get_environment() -> str:
    """`$LLM_ASSETS_ENGINE`, `sim` when unset; anything else is one ValueError line."""
    env = os.environ.get("LLM_ASSETS_ENGINE", "sim")
    if env not in ENVIRONMENTS:
        raise ValueError(f"LLM_ASSETS_ENGINE={env!r} is not one of {list(ENVIRONMENTS)}")
    return env


def engine_for(env: str) -> LLMEngineResource:
    """The engine resource of environment `env`: vLLM's model and every OpenAI option (URL,
    model, key, tuning) fall back to their `LLM_ASSETS_<ENGINE>_<OPTION>` variable when the
    run starts, so run config may set any one of them alone."""
    return engine_resource(env)


def default_resources(engine: str | None = None) -> dict:
    """Every resource key a query's assets require, for `engine` (`sim`, `vllm`, `openai`,
    `llama_cpp`; default `$LLM_ASSETS_ENGINE`, else `sim`): the engine as `llm_engine`, the
    response cache (off on the sim), `options`, the checks' `gx`, the MLflow `tracker` and
    the DuckDB warehouse IO managers under `$LLM_ASSETS_HOME` (default `./.llm_assets`).

    >>> sorted(default_resources("sim"))  # doctest: +NORMALIZE_WHITESPACE
    ['gx', 'io_manager', 'llm_engine', 'options', 'pickle_io_manager', 'response_cache',
     'tracker']
    """
    env = get_environment() if engine is None else engine
    if env not in ENVIRONMENTS:
        raise ValueError(f"engine {env!r} is not one of {list(ENVIRONMENTS)}")
    home = llm_assets_home()
    return {
        "llm_engine": engine_for(env),
        "response_cache": ResponseCacheResource(enabled=env != "sim"),
        "options": QueryOptionsResource(),
        "gx": GXValidator(),
        "tracker": MLflowTracker(),
        "io_manager": warehouse_io_manager(),
        "pickle_io_manager": dg.FilesystemIOManager(base_dir=str(home / "storage")),
    }
