"""What the `llm-assets` commands show: the run's statistics as JSON (`stats_report`, printed
by `run` and `plan`), `plan`'s table (`plan_table`) and a progress bar per LLM stage on
stderr (`ProgressBar`). Formatting only: nothing here reads inputs or sends requests."""

from __future__ import annotations

import sys


class ProgressBar:
    """A tqdm bar per LLM stage on stderr (`progress(label)(done, total)`)."""

    def __init__(self):
        self.bars = {}

    def __call__(self, label: str):
        from tqdm import tqdm

        def update(done: int, total: int) -> None:
            bar = self.bars.get(label)
            if bar is None:
                bar = self.bars[label] = tqdm(total=total, desc=label, unit="req", file=sys.stderr)
            if done >= total:  # close() prints the final line; update() first would twice
                bar.n = done
                bar.close()
            else:
                bar.update(done - bar.n)

        return update


def stats_report(stats, engine, wall_s: float) -> dict:
    """Requests, tokens, hit rate, engine time (simulated seconds on the sim), wall time and
    cost per pricing model: what `run` and `plan` print."""
    from llm_assets.pipeline.pricing import engine_costs

    costs = engine_costs(engine, stats)
    return {
        "n_requests": stats.n_requests,
        "prompt_tokens": stats.prompt_tokens,
        "cached_tokens": stats.cached_tokens,
        "token_hit_rate": round(stats.token_hit_rate, 6),
        "output_tokens": stats.output_tokens,
        "errors": stats.errors,
        "engine": stats.engine,
        "model": stats.model,
        "hardware": stats.hardware,
        "engine_time_s": round(stats.engine_time_s, 3),
        "wall_time_s": round(wall_s, 3),
        "cost_usd": {k.removeprefix("cost_usd_"): round(v, 6) for k, v in costs.items()},
    }


def money(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 1:
        return f"{value:,.2f}"
    return f"{value:.6f}" if value else "0"


def table_lines(header: list[str], rows: list[list[str]]) -> list[str]:
    """Columns padded to their widest cell: the first left-aligned, the others right."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(
            c.rjust(w) if i else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in [header, *rows]
    ]


def _stage_row(name: str, m: dict, rows: int) -> list[str]:
    return [
        name,
        f"{rows:,}",
        f"{m['n_requests']:,}",
        f"{m['prompt_tokens']:,}",
        f"{m['cached_tokens']:,}",
        f"{m['token_hit_rate']:.1%}",
        f"{m['output_tokens']:,}",
        f"{m['engine_time_s']:,.2f}",
        money(m["cost_usd"].get("self_hosted", 0.0)),
    ]


def sampled_lines(methods: dict) -> list[str]:
    """One line per method and stage priced from windows of its requests
    (`llm_assets.pipeline.pricing`): how many were counted and the standard errors."""
    lines = []
    for name, m in methods.items():
        for stage in m["stages"]:
            sample = stage.get("priced_on")
            if not sample:
                continue
            se = sample["relative_se"]
            lines.append(
                f"{name}, {stage['llm_call']}: tokens and engine s estimated from "
                f"{sample['requests']:,} of its {sample['of']:,} requests ({sample['windows']} "
                f"windows of consecutive requests; standard error: cached tokens "
                f"{se['cached_tokens']:.1%}, engine s {se['engine_time_s']:.1%})"
            )
    return ["", *lines] if lines else []


def plan_table(report: dict) -> str:
    """`plan`'s default output: per LLM stage in run order, one row per method; then each
    method's totals over all stages and their cost per pricing model."""
    methods = report["methods"]
    first = next(iter(methods.values()), None)
    calls = report["llm_calls"]
    order = report.get("llm_filter_order")
    stages = [s["llm_call"] for s in first["stages"]] if first else calls
    priced = f"its LLM stage {stages[0]}" if len(stages) == 1 else (
        f"its {len(stages)} LLM stages in run order {', '.join(stages)}"
    )  # fmt: skip
    engine = f"the simulated {first['model']} on {first['hardware']}" if first else "the sim"
    lines = [f"plan of {report['query']}, nothing sent: {priced}, on {engine}"]
    header = ["method", "rows", "requests", "prompt tokens", "cached tokens", "hit rate",
              "output tokens", "engine s", "self-hosted $"]  # fmt: skip
    for i, call in enumerate(stages if len(stages) > 1 else []):
        sample = first["reach_sample"]
        reach = "" if i == 0 else (
            f", rows predicted from a {sample['rows']:,}-row sample through the earlier stages"
        )  # fmt: skip
        lines += ["", f"stage {i + 1}: {call}{reach}"]
        lines += table_lines(
            header,
            [_stage_row(n, m["stages"][i], m["stages"][i]["rows"]) for n, m in methods.items()],
        )
    if len(stages) > 1:
        lines += ["", "total over all stages (rows: rows reaching the first stage):"]
    else:
        lines.append("")
    lines += table_lines(
        header, [_stage_row(n, m, m["stages"][0]["rows"]) for n, m in methods.items()]
    )
    pricings = [k for k in (first or {}).get("cost_usd", {}) if k != "self_hosted"]
    if pricings:
        lines += ["", "predicted cost in USD per pricing model, all stages "
                  "(llm_assets/optimizer/cost.py):"]  # fmt: skip
        lines += table_lines(
            ["method", *pricings],
            [[n, *(money(m["cost_usd"][p]) for p in pricings)] for n, m in methods.items()],
        )
    if order:
        lines += [
            "",
            f"LLM filters: written {', '.join(order['written_order'])} -> run "
            f"{', '.join(order['chosen_order'])} (expected tokens per row "
            f"{order['expected_tokens_per_row_written']:,} -> "
            f"{order['expected_tokens_per_row_chosen']:,}; the order sample costs "
            f"{order['sample_requests']} requests)",
        ]
    join = report.get("semantic_join")
    if join:
        sides = " x ".join(f"{alias} {n:,} rows" for alias, n in join["rows"].items())
        blocking = "; ".join(f"{a} by {b}" for a, b in join.get("blocking", {}).items())
        lines += ["", f"semantic join: {join['candidate_pairs']:,} candidate pairs ({sides}; "
                  f"max_pairs {join['max_pairs']:,}), each a row of the query; blocking: "
                  f"{blocking}"]  # fmt: skip
        for name, firsts in join["prefix_side"].items():
            total = sum(firsts.values()) or 1
            shares = ", ".join(f"{a}'s fields first in {n / total:.0%}" for a, n in firsts.items())
            lines.append(f"  {name}: {shares} of the prompts")
    lines += sampled_lines(methods)
    shown = next(reversed(methods), None)
    if shown and methods[shown]["first_prompt"] is not None:
        lines += ["", f"the first prompt {shown} sends, exactly as the model receives it:"]
        lines += ["  | " + line for line in methods[shown]["first_prompt"].split("\n")]
    guards = [
        (name, stage["llm_call"], stage["field_order_guard"])
        for name, m in methods.items()
        for stage in m["stages"]
        if "field_order_guard" in stage
    ]
    if guards:
        lines += ["", "field-order guard:"]
        lines += [
            f"  {name} {call}: {g['verdict']}: {g['reason']} ({g['requests']:,} requests, "
            f"{g['share_of_stage_chars']:.1%} of the stage's prompt characters)"
            for name, call, g in guards
        ]
    lines += ["", "rows: rows reaching the stage (the first stage, in a total), before rows "
              "with a null LLM input are skipped and duplicate inputs merged into requests; "
              "engine s: simulated seconds; --json prints every figure"]  # fmt: skip
    return "\n".join(lines)


def quality_report(stages, label: str | None, engine: str) -> dict:
    """`run`'s `quality` object (`llm_assets.pipeline.quality`): `parse_rate` over the answers
    of every LLM stage, and per stage under `stages`; with a `label` column, the last stage's
    (`labelled_call`) `accuracy`, its 95% Wilson interval `accuracy_ci95`, `n_labelled` and,
    for a text output, `f1` (null without a label); on the simulated engine a `note` that its
    answers are placeholders, not a model's. A stage the field-order guard judged carries its
    decision and `agreement` under `field_order_guard` (`guard_report`)."""
    from llm_assets.pipeline.quality import SIM_NOTE, answer_count, parse_rate, stage_quality

    report = {
        "engine": engine,
        "parse_rate": _rounded(parse_rate(*(s.outputs for s in stages))),
        "stages": [
            {
                "llm_call": s.call.name,
                "answers": answer_count(s.outputs),
                "parse_rate": _rounded(parse_rate(s.outputs)),
                **guard_report(s.guard),  # its agreement between the two field orders
            }
            for s in stages
        ],  # fmt: skip
        "label_column": label,
        "labelled_call": None,
        "accuracy": None,
        "accuracy_ci95": None,
        "n_labelled": None,
    }
    if label is not None and stages:
        last = stages[-1]
        figures = stage_quality(last.deduped, last.outputs, last.call.output, labelled=True)
        del figures["parse_rate"]  # the last stage's is under `stages`
        report["labelled_call"] = last.call.name
        report |= {k: _rounded(v) for k, v in figures.items()}
    if engine == "sim":
        report["note"] = SIM_NOTE
    return report


def _rounded(value):
    if isinstance(value, float):
        return round(value, 6)
    return [_rounded(v) for v in value] if isinstance(value, list) else value


def stage_report(stage, sim) -> dict:
    """One predicted LLM stage: its rows (reaching it, sent to the LLM, the sampled share of
    rows the earlier stages let through) and `stats_report`'s figures less wall time."""
    figures = stats_report(stage.stats, sim, 0.0)
    del figures["wall_time_s"]
    return {
        "llm_call": stage.call.name,
        "rows": stage.rows,
        "rows_to_llm": stage.rows_to_llm,
        "share": round(stage.share, 4),
        **figures,
        "priced_on": stage.priced_on.report() if stage.priced_on else None,
        **guard_report(stage.guard),
    }


def guard_report(guard) -> dict:
    """`{"field_order_guard": ...}` when the guard was asked for (`pipeline.guard`), else {}."""
    if guard is None or guard.verdict == "off":
        return {}
    return {"field_order_guard": guard.report()}


def pairs_report(query, pairs, options) -> dict:
    """A semantic join's candidate pairs: how many, each side's rows among them, the bound,
    how each join is blocked (top-k, an equi-key, or none: the cross product, less the pairs
    a predicate over both sides, as `a.id < b.id`, drops)."""
    from llm_assets.pipeline.filtering import pair_sides

    sides = pair_sides(query, pairs)
    aliases = [s.alias for s in query.sources]
    blocking = {j.alias: _blocking(query, j, aliases) for j in query.semantic_joins}
    return {"candidate_pairs": len(pairs), "rows": sides, "max_pairs": options.max_pairs,
            "blocking": blocking, "prefix_side": {}}  # fmt: skip


def _blocking(query, join, aliases: list[str]) -> str:
    if join.top_k:
        return join.top_k.show()
    at = aliases.index(join.alias)
    if query.joins_for(at):
        return "equi-key"
    earlier = set(aliases[:at])
    both = [  # predicates reading this side and an earlier one: they filter the pairs
        p.sql
        for p in query.predicates
        if join.alias in (sides := {c.split(".", 1)[0] for c in p.columns}) and sides & earlier
    ]
    return "cross product" + (f" filtered by {' AND '.join(both)}" if both else "")


def prefix_sides(query, plan) -> dict[str, int]:
    """Per source alias, how many of the plan's prompts open with one of its fields (the side
    whose values form the shared prefix: the ordering's choice for a semantic join)."""
    alias_of = {name: column.split(".", 1)[0] for column, name in query.output_names().items()}
    firsts = [order.split(",", 1)[0] for order in plan["field_order"]]
    counts = {s.alias: 0 for s in query.sources}
    for name in firsts:
        if name in alias_of:
            counts[alias_of[name]] += 1
    return counts
