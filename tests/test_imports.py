"""Every module of our packages imports without the optional heavy dependencies (vLLM, torch,
the tokenizer libraries, Playwright): `pytest --doctest-modules` imports them all, and so may
any user. Run in a fresh interpreter so nothing imported by other tests counts."""

import subprocess
import sys

from tests.conftest import ROOT

HEAVY = ["vllm", "torch", "transformers", "tiktoken", "tokenizers", "playwright", "highspy"]
SCRIPT = f"""
import importlib, pkgutil, sys
for package in ("llm_assets", "resources", "jobs", "benchmarks"):
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
print(sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r})))
"""


def test_no_module_imports_a_heavy_optional_dependency():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout
