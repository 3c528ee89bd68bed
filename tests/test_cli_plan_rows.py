"""`plan`'s `rows` column has one meaning in every table, the one its legend names: the rows
reaching the stage (issue 35, item 3: the totals table showed the rows sent, after rows with a
null LLM input were skipped, beside per-stage tables showing the rows reaching the stage).
Expected counts come from the table, computed here."""

import pandas as pd
from click.testing import CliRunner

from llm_assets.cli import main

ONE = "SELECT t.id, LLM('Sum up {review}', t.review) AS s FROM t WHERE t.kind = 'a'"
TWO = (
    "SELECT t.id, LLM('Sum up {review}', t.review) AS s FROM t WHERE t.kind = 'a' AND "
    "LLM('Is {review} long?', t.review, output => 'choice(yes,no)') = 'yes'"
)


def write(tmp_path):
    n = 40
    reviews = [None if i % 4 == 0 else f"review {i}" for i in range(n)]  # a null every 4th
    kinds = ["a" if i % 5 else "b" for i in range(n)]
    pd.DataFrame({"id": range(n), "review": reviews, "kind": kinds}).to_csv(
        tmp_path / "t.csv", index=False
    )
    reaching = sum(k == "a" for k in kinds)
    sent = sum(k == "a" and r is not None for k, r in zip(kinds, reviews, strict=True))
    assert sent < reaching
    return tmp_path / "t.csv", reaching


def rows_cells(output: str) -> list[int]:
    """The `rows` cell of each method row of every table, in order."""
    lines = output.splitlines()
    cells = []
    for i, line in enumerate(lines):
        if line.startswith("method ") and line.split()[1] == "rows":
            cells += [int(lines[i + 1].split()[1].replace(",", ""))]
    return cells


def test_the_rows_column_is_the_rows_reaching_the_stage_in_every_table(tmp_path):
    table, reaching = write(tmp_path)
    for sql, tables in ((ONE, 1), (TWO, 3)):  # TWO: a table per stage, then the totals
        (tmp_path / "q.sql").write_text(sql)
        out = CliRunner().invoke(main, ["plan", str(tmp_path / "q.sql"), "--table",
                                        f"t={table}", "--methods", "ggr"])  # fmt: skip
        assert out.exit_code == 0, out.output
        cells = rows_cells(out.output)
        assert len(cells) == tables, out.output
        assert cells[0] == reaching and cells[-1] == reaching, out.output
        legend = out.output.splitlines()[-1]
        assert legend.startswith("rows: rows reaching the stage"), legend
