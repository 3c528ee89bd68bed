"""Quality where users look, in Dagster: each LLM stage's `parse_rate_at_least` check fails
when the stage's answers break its output spec (and passes when they do not), and a label
column gives the last stage's `llm_outputs` an accuracy in its metadata and its MLflow run,
without the label ever reaching a prompt."""

import dataclasses

import dagster as dg
import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from jobs.resources import resources_for
from llm_assets import llm_query_assets
from llm_assets.assets.options import QueryOptionsResource
from llm_assets.pipeline.quality import SIM_NOTE
from resources.engine import RunResult
from resources.llm_resources import LLMEngineResource
from resources.tracking import default_tracking_uri
from tests.llm_assets.answering import AnsweringEngine
from tests.llm_assets.assets.test_sources_at_load import load_component, load_error

SQL = (
    "SELECT r.id, LLM('Is this review positive? {review}', r.review, "
    "output => 'choice(yes,no)') AS verdict FROM reviews r"
)
SECRET = "zz-label-only-9137"
# id, review, gold (the expected verdict; a JSON list: any of them)
ROWS = [
    ("1", "good plot", "yes"),
    ("2", "dull plot", "no"),
    ("3", "good cast", "YES"),  # a choice label matches whatever its case
    ("4", "dull cast", ""),  # an empty cell: no label, not counted
    ("5", "good score", '["no", "yes"]'),
    ("6", "dull score", SECRET),  # a wrong label, and a marker no prompt may hold
]


SENT: list[str] = []
"""Every prompt an `Answering` engine was sent (in process: Dagster's runs here are)."""


@pytest.fixture
def reviews(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    SENT.clear()
    path = tmp_path / "reviews.csv"
    pd.DataFrame(ROWS, columns=["id", "review", "gold"]).to_csv(path, index=False)
    return path


class Answering(AnsweringEngine):
    """`yes` for a good review, else `no`, or `maybe` (off the spec) for the reviews naming
    `off_spec`; records every prompt in `SENT`; its run statistics carry the engine name
    `answering` (not `sim`) when `real`."""

    def __init__(self, off_spec: tuple[str, ...] = (), real: bool = False):
        super().__init__(self.verdict)
        self.off_spec, self.real = off_spec, real

    def verdict(self, request) -> str:
        SENT.append(request.prompt)
        if any(word in request.prompt for word in self.off_spec):
            return "maybe"
        return "yes" if "good" in request.prompt else "no"

    def run(self, relquery_id, requests):
        result = super().run(relquery_id, requests)
        if not self.real:
            return result
        return RunResult(result.responses, dataclasses.replace(result.stats, engine="answering"))


class AnsweringResource(LLMEngineResource):
    off_spec: list[str] = []
    real: bool = False

    def build_engine(self):
        return Answering(tuple(self.off_spec), self.real)


def materialize(path, engine: LLMEngineResource | None = None, **options):
    defs = llm_query_assets("q", SQL, sources={"reviews": str(path)}, **options)
    resources = {**resources_for("sim"), **({"llm_engine": engine} if engine else {})}
    result = dg.materialize(list(defs.assets) + list(defs.asset_checks), resources=resources)
    assert result.success  # the check is not blocking: result is there either way
    assert len(result.asset_value(dg.AssetKey(["q", "result"]))) == len(ROWS)
    (check,) = [
        c for c in result.get_asset_check_evaluations() if c.check_name == "parse_rate_at_least"
    ]
    (meta,) = [
        {k: v.value for k, v in e.materialization.metadata.items()}
        for e in result.get_asset_materialization_events()
        if e.materialization.asset_key.path[-1] == "llm_outputs"
    ]
    return check, meta


def test_parse_rate_check_fails_when_answers_break_the_spec(reviews):
    # 2 of 6 answers are `maybe`: parse rate 4/6 < the default 0.9
    check, meta = materialize(reviews, AnsweringResource(off_spec=["plot"]))
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert check.metadata["parse_rate"].value == pytest.approx(4 / 6, abs=1e-6)
    assert check.metadata["min_parse_rate"].value == 0.9
    problems = check.metadata["problems"].text
    assert "< min_parse_rate 0.9" in problems and "2 of 6 answers" in problems
    assert "'maybe'" in problems
    assert meta["parse_rate"] == pytest.approx(4 / 6, abs=1e-6) and meta["spec_violations"] == 2
    # the query's own threshold decides
    check, _ = materialize(reviews, AnsweringResource(off_spec=["plot"]), min_parse_rate=0.6)
    assert check.passed


def test_parse_rate_check_passes_on_answers_in_the_spec(reviews):
    check, meta = materialize(reviews)  # the simulated engine answers yes or no
    assert check.passed and check.metadata["parse_rate"].value == 1.0
    assert meta["parse_rate"] == 1.0 and meta["quality_note"] == SIM_NOTE
    (run,) = MlflowClient(default_tracking_uri()).search_runs(
        [e.experiment_id for e in MlflowClient(default_tracking_uri()).search_experiments()]
    )
    assert run.data.metrics["parse_rate"] == 1.0 and run.data.tags["quality_note"] == SIM_NOTE
    assert "accuracy" not in meta and "label_column" not in meta  # no label, no accuracy


def test_the_check_reads_the_runs_min_parse_rate():
    defs = llm_query_assets("q", SQL, sources={"reviews": {"asset": "raw/reviews"}})
    (check,) = [
        c for c in defs.asset_checks for k in c.check_keys if k.name == "parse_rate_at_least"
    ]
    outputs = pd.DataFrame({"error": [None, None, "HTTP 503"], "violation": [None, "bad", None]})
    assert not check(llm_outputs=outputs, options=QueryOptionsResource()).passed  # 0.5 < 0.9
    assert check(llm_outputs=outputs, options=QueryOptionsResource(min_parse_rate=0.5)).passed
    failed = outputs.assign(error="HTTP 503")  # no answer: nothing to judge
    assert check(llm_outputs=failed, options=QueryOptionsResource()).passed


def test_a_label_column_gives_accuracy_in_metadata_and_mlflow_and_never_reaches_a_prompt(
    reviews,
):
    engine = AnsweringResource(real=True)
    _, meta = materialize(reviews, engine, label_column="gold")
    # answers: yes no yes no yes no; labels: yes no YES (none) [no, yes] SECRET
    assert meta["n_labelled"] == 5 and meta["accuracy"] == pytest.approx(4 / 5)
    assert 0 < meta["accuracy_ci95_low"] < 0.8 < meta["accuracy_ci95_high"] <= 1
    assert meta["label_column"] == "gold" and "quality_note" not in meta
    client = MlflowClient(default_tracking_uri())
    ids = [e.experiment_id for e in client.search_experiments()]
    (run,) = client.search_runs(ids)
    assert run.data.metrics["accuracy"] == pytest.approx(4 / 5)
    assert run.data.metrics["n_labelled"] == 5 and run.data.metrics["parse_rate"] == 1.0
    assert "quality_note" not in run.data.tags


def test_the_label_is_never_sent(reviews):
    defs = llm_query_assets("q", SQL, sources={"reviews": str(reviews)}, label_column="gold")
    resources = {**resources_for("sim"), "llm_engine": AnsweringResource()}
    assert dg.materialize(list(defs.assets), resources=resources).success
    assert len(SENT) == len(ROWS)
    assert not [p for p in SENT if SECRET in p or "gold" in p]


def test_a_label_column_that_is_not_there_is_refused_in_one_line(reviews, tmp_path, monkeypatch):
    with pytest.raises(ValueError) as error:
        llm_query_assets("q", SQL, sources={"reviews": str(reviews)}, label_column="answer")
    message = str(error.value)
    assert "\n" not in message and "'answer'" in message and "id, review, gold" in message
    # the component's YAML, loaded as `dg check defs` loads it
    attributes = {"sql": SQL, "sources": {"reviews": "reviews.csv"}}
    files = {"reviews.csv": reviews}

    def component(label: str) -> str:
        return yaml.safe_dump(
            {"type": "llm_assets.LLMQueryComponent", "attributes": {**attributes, "label": label}}
        )

    message = load_error(tmp_path / "bad", monkeypatch, component("answer"), files)
    assert "\n" not in message and message.startswith(str(tmp_path / "bad"))
    assert "defs.yaml: query 'my_reviews': label column 'answer' is not a column" in message
    assert "id, review, gold" in message
    defs, _ = load_component(tmp_path / "good", monkeypatch, component("gold"), files)
    assert any(dg.AssetKey(["my_reviews", "llm_outputs"]) in a.keys for a in defs.assets)


def test_an_upstream_assets_missing_label_column_fails_filtered_before_any_request(reviews):
    @dg.asset(key=["raw", "reviews"])
    def raw_reviews():
        return pd.DataFrame(ROWS, columns=["id", "review", "gold"])

    defs = llm_query_assets(
        "q", SQL, sources={"reviews": {"asset": "raw/reviews"}}, label_column="answer"
    )
    resources = {**resources_for("sim"), "llm_engine": AnsweringResource()}
    result = dg.materialize([raw_reviews, *defs.assets], resources=resources, raise_on_error=False)
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert failure.step_key == "q__filtered"
    assert "label column 'answer' is not a column of table 'reviews'" in str(
        failure.event_specific_data.error
    )
    assert SENT == []


def test_only_the_last_stage_is_compared_with_the_label(reviews):
    sql = (
        "SELECT r.id, LLM('Is this review positive? {review}', r.review, "
        "output => 'choice(yes,no)') AS verdict FROM reviews r "
        "WHERE LLM('Is {review} in English?', r.review) = 'Yes'"
    )
    defs = llm_query_assets("q", sql, sources={"reviews": str(reviews)}, label_column="gold")
    result = dg.materialize(list(defs.assets), resources=resources_for("sim"))
    metas = {
        e.materialization.asset_key.path[-1]: e.materialization.metadata
        for e in result.get_asset_materialization_events()
    }
    assert "accuracy" not in metas["llm_outputs"] and "n_labelled" not in metas["llm_outputs"]
    assert metas["llm_outputs_2"]["label_column"].value == "gold"
    assert metas["llm_outputs_2"]["n_labelled"].value <= 5
