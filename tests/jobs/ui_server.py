"""A UI server process for the headless-Chromium tests: a free port, waiting until it answers,
and stopping its whole process group."""

import contextlib
import os
import signal
import socket
import subprocess
import time

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def answering(proc: subprocess.Popen, probe: str, name: str, timeout_s: float, poll_s: float):
    """Wait until `probe` answers 200 (fail the test if `proc` exits or `timeout_s` passes),
    yield, then stop `proc`'s process group (SIGTERM, SIGKILL after 30 s)."""
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(probe, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                pytest.fail(f"{name} exited with {proc.returncode}")
            time.sleep(poll_s)
        else:
            pytest.fail(f"{name} did not answer within {timeout_s:g} s")
        yield
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
