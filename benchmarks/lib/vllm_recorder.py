"""Record vLLM v1's own scheduling and prefix-cache decisions on given token sequences.

    python -m benchmarks.lib.vllm_recorder IN.json OUT.json   (needs `vllm`; no GPU)

Standalone: imports vLLM and the standard library only, so it runs in the separate
`.venv-conformance` that `make conformance` builds. It drives vLLM's real v1 `Scheduler` (and
through it the real `KVCacheManager`, `BlockPool` and free queue) with a fake model runner: each
step, every request whose prompt is fully computed "samples" the next of the output token ids it
was given. Nothing else of vLLM runs (no model, no GPU).

IN: ``{"model_dir": str, "max_model_len": int, "requests": [{"prompt": [ids], "output": [ids]}],
"runs": [{"name", "order": [request index, ...], "num_blocks", "max_num_seqs",
"max_num_batched_tokens"}]}``. Requests of a run are added in `order`, all before the first
step, to a fresh scheduler with `num_blocks` KV blocks (block 0 is vLLM's null block).

OUT: ``{"vllm_version", "runs": [{"name", "cached_tokens": [per request of `order`],
"steps": [[[position in order, tokens], ...], ...], "num_preemptions"}]}``: the batch of every
step as (position, scheduled tokens) pairs in vLLM's order.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _scheduler(model_dir: str, max_model_len: int, block_size: int, run: dict):
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    model = ModelConfig(
        model=model_dir, skip_tokenizer_init=True, dtype="bfloat16", max_model_len=max_model_len
    )
    sched = SchedulerConfig(
        max_num_seqs=run["max_num_seqs"],
        max_num_batched_tokens=run["max_num_batched_tokens"],
        max_model_len=max_model_len,
        is_encoder_decoder=False,
    )
    cache = CacheConfig(block_size=block_size, enable_prefix_caching=True)
    config = VllmConfig(
        model_config=model,
        cache_config=cache,
        scheduler_config=sched,
        device_config=DeviceConfig(device="cpu"),
    )
    config.cache_config.num_gpu_blocks = run["num_blocks"]
    spec = FullAttentionSpec(
        block_size=block_size, num_kv_heads=8, head_size=128, dtype=torch.bfloat16
    )
    kv = KVCacheConfig(
        num_blocks=run["num_blocks"],
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.self_attn.attn"], spec)],
    )
    return Scheduler(config, kv, StructuredOutputManager(config), block_size=block_size)


def record_run(
    model_dir: str, max_model_len: int, block_size: int, requests: list[dict], run: dict
) -> dict:
    """One run through a fresh vLLM scheduler; see the module docstring for the output.
    `block_size` is the sim's (`resources.sim.block_cache.BLOCK_SIZE`, sent in the spec: this
    module imports nothing of ours)."""
    from vllm import SamplingParams
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    scheduler = _scheduler(model_dir, max_model_len, block_size, run)
    hash_fn = get_hash_fn_by_name(scheduler.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(block_size, hash_fn)
    order = run["order"]
    outputs: dict[str, list[int]] = {}
    reqs: dict[str, Request] = {}
    for pos, index in enumerate(order):
        rid = str(pos)
        spec = requests[index]
        outputs[rid] = spec["output"]
        params = SamplingParams(max_tokens=len(spec["output"]), ignore_eos=True)
        reqs[rid] = Request(rid, list(spec["prompt"]), params, None, block_hasher=hasher)
        scheduler.add_request(reqs[rid])
    cached: dict[str, int] = {}
    steps: list[list[list[int]]] = []
    while scheduler.has_unfinished_requests():
        out = scheduler.schedule()
        scheduled = dict(out.num_scheduled_tokens)
        if not scheduled:
            raise RuntimeError(f"run {run['name']!r}: vLLM scheduled an empty step")
        steps.append([[int(rid), n] for rid, n in scheduled.items()])
        ids = list(scheduled)
        sampled = []
        for rid in ids:
            req = reqs[rid]
            # Hit at first scheduling: computed tokens (already advanced) less this step's.
            cached.setdefault(rid, req.num_computed_tokens - scheduled[rid])
            done = req.num_computed_tokens >= req.num_tokens
            sampled.append([outputs[rid][req.num_output_tokens]] if done else [])
        result = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={rid: i for i, rid in enumerate(ids)},
            sampled_token_ids=sampled,
        )
        scheduler.update_from_output(out, result)
    return {
        "name": run["name"],
        "cached_tokens": [cached[str(pos)] for pos in range(len(order))],
        "steps": steps,
        "num_preemptions": sum(r.num_preemptions for r in reqs.values()),
    }


def record(spec: dict) -> dict:
    import vllm

    runs = [
        record_run(
            spec["model_dir"], spec["max_model_len"], spec["block_size"], spec["requests"], run
        )
        for run in spec["runs"]
    ]
    return {"vllm_version": vllm.__version__, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m benchmarks.lib.vllm_recorder IN.json OUT.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(args[0]).read_text())
    Path(args[1]).write_text(json.dumps(record(spec)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
