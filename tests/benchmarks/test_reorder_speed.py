"""`benchmarks.reorder`'s speed table: GGR's CPU seconds against the authors' port and the
seconds they published, with blanks where either is missing."""

from benchmarks.reorder import PUBLISHED, speed_markdown


def method(cpu: float, wall: float | None = None) -> dict:
    return {"cpu_seconds": cpu, "seconds": cpu if wall is None else wall}


def test_the_speed_table_divides_the_ports_and_the_published_seconds_by_ggrs():
    published = max(PUBLISHED, key=lambda t: PUBLISHED[t]["seconds"])
    results = [
        {"table": published, "methods": {"ggr": method(0.5, 0.55),
                                         "authors_ggr": method(2.0)}},
        {"table": "other", "methods": {"ggr": method(1.0)}},
    ]  # fmt: skip
    lines = speed_markdown(results)
    seconds = PUBLISHED[published]["seconds"]
    assert (f"| {published} | 0.500 | 2.000 | 4.0x | {seconds} | "
            f"{seconds / 0.55:.0f}x |") in lines  # fmt: skip
    assert "| other | 1.000 |  |  |  |  |" in lines
