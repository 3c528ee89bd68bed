"""`llm-assets plan --shards K`: a bad K is one `error:` line naming it; K > 1 plans each
stage in Ray tasks (slow: a local cluster) with the same rows, requests and distinct inputs
as one process."""

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from llm_assets.cli import main

SQL = "SELECT t.id, LLM('Kids? {genre} {blurb}', t.genre, t.blurb) AS k FROM t\n"


def write(tmp_path):
    n = 600
    frame = pd.DataFrame(
        {
            "id": range(n),
            "genre": [f"genre {i % 4}" for i in range(n)],
            "blurb": [f"a film about {i % 60} things" for i in range(n)],
        }
    )
    frame.to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "q.sql").write_text(SQL)
    return ["plan", str(tmp_path / "q.sql"), "--table", f"t={tmp_path / 't.csv'}"]


@pytest.mark.parametrize("bad", ["0", "-3", "5000"])
def test_a_bad_shard_count_is_refused_in_one_line(tmp_path, bad):
    result = CliRunner().invoke(main, [*write(tmp_path), "--shards", bad, "--json"])
    assert result.exit_code != 0
    assert "num_shards must be a whole number from 1 to 4096" in result.output
    assert f"got {int(bad)}" in result.output


@pytest.mark.slow
def test_sharded_plan_matches_one_process(tmp_path):
    pytest.importorskip("ray", reason="ray is not installed (pip install '.[ray]')")
    args = [*write(tmp_path), "--methods", "ggr", "--json"]
    one = json.loads(CliRunner().invoke(main, args).output)["methods"]["ggr"]
    result = CliRunner().invoke(main, [*args, "--shards", "3"])
    assert result.exit_code == 0, result.output
    many = json.loads(result.output)["methods"]["ggr"]
    for key in ("rows_to_first_llm", "n_requests", "prompt_tokens"):
        assert many[key] == one[key], key
    assert one["n_requests"] == 60  # 600 rows, 60 distinct inputs: dedup worked across shards
    assert many["token_hit_rate"] >= 0.9 * one["token_hit_rate"]
