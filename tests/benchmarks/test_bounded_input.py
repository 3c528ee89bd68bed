"""The fault matrix's hostile-file cases (`benchmarks.lib.bounded_input`): the bomb is what it
claims, a refusal counts only as one `error:` line naming the limit, and a wide table plans."""

import gzip

from benchmarks.lib import bounded_input
from benchmarks.lib.bounded_input import _refused, _write_bomb, bounded_input_case


def test_the_bomb_is_a_small_gzip_of_many_short_lines(tmp_path):
    path = tmp_path / "bomb.csv.gz"
    _write_bomb(path, lines=200_000)
    with gzip.open(path, "rb") as inflated:
        lines = inflated.read().split(b"\n")
    assert lines[0] == b"c0" and 180_000 < len(lines) - 2 <= 200_000
    assert path.stat().st_size * 100 < 200_000 * 63  # compresses over 100x


def test_only_a_one_line_refusal_naming_the_limit_counts():
    line = "error: f.csv: the table has 11 rows or more, over the max_rows limit of 10; ..."
    run = {"rc": 2, "stderr_lines": 1, "error": line}
    assert _refused(run, "max_rows")
    assert not _refused(run, "max_cell_bytes")
    assert not _refused({**run, "stderr_lines": 38}, "max_rows")  # a traceback
    assert not _refused({**run, "rc": 1}, "max_rows")
    assert not _refused({**run, "error": "MemoryError"}, "max_rows")


def test_ten_thousand_columns_plan_within_the_bound(tmp_path):
    row = bounded_input_case("10k-columns", tmp_path)
    assert row["outcome"] == "planned" and row["mixed"] == 0, row
    assert 0 < row["peak_rss_mb"] < bounded_input.LIMIT_MB
    assert not list((tmp_path / "10k-columns").glob("*.csv"))  # the file is removed
