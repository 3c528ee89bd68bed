"""Tokenizers for the simulated engine: a fast built-in approximation of Llama 3, or a real file.

One small protocol, `Tokenizer.encode(text) -> list[int]`. The engine only needs token *counts*
and *ids that are equal exactly when the text is equal* (the prefix cache hashes them), so the
built-in `ApproxTokenizer` does not need a vocabulary file:

- it splits text with (a `re`-compatible rendering of) Llama 3's pre-tokenizer pattern, so piece
  boundaries, and therefore shared prefixes, fall where a real BPE tokenizer puts them;
- each piece becomes `1 + (len - 1) // k` tokens, with `k` by piece shape (lower-case words 7,
  Capitalised words 6, ALL-CAPS words 3, punctuation runs 3; digits are split in 1-3 digit
  pieces by the pattern, as Llama 3 does). On the text of ../shared/data/*.csv its counts stay
  within 15% of the Llama 3 tokenizer (tested per file);
- text is first cut into lines and sentences (cuts that fall on piece boundaries) and each
  segment (up to `_MAX_MEMO_CHARS`) is memoised, so repeated instructions and field values cost
  one dict look-up;
- ids are a stable hash (crc32) of the piece and the sub-token index, reduced to Llama 3's 128,256
  ids: deterministic across processes (never Python's salted `hash()` of a str). A long piece
  (a run without spaces) is hashed once, not once per sub-token (see `_piece_ids`).

Invariants: `encode` is a pure function of the text; `encode(a + b)` starts with `encode(a)`
whenever `a` ends at a piece boundary (e.g. a newline), which is what makes field-aligned
prefixes shareable; it is fast (a regex pass plus one dict look-up per piece, memoised) and
linear in the text, long runs without spaces included (tests/resources/sim/
test_tokenizer_long.py counts the bytes hashed).

`load_tokenizer(path)` loads a Hugging Face `tokenizer.json` (package `tokenizers`) or a tiktoken
BPE file (package `tiktoken`, with the Llama 3 split pattern); both imports are lazy.
"""

from __future__ import annotations

import functools
import re
import zlib
from collections.abc import Callable
from itertools import chain
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = [
    "LLAMA3_SPLIT_PATTERN",
    "ApproxTokenizer",
    "FileTokenizer",
    "Tokenizer",
    "load_tokenizer",
]

LLAMA3_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
"""Llama 3's pre-tokenizer split pattern (meta-llama/llama-models tokenizer.py), for tiktoken."""

# The same pattern for Python's `re` (no \p{..} classes): \p{L} -> [^\W\d_], \p{N} -> \d, and
# "neither letter nor digit" -> (?:[^\w]|_) so that "_" behaves like punctuation, as in Llama 3.
_APPROX_SPLIT = re.compile(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|(?:[^\r\n\w]|_)?[^\W\d_]+|\d{1,3}"
    r"| ?(?:[^\s\w]|_)+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

VOCAB_SIZE = 128_256
"""Llama 3's vocabulary size; approximate ids are reduced modulo this."""

_CHARS_PER_TOKEN_LOWER = 7
_CHARS_PER_TOKEN_TITLE = 6
_CHARS_PER_TOKEN_UPPER = 3
_CHARS_PER_TOKEN_PUNCT = 3
_MAX_PIECE_MEMO = 1_000_000
_MAX_SEGMENT_MEMO = 300_000
_MIN_SENTENCE_SPLIT = 160
_MAX_MEMO_CHARS = 16_384
"""Longer segments and pieces are not memoised: they rarely repeat, and each would pin its text
and ids in the memo (a context-window search tokenizes ~20 prefixes of a 1M-character cell)."""
_DIRECT_IDS = 8
"""Pieces of up to this many sub-tokens hash each sub-token directly (short pieces: cheaper)."""
_ID_SEED = 0x9E3779B1
_CRC32_POLY = 0xEDB88320
"""zlib's CRC-32 polynomial, bit-reflected."""


@runtime_checkable
class Tokenizer(Protocol):
    """Anything that turns text into token ids."""

    def encode(self, text: str) -> list[int]: ...


def _piece_token_count(piece: str) -> int:
    """How many tokens the approximation gives one pre-tokenizer piece (at least 1)."""
    body = piece.lstrip(" ")
    if not body:
        return 1
    word = body if body[0].isalpha() else body[1:]
    if word and word[0].isalpha():
        if len(word) > 1 and word.isupper():
            per = _CHARS_PER_TOKEN_UPPER
        elif word[0].isupper():
            per = _CHARS_PER_TOKEN_TITLE
        else:
            per = _CHARS_PER_TOKEN_LOWER
        return 1 + (len(word) - 1) // per
    if body[0].isspace():
        return 1
    return 1 + (len(body) - 1) // _CHARS_PER_TOKEN_PUNCT


def _gf2_apply(columns: tuple[int, ...], vector: int) -> int:
    """The 32-bit GF(2)-linear map given by its `columns` (images of bits 0..31) at `vector`."""
    out = 0
    j = 0
    while vector:
        if vector & 1:
            out ^= columns[j]
        vector >>= 1
        j += 1
    return out


@functools.cache
def _zero_bits_map(k: int) -> tuple[int, ...]:
    """The map that 2**k zero bits apply to zlib's (reflected) CRC-32 register, as columns."""
    if k == 0:  # one zero bit: shift right, xor the polynomial when a 1 falls off
        return (_CRC32_POLY, *(1 << j for j in range(31)))
    half = _zero_bits_map(k - 1)
    return tuple(_gf2_apply(half, column) for column in half)


def _crc_shift(register: int, n_bytes: int) -> int:
    """`register` carried through `n_bytes` zero bytes: O(log n_bytes) steps, no bytes read.

    CRC-32 is affine in its start value, so for data of n bytes
    `crc32(data, a) ^ crc32(data, b) == _crc_shift(a ^ b, n)`.
    """
    bits = 8 * n_bytes
    k = 0
    while bits:
        if bits & 1:
            register = _gf2_apply(_zero_bits_map(k), register)
        bits >>= 1
        k += 1
    return register


def _piece_ids(piece: str) -> tuple[int, ...]:
    """Sub-token i of a piece has id `crc32(piece, _ID_SEED ^ i) % VOCAB_SIZE`.

    A long piece (a run without spaces) gets those ids from one CRC pass over its bytes: the
    CRC under seed `_ID_SEED ^ i` is the CRC under `_ID_SEED` xor `_crc_shift(i, len)`, and the
    shifts of the bits of i combine by xor, so the work is linear in the piece's length rather
    than one pass per sub-token (quadratic).
    """
    data = piece.encode("utf-8", "surrogatepass")
    n = _piece_token_count(piece)
    if n <= _DIRECT_IDS:
        return tuple(zlib.crc32(data, _ID_SEED ^ i) % VOCAB_SIZE for i in range(n))
    crcs = [zlib.crc32(data, _ID_SEED)]
    bit = 1
    while len(crcs) < n:  # crcs[j + bit] = crcs[j] ^ shift(bit), for j < bit
        step = _crc_shift(bit, len(data))
        crcs += [crc ^ step for crc in crcs]
        bit <<= 1
    return tuple(crc % VOCAB_SIZE for crc in crcs[:n])


def _segments(text: str) -> list[str]:
    """Cut text into lines (with their line ends) and long lines into sentences at ". ".

    Every cut falls on a piece boundary of the split pattern (a line end followed by a
    non-space, or the space after a full stop), so tokenizing the segments one by one gives the
    same pieces as tokenizing the whole text, except where a line end is followed by more
    whitespace (the approximation then splits that run at the line end).
    """
    out: list[str] = []
    for line in text.splitlines(keepends=True):
        if len(line) <= _MIN_SENTENCE_SPLIT or ". " not in line:
            out.append(line)
            continue
        parts = line.split(". ")
        out.append(parts[0] + ".")
        out.extend([" " + part + "." for part in parts[1:-1]])
        out.append(" " + parts[-1])
    return out


class ApproxTokenizer:
    """Fast, file-free approximation of the Llama 3 tokenizer (see the module docstring).

    Two memo tables keep it fast on relational prompts, where instructions and shared field
    values repeat: segment (line or sentence) -> ids, and piece -> ids. Both are bounded.
    """

    name = "approx-llama3"

    def __init__(self) -> None:
        self._segment_memo: dict[str, tuple[int, ...]] = {}
        self._piece_memo: dict[str, tuple[int, ...]] = {}

    def _encode_segment(self, segment: str) -> tuple[int, ...]:
        pieces = _APPROX_SPLIT.findall(segment)
        memo = self._piece_memo
        try:
            return tuple(chain.from_iterable(map(memo.__getitem__, pieces)))
        except KeyError:
            if len(memo) > _MAX_PIECE_MEMO:
                memo.clear()
            too_long = False
            for piece in pieces:
                if piece in memo:
                    continue
                if len(piece) <= _MAX_MEMO_CHARS:
                    memo[piece] = _piece_ids(piece)
                else:
                    too_long = True
            look_up = self._piece if too_long else memo.__getitem__
            return tuple(chain.from_iterable(map(look_up, pieces)))

    def _piece(self, piece: str) -> tuple[int, ...]:
        ids = self._piece_memo.get(piece)
        return _piece_ids(piece) if ids is None else ids

    def encode(self, text: str) -> list[int]:
        segments = _segments(text)
        memo = self._segment_memo
        try:
            return list(chain.from_iterable(map(memo.__getitem__, segments)))
        except KeyError:
            if len(memo) > _MAX_SEGMENT_MEMO:
                memo.clear()
            too_long = False
            for segment in segments:
                if segment in memo:
                    continue
                if len(segment) <= _MAX_MEMO_CHARS:
                    memo[segment] = self._encode_segment(segment)
                else:
                    too_long = True
            look_up = self._segment if too_long else memo.__getitem__
            return list(chain.from_iterable(map(look_up, segments)))

    def _segment(self, segment: str) -> tuple[int, ...]:
        ids = self._segment_memo.get(segment)
        return self._encode_segment(segment) if ids is None else ids

    def count(self, text: str) -> int:
        """Number of tokens of `text` (same as `len(encode(text))`)."""
        return len(self.encode(text))


class FileTokenizer:
    """A real tokenizer loaded from a file; `encode` never adds BOS/EOS. Pickled as its file's
    path (`load_tokenizer` reads it again), so its `encode` crosses to other processes."""

    def __init__(self, encode: Callable[[str], list[int]], name: str, path: Path) -> None:
        self._encode = encode
        self.name = name
        self.path = path

    def __reduce__(self):
        return load_tokenizer, (self.path,)

    def encode(self, text: str) -> list[int]:
        return list(self._encode(text))


def load_tokenizer(path: str | Path) -> FileTokenizer:
    """Load a HF `tokenizer.json` (needs `tokenizers`) or a tiktoken BPE file (needs `tiktoken`).

    A `.json` file is read with `tokenizers.Tokenizer.from_file`; anything else is read as a
    tiktoken rank file (`<base64 token> <rank>` lines, e.g. Llama 3's `tokenizer.model`) with
    the Llama 3 split pattern.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"tokenizer file {str(path)!r} does not exist")
    if path.suffix == ".json":
        try:
            from tokenizers import Tokenizer as HFTokenizer
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "loading a tokenizer.json needs the 'tokenizers' package: "
                "pip install 'llm-assets[tokenizers]'"
            ) from exc
        hf = HFTokenizer.from_file(str(path))
        return FileTokenizer(
            lambda text: hf.encode(text, add_special_tokens=False).ids, f"hf:{path.name}", path
        )
    try:
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "loading a tiktoken file needs the 'tiktoken' package: "
            "pip install 'llm-assets[tokenizers]'"
        ) from exc
    ranks = load_tiktoken_bpe(str(path))
    enc = tiktoken.Encoding(
        name=path.stem, pat_str=LLAMA3_SPLIT_PATTERN, mergeable_ranks=ranks, special_tokens={}
    )
    return FileTokenizer(
        lambda text: enc.encode(text, disallowed_special=()), f"tiktoken:{path.name}", path
    )
