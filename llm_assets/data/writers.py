"""Writing a result table to a user's file: the format the file name says, written atomically.

`check_target(path, inputs)` says, before anything is computed or paid for, why a path cannot
take a result (None when it can); `write_table(frame, path)` writes the table to a temporary
file in the same folder and moves it over `path` with `os.replace`, so a failure at any point
(full disk, a value the format cannot hold, a kill) leaves `path` as it was and no half file.
"""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import pandas as pd

from resources.storage import storage_guard

__all__ = ["FORMATS", "accepted_extensions", "check_target", "write_table"]


def _csv(sep: str) -> Callable[[pd.DataFrame, str], None]:
    return lambda frame, path: frame.to_csv(path, index=False, sep=sep)


FORMATS: dict[str, Callable[[pd.DataFrame, str], None]] = {
    ".parquet": lambda frame, path: frame.to_parquet(path, index=False),
    ".csv": _csv(","),
    ".tsv": _csv("\t"),
    ".jsonl": lambda frame, path: frame.to_json(
        path, orient="records", lines=True, force_ascii=False, date_format="iso"
    ),
    ".json": lambda frame, path: frame.to_json(
        path, orient="records", force_ascii=False, date_format="iso"
    ),
}
"""Writer per file extension (lower case); `.json` is one array of records."""


def accepted_extensions() -> str:
    return ", ".join(FORMATS)


def _input_files(inputs: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Every existing file an input names (globs expanded)."""
    out = []
    for item in inputs:
        text = str(item)
        if set("*?[") & set(text):
            out += [Path(p) for p in glob.glob(text, recursive=True)]
        else:
            out.append(Path(text))
    return out


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def check_target(path: Path, inputs: Iterable[str | os.PathLike[str]] = ()) -> str | None:
    """Why `path` cannot take a result table, as one line naming it and what would be
    accepted; None when it can. Checked: the extension, a directory, a missing or read-only
    folder, and the same file as one of `inputs` (paths or globs: it would be overwritten)."""
    accepted = f"accepted: a file ending in {accepted_extensions()}"
    if path.is_dir():
        return f"--out {path} is a directory ({accepted}, e.g. {path / 'result.parquet'})"
    if path.suffix.lower() not in FORMATS:
        what = f"extension {path.suffix!r}" if path.suffix else "no extension"
        return f"--out {path}: {what} is not a format the result can be written in ({accepted})"
    folder = path.parent
    if not folder.is_dir():
        return (
            f"--out {path}: folder {folder} does not exist (create it first, or give a "
            "file in an existing folder)"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"--out {path}: folder {folder} is not writable (give a file in a writable folder)"
    for source in _input_files(inputs):
        if _same_file(path, source):
            return (
                f"--out {path} is the input file {source}: writing there would overwrite it "
                "(give another file name)"
            )
    return None


def _mode_for(path: Path) -> int:
    """The permission bits the result gets: the replaced file's, else 0o666 minus the umask
    (what a plain `open(path, 'w')` would give; `mkstemp` makes 0o600)."""
    with contextlib.suppress(OSError):
        return path.stat().st_mode & 0o7777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_table(frame: pd.DataFrame, path: Path) -> None:
    """Write `frame` to `path` in the format of its extension (see `FORMATS`), atomically:
    a temporary file `.<name>.*.part` in the same folder, flushed to disk, then `os.replace`d
    over `path`. On any failure the temporary file is removed, `path` is untouched and the
    exception propagates; a full disk, a quota or a missing permission as a one-line
    `resources.storage.StorageError` (an OSError with its errno) naming `path`."""
    writer = FORMATS.get(path.suffix.lower())
    if writer is None:
        raise ValueError(f"{path}: unsupported extension (accepted: {accepted_extensions()})")
    with storage_guard(path, "the result file"):
        _write_atomically(frame, path, writer)


def _write_atomically(frame: pd.DataFrame, path: Path, writer) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    os.close(fd)
    try:
        writer(frame, tmp)
        with open(tmp, "rb+") as written:
            os.fsync(written.fileno())
        os.chmod(tmp, _mode_for(path))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
