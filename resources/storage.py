"""The one error for a file the product cannot write because of where it is, not what it holds:
`StorageError`, an `OSError` carrying the errno (ENOSPC disk full, EDQUOT quota, EACCES / EPERM
no permission, EROFS read-only), whose message is one line naming the path, the reason and what
to do. `storage_guard(path, what)` turns such an `OSError`, or a DuckDB error whose text
carries one (DuckDB reports `Could not write file ...: No space left on device`), into it.

Every writer of the product's own files goes through it: results (`data.writers.write_table`),
the response cache and the warehouse. A caller that shows errors to a person catches
`StorageError` (the CLI: `except StorageError as exc: fail(str(exc))`); anything else the guard
sees passes through unchanged.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["STORAGE_ERRNOS", "StorageError", "storage_guard"]

STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS)
"""The errnos that are about where a file is written (the message says them in the system's
words, `os.strerror`: "No space left on device")."""
_ADVICE = {
    errno.ENOSPC: "free space there or write elsewhere",
    errno.EDQUOT: "free space there or write elsewhere",
    errno.EROFS: "write elsewhere",
}


class StorageError(OSError):
    """A file could not be written where it was asked to be (see the module docstring)."""

    def __str__(self) -> str:
        return str(self.args[1]) if len(self.args) > 1 else super().__str__()


def _errno_in(exc: BaseException) -> int | None:
    if isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS:
        return exc.errno
    text = str(exc)
    for number in STORAGE_ERRNOS:
        if os.strerror(number) in text:
            return number
    return None


@contextlib.contextmanager
def storage_guard(path: str | os.PathLike[str], what: str) -> Iterator[None]:
    """Run the block; an `OSError` or a DuckDB error from a full disk, a quota, a permission
    or a read-only file system becomes a `StorageError` naming `what` (e.g. "the response
    cache") and `path`. Other errors pass through as they are."""
    import duckdb

    try:
        yield
    except StorageError:
        raise
    except (OSError, duckdb.Error) as exc:
        number = _errno_in(exc)
        if number is None:
            raise
        name = errno.errorcode.get(number, str(number))
        advice = _ADVICE.get(number, "give a path you may write, or fix its permissions")
        message = f"cannot write {what} {Path(path)}: {os.strerror(number)} ({name}); {advice}"
        raise StorageError(number, message, str(path)) from exc
