"""Hypothesis strategies for small tables with repeated values of mixed types."""

import pandas as pd
from hypothesis import strategies as st

CELLS = st.one_of(
    st.sampled_from(["a", "bb", "ccc", "a b", "{x}", ""]),
    st.integers(min_value=-3, max_value=3),
    st.booleans(),
    st.none(),
    st.sampled_from([0.5, 2.0, float("nan")]),
)


@st.composite
def tables(draw, max_rows: int = 7, max_cols: int = 4, cells=CELLS) -> pd.DataFrame:
    n_rows = draw(st.integers(min_value=1, max_value=max_rows))
    n_cols = draw(st.integers(min_value=1, max_value=max_cols))
    data = {f"f{j}": draw(st.lists(cells, min_size=n_rows, max_size=n_rows)) for j in range(n_cols)}
    return pd.DataFrame(data, dtype=object)


STRING_CELLS = st.sampled_from(["x", "yy", "zzz", "wwww", "q"])
