"""`dg check defs` shows a bad declaration as the project's one line, not wrapped in Dagster's
component tree (issue 35, item 3: ~34 lines of tree and stack frames around it). Dagster
re-raises a `ComponentTreeException` from a component as it is, so the component raises its
one line as `DeclarationError` (also a ValueError); what is left around it is Dagster's
header and the two user frames (the code location's `definitions.py`, the component)."""

import os
import sys
from pathlib import Path

import pytest
from dagster._utils.error import serializable_error_info_from_exc_info, unwrap_user_code_error
from dagster_shared.error import remove_system_frames_from_error

from tests.llm_assets.assets.test_sources_at_load import (
    FIX,
    RATINGS,
    SQL,
    component_yaml,
    load_component,
    write_reviews,
)
from tests.llm_assets.assets.test_user_query import DG_DEFINITIONS, DG_PYPROJECT, dg_run

ROOT = Path(__file__).resolve().parents[3]
TREE = ("Error while building definitions", "└──", "ComponentTreeException")


def test_the_error_dagster_prints_is_the_one_line_without_the_tree(tmp_path, monkeypatch):
    reviews = write_reviews(tmp_path / "reviews.tsv", RATINGS["na"])
    with pytest.raises(ValueError):
        try:
            load_component(tmp_path, monkeypatch, component_yaml(SQL, "reviews.tsv"),
                           {"reviews.tsv": reviews})  # fmt: skip
        except ValueError:
            info = serializable_error_info_from_exc_info(sys.exc_info())
            raise
    shown = remove_system_frames_from_error(unwrap_user_code_error(info)).to_string()
    assert not any(t in shown for t in TREE), shown
    assert shown.count("defs.yaml: query 'my_reviews':") == 1 and FIX in shown
    assert info.cause is None and info.context is None  # nothing chained to print


@pytest.mark.slow
def test_dg_check_defs_prints_the_line_in_a_few_lines(tmp_path):
    project = tmp_path / "proj"
    package = project / "src" / "myproj"
    (package / "defs" / "my_reviews").mkdir(parents=True)
    (project / "pyproject.toml").write_text(DG_PYPROJECT)
    (package / "__init__.py").write_text("")
    (package / "defs" / "__init__.py").write_text("")
    (package / "definitions.py").write_text(DG_DEFINITIONS)
    write_reviews(package / "defs" / "my_reviews" / "reviews.tsv", RATINGS["na"])
    (package / "defs" / "my_reviews" / "defs.yaml").write_text(component_yaml(SQL, "reviews.tsv"))
    env = {**os.environ, "PYTHONPATH": f"{project / 'src'}{os.pathsep}{ROOT}",
           "LLM_ASSETS_HOME": str(tmp_path / "home")}  # fmt: skip
    checked = dg_run(project, "check", "defs", env=env)
    out = checked.stdout + checked.stderr
    assert checked.returncode == 1 and out.count("query 'my_reviews':") == 1, out
    assert not any(t in out for t in TREE), out
    assert len(out.strip().splitlines()) <= 16, out
