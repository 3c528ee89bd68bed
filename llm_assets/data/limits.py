"""Bounds on what the table loader (`llm_assets.data.tables`) reads from one input: decompressed
bytes, rows, columns and cell size (`InputLimits`), checked while the file is read.

Invariants:
- `read_bounded` (JSON, a CSV that is not UTF-8; a UTF-8 CSV streams through
  `byte_sources.FileSource`, which counts the same way) never holds more than `max_bytes`
  (+ one chunk) of a file: a plain file over
  the limit is refused from its size before a byte is read, a gzip file while it inflates
  (a 6 MB gzip of 2 GB stops at `max_bytes`, not at the end).
- Every refusal is one `InputError` line naming the file, what was over which limit, and how to
  raise it (`limits: {max_rows: N}` in the source spec, `--max-rows N` in the CLI,
  `InputLimits(max_rows=N)` in Python).
- Limits cap memory, never change data: a table under every limit loads exactly as without.

The defaults are far above any table one machine would send to an LLM, and keep a 24 GiB
machine alive when a file is hostile (a gzip bomb, a runaway line):
- `max_bytes` 4 GiB: a UTF-8 CSV is streamed (`byte_sources.FileSource`), but JSON, Parquet
  and a transcoded CSV are held decompressed next to their Arrow table (about the same size
  again), and later steps copy the columns a query uses; 4 GiB of text keeps that under
  ~12 GiB. (The largest public review dumps used here are ~0.3 GB.)
- `max_rows` 10,000,000: every row is one LLM call; planning and prompts hold Python objects
  per row (~0.5 KB), ~5 GB at this count; ten million calls are days of GPU time.
- `max_columns` 16,384: the column limit of a spreadsheet (Excel), so any sheet's export fits.
- `max_cell_bytes` 64 MiB: ~16M tokens, over ten times the longest context window of any model
  the engines serve; a longer cell cannot reach a prompt whole.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from llm_assets.data.checks import InputError

GIB = 1 << 30
MIB = 1 << 20
CHUNK = 4 * MIB
"""Bytes read (or inflated) per step of `read_bounded`."""
GZIP_MAGIC = b"\x1f\x8b"


class InputLimits(BaseModel):
    """What one input may hold; a file over any limit is refused while it is read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_bytes: int = Field(
        4 * GIB, description="Bytes of one file after decompression (gzip inflated)."
    )
    max_rows: int = Field(10_000_000, description="Rows of one table (header excluded).")
    max_columns: int = Field(16_384, description="Columns of one table.")
    max_cell_bytes: int = Field(
        64 * MIB, description="UTF-8 bytes of one cell (also of one header name)."
    )

    @field_validator("*")
    @classmethod
    def _positive(cls, value: int, info: ValidationInfo) -> int:
        # (not Field(ge=1): Dagster's component YAML cannot resolve constrained fields)
        if value < 1:
            raise ValueError(f"{info.field_name} must be a whole number >= 1, got {value}")
        return value

    @classmethod
    def parse(cls, value: InputLimits | dict | None) -> InputLimits:
        """Limits from a mapping of some fields (the others default), limits, or None."""
        if value is None:
            return cls()
        return value if isinstance(value, InputLimits) else cls.model_validate(dict(value))

    def refusal(self, path: str | Path, what: str, field: str) -> InputError:
        """The one-line error: `{path}: {what}, over the {field} limit of N; raise it ...`."""
        limit = getattr(self, field)
        return InputError(
            f"{path}: {what}, over the {field} limit of {limit:,}; if the file is what you "
            f"meant, raise it with `limits: {{{field}: N}}` in the source spec, "
            f"--{field.replace('_', '-')} N in llm-assets (Python: InputLimits({field}=N))"
        )


def read_bounded(path: Path, limits: InputLimits) -> bytes | bytearray:
    """The bytes of `path`, inflated when it is gzip (detected from the content); refused
    (`InputLimits.refusal`) as soon as more than `limits.max_bytes` would be held."""
    with open(path, "rb") as raw:
        gzipped = raw.read(2) == GZIP_MAGIC
        raw.seek(0)
        if not gzipped:
            size = os.fstat(raw.fileno()).st_size
            if size > limits.max_bytes:
                raise limits.refusal(path, f"the file holds {size:,} bytes", "max_bytes")
            return _read_plain(raw, size, path, limits)
        out = bytearray()
        try:
            with gzip.GzipFile(fileobj=raw) as inflated:
                while chunk := inflated.read(CHUNK):
                    if len(out) + len(chunk) > limits.max_bytes:
                        raise limits.refusal(
                            path,
                            f"the gzip file inflates to more than {limits.max_bytes:,} bytes "
                            f"(stopped after {len(out) + len(chunk):,})",
                            "max_bytes",
                        )
                    out += chunk
        except (OSError, EOFError) as error:
            raise InputError(f"{path}: not a readable gzip file ({error})") from None
        return out  # (not bytes(out): that would hold the file twice)


def _read_plain(raw, size: int, path: Path, limits: InputLimits) -> bytearray:
    """The file's bytes read into one buffer of its size (`read()` would hold it twice while
    it joins its parts); bytes appended since `size` was taken are read too, within the
    limit."""
    out = bytearray(size)
    view, filled = memoryview(out), 0
    while filled < size and (got := raw.readinto(view[filled:])):
        filled += got
    view.release()
    del out[filled:]
    while chunk := raw.read(CHUNK):
        if len(out) + len(chunk) > limits.max_bytes:
            raise limits.refusal(path, "the file grew while read", "max_bytes")
        out += chunk
    return out


def check_cells(
    path: str | Path, part: pa.Table | pa.RecordBatch, before: int, limits: InputLimits
) -> None:
    """Refuse the first cell of `part` (rows `before`+1.. of the file's table) whose text or
    binary value is longer than `limits.max_cell_bytes`, naming its row and column. A part
    whose buffers hold no more bytes than the limit has no such cell (not scanned)."""
    if part.nbytes <= limits.max_cell_bytes:
        return
    for name, column in zip(part.column_names, part.columns, strict=True):
        kind = column.type
        if not (
            pa.types.is_string(kind)
            or pa.types.is_large_string(kind)
            or pa.types.is_binary(kind)
            or pa.types.is_large_binary(kind)
        ):
            continue
        lengths = pc.binary_length(column)
        longest = pc.max(lengths).as_py()
        if longest is not None and longest > limits.max_cell_bytes:
            row = pc.index(pc.greater(lengths, limits.max_cell_bytes), True).as_py()
            raise limits.refusal(
                path,
                f"row {before + row + 1:,} (after the header), column {name!r}: a cell of "
                f"{lengths[row].as_py():,} bytes",
                "max_cell_bytes",
            )


def check_count(path: str | Path, count: int, field: str, limits: InputLimits) -> None:
    """Refuse `count` rows or columns (`field` max_rows / max_columns) over the limit."""
    if count > getattr(limits, field):
        what = "rows" if field == "max_rows" else "columns"
        raise limits.refusal(path, f"the table has {count:,} {what} or more", field)
