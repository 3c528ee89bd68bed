"""The kill -9 case of the fault matrix: the client runs as a subprocess
(`python -m benchmarks.lib.kill9 client ...`, JSON events on stdout), is SIGKILLed once half
the rows are committed and the next chunk has gone out, then rerun to completion against the
same response cache. `kill_scenario` reports what `benchmarks.lib.faults` documents, plus
`killed_after_rows_committed` and `cache_entries_at_kill`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.lib.fault_setup import (
    REPO_ROOT,
    ClientSettings,
    FaultScenario,
    Log,
    SimServerProcess,
    _client_run,
    _row_counts,
    _subprocess_env,
)
from resources.engine import Response
from resources.response_cache import ResponseCache

__all__ = ["client_main", "kill_scenario"]


def client_main(argv: Sequence[str] | None = None) -> int:
    """`python -m benchmarks.lib.kill9 client ...`: one client run; JSON events on stdout."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.lib.kill9 client")
    p.add_argument("--base-url", required=True)
    p.add_argument("--rows", type=int, required=True)
    p.add_argument("--cache", required=True, help="response cache file")
    p.add_argument("--out", required=True, help="JSON file of the final responses")
    p.add_argument("--settings", required=True, help="ClientSettings as JSON")
    args = p.parse_args(argv)
    settings = ClientSettings(**json.loads(args.settings))
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")

    def emit(event: dict[str, Any]) -> None:
        print(json.dumps(event), flush=True)

    outcome = _client_run(
        args.base_url,
        args.rows,
        Path(args.cache),
        settings,
        on_send=lambda ids: emit({"event": "sent", "ids": ids}),
        progress=lambda done, total: emit({"event": "progress", "done": done, "total": total}),
    )
    final = {
        "responses": [[r.id, r.error] for r in outcome.responses],
        "sent": outcome.sent,
        "cache_hits": outcome.cache_hits,
    }
    Path(args.out).write_text(json.dumps(final))
    emit({"event": "done", "sent": outcome.sent, "cache_hits": outcome.cache_hits})
    return 0


def kill_scenario(
    scenario: FaultScenario, rows: int, workdir: Path, settings: ClientSettings, log: Log
) -> dict[str, Any]:
    cache_path = workdir / f"{scenario.name}.duckdb"
    out_path = workdir / f"{scenario.name}.out.json"
    row_ids = [f"row-{i:05d}" for i in range(rows)]
    start = time.perf_counter()
    with SimServerProcess(scenario.server_flags, log_path=workdir / f"{scenario.name}.log") as srv:
        cmd = [sys.executable, "-m", "benchmarks.lib.kill9", "client", "--base-url", srv.base_url,
               "--rows", str(rows), "--cache", str(cache_path), "--out", str(out_path),
               "--settings", json.dumps(asdict(settings))]  # fmt: skip
        first = _spawn_client(cmd, workdir / "kill9-first.err", kill_at_half=True)
        committed = ResponseCache(cache_path).count()
        log(
            f"  kill -9 after {first['done']} of {rows} rows committed "
            f"({committed} in the cache); rerunning"
        )
        second = _spawn_client(cmd, workdir / "kill9-rerun.err", kill_at_half=False)
        counts = srv.fault_counts()
    wall = time.perf_counter() - start
    final = json.loads(out_path.read_text())
    responses = [Response(i, "", 0, 0, 0, 0.0, 0.0, error=e) for i, e in final["responses"]]
    result = _row_counts(row_ids, responses)
    result.update(
        requests_sent=len(first["sent"]) + len(second["sent"]),
        requests_resent_after_rerun=len(set(first["sent"]) & set(second["sent"])),
        killed_after_rows_committed=first["done"],
        cache_entries_at_kill=committed,
        chunk_size=settings.chunk_size,
        http_calls=counts.pop("calls"),
        faults_injected=counts,
        wall_s=round(wall, 2),
    )
    if not first["killed"]:
        result["note"] = "the first run finished before it could be killed"
    return result


def _spawn_client(cmd: list[str], err_path: Path, *, kill_at_half: bool) -> dict[str, Any]:
    """Run the client; with `kill_at_half`, SIGKILL it once half the rows are committed AND
    the next chunk has gone out (the worst moment: a chunk in flight, none of it committed).
    Returns the ids it sent, the rows committed when it ended and whether it was killed."""
    sent: list[str] = []
    done = 0
    armed = killed = False
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            cmd, cwd=REPO_ROOT, env=_subprocess_env(), stdout=subprocess.PIPE, stderr=err
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            event = json.loads(line)
            if event["event"] == "sent":
                sent.extend(event["ids"])
                if armed and not killed:
                    time.sleep(0.05)  # let the chunk's first calls reach the server
                    os.kill(proc.pid, signal.SIGKILL)
                    killed = True
            elif event["event"] == "progress":
                done = event["done"]
                armed = kill_at_half and done * 2 >= event["total"] > 0
        code = proc.wait(120)
    if not killed and code != 0:
        raise RuntimeError(
            f"fault client exited with {code}: {err_path.read_text(errors='replace')[-2000:]}"
        )
    return {"sent": sent, "done": done, "killed": killed}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["client"]:
        return client_main(argv[1:])
    raise SystemExit("usage: python -m benchmarks.lib.kill9 client ... (see benchmarks.faults)")


if __name__ == "__main__":
    raise SystemExit(main())
