"""The engine switches `llm-assets run` and `plan` share (`engine_options`, `Switches`) and
the engine and response cache built from them, the one way the code location builds them
(`resources.environment.build_engine`), without importing Dagster."""

from __future__ import annotations

from dataclasses import dataclass, replace

import click

from llm_assets.cli.inputs import fail, query_options

__all__ = ["ENGINES", "SIM_MODEL", "Switches", "build_engine", "engine_options", "response_cache"]

ENGINES = ("sim", "openai", "vllm", "llama_cpp", "ray")
SIM_MODEL = "llama-2-7b"


@dataclass(frozen=True)
class Switches:
    """The options `run` and `plan` share (see `engine_options`)."""

    engine: str
    gpu: str
    model: str | None
    policy: str
    no_prefix_cache: bool
    system_prompt: str | None
    max_tokens: int | None
    no_dedup: bool
    no_pushdown: bool
    no_field_reorder: bool
    field_order_guard: float | None
    null_policy: str | None
    context_policy: str | None
    prompt_style: str | None
    max_pairs: int | None
    shards: int | None = None
    executor: str = "local"
    ray_address: str | None = None

    def resolved(self) -> Switches:
        """The switches with `--executor ray` read as `--engine ray` (the Ray engine sends to
        the OpenAI replicas of LLM_ASSETS_OPENAI_BASE_URL); one `error:` line for an engine
        that runs in this process under `--executor ray`, or `--ray-address` without Ray."""
        engine = self.engine
        if self.executor == "ray":
            if engine not in ("sim", "openai", "ray"):
                fail(
                    f"--executor ray sends to OpenAI-compatible replicas "
                    f"(LLM_ASSETS_OPENAI_BASE_URL); --engine {engine} runs in this process: "
                    "drop one of them"
                )
            engine = "ray"
        if self.ray_address is not None and engine != "ray":
            fail(f"--ray-address {self.ray_address!r} is for --engine ray (or --executor ray)")
        return replace(self, engine=engine)

    def options(self, method: str):
        return query_options(
            method=method,
            dedup=not self.no_dedup,
            pushdown=not self.no_pushdown,
            reorder_fields=not self.no_field_reorder,
            field_order_guard=self.field_order_guard,
            system_prompt=self.system_prompt,
            max_tokens=self.max_tokens,
            null_policy=self.null_policy,
            context_policy=self.context_policy,
            prompt_style=self.prompt_style,
            max_pairs=self.max_pairs,
            num_plan_shards=self.shards,
        )

    def build_engine(self):
        return build_engine(
            self.engine,
            self.gpu,
            self.model,
            self.policy,
            not self.no_prefix_cache,
            ray_address=self.ray_address,
        )


def build_engine(
    engine: str,
    gpu: str,
    model: str | None,
    policy: str,
    prefix_cache: bool,
    ray_address: str | None = None,
):
    """An engine for the CLI, built the one way the code location builds it
    (`resources.environment.build_engine`, without Dagster): the simulated one from the
    switches, or a
    real one from `--model` and the environment (LLM_ASSETS_OPENAI_BASE_URL, _MODEL, _API_KEY
    and LLM_ASSETS_OPENAI_<OPTION>; LLM_ASSETS_VLLM_MODEL and LLM_ASSETS_VLLM_<OPTION>;
    LLM_ASSETS_LLAMA_CPP_<OPTION>; the Ray engine's LLM_ASSETS_RAY_<OPTION>, its address
    from `ray_address` first). A missing or bad setting (a model or llama-server not
    installed) is that function's one-line error."""
    from resources.environment import build_engine as build

    fields: dict = {}
    if not prefix_cache and engine in ("sim", "vllm"):
        fields["enable_prefix_caching"] = False
    elif not prefix_cache and engine == "llama_cpp":
        fail("--no-prefix-cache: llama_cpp always reuses a slot's cached prefix")
    if engine == "sim":
        fields.update(gpu=gpu, model=model or SIM_MODEL, policy=policy)
    elif model is not None:
        fields["model"] = model
    if ray_address is not None:
        fields["ray_address"] = ray_address
    try:
        return build(engine, fields)
    except ValueError as exc:
        fail(str(exc))


def engine_options(f):
    for option in reversed(
        [
            click.option("--engine", type=click.Choice(ENGINES), default="sim", show_default=True),
            click.option(
                "--executor",
                type=click.Choice(["local", "ray"]),
                default="local",
                show_default=True,
                help="ray: Ray Data sends the stage to the OpenAI replicas "
                "(LLM_ASSETS_OPENAI_BASE_URL), as --engine ray.",
            ),
            click.option(
                "--ray-address",
                default=None,
                metavar="ADDR",
                help="--engine ray: the cluster to join (host:port of `ray start --head`, "
                "ray://head:10001, auto); default LLM_ASSETS_RAY_ADDRESS, else a local one.",
            ),
            click.option("--gpu", default="L4", show_default=True, help="Simulated GPU."),
            click.option(
                "--model",
                default=None,
                help=f"sim: the simulated model (default {SIM_MODEL}); llama_cpp: a bundled "
                "model (smollm2-135m, the default; gemma3-270m) or a GGUF file.",
            ),
            click.option("--policy", default="vllm-v1", show_default=True, help="Sim scheduler."),
            click.option("--no-prefix-cache", is_flag=True, help="Disable prefix caching."),
            click.option("--system-prompt", default=None, help="Sent before each instruction."),
            click.option("--max-tokens", type=int, default=None, help="Generation limit."),
            click.option("--no-dedup", is_flag=True, help="Send duplicate inputs again."),
            click.option("--no-pushdown", is_flag=True, help="Run predicates after the LLM."),
            click.option(
                "--no-field-reorder",
                is_flag=True,
                help="Keep every prompt's fields in the written order (rows still reordered).",
            ),
            click.option(
                "--field-order-guard",
                type=float,
                default=None,
                metavar="SHARE",
                help="Answer a sample in the written and the planned field order first; keep "
                "the planned one only if the 95% lower bound of their agreement >= SHARE.",
            ),
            click.option(
                "--null-policy", type=click.Choice(["skip", "empty", "fail"]), default=None
            ),
            click.option("--context-policy", type=click.Choice(["fail", "truncate"]), default=None),
            click.option(
                "--prompt-style",
                type=click.Choice(["named", "values", "inline"]),
                default=None,
                help="named (default): your template, then `name: value` lines; inline: "
                "values in the placeholders (rows reordered only).",
            ),
            click.option(
                "--max-pairs",
                type=int,
                default=None,
                help="A semantic join (LLM in JOIN ON) with more candidate pairs is refused "
                "(default 100,000).",
            ),
            click.option(
                "--shards",
                type=int,
                default=None,
                metavar="K",
                help="Plan each LLM stage in K shards cut on the field GGR puts first, as "
                "parallel Ray tasks (default 1: in this process; needs the ray extra).",
            ),
        ]
    ):
        f = option(f)
    return f


def response_cache(engine: str, cache: bool | None):
    """The response cache of a run: the assets' one (`$LLM_ASSETS_HOME/responses.duckdb`),
    on by default for the real engines and off for the simulated one (as jobs/resources.py)."""
    from resources.response_cache import ResponseCache

    enabled = engine != "sim" if cache is None else cache
    return ResponseCache() if enabled else ResponseCache.disabled()
