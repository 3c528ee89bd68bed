"""The UTF-8 bytes of a CSV / TSV file as the delimited reader (`llm_assets.data.delimited`)
consumes them: a prefix, the whole length, and a stream pyarrow parses block by block.

- `BufferSource`: bytes already in memory (a transcoded Windows-1252 file).
- `FileSource`: a file that is valid UTF-8 (gzip inflated on the fly), never held whole: a
  first pass (`FileSource.scan`) counts its bytes against `max_bytes` and checks it is valid
  UTF-8, each later read streams it again from disk. Peak memory is then the parsed table, not
  the file plus the table (a 2.2 GB gzip bomb refused at `max_rows` holds ~10M rows, not 2.2 GB).

Invariant: both give the file's bytes without a BOM and ending in a line break (one added when
missing), so the reader sees exactly what `encodings.utf8_payload` gives, plus that newline.
"""

from __future__ import annotations

import codecs
import gzip
import os
from pathlib import Path

import pyarrow as pa

from llm_assets.data.checks import InputError
from llm_assets.data.limits import CHUNK, GZIP_MAGIC, InputLimits


class BufferSource:
    """UTF-8 bytes in memory."""

    def __init__(self, payload) -> None:
        self._data = payload if payload[-1:] == b"\n" else bytes(payload) + b"\n"
        self.length = len(self._data)

    def prefix(self, size: int) -> bytes:
        return bytes(self._data[:size])

    def stream(self):
        return pa.BufferReader(pa.py_buffer(self._data))

    def text(self) -> str:
        return bytes(self._data).decode("utf-8")


class _Stream:
    """The file's bytes past a BOM, then a newline when the file does not end in one; refused
    past `max_bytes` (the file grew since the scan)."""

    def __init__(self, source: FileSource) -> None:
        self._source = source
        self._file = source._open()
        self._skip = len(codecs.BOM_UTF8) if source.bom else 0
        self._tail = b"" if source.ends_in_newline else b"\n"
        self._seen = 0
        self.closed = False

    def read(self, size: int = -1) -> bytes:
        if self._skip:
            self._file.read(self._skip)
            self._skip = 0
        data = self._file.read(size if size is not None and size >= 0 else -1)
        self._seen += len(data)
        self._source._check(self._seen)
        if (size is None or size < 0 or len(data) < size) and self._tail:
            data, self._tail = data + self._tail, b""
        return data

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def close(self) -> None:
        if not self.closed:
            self._file.close()
            self.closed = True


class FileSource:
    """A valid UTF-8 file read from disk on every pass (see the module docstring); build it
    with `FileSource.scan`, which returns None for a file that is not valid UTF-8."""

    def __init__(self, path: Path, limits: InputLimits, gzipped: bool) -> None:
        self.path, self.limits, self.gzipped = path, limits, gzipped
        self.bom = False
        self.ends_in_newline = True
        self.length = 0

    @classmethod
    def scan(cls, path: Path, limits: InputLimits) -> FileSource | None:
        """The source of `path` when its (inflated) bytes are valid UTF-8, else None; refused
        as soon as they pass `max_bytes`."""
        with open(path, "rb") as probe:
            source = cls(path, limits, probe.read(2) == GZIP_MAGIC)
            size = os.fstat(probe.fileno()).st_size
        if not source.gzipped and size > limits.max_bytes:
            raise limits.refusal(path, f"the file holds {size:,} bytes", "max_bytes")
        decoder = codecs.getincrementaldecoder("utf-8")()
        total, last = 0, b""
        try:
            with source._open() as raw:
                while chunk := raw.read(CHUNK):
                    if total == 0:
                        source.bom = chunk.startswith(codecs.BOM_UTF8)
                    total += len(chunk)
                    source._check(total)
                    if not chunk.isascii():
                        decoder.decode(chunk)
                    elif decoder.getstate()[0]:
                        decoder.decode(chunk)  # completes (or breaks) a split sequence
                    last = chunk[-1:]
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            return None
        except (OSError, EOFError) as error:
            if isinstance(error, InputError):
                raise
            raise InputError(f"{path}: not a readable gzip file ({error})") from None
        source.ends_in_newline = last == b"\n"
        body = total - (len(codecs.BOM_UTF8) if source.bom else 0)
        source.length = body + (0 if source.ends_in_newline else 1)
        return source

    def _open(self):
        return gzip.open(self.path, "rb") if self.gzipped else open(self.path, "rb")

    def _check(self, total: int) -> None:
        if total > self.limits.max_bytes:
            what = (
                f"the gzip file inflates to more than {self.limits.max_bytes:,} bytes "
                f"(stopped after {total:,})"
                if self.gzipped
                else f"the file holds more than {self.limits.max_bytes:,} bytes"
            )
            raise self.limits.refusal(self.path, what, "max_bytes")

    def prefix(self, size: int) -> bytes:
        stream = _Stream(self)
        try:
            out = bytearray()
            while len(out) < size and (data := stream.read(min(CHUNK, size - len(out)))):
                out += data
            return bytes(out[:size])
        finally:
            stream.close()

    def stream(self) -> _Stream:
        return _Stream(self)

    def text(self) -> str:
        return self.prefix(self.length).decode("utf-8")
