"""The CLI's progress bar (`cli.reports.ProgressBar`) prints a stage's 100% line once (issue
35, item 3: with chunks slower than tqdm's refresh interval, the last update printed it and
closing the bar printed it again)."""

import time

from llm_assets.cli.reports import ProgressBar


def test_each_stage_prints_its_100_percent_line_once(capsys):
    progress = ProgressBar()
    for label in ("q:a", "q:b"):
        update = progress(label)
        for done in (0, 2, 4):
            update(done, 4)
            time.sleep(0.15)  # a chunk slower than tqdm's mininterval (0.1 s)
    lines = capsys.readouterr().err.replace("\r", "\n").splitlines()
    finished = [line for line in lines if "100%" in line]
    assert [line.split(":")[1] for line in finished] == ["a", "b"], lines
    assert any("2/4" in line for line in lines)  # the chunks in between still show


def test_a_stage_answered_from_the_cache_shows_once_at_100_percent(capsys):
    ProgressBar()("q:s")(5, 5)
    err = capsys.readouterr().err
    assert err.count("100%") == 1 and "5/5" in err
