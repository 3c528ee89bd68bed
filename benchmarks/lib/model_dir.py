"""A local Llama-3-8B model directory vLLM loads offline (no download): the shape from
meta-llama/Meta-Llama-3-8B's `config.json`, the shared Llama 3 tokenizer when given. With
`load_format="dummy"` vLLM fills the weights at random, so nothing else is needed."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["LLAMA3_8B_CONFIG", "write_model_dir"]

# A Llama-3-8B config.json (meta-llama/Meta-Llama-3-8B): vLLM builds its ModelConfig from it
# offline; only the shape matters (the scheduler never runs the model).
LLAMA3_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}


def write_model_dir(directory: Path, tokenizer: Path | None = None) -> Path:
    """A local model directory vLLM can load offline: the Llama-3-8B `config.json`, plus the
    shared `tokenizer.json` when given."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(LLAMA3_8B_CONFIG, indent=1))
    if tokenizer is not None:
        (directory / "tokenizer.json").write_bytes(tokenizer.read_bytes())
        (directory / "tokenizer_config.json").write_text(
            json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None})
        )
    return directory
