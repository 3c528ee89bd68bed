"""Where local state lives: `$LLM_ASSETS_HOME`, default `./.llm_assets` (the DuckDB warehouse,
the MLflow store, the response cache, the landing folder)."""

import os
from pathlib import Path


def llm_assets_home() -> Path:
    """`$LLM_ASSETS_HOME` as an absolute path, or `./.llm_assets` when unset or empty."""
    return Path(os.environ.get("LLM_ASSETS_HOME") or ".llm_assets").resolve()
