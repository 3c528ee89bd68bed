"""Shared test helpers: where ../shared is, and a skip when it is absent."""

import os
import signal
import subprocess
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]

# Hypothesis' per-example deadline (200 ms) is a timing assertion, and this suite runs on
# shared 2-core machines where one example can take 2x-10x longer for reasons of its own
# (a fresh-clone CI run failed a 47 ms sampling test at 440 ms): no deadline by default.
# A test that must bound its time says so with its own @settings(deadline=...).
settings.register_profile("shared-cores", deadline=None)
settings.load_profile("shared-cores")
# LLM_ASSETS_SHARED: where the tests run from a copy of the tree (mutmut's mutants/)
SHARED = Path(os.environ.get("LLM_ASSETS_SHARED") or ROOT.parent / "shared")


def shared_file(*parts: str) -> Path:
    """A file under ../shared, or skip the test with the reason."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared data folder is not beside the project)")
    return path


@pytest.fixture(autouse=True)
def _children_can_be_terminated():
    """Dagster's in-process runs map SIGTERM to whatever SIGINT does; from a shell that
    ignores SIGINT (a background CI job) that leaves SIGTERM ignored here and in every server
    a later test starts, which then cannot be stopped. Restore the default after each test."""
    yield
    if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def terminate_cleanly(proc: subprocess.Popen) -> None:
    """SIGTERM a server subprocess and assert it exits 0 within 10 s; a server that does not is
    killed, so a failing test leaves no orphan behind."""
    proc.terminate()
    try:
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
