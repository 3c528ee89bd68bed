"""The fault matrix's hostile-file cases (issue 36 item 1): each file is generated streaming
into the scratch folder, then read by the product in a fresh process whose peak RSS is
`wait4`'s `ru_maxrss` for that process alone:

- `gzip-bomb`: a ~4 MB `.csv.gz` of 35M short lines (~2.2 GB inflated; one compressed
  1 MiB member written over and over, which gzip readers concatenate), through
  `llm-assets plan` with the default limits: refused at `max_rows` (10M) in one `error:` line.
- `long-cell`: a valid CSV whose one quoted cell is 300 MB (line breaks and quotes inside):
  `llm-assets plan` refuses it at `max_cell_bytes` (64 MiB) naming its row and column; the
  same file through a source spec with `limits: {max_cell_bytes: 512 MiB}` loads, and the
  cell read back equals the one written (`raised_intact`).
- `10k-columns`: a CSV of 10,000 columns x 200 rows, planned by `llm-assets plan`: loads
  (under `max_columns` 16,384) and plans.
- `long-line`: a 1 GB file that is one line with no delimiter and no newline: refused at the
  header (its one field passes `max_cell_bytes`).

`mixed` counts a run whose outcome is not the expected one (a crash, a traceback, a refusal of
a file that should load, or a refusal without the limit's name); `peak_rss_mb` must stay under
`limit_mb` (the default `max_bytes` plus the interpreter). Every case reports the row-shaped
fields the matrix table prints (no LLM call is made: 0 answered, 0 lost).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from llm_assets.data.limits import InputLimits

__all__ = ["BOUNDED_INPUT_CASES", "bounded_input_case"]

BOUNDED_INPUT_CASES = {
    "gzip-bomb": "4 MB .csv.gz of 35M lines (~2.2 GB inflated), plan refuses at max_rows",
    "long-cell": "one valid 300 MB cell: refused at max_cell_bytes, loads when raised",
    "10k-columns": "10,000 columns x 200 rows: loads and plans",
    "long-line": "a 1 GB single line, no delimiter: refused at the header",
}
LIMIT_MB = InputLimits().max_bytes / 2**20 + 512
"""The bound on a case's peak RSS: the default `max_bytes` plus 512 MB of interpreter."""
MB = 1 << 20
SQL = "SELECT t.c0, LLM('Summarise: {c0}', t.c0) AS s FROM t"


ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    """This checkout's code first (the child runs in the scratch folder)."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}


def _measured(argv: list[str], scratch: Path) -> dict[str, Any]:
    """Run `argv` in a fresh process; its exit code, last stderr line and peak RSS (MB)."""
    err = scratch / "stderr.txt"
    out = scratch / "stdout.txt"
    started = time.perf_counter()
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr, cwd=scratch, env=_env())
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    lines = err.read_text(errors="replace").strip().splitlines()
    return {
        "rc": proc.returncode,
        "stderr_lines": len(lines),
        "error": lines[-1] if lines else "",
        "stdout": out.read_text(errors="replace"),
        "peak_rss_mb": round(usage.ru_maxrss / 1024),
        "wall_s": round(time.perf_counter() - started, 1),
    }


def _plan(path: Path, scratch: Path) -> dict[str, Any]:
    query = scratch / "q.sql"
    query.write_text(SQL)
    argv = [sys.executable, "-m", "llm_assets.cli", "plan", str(query), "--table", f"t={path}"]
    return _measured(argv, scratch)


def _write_bomb(path: Path, lines: int = 35_000_000) -> None:
    line = b"0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmno\n"  # 63 bytes
    per = MB // len(line)
    member = gzip.compress(line * per, compresslevel=9)
    with open(path, "wb") as out:
        out.write(gzip.compress(b"c0\n"))
        for _ in range(lines // per):
            out.write(member)


def _write_long_cell(path: Path, size: int = 300 * MB) -> str:
    """A CSV (header, a short row, the long row, a short row); the long cell's sha256."""
    piece = 'words, "quoted" and a line break\n' * (MB // 34)
    digest = hashlib.sha256()
    with open(path, "w", encoding="utf-8") as out:
        out.write('c0,c1\nshort,1\n"')
        written = 0
        while written < size:
            out.write(piece.replace('"', '""'))
            digest.update(piece.encode())
            written += len(piece)
        out.write('",2\nafter,3\n')
    return digest.hexdigest()


def _write_wide(path: Path, columns: int = 10_000, rows: int = 200) -> None:
    with open(path, "w") as out:
        out.write(",".join(f"c{j}" for j in range(columns)) + "\n")
        for i in range(rows):
            out.write(",".join(f"r{i}v{j}" for j in range(columns)) + "\n")


def _write_long_line(path: Path, size: int = 1000 * MB) -> None:
    with open(path, "wb") as out:
        chunk = b"x" * (4 * MB)
        for _ in range(size // len(chunk)):
            out.write(chunk)


def _row(name: str, runs: list[dict[str, Any]], ok: bool, **extra: Any) -> dict[str, Any]:
    peak = max(r["peak_rss_mb"] for r in runs)
    return {
        "rows_in": 0, "answered": 0, "skipped": 0, "failed": 0, "lost": 0,
        "mixed": 0 if ok and peak < LIMIT_MB else 1,
        "requests_sent": 0, "requests_resent_after_rerun": 0, "http_calls": 0,
        "faults_injected": {name: 1}, "wall_s": round(sum(r["wall_s"] for r in runs), 1),
        "peak_rss_mb": peak, "limit_mb": round(LIMIT_MB), "outcome": runs[0]["error"][:240],
        **extra,
    }  # fmt: skip


def _refused(run: dict[str, Any], field: str) -> bool:
    """One `error:` line (nothing else on stderr) naming the limit, exit code 2."""
    error = run["error"]
    return (
        run["rc"] == 2  # the CLI's exit code for bad input
        and run["stderr_lines"] == 1
        and error.startswith("error: ")
        and f"the {field} limit of" in error
    )


def bounded_input_case(name: str, scratch: Path) -> dict[str, Any]:
    """Generate the case's file in `scratch`, run it, and return its matrix row (the file is
    removed after: up to 1 GB)."""
    folder = scratch / name
    folder.mkdir(parents=True, exist_ok=True)
    try:
        return _case(name, folder)
    finally:
        for path in folder.glob("*.csv*"):
            path.unlink()


def _case(name: str, folder: Path) -> dict[str, Any]:
    if name == "gzip-bomb":
        path = folder / "bomb.csv.gz"
        _write_bomb(path)
        run = _plan(path, folder)
        return _row(
            name, [run], _refused(run, "max_rows"), file_mb=round(path.stat().st_size / MB, 1)
        )
    if name == "long-cell":
        path = folder / "long.csv"
        digest = _write_long_cell(path)
        run = _plan(path, folder)
        code = (
            "import hashlib, json, sys\n"
            "from llm_assets.pipeline.sources import SourceSpec\n"
            "limits = {'max_cell_bytes': 512 << 20}\n"
            "spec = SourceSpec.parse({'path': sys.argv[1], 'limits': limits})\n"
            "cell = spec.read().column('c0')[1].as_py()\n"
            "print(json.dumps({'sha256': hashlib.sha256(cell.encode()).hexdigest()}))\n"
        )
        raised = _measured([sys.executable, "-c", code, str(path)], folder)
        intact = raised["rc"] == 0 and json.loads(raised["stdout"])["sha256"] == digest
        row = _row(name, [run, raised], _refused(run, "max_cell_bytes") and intact)
        return {**row, "raised_intact": intact, "raised_peak_rss_mb": raised["peak_rss_mb"]}
    if name == "10k-columns":
        path = folder / "wide.csv"
        _write_wide(path)
        run = _plan(path, folder)
        row = _row(name, [run], run["rc"] == 0)
        return {**row, "outcome": "planned" if run["rc"] == 0 else run["error"][:240]}
    if name == "long-line":
        path = folder / "line.csv"
        _write_long_line(path)
        run = _plan(path, folder)
        return _row(name, [run], _refused(run, "max_cell_bytes"))
    raise ValueError(
        f"unknown bounded-input case {name!r}; expected one of {list(BOUNDED_INPUT_CASES)}"
    )
