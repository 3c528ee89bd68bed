"""The Dagster UI, started as `make dev` starts it, renders the lineage of all five queries in a
real headless Chromium (Playwright driving /usr/bin/chromium). Saves screenshots under
benchmarks/results/."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.jobs.ui_server import answering, free_port

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
LINEAGES = {
    "q1": ["filtered", "deduped", "request_plan", "llm_outputs", "result", "answer"],
    "q2": ["filtered", "deduped", "request_plan", "llm_outputs", "result", "answer"],
    "q3": ["filtered", "llm_outputs", "deduped_2", "request_plan_2", "llm_outputs_2", "result"],
    "q4": ["filtered", "deduped", "request_plan", "llm_outputs", "result", "answer"],
    "q5": ["filtered", "retrieved", "deduped", "request_plan", "llm_outputs", "answer"],
}

pytestmark = [
    pytest.mark.ui,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)"),
]


@pytest.fixture(scope="module")
def dagster_ui(tmp_path_factory):
    home = tmp_path_factory.mktemp("ui")
    (home / "dagster").mkdir()
    port = free_port()
    dagster = Path(sys.executable).with_name("dagster")
    env = {**os.environ, "DAGSTER_HOME": str(home / "dagster"), "LLM_ASSETS_HOME": str(home)}
    proc = subprocess.Popen(
        [str(dagster), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    with answering(proc, f"{url}/server_info", "dagster dev", timeout_s=180, poll_s=1):
        yield url


def test_lineage_of_every_query_renders(dagster_ui, tmp_path):
    """Screenshots of Q3 and Q5 go to a temp dir, or to LLM_ASSETS_SCREENSHOTS (e.g.
    benchmarks/results, to refresh the committed ones): a test run leaves the tree as it was."""
    from playwright.sync_api import sync_playwright

    flags = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    flags += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
    out = Path(os.environ.get("LLM_ASSETS_SCREENSHOTS") or tmp_path)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=flags)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        for group, assets in LINEAGES.items():
            page.goto(
                f"{dagster_ui}/locations/llm_assets/asset-groups/{group}/lineage",
                wait_until="networkidle",
            )
            skip = page.get_by_role("button", name="Skip")  # first-visit newsletter dialog
            if skip.count():
                skip.first.click()
            for name in assets:
                page.get_by_text(name, exact=True).first.wait_for(timeout=30_000)
            if group in ("q3", "q5"):
                page.screenshot(path=str(out / f"ui_lineage_{group}.png"))
        browser.close()
