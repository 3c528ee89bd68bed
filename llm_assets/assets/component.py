"""`llm_assets.LLMQueryComponent`: an LLM query declared in a `defs.yaml`.

    dg scaffold defs llm_assets.LLMQueryComponent reviews_sentiment

writes `defs/reviews_sentiment/defs.yaml`:

    type: llm_assets.LLMQueryComponent
    attributes:
      sql: |
        SELECT r.id, LLM('Is this review positive? {review}', r.review) AS positive
        FROM reviews r
      sources:
        reviews: reviews.csv          # a file or glob, {asset: a/b}, {duckdb_table, database}
      options:                        # optional; every QueryOptions field
        method: ggr
        null_policy: skip

Relative paths (sources, landing folder) are relative to the folder holding `defs.yaml`. The
query's name (asset group and key prefix) is `name:` or that folder's name. The component is
a thin layer over `llm_query_assets` (same lineage, same checks, same MLflow runs).

Loading it (`dg check defs`, `dg dev`) checks the sources as `llm_query_assets` does
(`llm_assets.assets.validation`): a missing file or empty glob, an unknown column or a
predicate that cannot compare a column as written is one line starting with the YAML's path.
dg validates the YAML against the component's schema first and prints "All component YAML
validated successfully." when the keys are right: that line is dg's own, printed before the
definitions load, so a wrong value or a source problem fails after it (with our one line).

Customising the assets, as in dbt's and sling's components (`llm_assets.assets.translation`):
`translation:` takes Dagster's asset attributes, applied to every generated asset (templates
see `{{ stage }}`, the asset's name in the query, and `{{ spec }}`); dg's own
`post_processing:` targets assets by selection:

    type: llm_assets.LLMQueryComponent
    attributes:
      sql: ...
      sources: ...
      translation:
        owners: [team:data]
        tags: {tier: gold}                          # tags and metadata merge, the rest replace
        kinds: [llm]
        automation_condition: "{{ automation_condition.eager() }}"
    post_processing:
      assets:
        - target: "key:reviews_sentiment/answer"
          attributes: {description: "One row per positive review."}

Keys, deps, group, partitions and skippable are the lineage's: a translation that changes one
is refused in one line naming the asset and the attribute.

Subclassing, as `dagster-sling`'s component allows: `build_defs` is
`build_lineage(query_definition(folder))`, and each `llm_outputs` asset sends its stage
through `execute(context, stage)` (default `stage.send()`, the one stage runner); a subclass
overrides any of the three (e.g. `execute` to wrap the send, log or post-process the answers)
and names itself in `defs.yaml` (`type: my_project.components.MyQuery`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd
from dagster.components.scaffold.scaffold import ScaffoldRequest, scaffold_with
from pydantic import Field

from llm_assets.assets.definition import LandingSpec, QueryDefinition
from llm_assets.assets.factory import lineage
from llm_assets.assets.translation import ResolvedTranslation
from llm_assets.pipeline.options import QueryOptions
from llm_assets.pipeline.send import StageSend
from llm_assets.pipeline.sources import SourceSpec
from resources.runner import RunOutcome

YAML_NAMES = ("defs.yaml", "defs.yml", "component.yaml")
"""Where dg reads a component's YAML from, in its order."""

try:  # Dagster wraps what a component raises in a ComponentTreeException that prints the
    # component tree and its frames (~20 lines around ours), except one that already is one
    from dagster.components.core.component_tree import ComponentTreeException
except ImportError:  # pragma: no cover - another Dagster: its wrapper comes back, nothing else
    ComponentTreeException = Exception  # type: ignore[assignment,misc]


class DeclarationError(ValueError, ComponentTreeException):
    """A bad query declaration, in one line naming the component's YAML; `dg check defs`
    prints it as it is (a ComponentTreeException is not wrapped again)."""


class LLMQueryScaffolder(dg.Scaffolder):
    """Writes a defs.yaml with an example query over a CSV beside it."""

    def scaffold(self, request: ScaffoldRequest) -> None:
        dg.scaffold_component(
            request,
            {
                "sql": "SELECT r.id, LLM('Is this review positive? {review}', r.review) "
                "AS positive FROM reviews r",
                "sources": {"reviews": "reviews.csv"},
                "options": {"method": "ggr", "null_policy": "skip"},
            },
        )


@scaffold_with(LLMQueryScaffolder)
class LLMQueryComponent(dg.Component, dg.Model, dg.Resolvable):
    """An LLM-SQL query over your tables as a lineage of assets: filtered -> deduped ->
    request_plan -> llm_outputs -> result -> answer, with checks and an MLflow run per LLM
    stage (see llm_assets.assets.factory). `translation:` sets Dagster asset attributes
    (owners, tags, kinds, automation_condition, ...) on every generated asset, as dbt's and
    sling's components do; dg's `post_processing:` targets some (see this module's docstring)."""

    sql: str = Field(description="One LLM-SQL SELECT: LLM('template {col}', t.col) calls.")
    sources: dict[str, str | SourceSpec] = Field(
        description="Table name in the SQL -> a file path or glob (CSV, TSV, Parquet, JSON "
        "lines), {asset: key/path}, or {duckdb_table: schema.table, database: file.duckdb}."
    )
    name: str | None = Field(
        None, description="Asset group and key prefix (default: the defs folder's name)."
    )
    options: QueryOptions = Field(
        default_factory=QueryOptions, description="Optimisation and run options."
    )
    engine_key: str = Field("llm_engine", description="Resource key of the LLM engine.")
    landing: LandingSpec | None = Field(
        None, description="A folder whose files each become a partition and a run."
    )
    description: str | None = Field(None, description="Shown on the query's assets.")
    label: str | None = Field(
        None,
        description="A source column holding each row's expected answer (alias.column where "
        "several sources have it): the last LLM stage reports accuracy against it; it is "
        "never sent to the model.",
    )
    translation: ResolvedTranslation | None = Field(
        None,
        description="Dagster asset attributes set on every generated asset (tags, owners, "
        "kinds, automation_condition, description, metadata, code_version, freshness_policy); "
        "templates see {{ stage }} (answer, llm_outputs, ...) and {{ spec }}.",
    )

    def query_definition(self, folder: Path) -> QueryDefinition:
        """The declared query, its relative paths resolved against the component's folder."""

        def local(path: str) -> str:
            return path if Path(path).is_absolute() else str(folder / path)

        sources: dict[str, Any] = {}
        for table, spec in self.sources.items():
            spec = SourceSpec.parse(spec)
            if spec.path:
                spec = spec.model_copy(update={"path": local(spec.path)})
            if spec.database:
                spec = spec.model_copy(update={"database": local(spec.database)})
            sources[table] = spec
        landing = self.landing
        if landing is not None:
            landing = landing.model_copy(update={"folder": local(landing.folder)})
        return QueryDefinition(
            name=self.name or folder.name,
            sql=self.sql,
            sources=sources,
            options=self.options,
            engine_key=self.engine_key,
            landing=landing,
            description=self.description,
            label_column=self.label,
        )

    def build_lineage(self, qdef: QueryDefinition) -> dg.Definitions:
        """The query's assets, checks and sensor, with `translation` applied and every LLM
        stage sent through `execute`."""
        return lineage(qdef, self.translation, self.execute)

    def execute(
        self, context: dg.AssetExecutionContext, stage: StageSend
    ) -> tuple[pd.DataFrame, RunOutcome]:
        """Send one LLM stage (in its `llm_outputs` asset) and return (outputs, outcome).
        Override to wrap it, as `dagster-sling`'s component lets a subclass override
        `execute`: the default is `stage.send()` (the one stage runner, `send_stage`); an
        override must return one output row per planned request."""
        return stage.send()

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """`build_lineage(query_definition(folder))`; a bad declaration is one ValueError line
        naming the component's YAML file."""
        folder = Path(context.path)
        try:
            return self.build_lineage(self.query_definition(folder))
        except ValueError as exc:
            # one line naming the file; the chained traceback would only repeat it
            where = next((folder / n for n in YAML_NAMES if (folder / n).exists()), folder)
            raise DeclarationError(f"{where}: {exc}") from None
