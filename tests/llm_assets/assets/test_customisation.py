"""Customising the generated assets as Dagster's own components allow (issue 21 item 12): a
component's `translation:` (Dagster's asset attributes, templated per asset) and dg's
`post_processing:` in `defs.yaml`, `translation=` on `llm_query_assets`; keys, deps, group and
partitions stay the lineage's, so a translation changing one is refused in one line."""

import uuid
from pathlib import Path

import dagster as dg
import pydantic
import pytest
import yaml

from jobs.resources import resources_for
from llm_assets import llm_query_assets

SQL = (
    "SELECT r.id, LLM('Is this review positive? {review}', r.review, "
    "output => 'choice(positive,negative)') AS sentiment FROM reviews r"
)
EAGER = dg.AutomationCondition.eager()
TRANSLATION = {
    "owners": ["team:data"],
    "tags": {"tier": "gold"},
    "kinds": ["llm"],
    "automation_condition": "{{ automation_condition.eager() }}",
}


@pytest.fixture
def reviews(tmp_path) -> Path:
    path = tmp_path / "reviews.csv"
    path.write_text("id,review\n1,Great film\n2,Dull\n3,Great film\n")
    return path


def load(
    tmp_path,
    monkeypatch,
    reviews: Path,
    attributes: dict,
    component: str = "llm_assets.LLMQueryComponent",
    module: str = "",
    **top,
) -> dg.Definitions:
    """The component folder `my_reviews/` (its `defs.yaml` and the CSV) loaded as
    `dg check defs` loads it, in process. `module`: the source of the project's
    `components.py` (a subclass `component` may name as `{package}.components.Name`)."""
    package = f"proj_{uuid.uuid4().hex[:8]}"
    component = component.format(package=package)
    project = tmp_path / "proj"
    folder = project / "src" / package / "defs" / "my_reviews"
    folder.mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        f'[project]\nname = "{package}"\nversion = "0.1.0"\n\n[tool.dg]\n'
        f'directory_type = "project"\n\n[tool.dg.project]\nroot_module = "{package}"\n'
    )
    for init in (project / "src" / package, folder.parent):
        (init / "__init__.py").write_text("")
    (project / "src" / package / "components.py").write_text(module)
    (folder / "reviews.csv").write_bytes(reviews.read_bytes())
    body = {"sql": SQL, "sources": {"reviews": "reviews.csv"}, **attributes}
    document = {"type": component, "attributes": body, **top}
    (folder / "defs.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    monkeypatch.syspath_prepend(str(project / "src"))
    return dg.load_from_defs_folder(path_within_project=folder.parent)


def all_specs(defs: dg.Definitions) -> list[dg.AssetSpec]:
    return [s for a in defs.assets or () for s in a.specs]


def specs(defs: dg.Definitions) -> dict[str, dg.AssetSpec]:
    return {s.key.to_user_string(): s for s in all_specs(defs)}


def assert_lineage_intact(defs: dg.Definitions, query: str) -> None:
    """Keys and group are the query's, and every check targets one of its assets."""
    dg.Definitions.validate_loadable(
        dg.Definitions.merge(defs, dg.Definitions(resources=resources_for("sim")))
    )
    keys = {s.key for s in all_specs(defs)}
    assert all(k.path[0] == query for k in keys)
    assert {s.group_name for s in all_specs(defs)} == {query}
    targets = {c.asset_key for checks in defs.asset_checks for c in checks.check_specs}
    targets |= {
        c.asset_key
        for a in defs.assets
        if isinstance(a, dg.AssetsDefinition)
        for c in a.check_specs
    }
    assert targets and targets <= keys


def assert_customised(spec: dg.AssetSpec) -> None:
    assert spec.owners == ["team:data"], spec.key
    assert spec.tags.get("tier") == "gold", spec.key
    assert "llm" in spec.kinds, spec.key
    assert spec.automation_condition == EAGER, spec.key


# ---- defs.yaml --------------------------------------------------------------------------


def test_yaml_translation_sets_owner_eager_condition_tags_and_kinds_on_every_asset(
    tmp_path, monkeypatch, reviews
):
    translation = {**TRANSLATION, "description": "{{ stage }} of my_reviews"}
    defs = load(tmp_path, monkeypatch, reviews, {"translation": translation})
    by_key = specs(defs)
    assert set(by_key) >= {
        "my_reviews/source_reviews",
        "my_reviews/filtered",
        "my_reviews/deduped",
        "my_reviews/request_plan",
        "my_reviews/llm_outputs",
        "my_reviews/result",
        "my_reviews/answer",
    }
    for key, spec in by_key.items():
        assert_customised(spec)
        # templates are resolved per asset, with {{ stage }} its name in the query
        assert spec.description == f"{key.split('/')[-1]} of my_reviews"
    assert_lineage_intact(defs, "my_reviews")


def test_dg_post_processing_targets_one_asset_of_the_query(tmp_path, monkeypatch, reviews):
    post = {
        "assets": [
            {
                "target": "key:my_reviews/answer",
                "attributes": {
                    "owners": ["team:data"],
                    "automation_condition": "{{ automation_condition.eager() }}",
                },
            }
        ]
    }
    defs = load(tmp_path, monkeypatch, reviews, {}, post_processing=post)
    by_key = specs(defs)
    assert by_key["my_reviews/answer"].owners == ["team:data"]
    assert by_key["my_reviews/answer"].automation_condition == EAGER
    others = [s for k, s in by_key.items() if k != "my_reviews/answer"]
    assert others and all(not s.owners and s.automation_condition is None for s in others)
    assert_lineage_intact(defs, "my_reviews")


@pytest.mark.parametrize(
    ("attributes", "refused"),
    [
        ({"key": "elsewhere/answer"}, "key"),
        ({"key_prefix": "team"}, "key"),
        ({"group_name": "other"}, "group_name"),
    ],
)
def test_yaml_translation_cannot_move_an_asset(tmp_path, monkeypatch, reviews, attributes, refused):
    with pytest.raises(Exception) as raised:
        load(tmp_path, monkeypatch, reviews, {"translation": attributes})
    error = raised.value
    while not isinstance(error, ValueError) and error.__cause__ is not None:
        error = error.__cause__
    message = str(error)
    assert "\n" not in message.strip(), message
    assert "my_reviews/defs.yaml: query 'my_reviews': translation cannot change" in message
    assert f"cannot change {refused} of my_reviews/" in message
    assert "automation_condition" in message  # says what it may set


def test_an_unknown_yaml_attribute_is_dgs_schema_error(tmp_path, monkeypatch, reviews):
    with pytest.raises(Exception) as raised:
        load(tmp_path, monkeypatch, reviews, {"translation": {"ownerz": ["team:data"]}})
    error = raised.value
    while not isinstance(error, pydantic.ValidationError) and error.__cause__ is not None:
        error = error.__cause__
    message = str(error)  # dg's own, with the file and line
    assert "attributes.translation.AssetSpecUpdateKwargsModel.ownerz at " in message, message
    assert "my_reviews/defs.yaml:" in message and "Extra inputs are not permitted" in message


# ---- Python ---------------------------------------------------------------------------------


def test_factory_attributes_mapping_and_translator_function(reviews, tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    attributes = {**TRANSLATION, "automation_condition": EAGER}
    defs = llm_query_assets("q", SQL, sources={"reviews": str(reviews)}, translation=attributes)
    for spec in all_specs(defs):
        assert_customised(spec)
        assert spec.kinds == {"llm"}  # kinds replace, as in Dagster's translators
    assert_lineage_intact(defs, "q")

    def translator(spec: dg.AssetSpec, stage: str) -> dg.AssetSpec:
        if stage != "answer":
            return spec
        return spec.replace_attributes(owners=["team:data"], automation_condition=EAGER)

    defs = llm_query_assets("q", SQL, sources={"reviews": str(reviews)}, translation=translator)
    by_key = specs(defs)
    assert by_key["q/answer"].owners == ["team:data"]
    assert by_key["q/answer"].automation_condition == EAGER
    assert by_key["q/result"].automation_condition is None
    # the customised lineage still runs, every check on its asset
    result = dg.materialize(
        list(defs.assets) + list(defs.asset_checks), resources=resources_for("sim")
    )
    assert result.success
    evaluated = {e.asset_key.path[-1] for e in result.get_asset_check_evaluations()}
    assert evaluated >= {"filtered", "request_plan", "llm_outputs", "result"}, evaluated


def test_the_query_description_heads_each_assets(reviews):
    defs = llm_query_assets(
        "q", SQL, sources={"reviews": str(reviews)}, description="Sentiment of reviews."
    )
    for spec in all_specs(defs):
        assert spec.description.startswith("Sentiment of reviews."), spec.key
    assert specs(defs)["q/answer"].description.endswith("passed, or the aggregate.")


@pytest.mark.parametrize(
    ("translation", "refused"),
    [
        ({"key": dg.AssetKey(["x", "answer"])}, "cannot set key"),
        ({"partitions_def": dg.StaticPartitionsDefinition(["a"])}, "cannot set partitions_def"),
        (lambda spec, stage: spec.replace_attributes(deps=[]), "cannot change deps of q/"),
        (lambda spec, stage: spec.replace_attributes(skippable=True), "cannot change skippable"),
        (lambda spec, stage: None, "returned NoneType for q/"),
        ("owners", "must be a function"),
    ],
)
def test_factory_translation_cannot_move_an_asset(reviews, translation, refused):
    with pytest.raises(ValueError) as raised:
        llm_query_assets("q", SQL, sources={"reviews": str(reviews)}, translation=translation)
    message = str(raised.value)
    assert "\n" not in message and message.startswith("query 'q': "), message
    assert refused in message, message


SUBCLASS = """
import llm_assets


class Shouting(llm_assets.LLMQueryComponent):
    \"\"\"Sends each stage as the base class does, then upper-cases its answers.\"\"\"

    def execute(self, context, stage):
        context.log.info(f"shouting {stage.relquery}: {len(stage.plan)} requests")
        outputs, outcome = super().execute(context, stage)
        return outputs.assign(answer=outputs["answer"].str.upper()), outcome
"""


def test_a_subclass_overrides_execute_as_dagster_sling_allows(tmp_path, monkeypatch, reviews):
    """`execute` is the seam a subclass overrides (issue 23 item 6): the lineage, its checks
    and the MLflow run are the base class's; every LLM stage goes through the override."""
    component = "{package}.components.Shouting"
    defs = load(tmp_path, monkeypatch, reviews, {}, component=component, module=SUBCLASS)
    assert_lineage_intact(defs, "my_reviews")
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    result = dg.materialize(
        [a for a in defs.assets if isinstance(a, dg.AssetsDefinition)],
        resources=resources_for("sim"),
        selection=None,
    )
    assert result.success
    outputs = result.output_for_node("my_reviews__llm_outputs")
    assert len(outputs) == 2 and (outputs["answer"] == outputs["answer"].str.upper()).all()
    assert outputs["answer"].str.len().gt(0).all()
