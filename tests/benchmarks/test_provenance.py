"""Every committed result names the commit and command that produced it, and a result whose
measured code changed since says so: in its JSON (`stale`), in its markdown's header and in the
README's results table (`benchmarks.lib.provenance`, issue 37 item 4)."""

import json
import re
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.lib.provenance import (
    MEASURES,
    RESULTS,
    RUN_MARK,
    STALE_MARK,
    changes_since,
    mark_readme,
    with_header,
)
from tests.conftest import ROOT

RESULT_FILES = sorted(RESULTS.glob("*.json"))


def history_available() -> bool:
    try:
        out = subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return False
    return int(out.stdout) > 100  # a shallow clone cannot date the results


def readme_rows() -> dict[str, str]:
    """The README's results table: result name -> its row."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        for name in re.findall(r"benchmarks/results/(\w+)\.md", line):
            if line.startswith("|"):
                rows[name] = line
    return rows


def test_every_result_names_its_commit_and_command():
    missing = []
    for path in RESULT_FILES:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if not re.fullmatch(r"[0-9a-f]{7,40}", str(doc.get("commit"))) or "command" not in doc:
            missing.append(path.name)
        if path.stem not in MEASURES:
            missing.append(f"{path.name} (no entry in provenance.MEASURES)")
    assert not missing, missing


@pytest.mark.skipif(not history_available(), reason="needs the git history (not a shallow clone)")
@pytest.mark.parametrize("path", RESULT_FILES, ids=lambda p: p.stem)
def test_a_result_whose_code_changed_says_it_is_stale(path):
    doc = json.loads(path.read_text(encoding="utf-8"))
    changes = changes_since(path.stem, doc)
    if not changes:
        assert "stale" not in doc, f"{path.name} is current: drop its `stale`"
        return
    assert doc.get("stale"), (
        f"{path.name}: the code it measures changed since {doc['commit']} ({changes[0]}); "
        "regenerate it or mark it `stale`"
    )
    markdown = path.with_suffix(".md")
    if markdown.exists():
        head = markdown.read_text(encoding="utf-8")[:2000]
        assert "**Stale**" in head, f"{markdown.name} must say **Stale** in its header"
    row = readme_rows().get(path.stem)
    assert row is None or "stale" in row.lower(), f"README's row for {path.stem} must say stale"


@pytest.mark.skipif(not history_available(), reason="needs the git history (not a shallow clone)")
def test_the_stale_check_sees_a_change_after_the_result():
    """A result stamped at the first commit of the history has every later change to its code
    after it (the check is not vacuous)."""
    roots = subprocess.run(["git", "rev-list", "--max-parents=0", "HEAD"], cwd=ROOT,
                           capture_output=True, text=True, check=True)  # fmt: skip
    first = roots.stdout.split()[0]
    assert changes_since("reorder", {"commit": first, "dirty": False})


_LINE = st.one_of(
    st.just(""),
    st.just("# Title"),
    st.sampled_from([STALE_MARK + "old note", RUN_MARK + "abc by `x`"]),
    st.text(alphabet="ab |-#>", max_size=8),
)


@given(st.lists(_LINE, max_size=12), st.booleans())
def test_a_header_rewrite_is_idempotent_and_keeps_every_other_line(lines, stale):
    """Marking a result twice gives what marking it once gives (blank lines do not pile up
    where the marks stand), and the markdown's own lines stay, in order."""
    head = [RUN_MARK + "0123abcd by `python -m benchmarks.x`"]
    if stale:
        head += ["", STALE_MARK + "changed"]
    text = "\n".join(lines)
    once = with_header(text, head)
    assert with_header(once, head) == once
    own = [ln for ln in lines if ln.strip() and not ln.startswith((STALE_MARK, RUN_MARK))]
    kept = [ln for ln in once.split("\n") if ln.strip() and ln not in head]
    assert kept == own


def test_the_readme_row_says_what_its_result_json_says():
    row = "| [fleet](benchmarks/results/fleet.md) | a headline | 1234567, current |"
    other = "| [queries](benchmarks/results/queries.md) | q | 7654321, current |"
    text = f"intro\n{row}\n{other}\n"
    stale = mark_readme(text, {"fleet": ("abcdef0123", True)})
    assert "| a headline | abcdef0, **stale** |" in stale
    assert other in stale  # a result not in the states keeps its row
    assert mark_readme(stale, {"fleet": ("abcdef0123", False)}).count("abcdef0, current |") == 1
