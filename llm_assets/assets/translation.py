"""Customising a query's generated assets: tags, owners, kinds, automation conditions,
descriptions, metadata, code versions and freshness policies, as Dagster's own components
do it (`dagster-dbt`'s and `dagster-sling`'s `translation`).

A translation is Dagster's `TranslationFn`: `(AssetSpec, stage) -> AssetSpec`, called once per
generated asset with its spec and its name within the query (`source_<table>`, `filtered`,
`retrieved`, `llm_filter_order`, `deduped`, `request_plan`, `llm_outputs`, `result`,
`answer`; later LLM stages end in `_2`, `_3`, ...).

- YAML (`LLMQueryComponent.translation`): Dagster's asset-attributes model, resolved per asset
  by `dagster.components.utils.translation.TranslationFnResolver` with `{{ spec }}` and
  `{{ stage }}` in scope, so `automation_condition: "{{ automation_condition.eager() }}"` and
  `description: "{{ stage }}: ..."` work as in a dbt component; `tags` and `metadata` merge
  into the built ones, every other attribute replaces (Dagster's `TRANSLATOR_MERGE_ATTRIBUTES`).
- Python (`llm_query_assets(..., translation=...)`): that function, or a mapping of the same
  attributes as Python values (`{"owners": ["team:data"], "automation_condition":
  dg.AutomationCondition.eager()}`), applied with the same merge rule.

The key, deps, group, partitions and `skippable` of a generated asset are the lineage's: its
checks, `ins`, jobs (`<query>_job` selects the group) and landing sensor are built on them, so
a translation that changes one is refused in one line naming the asset and the attribute.
dg's own `post_processing:` (any component's `defs.yaml`) is applied by dg after the component
builds, outside this check: keep it to the same attributes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeAlias

import dagster as dg
from dagster.components.utils.translation import TranslationFn, TranslationFnResolver

from llm_assets.assets.definition import QueryDefinition

ALLOWED = (
    "description",
    "metadata",
    "tags",
    "owners",
    "kinds",
    "automation_condition",
    "code_version",
    "freshness_policy",
)
"""What a translation may set on a generated asset."""

MERGED = ("tags", "metadata")
"""Merged into the built values (as Dagster's translators do); the rest replace them."""

Translation: TypeAlias = TranslationFn[str]
"""`(spec, stage) -> spec`: Dagster's `TranslationFn` with the asset's stage name as data."""

ResolvedTranslation: TypeAlias = Annotated[
    Translation, TranslationFnResolver[str](lambda stage: {"stage": stage})
]
"""The YAML form: Dagster's asset attributes (or one template string), `{{ stage }}` and
`{{ spec }}` in scope."""


def _refused(qdef: QueryDefinition, key: dg.AssetKey, attribute: str) -> ValueError:
    return ValueError(
        f"query {qdef.name!r}: translation cannot change {attribute} of "
        f"{key.to_user_string()} (keys, deps, group, partitions and skippable tie the lineage's "
        f"checks, jobs and landing sensor together); it may set {', '.join(ALLOWED)}"
    )


def from_attributes(qdef: QueryDefinition, attributes: Mapping[str, Any]) -> Translation:
    """A translation setting the same `attributes` (Python values) on every asset."""
    unknown = sorted(set(attributes) - set(ALLOWED))
    if unknown:
        raise ValueError(
            f"query {qdef.name!r}: translation cannot set {', '.join(unknown)}; it may set "
            f"{', '.join(ALLOWED)}"
        )
    merged = {k: v for k, v in attributes.items() if k in MERGED}
    replaced = {k: v for k, v in attributes.items() if k not in MERGED}

    def translate(spec: dg.AssetSpec, stage: str) -> dg.AssetSpec:
        return spec.replace_attributes(**replaced).merge_attributes(**merged)

    return translate


def stage_of(qdef: QueryDefinition, key: dg.AssetKey) -> str:
    """The asset's name within query `qdef` (`answer`, `llm_outputs_2`, `source_reviews`)."""
    return key.path[-1]


def translate_assets(
    qdef: QueryDefinition,
    assets: list,
    translation: Translation | Mapping[str, Any] | None,
) -> list:
    """`assets` with the query's description heading each one's, then every spec passed
    through `translation` (AssetsDefinition.map_asset_specs,
    as `Definitions.map_asset_specs` and dg's post-processing do), after checking that it
    changed only what `ALLOWED` names."""
    if qdef.description:  # the query's own description heads each of its assets'
        assets = dg.map_asset_specs(
            lambda spec: spec.replace_attributes(
                description="\n\n".join(d for d in (qdef.description, spec.description) if d)
            ),
            assets,
        )
    if translation is None:
        return assets
    if isinstance(translation, Mapping):
        translation = from_attributes(qdef, translation)
    elif not callable(translation):
        raise ValueError(
            f"query {qdef.name!r}: translation must be a function (spec, stage) -> spec or a "
            f"mapping of asset attributes, not {type(translation).__name__}"
        )

    def translate(spec: dg.AssetSpec) -> dg.AssetSpec:
        new = translation(spec, stage_of(qdef, spec.key))
        if not isinstance(new, dg.AssetSpec):
            raise ValueError(
                f"query {qdef.name!r}: translation returned {type(new).__name__} for "
                f"{spec.key.to_user_string()}, not an AssetSpec"
            )
        before, after = spec._asdict(), new._asdict()
        for attribute in before:
            if attribute not in ALLOWED and before[attribute] != after[attribute]:
                raise _refused(qdef, spec.key, attribute)
        return new

    return dg.map_asset_specs(translate, assets)


TranslationArg: TypeAlias = Callable[[dg.AssetSpec, str], dg.AssetSpec] | Mapping[str, Any] | None
"""What `llm_query_assets(translation=...)` takes."""
