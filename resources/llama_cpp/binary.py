"""Where llama.cpp's `llama-server` executable is.

`make llama-server` (`benchmarks.lib.llama_cpp_build`) builds it from the pinned
`llama-cpp-python` sdist into `cache_dir()`; a user may instead put their own build on PATH or
name it in `LLM_ASSETS_LLAMA_SERVER`. `find_binary(given)` looks, in order, at: the path given
(config / `--llama-server`), `$LLM_ASSETS_LLAMA_SERVER`, the cached build of `VERSION`, and
`llama-server` on PATH. A missing binary is one line saying each way to get one.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

VERSION = "0.3.36"
"""`llama-cpp-python` release whose vendored llama.cpp is built (pinned: new releases move
llama.cpp's HTTP API and metrics)."""

BINARY_ENV = "LLM_ASSETS_LLAMA_SERVER"


def cache_root() -> Path:
    """`$LLM_ASSETS_CACHE`, else `~/.cache/llm-assets`: built binaries and joined models."""
    return Path(os.environ.get("LLM_ASSETS_CACHE") or Path.home() / ".cache" / "llm-assets")


def cache_dir(version: str = VERSION) -> Path:
    """Where the binary of `version` is kept."""
    return cache_root() / f"llama.cpp-{version}"


def server_binary(version: str = VERSION) -> Path | None:
    """The built `llama-server`, or None when it has not been built on this machine."""
    path = cache_dir(version) / "llama-server"
    return path if _executable(path) else None


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_binary(given: str | Path | None = None) -> Path:
    """The `llama-server` to run (see the module docstring); FileNotFoundError, one line."""
    named = given or os.environ.get(BINARY_ENV) or None
    if named:
        path = Path(named).expanduser()
        if _executable(path):
            return path
        source = "llama_server" if given else BINARY_ENV
        raise FileNotFoundError(f"{source}={str(named)!r} is not an executable file")
    found = server_binary() or shutil.which("llama-server")
    if found is None:
        raise FileNotFoundError(
            "llama-server not found: run `make llama-server` (builds llama.cpp "
            f"{VERSION} into {cache_dir()}), put llama-server on PATH, or set {BINARY_ENV}"
        )
    return Path(found)
