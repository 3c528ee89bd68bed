"""`llm-assets plan` and `run` on the simulated engine never import Dagster, MLflow or Great
Expectations (issue 37 item 5), nor Ray unless `--shards` asks for it: a CLI user pays none
of their import time. Run in a fresh interpreter so nothing another test imported counts."""

import subprocess
import sys

from tests.conftest import ROOT

SCRIPT = """
import sys
from click.testing import CliRunner
from llm_assets.cli import main
for args in (["plan", "q.sql", "--table", "t=t.csv", "--json"],
             ["run", "q.sql", "--table", "t=t.csv", "--out", "o.csv"]):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
heavy = {"dagster", "mlflow", "great_expectations", "ray"}
print(sorted({m.split(".")[0] for m in sys.modules} & heavy))
"""


def test_plan_and_run_import_no_orchestration_library(tmp_path):
    (tmp_path / "t.csv").write_text("id,review\n1,good film\n2,bad film\n")
    (tmp_path / "q.sql").write_text("SELECT LLM('Positive? {review}', t.review) AS p FROM t\n")
    env = {"PYTHONPATH": str(ROOT), "LLM_ASSETS_HOME": str(tmp_path / "home"), "PATH": ""}
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
