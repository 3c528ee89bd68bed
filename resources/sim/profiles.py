"""Hardware and model profiles for the simulated engine (public datasheet figures only).

A `Deployment` is one model on `tensor_parallel_size` GPUs of one kind: it derives what the
engine needs, the KV capacity in blocks (vLLM's rule, below) and the GPU count for pricing.

KV capacity (vLLM's memory profiling, without the activation-peak term):
``num_blocks = (memory_bytes * gpu_memory_utilization - weight_bytes / tp) /
(kv_bytes_per_token / tp) / 16``, the KV bytes per token being
``2 (K and V) * layers * kv_heads * head_dim * 2 bytes (FP16/BF16)``.
As in vLLM, a deployment whose KV cache cannot hold one max-length sequence is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from resources.sim.block_cache import BLOCK_SIZE

__all__ = [
    "HARDWARE",
    "MODELS",
    "Deployment",
    "HardwareProfile",
    "ModelProfile",
    "get_hardware",
    "get_model",
    "USAGES",
    "resolve_deployment",
    "vllm_default_budgets",
]

_MIB = 1024 * 1024
_GIB = 1024 * _MIB

USAGES = ("offline", "serve")
"""How vLLM is run: `offline` (the `LLM` class) or `serve` (`vllm serve`, the OpenAI server);
they get different default batch budgets (`vllm_default_budgets`)."""


@dataclass(frozen=True)
class HardwareProfile:
    """One GPU, from its public datasheet."""

    name: str
    peak_flops: float
    """Dense (no sparsity) FP16/BF16 tensor-core FLOP/s."""
    memory_bandwidth: float
    """HBM/GDDR bandwidth, bytes/s."""
    memory_bytes: int
    """Device memory as the driver reports it (nvidia-smi total), bytes."""
    interconnect_bandwidth: float
    """GPU-to-GPU bandwidth per direction (NVLink, or PCIe when there is none), bytes/s."""


HARDWARE: dict[str, HardwareProfile] = {
    # NVIDIA L4 datasheet: FP16 tensor 242 TFLOPS *with sparsity* -> 121 dense; 24 GB GDDR6
    # (23,034 MiB reported), 300 GB/s; PCIe Gen4 x16 (32 GB/s per direction), no NVLink.
    "L4": HardwareProfile("L4", 121e12, 300e9, 23_034 * _MIB, 32e9),
    # NVIDIA A100 datasheet (SXM4 40GB): FP16 tensor 312 TFLOPS dense; 1,555 GB/s HBM2;
    # 40,960 MiB; NVLink 3 600 GB/s total (300 GB/s per direction).
    "A100-40GB": HardwareProfile("A100-40GB", 312e12, 1555e9, 40_960 * _MIB, 300e9),
    # NVIDIA H100 datasheet (SXM5 80GB): BF16 tensor 1,979 TFLOPS with sparsity -> 989 dense;
    # 3.35 TB/s HBM3; 81,559 MiB; NVLink 4 900 GB/s total (450 GB/s per direction).
    "H100-80GB": HardwareProfile("H100-80GB", 989e12, 3.35e12, 81_559 * _MIB, 450e9),
    # NVIDIA H200 datasheet (SXM): same compute as H100 (989 TFLOPS dense BF16); 141 GB HBM3e
    # (143,771 MiB), 4.8 TB/s; NVLink 900 GB/s total.
    "H200": HardwareProfile("H200", 989e12, 4.8e12, 143_771 * _MIB, 450e9),
}


@dataclass(frozen=True)
class ModelProfile:
    """One decoder-only transformer in FP16/BF16, from its Hugging Face config.json."""

    name: str
    num_params: float
    """All parameters, embeddings included."""
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    """Equal to `num_heads` for multi-head attention, fewer for grouped-query attention."""
    head_dim: int
    vocab_size: int
    tied_embeddings: bool
    """Input embedding and LM head share one matrix (OPT) or not (Llama)."""
    max_model_len: int
    """Context length (max_position_embeddings)."""
    bytes_per_param: int = 2

    @property
    def weight_bytes(self) -> float:
        return self.num_params * self.bytes_per_param

    @property
    def matmul_params(self) -> float:
        """Parameters multiplied per token (embedding tables excluded; the LM head runs only for
        the sampled position of each sequence, so it is left out of the per-token cost)."""
        n_tables = 1 if self.tied_embeddings else 2
        return self.num_params - n_tables * self.vocab_size * self.hidden_size

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.bytes_per_param


MODELS: dict[str, ModelProfile] = {
    # meta-llama/Llama-2-7b-hf config.json: 32 layers, hidden 4096, 32 heads (MHA), vocab 32000,
    # 4096 positions; 6.74B parameters.
    "llama-2-7b": ModelProfile("llama-2-7b", 6.738e9, 32, 4096, 32, 32, 128, 32_000, False, 4096),
    # meta-llama/Meta-Llama-3-8B config.json: 32 layers, hidden 4096, 32 heads, 8 KV heads (GQA),
    # vocab 128256, 8192 positions; 8.03B parameters.
    "llama-3-8b": ModelProfile("llama-3-8b", 8.030e9, 32, 4096, 32, 8, 128, 128_256, False, 8192),
    # facebook/opt-13b config.json: 40 layers, hidden 5120, 40 heads (MHA), vocab 50272, tied
    # embeddings, 2048 positions; 12.85B parameters.
    "opt-13b": ModelProfile("opt-13b", 12.85e9, 40, 5120, 40, 40, 128, 50_272, True, 2048),
    # meta-llama/Meta-Llama-3-70B config.json: 80 layers, hidden 8192, 64 heads, 8 KV heads,
    # vocab 128256, 8192 positions; 70.55B parameters.
    "llama-3-70b": ModelProfile("llama-3-70b", 70.55e9, 80, 8192, 64, 8, 128, 128_256, False, 8192),
}


def get_hardware(name: str) -> HardwareProfile:
    try:
        return HARDWARE[name]
    except KeyError:
        raise ValueError(f"unknown gpu {name!r}; expected one of {sorted(HARDWARE)}") from None


def get_model(name: str) -> ModelProfile:
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; expected one of {sorted(MODELS)}") from None


@dataclass(frozen=True)
class Deployment:
    """A model served on `tensor_parallel_size` GPUs of one kind."""

    hardware: HardwareProfile
    model: ModelProfile
    tensor_parallel_size: int
    """GPUs the model is sharded over (weights and KV heads split evenly)."""
    gpu_memory_utilization: float
    """Share of each GPU's memory vLLM may use (weights + KV cache); vLLM's default is 0.9."""

    @property
    def num_gpus(self) -> int:
        return self.tensor_parallel_size

    @property
    def kv_bytes_per_gpu(self) -> float:
        tp = self.tensor_parallel_size
        return (
            self.hardware.memory_bytes * self.gpu_memory_utilization - self.model.weight_bytes / tp
        )

    @property
    def num_kv_blocks(self) -> int:
        """KV cache capacity in 16-token blocks (0 when the weights do not fit)."""
        per_token = self.model.kv_bytes_per_token / self.tensor_parallel_size
        return max(0, int(self.kv_bytes_per_gpu / per_token) // BLOCK_SIZE)

    def describe(self) -> str:
        tp = self.tensor_parallel_size
        return f"{tp}x{self.hardware.name}" if tp > 1 else self.hardware.name


def resolve_deployment(
    gpu: str,
    model: str,
    tensor_parallel_size: int | None = None,
    gpu_memory_utilization: float = 0.9,
) -> Deployment:
    """Look up both profiles and pick the tensor-parallel degree.

    With `tensor_parallel_size=None` the smallest power of two (up to 8) whose KV cache holds
    one max-length sequence is used (e.g. llama-3-70b: 4 x A100-40GB, 2 x H200). ValueError
    names the bad value and the valid ones.
    """
    hw = get_hardware(gpu)
    mp = get_model(model)
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    needed = -(-mp.max_model_len // BLOCK_SIZE)
    if tensor_parallel_size is None:
        for tp in (1, 2, 4, 8):
            dep = Deployment(hw, mp, tp, gpu_memory_utilization)
            if dep.num_kv_blocks >= needed:
                return dep
        raise ValueError(f"model {model!r} does not fit on 8 x {gpu}; choose a larger GPU")
    if tensor_parallel_size not in (1, 2, 4, 8):
        raise ValueError(
            f"tensor_parallel_size must be one of [1, 2, 4, 8], got {tensor_parallel_size}"
        )
    dep = Deployment(hw, mp, tensor_parallel_size, gpu_memory_utilization)
    if dep.num_kv_blocks < needed:
        raise ValueError(
            f"model {model!r} on {tensor_parallel_size} x {gpu} leaves {dep.num_kv_blocks} KV "
            f"blocks, fewer than one {mp.max_model_len}-token sequence needs ({needed}); "
            "raise tensor_parallel_size or gpu_memory_utilization"
        )
    return dep


def vllm_default_budgets(hardware: HardwareProfile, usage: str = "offline") -> tuple[int, int]:
    """vLLM's default (`max_num_seqs`, `max_num_batched_tokens`) with chunked prefill on this
    GPU (vLLM 0.32 `EngineArgs._set_default_max_num_seqs_and_batched_tokens_args`):

    | GPU memory                    | offline (`LLM`) | `vllm serve`  |
    |-------------------------------|-----------------|---------------|
    | >= 160 GiB (B200, B300)       | 1024, 16384     | 1024, 16384   |
    | >= 70 GiB, not an A100 (H100, H200) | 1024, 16384 | 1024, 8192  |
    | otherwise (L4, A100)          | 256, 8192       | 256, 2048     |
    """
    if usage not in USAGES:
        raise ValueError(f"unknown usage {usage!r}; expected one of {list(USAGES)}")
    serve = usage == "serve"
    if hardware.memory_bytes >= 160 * _GIB:
        return 1024, 16384
    if hardware.memory_bytes >= 70 * _GIB and "a100" not in hardware.name.lower():
        return 1024, 8192 if serve else 16384
    return 256, 2048 if serve else 8192
