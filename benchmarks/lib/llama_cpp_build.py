"""Build llama.cpp's C++ `llama-server` once, from the pinned `llama-cpp-python` sdist.

`python -m benchmarks.lib.llama_cpp_build` downloads `llama-cpp-python==VERSION`'s source
distribution from PyPI (`pip download --no-binary :all: --no-deps`), configures its vendored
`vendor/llama.cpp` with CMake (static, CPU only, no curl/OpenSSL) and builds only the
`llama-server` target. Invariants:

- the binary lives at `cache_dir() / "llama-server"`, a directory keyed by `VERSION`
  (`$LLM_ASSETS_CACHE` or `~/.cache/llm-assets`, then `llama.cpp-VERSION/`); a binary already
  there is reused and nothing is downloaded or built;
- the binary is copied into place only after a successful build, so a half-finished build
  never looks like a cached one;
- `server_binary()` answers without building: the path when built, else None.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from resources.llama_cpp.binary import VERSION, cache_dir, server_binary

__all__ = ["VERSION", "build", "cache_dir", "server_binary"]

CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DGGML_NATIVE=ON",
)


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=cwd, check=True)


def _download_sdist(version: str, dest: Path) -> Path:
    """The sdist in `dest`, downloaded first unless an earlier attempt left it there."""
    sdists = sorted(dest.glob(f"llama_cpp_python-{version}.tar.gz"))
    if sdists:
        return sdists[0]
    _run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:"]
        + ["--no-deps", "-d", str(dest), f"llama-cpp-python=={version}"]
    )
    sdists = sorted(dest.glob(f"llama_cpp_python-{version}.tar.gz"))
    if not sdists:
        raise RuntimeError(f"pip download left no llama_cpp_python sdist in {dest}")
    return sdists[0]


def build(version: str = VERSION, jobs: int | None = None) -> Path:
    """The path of `llama-server` for `version`, built first unless already cached."""
    cached = server_binary(version)
    if cached is not None:
        return cached
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise RuntimeError(
                f"{tool} is not on PATH; install cmake and g++ to build llama-server"
            )
    target = cache_dir(version)
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="llama-cpp-build-") as tmp:
        work = Path(tmp)
        with tarfile.open(_download_sdist(version, target)) as archive:
            archive.extractall(work, filter="data")
        source = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
        build_dir = source / "build"
        _run(["cmake", "-S", str(source), "-B", str(build_dir), *CMAKE_OPTIONS])
        _run(
            ["cmake", "--build", str(build_dir), "--target", "llama-server"]
            + ["--parallel", str(jobs or os.cpu_count() or 1)]
        )
        built = build_dir / "bin" / "llama-server"
        partial = target / "llama-server.partial"
        shutil.copy2(built, partial)
        partial.replace(target / "llama-server")
    return target / "llama-server"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default=VERSION)
    parser.add_argument("--jobs", type=int, default=None, help="parallel compile jobs")
    args = parser.parse_args(argv)
    print(build(args.version, args.jobs))


if __name__ == "__main__":
    main()
