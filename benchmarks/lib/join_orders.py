"""Orderings of a semantic join's pair prompts, measured on the simulated engine (issue 25
item 3): the product's plan under the chosen method (GGR by default) and under file order,
and the naive nested loop with each side as the outer loop, beside the best the template
allows.

`measure_join(sql, tables)` runs the query with `llm_assets.pipeline.run.run_query` on a fresh
`SimulatedEngine` per ordering (prefix caching on), so each ordering's engine time, cost and
engine-reported token hit rate come from the sim's `RunStats`. The nested loops are built here
from the same distinct requests (after dedup): one loop per side as the outer one, ordered by
(outer row, inner row) of each request's first candidate pair, each sent through the product's
`send_stage`. Their prompts are the product's texts with either side's fields first (the
`named` style renders the template, then one `name: value` line per field; GGR picks that
field order per prompt): a loop is reported over both renderings and its better one is the
baseline, so no nested loop is made weaker than it could be with those prompts.

Each ordering's prompts are also replayed one at a time through the sim's block pool
(`benchmarks.lib.tokens.cache_replay`, unbounded): `replay_token_hit_rate` depends on the
order only, not on which requests the engine batches together.

Best achievable for the template (the issue's definition): with each row of the longer side
(the side whose LLM fields hold more tokens) owning consecutive prompts that put its fields
first, the share of all prompt tokens in the template head plus the longer side's lines. It
ignores the 16-token block granularity and the first prompt of each long row, which no order
can serve from the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pandas as pd

from llm_assets.pipeline.filtering import PAIR
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.plan import placeholder_columns, prompt_format, relquery_id
from llm_assets.pipeline.pricing import engine_costs
from llm_assets.pipeline.rows import INPUT, ROW
from llm_assets.pipeline.run import run_query
from llm_assets.pipeline.send import send_stage
from llm_assets.sql.compiler import compile_sql
from resources.engine import LLMEngine, RunStats

FILE_ORDER = "original"
BUDGET_FRACTIONS = (0.01, 0.1)
"""Prefix-cache budgets, as shares of the file-order prompts' distinct blocks."""


def nested_name(alias: str) -> str:
    return f"nested_{alias}_outer"


def stats_row(engine: LLMEngine, stats: RunStats) -> dict:
    """What an ordering reports from the sim's `RunStats`: tokens, hit rate, engine time, cost."""
    costs = engine_costs(engine, stats)
    return {
        "requests": stats.n_requests,
        "prompt_tokens": stats.prompt_tokens,
        "cached_tokens": stats.cached_tokens,
        "token_hit_rate": round(stats.token_hit_rate, 4),
        "engine_time_s": round(stats.engine_time_s, 3),
        "cost_usd_self_hosted": round(costs.get("cost_usd_self_hosted", 0.0), 6),
        "cost_usd_openai_gpt4o_mini": round(costs.get("cost_usd_openai_gpt4o_mini", 0.0), 6),
    }


class TokenCounter:
    """Token ids of prompt texts, memoised (the same text recurs across orderings)."""

    def __init__(self, encode: Callable[[str], list[int]]):
        self.encode = encode
        self.memo: dict[str, list[int]] = {}

    def __call__(self, text: str) -> list[int]:
        ids = self.memo.get(text)
        if ids is None:
            ids = self.memo[text] = list(self.encode(text))
        return ids

    def replay(self, prompts: Sequence[str], budgets: Mapping[str, int]) -> dict:
        """`replay_token_hit_rate` of `prompts` in this order through an unbounded block
        pool, and `budget_token_hit_rate` per prefix-cache budget (blocks)."""
        from benchmarks.lib.tokens import cache_replay
        from resources.sim.block_cache import block_hashes

        rows = [self(p) for p in prompts]
        hashes = [block_hashes(ids) for ids in rows]
        total = sum(map(len, rows)) or 1
        return {
            "replay_token_hit_rate": round(cache_replay(rows, None, hashes) / total, 4),
            "budget_token_hit_rate": {
                k: round(cache_replay(rows, blocks, hashes) / total, 4)
                for k, blocks in budgets.items()
            },
        }


def sendable(plan: pd.DataFrame) -> pd.DataFrame:
    return plan[plan["error"].isna()] if "error" in plan else plan


def measure_join(
    sql: str,
    tables: Mapping[str, pd.DataFrame],
    make_engine: Callable[[], LLMEngine],
    encode: Callable[[str], list[int]],
    chosen: str = "ggr",
    name: str = "sj",
    budget_fractions: Sequence[float] = BUDGET_FRACTIONS,
) -> dict:
    """Pairs, requests and, per ordering, the sim's figures and the replayed token hit rates
    of the semantic join `sql` over `tables`; `best_achievable` for its template. `chosen` is
    the method whose plan is under test (the product's default is GGR); file order is
    `original`. `make_engine` builds a fresh engine per ordering (an empty prefix cache).
    Budgets are `budget_fractions` of the file-order prompts' distinct blocks, as in
    `benchmarks.reorder`."""
    from benchmarks.lib.tokens import budget_blocks

    query = compile_sql(sql, name)
    if len(query.semantic_joins) != 1 or len(query.llm_calls) != 1 or len(query.sources) != 2:
        raise ValueError("measure_join takes a two-table semantic join with one LLM call")
    tokens = TokenCounter(encode)
    runs, orderings, prompts = {}, {}, {}
    for method in dict.fromkeys([chosen, FILE_ORDER]):
        engine = make_engine()
        run = run_query(query, tables, QueryOptions(method=method), engine)
        stage = run.stages[0]
        runs[method] = run
        prompts[method] = sendable(stage.plan)["prompt"].tolist()
        orderings[method] = {
            **stats_row(engine, stage.stats),
            "field_orders": stage.plan["field_order"].value_counts().to_dict(),
        }
    run = runs[chosen]
    stage = run.stages[0]
    call, options = stage.call, QueryOptions(method=chosen)
    plan = sendable(stage.plan)
    requests = _request_rows(run, plan)
    sides = [s.alias for s in query.sources]
    fmt, side_columns = _format(query, call, stage.deduped, options)
    _check_rendering(requests, plan, fmt)  # re-rendering gives the product's texts exactly
    relquery = relquery_id(query, call)
    nested = {}
    for outer in sides:
        inner = next(a for a in sides if a != outer)
        looped = requests.set_index(INPUT).loc[_loop_order(stage.deduped, plan, outer, inner)]
        looped = looped.reset_index()
        for first in (outer, inner):
            names = side_columns[first] + side_columns[next(a for a in sides if a != first)]
            texts = [fmt.render(names, [row[c] for c in names]) for _, row in looped.iterrows()]
            engine = make_engine()
            nested_plan = plan.set_index(INPUT).loc[looped[INPUT]].reset_index()
            nested_plan["prompt"] = texts
            nested_plan["field_order"] = ",".join(names)
            nested_plan["position"] = range(len(nested_plan))
            _, sent = send_stage(engine, relquery, nested_plan, call, options)
            key = (nested_name(outer), f"{first}_fields_first")
            nested[key], prompts[key] = stats_row(engine, sent.stats), texts
    budgets = budget_blocks([tokens(p) for p in prompts[FILE_ORDER]], list(budget_fractions))
    for method in runs:
        orderings[method].update(tokens.replay(prompts[method], budgets["blocks"]))
    for key, figures in nested.items():
        figures.update(tokens.replay(prompts[key], budgets["blocks"]))
    for outer in sides:
        variants = {v: f for (loop, v), f in nested.items() if loop == nested_name(outer)}
        best = max(variants, key=lambda v: variants[v]["token_hit_rate"])
        orderings[nested_name(outer)] = {**variants[best], "prompts": best, "variants": variants}
    longer = max(
        sides,
        key=lambda a: sum(len(tokens(str(v))) for c in side_columns[a] for v in requests[c]),
    )
    return {
        "sql": sql,
        "tables": {t: len(frame) for t, frame in tables.items()},
        "candidate_pairs": run.accounting["rows_in"],
        "skipped_pairs": run.accounting["skipped"],
        "requests": len(plan),
        "answer_rows": len(run.answer),
        "chosen": chosen,
        "longer_side": longer,
        "best_achievable": _best_achievable(requests, fmt, side_columns, longer, sides, tokens),
        "cache_budget": budgets,
        "orderings": orderings,
        "answers": sorted(map(tuple, run.answer.astype(str).to_numpy().tolist())),
    }


def _request_rows(run, plan: pd.DataFrame) -> pd.DataFrame:
    """One row per sent request (distinct input), in plan order: its field values."""
    deduped = run.stages[0].deduped
    keep = deduped[deduped[INPUT].isin(plan[INPUT])]
    first = keep.sort_values(ROW).groupby(INPUT, sort=False).head(1)
    return first.set_index(INPUT).loc[plan[INPUT]].reset_index()


def _loop_order(deduped: pd.DataFrame, plan: pd.DataFrame, outer: str, inner: str) -> list:
    """The sent inputs in the order a nested loop over the source rows (`outer` outside) first
    meets one of each input's candidate pairs (a deduplicated input stands for several)."""
    keys = [f"{PAIR}{outer}", f"{PAIR}{inner}"]
    keep = deduped[deduped[INPUT].isin(plan[INPUT])]
    return keep.sort_values(keys, kind="stable").drop_duplicates(INPUT)[INPUT].tolist()


def _format(query, call, deduped: pd.DataFrame, options: QueryOptions):
    """The product's prompt format of `call` and, per source alias, its LLM field columns."""
    columns = placeholder_columns(query, call, deduped)
    fmt = prompt_format(call, options.prompt_style, options.system_prompt, columns)
    by_field = query.field_columns(call.name)
    side_columns: dict[str, list[str]] = {s.alias: [] for s in query.sources}
    for field, name in zip(call.fields, call.field_names, strict=True):
        alias = field.split(".", 1)[0]  # a self-join's {a.title} and {b.title}: two sides
        side_columns[alias] += columns[name] if name in columns else [by_field[name]]
    return fmt, side_columns


def _check_rendering(requests: pd.DataFrame, plan: pd.DataFrame, fmt) -> None:
    for (_, row), (_, planned) in zip(requests.iterrows(), plan.iterrows(), strict=True):
        names = planned["field_order"].split(",")
        if fmt.render(names, [row[c] for c in names]) != planned["prompt"]:
            raise AssertionError(f"re-rendering request {planned[INPUT]} differs from its plan")


def _best_achievable(requests, fmt, side_columns, longer, sides, tokens) -> float:
    """Share of prompt tokens in the template head + the longer side's lines, every prompt
    rendered with the longer side's fields first."""
    other = next(a for a in sides if a != longer)
    names = side_columns[longer] + side_columns[other]
    head = full = 0
    for _, row in requests.iterrows():
        prompt = fmt.render(names, [row[c] for c in names])
        prefix = fmt.render(side_columns[longer], [row[c] for c in side_columns[longer]]) + "\n"
        assert prompt.startswith(prefix)
        head += len(tokens(prefix))
        full += len(tokens(prompt))
    return round(head / full, 4) if full else 0.0


def nested_variants(result: dict) -> dict[str, dict]:
    """Every nested-loop ordering measured: `<loop>/<rendering>` -> its figures."""
    return {
        f"{loop}/{variant}": figures
        for loop, entry in result["orderings"].items()
        if loop.startswith("nested_")
        for variant, figures in entry["variants"].items()
    }


def targets(result: dict, ratio: float = 0.9) -> dict:
    """The issue's ordering targets on one join: the chosen ordering's token hit rate >= the
    better nested loop (the best of both loops over both renderings) and >= `ratio` x best
    achievable, on the engine's and on the replayed hit rates."""
    out = {}
    chosen = result["orderings"][result["chosen"]]
    nested = nested_variants(result)
    best = result["best_achievable"]
    for metric in ("token_hit_rate", "replay_token_hit_rate"):
        strongest = max(nested, key=lambda k: nested[k][metric])
        out[metric] = {
            "chosen": chosen[metric],
            "best_nested_loop": nested[strongest][metric],
            "best_nested_loop_is": strongest,
            "ge_nested_loops": chosen[metric] >= nested[strongest][metric],
            "best_achievable": best,
            "share_of_best": round(chosen[metric] / best, 4) if best else None,
            "ge_ratio_of_best": chosen[metric] >= ratio * best,
        }
    return out


def budget_comparison(result: dict) -> dict:
    """Not a target: per prefix-cache budget, the chosen ordering's replayed hit rate beside
    the best nested loop's (row order matters once the cache evicts)."""
    chosen = result["orderings"][result["chosen"]]["budget_token_hit_rate"]
    nested = nested_variants(result)
    out = {}
    for key, rate in chosen.items():
        strongest = max(nested, key=lambda k: nested[k]["budget_token_hit_rate"][key])
        out[key] = {
            "chosen": rate,
            "best_nested_loop": nested[strongest]["budget_token_hit_rate"][key],
            "best_nested_loop_is": strongest,
        }
    return out
