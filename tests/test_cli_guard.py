"""The CLI's switches for a real engine and the field-order guard: `--no-prefix-cache` with
llama.cpp is refused in one line; `plan --field-order-guard` says what the guard would do (the
simulated engine cannot judge) in its table and its JSON."""

import json

import pytest
from click.testing import CliRunner

from llm_assets.cli import commands as cli

SQL = (
    "SELECT t.id, LLM('Answerable? {question} {passage}', t.question, t.passage, "
    "output => 'choice(yes,no)') AS a FROM t"
)


def test_no_prefix_cache_with_llama_cpp_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.build_engine("llama_cpp", "L4", None, "vllm-v1", False)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        "error: --no-prefix-cache: llama_cpp always reuses a slot's cached prefix\n"
    )


@pytest.fixture
def files(tmp_path):
    table = tmp_path / "t.csv"
    rows = ["id,question,passage"]
    rows += [
        f"{i},What happened in {1900 + i}?,A long shared passage {i // 10}." for i in range(60)
    ]
    table.write_text("\n".join(rows) + "\n")
    query = tmp_path / "q.sql"
    query.write_text(SQL)
    return query, table


def test_plan_explains_the_guard_in_its_table_and_json(files):
    query, table = files
    args = ["plan", str(query), "--table", f"t={table}", "--field-order-guard", "0.9"]
    runner = CliRunner()
    shown = runner.invoke(cli.main, [*args, "--methods", "original,ggr"])
    assert shown.exit_code == 0, shown.output
    assert "field-order guard:" in shown.output
    assert "ggr a: cannot judge: the simulated engine answers placeholders" in shown.output
    assert "original a: fields not moved" in shown.output
    report = json.loads(runner.invoke(cli.main, [*args, "--json"]).stdout)
    guard = report["methods"]["ggr"]["stages"][0]["field_order_guard"]
    assert guard["verdict"] == "cannot judge" and guard["requests"] == 2 * 48
    off = json.loads(runner.invoke(cli.main, [*args[:4], "--json"]).stdout)
    assert "field_order_guard" not in off["methods"]["ggr"]["stages"][0]
