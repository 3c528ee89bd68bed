"""The asset layer knows no dataset: every query, the benchmark ones included, is declared
with the factory or the component."""

import re
from pathlib import Path

import llm_assets.assets

BUILT_IN = re.compile(r"movies|products|squad|rotten|amazon", re.IGNORECASE)


def test_no_built_in_dataset_name_in_the_asset_layer():
    folder = Path(llm_assets.assets.__file__).parent
    hits = [
        f"{path.name}:{n}: {line.strip()}"
        for path in sorted(folder.glob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if BUILT_IN.search(line)
    ]
    assert hits == []
