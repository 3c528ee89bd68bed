import pandas as pd

from llm_assets.optimizer.column_stats import column_scores, column_stats_schedule
from llm_assets.optimizer.table import encode


def test_fields_by_score_and_rows_sorted():
    frame = pd.DataFrame(
        {
            "unique": ["u3", "u1", "u2", "u4"],  # 2 chars x 4 rows / 4 distinct = 2
            "long": ["bbbbbb", "aaaaaa", "bbbbbb", "aaaaaa"],  # 6 x 4 / 2 = 12
            "short": ["x", "x", "x", "y"],  # 1 x 4 / 2 = 2
        }
    )
    assert column_scores(encode(frame)).tolist() == [2.0, 12.0, 2.0]
    schedule = column_stats_schedule(frame)
    assert schedule.orders == (("long", "unique", "short"),)
    assert [row for row, _ in schedule] == [1, 3, 2, 0]
