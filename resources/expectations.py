"""Great Expectations 1.x behind a thin Dagster resource (dagster-ge supports only GX < 1).

`GXValidator.validate(name, frame, expectations)` runs a suite on a pandas DataFrame in an
ephemeral GX context and returns a `Validation`: overall success and, per failed
expectation, a one-line reason naming the column and a few offending values. The context is
created once per run (in `setup_for_execution`, lazily imported: GX takes seconds to import).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import pandas as pd
from pydantic import PrivateAttr

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")


@dataclass(frozen=True)
class Expect:
    """One expectation: a GX 1.x expectation class name (e.g. `ExpectColumnToExist`) and
    its keyword arguments."""

    kind: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f"{self.kind}({args})"


@dataclass(frozen=True)
class Validation:
    success: bool
    evaluated: int
    failures: list[str]

    def metadata(self) -> dict[str, Any]:
        return {
            "expectations": self.evaluated,
            "failed": len(self.failures),
            "failures": "\n".join(self.failures) or "none",
        }


class GXValidator(dg.ConfigurableResource):
    """Validates DataFrames with Great Expectations (ephemeral context)."""

    max_examples: int = 3
    """How many offending values each failure message quotes."""

    _context: Any = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._context = None  # created on first use

    def _gx(self):
        if self._context is None:
            import great_expectations as gx
            from great_expectations.data_context.types.base import ProgressBarsConfig

            self._context = gx.get_context(mode="ephemeral")
            self._context.variables.progress_bars = ProgressBarsConfig(globally=False)
            self._context.data_sources.add_pandas("frames")
        return self._context

    def validate(self, name: str, frame: pd.DataFrame, expectations: list[Expect]) -> Validation:
        import great_expectations as gx
        import great_expectations.expectations as gxe

        context = self._gx()
        source = context.data_sources.get("frames")
        asset_name = f"{name}_{len(source.assets)}"
        batch_def = source.add_dataframe_asset(asset_name).add_batch_definition_whole_dataframe(
            "whole"
        )
        batch = batch_def.get_batch(batch_parameters={"dataframe": frame})
        suite = gx.ExpectationSuite(name=asset_name)
        for expect in expectations:
            suite.add_expectation(getattr(gxe, expect.kind)(**expect.kwargs))
        result = batch.validate(suite)
        failures = []
        for expect, outcome in zip(expectations, result.results, strict=True):
            if outcome.success:
                continue
            examples = (outcome.result or {}).get("partial_unexpected_list") or []
            count = (outcome.result or {}).get("unexpected_count")
            detail = f": {count} unexpected, e.g. {examples[: self.max_examples]}" if count else ""
            failures.append(f"{expect.describe()} failed{detail}")
        return Validation(bool(result.success), len(expectations), failures)
