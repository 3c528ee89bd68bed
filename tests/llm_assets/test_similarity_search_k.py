"""`similarity_search(..., k => x)` with an x that is not a whole number is refused when the
SQL compiles (so `dg check defs` and `llm-assets plan` stop on it), in one line naming the
argument and what it accepts (issue 35, item 3: `k => 2.5` raised Python's `invalid literal
for int()`)."""

import pytest

from llm_assets.sql.compiler import SQLError, compile_sql

IN_SELECT = "SELECT LLM('{c} {y}', similarity_search(a.q, k => K), a.y) FROM t a"
IN_JOIN = (
    "SELECT r.id FROM reviews r JOIN movies m ON m.info IN similarity_search(r.review, k => K) "
    "AND LLM('Same film? {review} {info}', r.review, m.info) = 'Yes'"
)


@pytest.mark.parametrize("sql", [IN_SELECT, IN_JOIN], ids=["select", "semantic-join"])
@pytest.mark.parametrize("k", ["2.5", "1e3", "3.0"])
def test_a_k_that_is_not_a_whole_number_is_one_line_naming_k(sql, k):
    with pytest.raises(SQLError) as refused:
        compile_sql(sql.replace("K", k), "q")
    message = str(refused.value)
    assert f"k => {k} must be a positive integer" in message, message
    assert "\n" not in message and "invalid literal" not in message
