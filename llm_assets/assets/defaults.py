"""The resources a query's assets need, chosen in one place (`LLM_ASSETS_ENGINE=sim|vllm|openai`,
sim by default): what the code location (`jobs/`) binds, and what a hand-written
`llm_query_assets` needs to materialize:

    defs = llm_query_assets("my_reviews", SQL, sources={"reviews": "reviews.tsv"})
    dg.materialize([*defs.assets, *defs.asset_checks], resources=default_resources("sim"))

Secrets and endpoints come through `dg.EnvVar` (read when a run starts, never at import):
- vllm: LLM_ASSETS_VLLM_MODEL (weights path or model id);
- openai: LLM_ASSETS_OPENAI_BASE_URL, LLM_ASSETS_OPENAI_MODEL, LLM_ASSETS_OPENAI_API_KEY
  (optional: a keyless local server needs none) and LLM_ASSETS_OPENAI_<OPTION> for any
  tuning option of `OpenAIEngineResource`, all read when a run starts.
"""

import os

import dagster as dg

from llm_assets.assets.options import QueryOptionsResource
from resources.expectations import GXValidator
from resources.home import llm_assets_home
from resources.llm_resources import (
    LLMEngineResource,
    OpenAIEngineResource,
    ResponseCacheResource,
    SimulatedEngineResource,
    VLLMEngineResource,
)
from resources.tracking import MLflowTracker
from resources.warehouse import warehouse_io_manager

ENVIRONMENTS = ("sim", "vllm", "openai")


def get_environment() -> str:
    """`$LLM_ASSETS_ENGINE`, `sim` when unset; anything else is one ValueError line."""
    env = os.environ.get("LLM_ASSETS_ENGINE", "sim")
    if env not in ENVIRONMENTS:
        raise ValueError(f"LLM_ASSETS_ENGINE={env!r} is not one of {list(ENVIRONMENTS)}")
    return env


def engine_for(env: str) -> LLMEngineResource:
    if env == "vllm":
        return VLLMEngineResource(model=dg.EnvVar("LLM_ASSETS_VLLM_MODEL"))
    if env == "openai":
        # every option (URL, model, key, tuning) falls back to LLM_ASSETS_OPENAI_<OPTION>
        # when the run starts, so run config may set any one of them alone
        return OpenAIEngineResource()
    return SimulatedEngineResource()


def default_resources(engine: str | None = None) -> dict:
    """Every resource key a query's assets require, for `engine` (`sim`, `vllm`, `openai`;
    default `$LLM_ASSETS_ENGINE`, else `sim`): the engine as `llm_engine`, the response cache
    (off on the sim), `options`, the checks' `gx`, the MLflow `tracker` and the DuckDB
    warehouse IO managers under `$LLM_ASSETS_HOME` (default `./.llm_assets`).

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
