"""A small Llama-architecture GGUF with random weights and the real Llama 3 tokenizer.

No weights can be downloaded here, so the real engine (llama.cpp's `llama-server`) runs a model
written locally: random weights (what a prefix cache measures does not depend on them) and the
Llama 3 vocabulary and merges read from a Hugging Face `tokenizer.json`, so prompt token counts
are the real ones. Invariants of `write_model`:

- architecture `llama`, tokenizer model `gpt2` with pre-tokenizer `llama-bpe` (what llama.cpp's
  own converter writes for Llama 3), BOS 128000, EOS 128001 (`<|eot_id|>` is recognised by
  llama.cpp as end of generation from its text), BOS added to every prompt;
- the token list is the `tokenizer.json` vocabulary plus its added tokens, in id order, with no
  gap (a gap raises: llama.cpp needs one token per id); added special tokens are CONTROL;
- weights are drawn from a seeded generator (same arguments, same file), F16 except the norm
  vectors (F32); the output head is tied to the token embedding (no `output.weight`);
- the file is written to `path.partial` and renamed, so a half-written model is never loaded.

Lives under `benchmarks/` with the build script: it is test and benchmark tooling, not a
runtime dependency of the project (the `gguf` package is pinned in the dev extra only).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BOS_ID = 128000
EOS_ID = 128001


@dataclass(frozen=True)
class LlamaShape:
    """Transformer sizes; `n_embd` must divide by `n_head` and `n_head` by `n_head_kv`."""

    n_embd: int = 256
    n_layer: int = 4
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 768
    n_ctx: int = 8192
    rope_theta: float = 500000.0
    rms_eps: float = 1e-5

    def __post_init__(self) -> None:
        if self.n_embd % self.n_head or self.n_head % self.n_head_kv:
            raise ValueError(
                f"n_embd={self.n_embd} must divide by n_head={self.n_head} and n_head by "
                f"n_head_kv={self.n_head_kv}"
            )

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


@dataclass(frozen=True)
class Vocab:
    """The tokenizer as GGUF stores it: tokens in id order, their types, BPE merges."""

    tokens: list[str]
    types: list[int]
    merges: list[str]


def read_vocab(tokenizer_json: Path) -> Vocab:
    """Tokens, token types and merges of a byte-level BPE `tokenizer.json` (Llama 3's)."""
    import gguf

    data = json.loads(Path(tokenizer_json).read_text(encoding="utf-8"))
    model = data.get("model", {})
    if model.get("type") != "BPE":
        raise ValueError(f"{tokenizer_json}: model.type is {model.get('type')!r}, expected 'BPE'")
    by_id: dict[int, tuple[str, int]] = {
        i: (t, gguf.TokenType.NORMAL) for t, i in model["vocab"].items()
    }
    for added in data.get("added_tokens", []):
        kind = gguf.TokenType.CONTROL if added.get("special") else gguf.TokenType.USER_DEFINED
        by_id[added["id"]] = (added["content"], kind)
    missing = sorted(set(range(len(by_id))) - by_id.keys())
    if missing:
        raise ValueError(f"{tokenizer_json}: token ids are not contiguous (first gap {missing[0]})")
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return Vocab(
        tokens=[by_id[i][0] for i in range(len(by_id))],
        types=[int(by_id[i][1]) for i in range(len(by_id))],
        merges=merges,
    )


def _weights(shape: LlamaShape, n_vocab: int, seed: int) -> dict[str, np.ndarray]:
    """Random tensors named as llama.cpp expects, numpy shapes (out, in)."""
    rng = np.random.default_rng(seed)

    def matrix(rows: int, cols: int) -> np.ndarray:
        scale = 1.0 / np.sqrt(cols)
        return (rng.standard_normal((rows, cols), dtype=np.float32) * scale).astype(np.float16)

    def ones() -> np.ndarray:
        return np.ones(shape.n_embd, dtype=np.float32)

    q_width = shape.n_head * shape.head_dim
    kv_width = shape.n_head_kv * shape.head_dim
    tensors = {"token_embd.weight": matrix(n_vocab, shape.n_embd)}
    for i in range(shape.n_layer):
        tensors |= {
            f"blk.{i}.attn_norm.weight": ones(),
            f"blk.{i}.attn_q.weight": matrix(q_width, shape.n_embd),
            f"blk.{i}.attn_k.weight": matrix(kv_width, shape.n_embd),
            f"blk.{i}.attn_v.weight": matrix(kv_width, shape.n_embd),
            f"blk.{i}.attn_output.weight": matrix(shape.n_embd, q_width),
            f"blk.{i}.ffn_norm.weight": ones(),
            f"blk.{i}.ffn_gate.weight": matrix(shape.n_ff, shape.n_embd),
            f"blk.{i}.ffn_up.weight": matrix(shape.n_ff, shape.n_embd),
            f"blk.{i}.ffn_down.weight": matrix(shape.n_embd, shape.n_ff),
        }
    tensors["output_norm.weight"] = ones()
    return tensors


def write_model(
    path: Path, tokenizer_json: Path, shape: LlamaShape = LlamaShape(), seed: int = 0
) -> Path:
    """Write the GGUF to `path` (parents created) and return it."""
    import gguf

    vocab = read_vocab(tokenizer_json)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    writer = gguf.GGUFWriter(partial, arch="llama")
    writer.add_name(f"random-llama3-{shape.n_embd}x{shape.n_layer}")
    writer.add_context_length(shape.n_ctx)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_dimension_count(shape.head_dim)
    writer.add_rope_freq_base(shape.rope_theta)
    writer.add_layer_norm_rms_eps(shape.rms_eps)
    writer.add_vocab_size(len(vocab.tokens))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("llama-bpe")
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.types)
    writer.add_token_merges(vocab.merges)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_add_bos_token(True)
    for name, tensor in _weights(shape, len(vocab.tokens), seed).items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.replace(path)
    return path
