"""The random-weight Llama GGUF: what it holds, read back with `gguf` (no server needed).

The header and tensors are checked on a tiny model with a four-token vocabulary (reading a
GGUF back parses every vocabulary string: tens of seconds for Llama 3's); the Llama 3
vocabulary itself is checked through `read_vocab`, and llama.cpp's own tokenization of the full
model in tests/benchmarks/test_llama_cpp.py.
"""

import hashlib
import json
import os

import pytest

from benchmarks.lib.gguf_model import BOS_ID, EOS_ID, LlamaShape, read_vocab, write_model
from tests.conftest import shared_file

TINY = LlamaShape(n_embd=32, n_layer=2, n_head=2, n_head_kv=1, n_ff=64, n_ctx=512)


def _tokenizer(tmp_path, vocab, added=(), model_type="BPE"):
    data = {
        "model": {"type": model_type, "vocab": vocab, "merges": [["a", "b"]]},
        "added_tokens": [{"id": i, "content": c, "special": True} for i, c in added],
    }
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data))
    return path


@pytest.fixture(scope="module")
def small_tokenizer(tmp_path_factory):
    return _tokenizer(tmp_path_factory.mktemp("tok"), {"a": 0, "b": 1, "ab": 2}, [(3, "<s>")])


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, small_tokenizer):
    return write_model(tmp_path_factory.mktemp("gguf") / "tiny.gguf", small_tokenizer, TINY)


@pytest.fixture(scope="module")
def reader(tiny_model):
    import gguf

    return gguf.GGUFReader(tiny_model)


def test_header_is_llama_with_llama3s_tokenizer_settings(reader):
    import gguf

    value = {k: f.contents() for k, f in reader.fields.items()}
    assert value["general.architecture"] == "llama"
    assert value["tokenizer.ggml.model"] == "gpt2"
    assert value["tokenizer.ggml.pre"] == "llama-bpe"
    assert value["tokenizer.ggml.bos_token_id"] == BOS_ID == 128000
    assert value["tokenizer.ggml.eos_token_id"] == EOS_ID == 128001
    assert value["tokenizer.ggml.add_bos_token"] is True
    assert value["tokenizer.ggml.tokens"] == ["a", "b", "ab", "<s>"]
    assert value["tokenizer.ggml.token_type"] == [1, 1, 1, gguf.TokenType.CONTROL]
    assert value["tokenizer.ggml.merges"] == ["a b"]
    assert value["llama.vocab_size"] == 4
    assert value["llama.embedding_length"] == TINY.n_embd
    assert value["llama.block_count"] == TINY.n_layer
    assert value["llama.attention.head_count_kv"] == TINY.n_head_kv
    assert value["llama.rope.dimension_count"] == TINY.head_dim


def test_tensors_have_llama_cpp_names_and_shapes(reader):
    import gguf

    tensors = {t.name: t for t in reader.tensors}
    assert tensors["token_embd.weight"].shape.tolist() == [TINY.n_embd, 4]
    assert tensors["blk.1.attn_q.weight"].shape.tolist() == [TINY.n_embd, TINY.n_embd]
    assert tensors["blk.1.attn_k.weight"].shape.tolist() == [TINY.n_embd, TINY.head_dim]
    assert tensors["blk.1.ffn_down.weight"].shape.tolist() == [TINY.n_ff, TINY.n_embd]
    assert tensors["blk.0.ffn_gate.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert tensors["output_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    assert "output.weight" not in tensors  # tied to token_embd
    assert len(tensors) == 2 + 9 * TINY.n_layer


def test_same_seed_same_file_other_seed_other_weights(tiny_model, small_tokenizer, tmp_path):
    def digest(path):
        return hashlib.sha256(path.read_bytes()).hexdigest()

    again = write_model(tmp_path / "again.gguf", small_tokenizer, TINY)
    other = write_model(tmp_path / "other.gguf", small_tokenizer, TINY, seed=1)
    assert digest(again) == digest(tiny_model) != digest(other)
    assert sorted(os.listdir(tmp_path)) == ["again.gguf", "other.gguf"]  # no .partial left


def test_llama3_vocabulary_in_id_order():
    import gguf
    from tokenizers import Tokenizer

    path = shared_file("tokenizers", "llama3_tokenizer.json")
    vocab = read_vocab(path)
    hf = Tokenizer.from_file(str(path))
    assert len(vocab.tokens) == hf.get_vocab_size() == 128256
    assert vocab.tokens == [hf.id_to_token(i) for i in range(len(vocab.tokens))]
    assert vocab.types[BOS_ID] == vocab.types[EOS_ID] == gguf.TokenType.CONTROL
    assert set(vocab.types[:BOS_ID]) == {gguf.TokenType.NORMAL}
    assert vocab.merges[0] == "Ġ Ġ" and len(vocab.merges) == 280147


def test_read_vocab_orders_by_id_and_joins_merges(tmp_path):
    vocab = read_vocab(_tokenizer(tmp_path, {"b": 1, "a": 0, "ab": 2}, added=[(3, "<s>")]))
    assert vocab.tokens == ["a", "b", "ab", "<s>"]
    assert vocab.types == [1, 1, 1, 3]
    assert vocab.merges == ["a b"]


def test_read_vocab_rejects_a_gap_and_other_models(tmp_path):
    with pytest.raises(ValueError, match="not contiguous.*gap 1"):
        read_vocab(_tokenizer(tmp_path, {"a": 0, "b": 2}))
    with pytest.raises(ValueError, match="tokenizer.json: model.type is 'Unigram'"):
        read_vocab(_tokenizer(tmp_path, {"a": 0}, model_type="Unigram"))


def test_shape_must_split_into_heads():
    with pytest.raises(ValueError, match="n_embd=30 must divide by n_head=4"):
        LlamaShape(n_embd=30, n_head=4)
    with pytest.raises(ValueError, match="n_head_kv=3"):
        LlamaShape(n_embd=32, n_head=4, n_head_kv=3)
