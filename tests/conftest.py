"""Shared test helpers: where ../shared is, and a skip when it is absent."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def shared_file(*parts: str) -> Path:
    """A file under ../shared, or skip the test with the reason."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared data folder is not beside the project)")
    return path
