"""Does one huge request hold up the sim server? `python -m benchmarks.sim_server_blocking
[--huge 1000000000] [--repeats 5] [--code DIR] [--json PATH]`.

Starts `python -m resources.sim.server` (the code under `--code`, default this checkout) on
127.0.0.1 and measures, `--repeats` times each, medians reported:

- `small_alone_s`: a 2-token completion on an idle server;
- `huge_s`, `huge_status`, `huge_body_bytes`: one completion asking `max_tokens=--huge`;
- `small_beside_huge_s`: the small completion sent 50 ms after the huge one started;
- `window_s`, `window_sim_finish_s`: the largest completion the window allows
  (`max_tokens = max_model_len - 8`, a prompt of a few tokens): wall seconds, and the
  simulated seconds it stands for;
- `small_beside_window_s`: the small completion sent 50 ms after that one started.

Writes JSON (default `benchmarks/results/sim_server_blocking.json`) and a markdown table beside
it. Before the server checked the context window, `max_tokens=10**9` built a 5 GB answer; run the
old code with a smaller `--huge` to see the trend without exhausting memory.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.lib.provenance import write_result

REPO = Path(__file__).resolve().parents[1]
DEFAULT_JSON = REPO / "benchmarks/results/sim_server_blocking.json"
_URL = re.compile(r"sim server on (http://[0-9.]+:\d+/v1)")


def _start(code: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    cmd = [sys.executable, "-m", "resources.sim.server", "--port", "0", "--log-level", "INFO"]
    with open(log, "wb") as err:
        proc = subprocess.Popen(cmd, cwd=code, env=env, stderr=err, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (match := _URL.search(log.read_text())):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"server did not start: {log.read_text()[-2000:]}")
        time.sleep(0.05)
    return proc, match.group(1)


def _post(url: str, body: dict[str, Any], out: dict[str, Any]) -> None:
    t0 = time.perf_counter()
    reply = httpx.post(f"{url}/completions", json=body, timeout=900)
    out.update(
        status=reply.status_code,
        seconds=time.perf_counter() - t0,
        bytes=len(reply.content),
        body=reply.json() if len(reply.content) < 1_000_000 else None,
    )


def _beside(url: str, big: dict[str, Any], small: dict[str, Any]) -> tuple[dict, dict]:
    """Send `big`, then `small` 50 ms later; both results."""
    big_out: dict[str, Any] = {}
    small_out: dict[str, Any] = {}
    thread = threading.Thread(target=_post, args=(url, big, big_out))
    thread.start()
    time.sleep(0.05)
    _post(url, small, small_out)
    thread.join()
    return big_out, small_out


def measure(code: Path, huge: int, repeats: int) -> dict[str, Any]:
    small = {"prompt": "small", "max_tokens": 2}
    samples: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        samples.setdefault(name, []).append(value)

    with tempfile.TemporaryDirectory() as tmp:
        proc, url = _start(code, Path(tmp) / "server.log")
        try:
            window = httpx.get(f"{url}/models", timeout=10).json()["data"][0].get("max_model_len")
            for i in range(repeats):
                alone: dict[str, Any] = {}
                _post(url, {**small, "prompt": f"small {i}"}, alone)
                add("small_alone_s", alone["seconds"])
                big, beside = _beside(
                    url, {"prompt": f"huge {i}", "max_tokens": huge}, {**small, "prompt": f"s{i}"}
                )
                add("huge_s", big["seconds"])
                add("huge_status", big["status"])
                add("huge_body_bytes", big["bytes"])
                add("small_beside_huge_s", beside["seconds"])
                if window:
                    big, beside = _beside(
                        url,
                        {"prompt": f"w{i}", "max_tokens": window - 8},
                        {**small, "prompt": f"t{i}"},
                    )
                    add("window_s", big["seconds"])
                    add("window_sim_finish_s", big["body"]["sim"]["finish_s"][0])
                    add("small_beside_window_s", beside["seconds"])
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    return {
        "code": "this checkout" if code == REPO else str(code),
        "huge_max_tokens": huge,
        "max_model_len": window,
        "repeats": repeats,
        "medians": {k: round(statistics.median(v), 4) for k, v in samples.items()},
    }


def markdown(result: dict[str, Any]) -> str:
    rows = [f"| {k} | {v} |" for k, v in result["medians"].items()]
    head = f"huge max_tokens={result['huge_max_tokens']}, repeats={result['repeats']} (medians)"
    return "\n".join([head, "", "| measure | median |", "|---|---|", *rows, ""])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--huge", type=int, default=10**9, help="max_tokens of the huge request")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--code", type=Path, default=REPO, help="checkout whose server to run")
    p.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = p.parse_args(argv)
    result = measure(args.code.resolve(), args.huge, args.repeats)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.json, result, indent=2)
    args.json.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
