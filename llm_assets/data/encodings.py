"""How the table loader (`llm_assets.data.tables`) reads a file's bytes as text: `decode` (the
whole text, for JSON) and `utf8_payload` (CSV / TSV: UTF-8 bytes for pyarrow, the file itself
when it is valid UTF-8, so no text copy of a large file is ever made).

Invariants: the encoding is `encoding` when given, else detected per file, preferring UTF-8 (a
file is UTF-8 when it decodes as UTF-8 or holds at least one valid multi-byte UTF-8 sequence;
only a file with neither is Windows-1252); a BOM is dropped; a byte invalid in the chosen
encoding is an `InputError` naming the file, line and column, or with `errors="replace"`
U+FFFD (that byte only). Both readers agree on every file (`utf8_payload` decodes to
`decode`'s text). Whole-file passes go chunk by chunk, never through a full-size str.
"""

from __future__ import annotations

import codecs
from pathlib import Path

from llm_assets.data.checks import InputError
from llm_assets.data.delimited import first_row, sniff_delimiter

NEWLINE = b"\n"
_CHUNK = 1 << 22


def _chunks(data):
    view = memoryview(data)
    for start in range(0, len(view), _CHUNK):
        yield view[start : start + _CHUNK]


def utf8_payload(
    path: Path, data, encoding: str | None, kind: str, delimiter: str | None, errors: str
):
    """`data` as UTF-8 bytes without a BOM, as `decode` reads it: `data` itself (no copy but
    a view past the BOM) when it is valid UTF-8, else transcoded chunk by chunk; an invalid
    byte is `decode`'s error."""
    if errors not in ENCODING_ERRORS:
        raise InputError(f"encoding_errors {errors!r}: expected one of {list(ENCODING_ERRORS)}")
    name = encoding or ("utf-8-sig" if _looks_utf8(data) else "cp1252")
    try:
        utf8 = codecs.lookup(name).name in ("utf-8", "utf-8-sig")
    except LookupError:
        raise InputError(f"unknown encoding {name!r} for {path}") from None
    if utf8 and _valid_utf8(data):
        return memoryview(data)[3:] if data[:3] == codecs.BOM_UTF8 else data
    decoder = codecs.getincrementaldecoder(name)(errors)
    out, first = bytearray(), True
    try:
        for chunk in _chunks(data):
            text = decoder.decode(chunk)
            if first and text:
                text, first = text.removeprefix("\ufeff"), False
            out += text.encode("utf-8")
        out += decoder.decode(b"", final=True).encode("utf-8")
    except UnicodeDecodeError:
        decode(path, data, encoding, kind, delimiter, errors)  # raises with the place
        raise
    return out


def _valid_utf8(data) -> bool:
    if data.isascii():
        return True
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        for chunk in _chunks(data):
            decoder.decode(chunk)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def decode(
    path: Path,
    data: bytes,
    encoding: str | None,
    kind: str,
    delimiter: str | None,
    errors: str = "strict",
) -> str:
    """The file's text; a BOM is dropped. `encoding` when given, else detected per file,
    preferring UTF-8: a file is UTF-8 when it decodes as UTF-8 or holds at least one valid
    multi-byte UTF-8 sequence; only a file with neither is read as Windows-1252. A byte that is
    not valid in the chosen encoding is an InputError naming the file, line and column, or,
    with `errors="replace"`, becomes U+FFFD (that byte only; nothing else changes)."""
    if errors not in ENCODING_ERRORS:
        raise InputError(f"encoding_errors {errors!r}: expected one of {list(ENCODING_ERRORS)}")
    name = encoding or ("utf-8-sig" if _looks_utf8(data) else "cp1252")
    try:
        return data.decode(name, errors).removeprefix("\ufeff")
    except LookupError:
        raise InputError(f"unknown encoding {name!r} for {path}") from None
    except UnicodeDecodeError as error:
        failure = error
    where = _where(data, failure.start, kind, delimiter)
    byte = f"byte 0x{data[failure.start]:02x}"
    bad = _invalid_utf8(data) if name == "utf-8-sig" else None
    if encoding:
        problem = f"is not valid {encoding}"
    elif bad is not None:
        problem = (
            f"is not valid UTF-8, in a file that is otherwise UTF-8 ({bad} such place"
            f"{'s' if bad != 1 else ''})"
        )
    else:
        problem = "is neither UTF-8 nor Windows-1252 (cp1252)"
    raise InputError(
        f"{path}: {where}: {byte} {problem}; fix the file, pass encoding_errors='replace' to "
        "read each such byte as U+FFFD, or encoding=... (e.g. utf-8, cp1252, latin-1)"
    )


ENCODING_ERRORS = ("strict", "replace")


def _looks_utf8(data) -> bool:
    """Whether `data` decodes as UTF-8 or holds at least one valid multi-byte sequence."""
    if _valid_utf8(data):
        return True
    decoder = codecs.getincrementaldecoder("utf-8")("ignore")
    return any(not decoder.decode(chunk).isascii() for chunk in _chunks(data))


def _invalid_utf8(data: bytes) -> int:
    """How many invalid UTF-8 sequences `data` holds (each one U+FFFD under "replace")."""
    replaced = data.decode("utf-8", "replace").count("\ufffd")
    return replaced - data.count("\ufffd".encode())


def _where(data: bytes, offset: int, kind: str, delimiter: str | None) -> str:
    """'line N' (1-based) of byte `offset`, plus the CSV column it falls in when known."""
    line_start = data.rfind(NEWLINE, 0, offset) + 1
    where = f"line {data.count(NEWLINE, 0, offset) + 1}"
    if kind not in ("csv", "tsv"):
        return where
    text = data.decode("utf-8", errors="replace")
    delimiter = delimiter or ("\t" if kind == "tsv" else sniff_delimiter(text))
    header = first_row(text, delimiter)
    prefix = data[line_start:offset].decode("utf-8", errors="replace")
    index = len(first_row(prefix + "x", delimiter)) - 1
    if 0 <= index < len(header):
        where += f", column {index + 1} ({header[index]!r})"
    return where
