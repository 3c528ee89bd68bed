"""Resources per environment, chosen in one place (`LLM_ASSETS_ENGINE=sim|vllm|openai`).

Secrets and endpoints come through `dg.EnvVar` (read when a run starts, never at import):
- vllm: LLM_ASSETS_VLLM_MODEL (weights path or model id);
- openai: LLM_ASSETS_OPENAI_BASE_URL, LLM_ASSETS_OPENAI_MODEL, LLM_ASSETS_OPENAI_API_KEY
  (optional: a keyless local server needs none) and LLM_ASSETS_OPENAI_<OPTION> for any
  tuning option of `OpenAIEngineResource`, all read when a run starts.
"""

import os

import dagster as dg

from llm_assets.assets import QueryOptionsResource
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


def resources_for(env: str) -> dict:
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
