"""Answer quality of a run (DESIGN section 10): the parse rate of each LLM stage, and accuracy
against a label column the user names. Pure functions; the `llm_outputs` asset (its metadata
and MLflow run), its `parse_rate_at_least` check and `llm-assets run`'s `quality` summary all
take their figures from here.

**Parse rate** (`parse_rate`): answers in the output spec's allowed form / answers. An answer
is an `llm_outputs` row without an `error` (a failed request is no answer); it is in form when
its `violation` (`OutputSpec.violation`) is null. Counted per distinct request, as
`llm_outputs` holds them (a deduplicated row shares its request's answer). None without
answers.

**Accuracy** (`label_accuracy`): the last LLM stage's answer of each row against the row's
label, over the rows that stage answered whose label is not null (`n_labelled`). Exact match
after stripping blanks; case-insensitive for `choice` outputs; `number` outputs compare as
numbers when both sides are one (`3` = `3.0`). With a 95% Wilson interval. For `text` outputs
also SQuAD's token F1 (`token_f1`). A label written as a JSON list (`["France", "france"]`)
lists acceptable answers: a row scores its best match; an empty list means "no answer" (the
SQuAD v2 convention: only an answer that normalises to nothing matches it).

The label reaches the rows by source row number (`with_labels`), as `_label`, never as an LLM
field: prompts read only the columns the query's templates name.

>>> outputs = pd.DataFrame({"error": [None, None, "HTTP 503"], "violation": [None, "bad", None]})
>>> parse_rate(outputs)
0.5
>>> token_f1("The Normans.", "Normans of France")  # P = 1/1, R = 1/3
0.5
"""

from __future__ import annotations

import json
import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from llm_assets.optimizer.table import column_names
from llm_assets.output_spec import OutputSpec
from llm_assets.pipeline.filtering import SOURCE_ROWS, source_row_column
from llm_assets.pipeline.results import answer_number
from llm_assets.pipeline.rows import INPUT
from llm_assets.query.model import LLMQuery

LABEL = "_label"
"""The column of `filtered` (and of every later table) holding each row's label as text."""
Z_95 = 1.959963984540054
"""The standard normal quantile of a two-sided 95% interval."""


# ---- parse rate ------------------------------------------------------------------------------


def parse_rate(*outputs: pd.DataFrame) -> float | None:
    """Answers in the output spec's allowed form / answers, over one or several `llm_outputs`
    frames (several: the overall rate of their stages). An answer is a row whose `error` is
    null; it is in form when its `violation` is null. None when there is no answer."""
    answers = in_form = 0
    for frame in outputs:
        answered = _answered(frame)
        answers += int(answered.sum())
        in_form += int((answered & frame["violation"].isna()).sum())
    return in_form / answers if answers else None


def _answered(outputs: pd.DataFrame) -> pd.Series:
    """The answers of an `llm_outputs` frame: its rows without an `error`."""
    return outputs["error"].isna()


def answer_count(outputs: pd.DataFrame) -> int:
    """How many answers an `llm_outputs` frame holds (rows without an `error`)."""
    return int(_answered(outputs).sum())


def parse_rate_problems(outputs: pd.DataFrame, min_parse_rate: float) -> list[str]:
    """Why a stage's parse rate fails the `parse_rate_at_least` check (empty: it passes; a
    stage without answers passes, having nothing to judge)."""
    rate = parse_rate(outputs)
    if rate is None or rate >= min_parse_rate:
        return []
    answers = answer_count(outputs)
    first = outputs["violation"].dropna()
    example = f" (first: {first.iloc[0]})" if len(first) else ""
    return [
        f"parse rate {rate:.4f} < min_parse_rate {min_parse_rate:g}: "
        f"{round((1 - rate) * answers)} of {answers} answers break the output spec{example}"
    ]


# ---- accuracy ----------------------------------------------------------------------------------


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float] | None:
    """The Wilson score interval of a proportion `successes / n` (95% by default), None for
    n = 0. Unlike the normal approximation it stays inside [0, 1] and is not empty at 0 or n.

    >>> [round(x, 4) for x in wilson_interval(8, 10)]
    [0.4902, 0.9433]
    """
    if n <= 0:
        return None
    p = successes / n
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator
    # at 0 and n an end is exactly 0 or 1 (centre -+ half, less rounding)
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    return low, 1.0 if successes == n else min(1.0, centre + half)


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, punctuation removed, articles (a, an, the) removed,
    blanks collapsed.

    >>> normalize_answer("  The Eiffel-Tower, in Paris! ")
    'eiffeltower in paris'
    """
    text = _ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION))
    return " ".join(text.split())


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD's token F1 of `prediction` against `gold` (both `normalize_answer`ed): the
    harmonic mean of the shared tokens' precision and recall; 1.0 when both are empty, 0.0
    when only one is."""
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not predicted or not expected:
        return float(predicted == expected)
    shared = sum((Counter(predicted) & Counter(expected)).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / len(predicted), shared / len(expected)
    return 2 * precision * recall / (precision + recall)


def acceptable_answers(label: object) -> list[str] | None:
    """The answers a label accepts, or None for no label (null). A JSON list (text or a list
    value) is its items; an empty one is `[""]` ("no answer", as SQuAD v2 scores it); any
    other value is itself, as text.

    >>> acceptable_answers('["France", "France"]'), acceptable_answers("[]")
    (['France', 'France'], [''])
    >>> acceptable_answers("7"), acceptable_answers(None)
    (['7'], None)
    """
    if label is None or (not isinstance(label, list | tuple | np.ndarray) and pd.isna(label)):
        return None
    if isinstance(label, str):
        text = label.strip()
        if not (text.startswith("[") and text.endswith("]")):
            return [label]
        try:
            label = json.loads(text)
        except ValueError:
            return [label]
        if not isinstance(label, list):
            return [text]
    if isinstance(label, list | tuple | np.ndarray):
        items = [item if isinstance(item, str) else json.dumps(item) for item in label]
        return items or [""]
    return [str(label)]


def answer_matches(answer: str, gold: str, spec: OutputSpec) -> bool:
    """Exact match after stripping blanks; case-insensitive for a `choice` output; a `number`
    output compares as numbers when both sides read as one."""
    answer, gold = answer.strip(), gold.strip()
    if spec.kind == "choice":
        return answer.casefold() == gold.casefold()
    if spec.kind == "number":
        a, g = answer_number(answer), answer_number(gold)
        if a is not None and g is not None:
            return a == g
    return answer == gold


# Not `mlflow.models.evaluate` (MLflow 3.17, tried on a static dataset): it logs to the fluent
# API's active run under a process-wide tracking URI, where each `llm_outputs` logs its one run
# through an `MlflowClient` under a lock (two steps share a process); its built-in exact match
# (sklearn's accuracy_score) is case-sensitive, takes one target per row and has no interval,
# so a custom metric would only wrap this function; its question-answering defaults download a
# tiktoken file (refused offline) or need `evaluate` and torch; and it took 2.6 s a call. The
# figures below are logged as the stage run's metrics instead.
def label_accuracy(answers: Iterable, labels: Iterable, spec: OutputSpec) -> dict:
    """Accuracy of `answers` against `labels` (row by row) under `spec`, over the rows with an
    answer (text; None or NaN: the row was not answered) and a label (`acceptable_answers`):
    `n_labelled` those rows, `accuracy` the share matching (`answer_matches`, the best of a
    label's acceptable answers) with its 95% Wilson interval `accuracy_ci95`, and for a `text`
    output the mean best `f1` (`token_f1`). Figures are None when no row counts."""
    scored = []
    for answer, label in zip(answers, labels, strict=True):
        golds = acceptable_answers(label)
        if isinstance(answer, str) and golds is not None:
            scored.append((answer, golds))
    n = len(scored)
    correct = sum(any(answer_matches(a, g, spec) for g in golds) for a, golds in scored)
    interval = wilson_interval(correct, n)
    out = {
        "n_labelled": n,
        "accuracy": correct / n if n else None,
        "accuracy_ci95": list(interval) if interval else None,
    }
    if spec.kind == "text":
        f1s = [max(token_f1(a, g) for g in golds) for a, golds in scored]
        out["f1"] = sum(f1s) / n if n else None
    return out


# ---- the label column --------------------------------------------------------------------------


def resolve_label(
    query: LLMQuery, columns: Mapping[str, Sequence[str]], label: str
) -> tuple[str, str]:
    """(source alias, column) of the label column `label`: a column of exactly one of the
    query's sources, or `alias.column`. `columns`: each table's columns. Anything else is a
    one-line ValueError naming the column and the tables' columns."""
    aliases = [(s.alias, s.table) for s in query.sources]
    alias, dot, name = label.partition(".")
    if dot and label not in {c for _, t in aliases for c in columns.get(t, ())}:
        table = dict(aliases).get(alias)
        if table is not None and name in columns.get(table, ()):
            return alias, name
    found = [a for a, t in aliases if label in columns.get(t, ())]
    if len(found) == 1:
        return found[0], label
    if found:
        written = " or ".join(f"{a}.{label}" for a in found)
        raise ValueError(
            f"label column {label!r} is in sources {', '.join(found)}: name one, as {written}"
        )
    tables = list(dict.fromkeys(t for _, t in aliases))
    listed = "; ".join(f"{t}: {', '.join(columns.get(t, ()))}" for t in tables)
    what = f"table {tables[0]!r}" if len(tables) == 1 else "any source table"
    raise ValueError(f"label column {label!r} is not a column of {what} (columns of {listed})")


def with_labels(
    query: LLMQuery,
    tables: Mapping[str, pa.Table | pd.DataFrame],
    base: pd.DataFrame,
    label: str,
) -> pd.DataFrame:
    """`base` (`filtered` with its source row numbers: `run_filtered(..., source_rows=True)`)
    with `LABEL`: each row's value of the label column, read from its source row
    (`source_row_column`), as text (a list or other non-text value as JSON text, null as
    None), and the source row numbers dropped again (a semantic join's pairs and a `SELECT *`
    keep theirs). A label column that is not there is `resolve_label`'s ValueError."""
    columns = {t: column_names(frame) for t, frame in tables.items()}
    alias, column = resolve_label(query, columns, label)
    source = tables[next(s.table for s in query.sources if s.alias == alias)]
    rows = base[source_row_column(query, alias)].to_numpy()
    if isinstance(source, pa.Table):
        values = pc.take(source.column(column), pa.array(rows, pa.int64())).to_pylist()
    else:
        values = source[column].to_numpy(dtype=object)[rows].tolist()
    numbers = [c for c in base.columns if c.startswith(SOURCE_ROWS)]
    out = base.drop(columns=[] if query.semantic_joins or query.star_aliases else numbers)
    out[LABEL] = pd.Series([_text(v) for v in values], index=base.index, dtype=object)
    return out


def _text(value: object) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value) if isinstance(value, list | dict) else str(value)


# ---- one stage, one run --------------------------------------------------------------------------


def stage_quality(
    deduped: pd.DataFrame, outputs: pd.DataFrame, spec: OutputSpec, labelled: bool
) -> dict:
    """One LLM stage's figures: `parse_rate` and, when `labelled` (the last stage of a query
    with a label column: `deduped` holds `LABEL`), `label_accuracy` of its answers per row."""
    out: dict = {"parse_rate": parse_rate(outputs)}
    if labelled and LABEL in deduped:
        rows = deduped[[INPUT, LABEL]].merge(outputs[[INPUT, "answer"]], on=INPUT, how="left")
        out |= label_accuracy(rows["answer"], rows[LABEL], spec)
    return out


def quality_metrics(quality: Mapping) -> dict[str, float]:
    """`stage_quality` as flat metrics for MLflow and Dagster metadata (the interval as
    `accuracy_ci95_low` / `_high`), figures that are None left out."""
    flat = {k: v for k, v in quality.items() if k != "accuracy_ci95"}
    if quality.get("accuracy_ci95"):
        flat["accuracy_ci95_low"], flat["accuracy_ci95_high"] = quality["accuracy_ci95"]
    return {k: v for k, v in flat.items() if v is not None}


SIM_NOTE = (
    "simulated engine: its answers are placeholders of the right shape, not a model's; "
    "parse_rate and accuracy here describe the placeholders"
)
