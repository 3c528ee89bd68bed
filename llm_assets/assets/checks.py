"""The asset checks of a query lineage. Each is a pure function of frames returning the list
of problems (empty: passed), wrapped as a Dagster check beside its asset; tests call the pure
functions with corrupted frames to see them fail."""

from collections.abc import Sequence

import dagster as dg
import pandas as pd

from llm_assets.assets.definition import QueryDefinition
from llm_assets.assets.options import QueryOptionsResource
from llm_assets.optimizer.schedule import validate_schedule
from llm_assets.pipeline.filtering import PAIR
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.quality import answer_count, parse_rate, parse_rate_problems
from llm_assets.pipeline.results import accounting
from llm_assets.pipeline.rows import INPUT, ROW, SKIP
from llm_assets.query.model import LLMQuery
from llm_assets.query.parts import LLMCall
from resources.expectations import Expect, GXValidator

FIELDS_CHECK = "llm_fields_present"
PAIR_CHECKS = ("pairs_within_bound", "no_duplicate_pair")
ORDER = "llm_filter_order"
"""The asset holding a run's LLM filter order (`builders.filter_order_asset`)."""


# ---- pure checks -------------------------------------------------------------------------


def plan_problems(plan: pd.DataFrame, deduped: pd.DataFrame) -> list[str]:
    """Every distinct input is planned exactly once, at positions 0..n-1, with one valid field
    order per request."""
    expected = sorted(set(deduped.loc[deduped[INPUT] >= 0, INPUT]))
    problems = []
    if sorted(plan["position"]) != list(range(len(plan))):
        problems.append("positions are not 0..n-1")
    if sorted(plan[INPUT]) != expected:
        problems.append("planned inputs differ from the distinct inputs")
    fields = [f.split(",") for f in plan["field_order"]]
    try:
        if fields:
            validate_schedule(
                list(zip(range(len(fields)), fields, strict=True)), len(fields), fields[0]
            )
    except ValueError as exc:
        problems.append(str(exc))
    return problems


def response_problems(outputs: pd.DataFrame, plan: pd.DataFrame) -> list[str]:
    """Exactly one answer or error row per planned request."""
    problems = []
    if len(outputs) != len(plan):
        problems.append(f"{len(outputs)} output rows for {len(plan)} planned requests")
    ids = outputs["request_id"]
    if ids.duplicated().any():
        problems.append(f"request ids answered twice: {ids[ids.duplicated()].head(3).tolist()}")
    unknown = set(ids) - set(plan["request_id"])
    if unknown:
        problems.append(f"answers to unplanned requests: {sorted(unknown)[:3]}")
    empty = outputs["answer"].isna() & outputs["error"].isna()
    if empty.any():
        problems.append(f"{int(empty.sum())} rows with neither an answer nor an error")
    return problems


def accounting_problems(
    result: pd.DataFrame,
    base: pd.DataFrame,
    query: LLMQuery | None = None,
    calls: Sequence[LLMCall] | None = None,
) -> list[str]:
    """answered + skipped + failed == rows in, and `result` holds exactly `base`'s rows; with
    `query`, every `answered` row has the answers it claims (`unanswered_problems`, the calls
    in the order they ran: `calls`, default as written)."""
    counts = accounting(result)
    problems = []
    total = counts["answered"] + counts["skipped"] + counts["failed"]
    if total != counts["rows_in"]:
        problems.append(f"statuses sum to {total}, rows in {counts['rows_in']}")
    if len(result) != len(base) or set(result[ROW]) != set(base[ROW]):
        problems.append(f"result has {len(result)} rows, its input {len(base)}")
    unknown = set(result["status"]) - {"answered", "skipped", "failed"}
    if unknown:
        problems.append(f"unknown statuses {sorted(unknown)}")
    unexplained = result["status"].isin(["skipped", "failed"]) & result["reason"].isna()
    if unexplained.any():
        problems.append(f"{int(unexplained.sum())} skipped/failed rows without a reason")
    if query is not None:
        problems += unanswered_problems(result, query, calls)
    return problems


def unanswered_problems(
    result: pd.DataFrame, query: LLMQuery, calls: Sequence[LLMCall] | None = None
) -> list[str]:
    """Every `answered` row has a (non-null) answer from each LLM call it reached: the first
    call that ran, then each next one while its answers pass the filters on the calls before
    (a row an LLM filter drops reaches no later call). `calls`: the order the calls ran."""
    problems = []
    reached = result["status"] == "answered"
    for call in query.llm_calls if calls is None else calls:
        if call.name not in result:
            return [*problems, f"no column {call.name!r} for the answers of LLM call {call.name}"]
        answer = result[call.name]
        null = reached & answer.isna()
        if null.any():
            rows = result.loc[null, ROW].head(3).tolist()
            problems.append(
                f"{int(null.sum())} answered rows without an answer from {call.name} (rows {rows})"
            )
        filters = query.filters_for(call.name)
        kept = answer.map(lambda a, fs=filters: isinstance(a, str) and all(f.keeps(a) for f in fs))
        reached &= ~null & kept.astype(bool)
    return problems


def template_columns(qdef: QueryDefinition, frame: pd.DataFrame) -> list[str]:
    """The columns of `frame` the LLM templates read (retrievals expanded)."""
    columns: list[str] = []
    for call in qdef.query.llm_calls:
        for column in qdef.query.field_columns(call.name).values():
            expanded = sorted(c for c in frame.columns if c.startswith(f"{column}_"))
            columns += [column] if column in frame.columns or not expanded else expanded
    return list(dict.fromkeys(columns))


def pair_problems(pairs: pd.DataFrame, query: LLMQuery, max_pairs: int) -> dict[str, list[str]]:
    """Per check of a semantic join's candidate pairs, what is wrong: more pairs than
    `max_pairs` (`pairs_within_bound`), or two rows for the same source rows
    (`no_duplicate_pair`: each pair must be asked once)."""
    columns = [f"{PAIR}{s.alias}" for s in query.sources]
    bound = [] if len(pairs) <= max_pairs else [f"{len(pairs):,} pairs > max_pairs {max_pairs:,}"]
    missing = [c for c in columns if c not in pairs.columns]
    if missing:
        return {"pairs_within_bound": bound, "no_duplicate_pair": [f"no column {missing}"]}
    dupes = pairs[pairs.duplicated(columns, keep=False)]
    duplicate = []
    if len(dupes):
        first = dupes.iloc[0]
        where = ", ".join(f"{c[len(PAIR) :]} row {int(first[c])}" for c in columns)
        duplicate = [f"{len(dupes)} rows repeat a pair (first: {where})"]
    return {"pairs_within_bound": bound, "no_duplicate_pair": duplicate}


# ---- Dagster wrappers -----------------------------------------------------------------------


def fields_check_specs(qdef: QueryDefinition, asset: str) -> list[dg.AssetCheckSpec]:
    if qdef.base != asset:
        return []
    return [dg.AssetCheckSpec(FIELDS_CHECK, asset=qdef.key(asset), blocking=True)]


def fields_check(
    qdef: QueryDefinition, frame: pd.DataFrame, options: QueryOptions, gx: GXValidator
) -> dg.AssetCheckResult:
    """Every column an LLM template reads exists; nulls are refused unless the null policy
    handles them (skip or empty)."""
    columns = template_columns(qdef, frame)
    expectations = [Expect("ExpectColumnToExist", {"column": c}) for c in columns]
    live = frame[frame[SKIP].isna()] if SKIP in frame else frame
    if options.null_policy == "fail":
        expectations += [
            Expect("ExpectColumnValuesToNotBeNull", {"column": c})
            for c in columns
            if c in frame.columns
        ]
    nulls = {c: int(live[c].isna().sum()) for c in columns if c in live.columns}
    validation = gx.validate(f"{qdef.name}_fields", live, expectations)
    return dg.AssetCheckResult(
        check_name=FIELDS_CHECK,
        passed=validation.success,
        metadata={
            **validation.metadata(),
            "null_counts": str(nulls),
            "null_policy": options.null_policy,
        },
    )


def _result(problems: list[str], **metadata) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=not problems, metadata={"problems": "; ".join(problems) or "none", **metadata}
    )


def stage_checks(qdef: QueryDefinition, k: int, call: LLMCall) -> list:
    """Checks of one LLM stage: the plan is a permutation, one response per request, answers
    obey the output spec (a warning: violations are recorded, not coerced), and the parse
    rate is at least `min_parse_rate` (an error, not blocking)."""
    s = qdef.stage_suffix(k)
    partitions = qdef.partitions_def

    @dg.asset_check(
        asset=qdef.key(f"request_plan{s}"),
        name="plan_is_a_permutation",
        blocking=True,
        additional_ins={"deduped": dg.AssetIn(qdef.key(f"deduped{s}"))},
        partitions_def=partitions,
    )
    def plan_is_a_permutation(request_plan: pd.DataFrame, deduped: pd.DataFrame):
        """Every distinct input is planned exactly once, in positions 0..n-1."""
        return _result(plan_problems(request_plan, deduped))

    @dg.asset_check(
        asset=qdef.key(f"llm_outputs{s}"),
        name="one_response_per_request",
        blocking=True,
        additional_ins={"plan": dg.AssetIn(qdef.key(f"request_plan{s}"))},
        partitions_def=partitions,
    )
    def one_response_per_request(llm_outputs: pd.DataFrame, plan: pd.DataFrame):
        """Every planned request has exactly one answer or error row."""
        return _result(response_problems(llm_outputs, plan), requests=len(plan))

    @dg.asset_check(
        asset=qdef.key(f"llm_outputs{s}"),
        name="answers_obey_output_spec",
        blocking=False,
        partitions_def=partitions,
    )
    def answers_obey_output_spec(llm_outputs: pd.DataFrame, gx: GXValidator):
        """Answers are valid for the call's OutputSpec; violations are recorded, not coerced."""
        ok = llm_outputs[llm_outputs["error"].isna()]
        expectations = [Expect("ExpectColumnValuesToBeNull", {"column": "violation"})]
        # (with a run-time filter order the stage's call varies: `violation` is computed
        # against the call that ran, so it alone decides)
        if call.output.kind == "choice" and not qdef.reorders_filters:
            expectations.append(
                Expect(
                    "ExpectColumnValuesToBeInSet",
                    {"column": "answer", "value_set": list(call.output.values)},
                )
            )
        validation = gx.validate(f"{qdef.name}_spec{s}", ok, expectations)
        return dg.AssetCheckResult(
            passed=validation.success,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={**validation.metadata(), "output_spec": str(call.output)},
        )

    @dg.asset_check(
        asset=qdef.key(f"llm_outputs{s}"),
        name="parse_rate_at_least",
        blocking=False,
        partitions_def=partitions,
    )
    def parse_rate_at_least(llm_outputs: pd.DataFrame, options: QueryOptionsResource):
        """At least `min_parse_rate` of the stage's answers are in the output spec's allowed
        form (`quality.parse_rate`; a stage without answers passes). Not blocking: the
        answers stay recorded in `result`, the check is red."""
        minimum = options.apply(qdef.options).min_parse_rate
        problems = parse_rate_problems(llm_outputs, minimum)
        rate = parse_rate(llm_outputs)
        return _result(
            problems,
            parse_rate=None if rate is None else round(rate, 6),
            min_parse_rate=minimum,
            answers=answer_count(llm_outputs),
        )

    return [
        plan_is_a_permutation,
        one_response_per_request,
        answers_obey_output_spec,
        parse_rate_at_least,
    ]


def result_check(qdef: QueryDefinition):
    """`every_row_accounted_for`: answered + skipped + failed == rows in, result reconciles
    with its input, and an answered row has an answer from every LLM call it reached (in the
    order the calls ran: with a run-time filter order, it reads `llm_filter_order` too)."""
    ins = {"base": dg.AssetIn(qdef.key(qdef.base))}
    if qdef.reorders_filters:
        ins["filter_order"] = dg.AssetIn(qdef.key(ORDER))

    def accounted(result: pd.DataFrame, base: pd.DataFrame, filter_order=None):
        calls = qdef.run_order(filter_order)
        problems = accounting_problems(result, base, qdef.query, calls)
        return _result(problems, **accounting(result))

    decorate = dg.asset_check(
        asset=qdef.key("result"),
        name="every_row_accounted_for",
        blocking=True,
        additional_ins=ins,
        partitions_def=qdef.partitions_def,
    )
    if qdef.reorders_filters:

        @decorate
        def every_row_accounted_for(
            result: pd.DataFrame, base: pd.DataFrame, filter_order: pd.DataFrame
        ):
            """Every row answered, skipped or failed; an answered row has an answer from
            each LLM call it reached, in this run's order."""
            return accounted(result, base, filter_order)

    else:

        @decorate
        def every_row_accounted_for(result: pd.DataFrame, base: pd.DataFrame):
            """Every row answered, skipped or failed; an answered row has an answer from
            each LLM call it reached."""
            return accounted(result, base)

    return every_row_accounted_for
