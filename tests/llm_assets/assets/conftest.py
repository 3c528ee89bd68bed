"""Fixtures the asset tests share."""

import pytest


@pytest.fixture
def landing(tmp_path, monkeypatch):
    """An empty landing folder, with LLM_ASSETS_HOME (the warehouse) beside it."""
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    folder = tmp_path / "landing"
    folder.mkdir()
    return folder
