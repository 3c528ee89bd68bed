"""A throwaway PostgreSQL server, and Dagster instances whose run, event-log and schedule
storage live in it (`dagster-postgres`): what a deployment that launches many runs at once uses,
since Dagster's SQLite storage refuses concurrent writers ("database table is locked").

`postgres_server()` runs Debian's binaries (`initdb`, `pg_ctl`, `postgres`: on PATH, as
/usr/local/bin has them, or under /usr/lib/postgresql/<version>/bin) on a data folder of its
own under the temp dir, on a free port of 127.0.0.1, with trust authentication for the local
user `postgres` only; it stops the server and removes the folder on exit. Postgres refuses to
run as root: as root the server runs as the system user `postgres` (Debian's package creates
it). Where it cannot start (no binaries, no such user, a failed start) it raises
`PostgresUnavailable` with one line saying why; tests skip on it.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PostgresServer", "PostgresUnavailable", "dagster_instance", "postgres_server"]

NOOP_COMPUTE_LOGS = {
    "module": "dagster._core.storage.noop_compute_log_manager",
    "class": "NoOpComputeLogManager",
}
"""Compute-log capture redirects the process's stdout per step: runs in threads then lose it."""


class PostgresUnavailable(RuntimeError):
    """The server could not start here; the message is one line saying why."""


@dataclass(frozen=True)
class PostgresServer:
    port: int
    folder: Path

    def url(self, database: str = "postgres") -> str:
        """A SQLAlchemy URL naming psycopg2 (`dagster-postgres`'s driver): SQLAlchemy 2.1
        reads a bare `postgresql://` as psycopg 3, which is not installed."""
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """CREATE DATABASE `name` (an identifier, quoted by psycopg2); its URL."""
        import psycopg2
        from psycopg2 import sql

        con = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres")
        try:
            con.autocommit = True
            with con.cursor() as cur:
                cur.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        finally:
            con.close()
        return self.url(name)


def _binary(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if not found:
        raise PostgresUnavailable(
            f"PostgreSQL's {name} is not installed (apt-get install postgresql, or put it on PATH)"
        )
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_server_user() -> list[str]:
    """The command prefix that runs a command as a user Postgres accepts (not root)."""
    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        runuser = None
    if not runuser:
        raise PostgresUnavailable(
            "running as root, and there is no `postgres` system user (or runuser) to run "
            "PostgreSQL as; install Debian's postgresql package"
        )
    return [runuser, "-u", "postgres", "--"]


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise PostgresUnavailable(f"{what} failed (exit {done.returncode}): {last[0]}")


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the block; see the module docstring."""
    initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
    _binary("postgres")
    prefix = _as_server_user()
    folder = Path(tempfile.mkdtemp(prefix="llm-assets-pg-"))
    started = False
    try:
        if prefix:
            shutil.chown(folder, user="postgres")
        data = folder / "data"
        _run([*prefix, initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
              "--no-sync"], "initdb")  # fmt: skip
        port = _free_port()
        options = (
            f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c max_connections=200"
        )
        log = folder / "server.log"
        _run([*prefix, pg_ctl, "-D", str(data), "-o", options, "-l", str(log), "-w", "-t", "60",
              "start"], f"pg_ctl start (log {log})")  # fmt: skip
        started = True
        yield PostgresServer(port=port, folder=folder)
    finally:
        if started:
            subprocess.run([*prefix, pg_ctl, "-D", str(folder / "data"), "-m", "fast", "stop"],
                           capture_output=True, timeout=120)  # fmt: skip
        shutil.rmtree(folder, ignore_errors=True)


def dagster_instance(url: str, folder: str | Path) -> Any:
    """A persistent DagsterInstance whose run, event-log and schedule storage are the Postgres
    database at `url` (local artifacts under `folder`), without compute-log capture."""
    import dagster as dg

    overrides = {"storage": {"postgres": {"postgres_url": url}}, "compute_logs": NOOP_COMPUTE_LOGS}
    Path(folder).mkdir(parents=True, exist_ok=True)
    return dg.DagsterInstance.local_temp(str(folder), overrides=overrides)
