"""MLflow's own UI (`mlflow server`, the installed 3.17), driven in a real headless Chromium
(Playwright on /usr/bin/chromium) as tests/jobs/test_ui.py drives Dagster's: the link an
`llm_outputs` run records opens the runs table, not the GenAI overview, with the hit rate,
engine time and cost columns and both run names whole. The screenshot goes to a temp dir, or to
LLM_ASSETS_SCREENSHOTS (benchmarks/results, to refresh the committed mlflow_runs.png)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llm_assets.assets.tracking import run_name, table_columns
from llm_assets.optimizer.cost import PRICING
from llm_assets.pipeline.options import QueryOptions
from resources.tracking import MLflowTracker
from tests.jobs.ui_server import answering, free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = [
    pytest.mark.ui,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (.ci/run installs it)"),
]


def metrics(hit_rate: float, engine_s: float) -> dict[str, float]:
    costs = {f"cost_usd_{k}": round(0.01 * (i + 1) * engine_s, 4) for i, k in enumerate(PRICING)}
    return {
        "engine_time_s": engine_s,
        "token_hit_rate": hit_rate,
        "n_requests": 120,
        **costs,
        "cost_usd_self_hosted": 0.002 * engine_s,
    }


@pytest.fixture(scope="module")
def mlflow_ui(tmp_path_factory):
    """Two runs of q1's LLM stage (original, ggr) on a file given by its absolute path, logged
    as `log_llm_run` logs them, then `mlflow server` over the store."""
    home = tmp_path_factory.mktemp("mlflow")
    data = f"reviews={home / 'data' / 'reviews.tsv'}"
    port = free_port()
    tracker = MLflowTracker(
        tracking_uri=f"sqlite:///{home / 'mlflow.db'}", ui_url=f"http://127.0.0.1:{port}"
    )
    names, links = {}, None
    for method, hit_rate, engine_s in (("original", 0.12, 41.5), ("ggr", 0.81, 9.25)):
        names[method] = run_name(QueryOptions(method=method), "q1/llm_outputs", data)
        m = metrics(hit_rate, engine_s)
        links = tracker.log_run(
            "llm-assets-q1", names[method], {"data": data}, m, {}, columns=table_columns(m)
        )
    assert links is not None
    mlflow = Path(sys.executable).with_name("mlflow")
    # no job runner (its worker processes only slow the start; no job runs here)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    command = [str(mlflow), "server", "--backend-store-uri", tracker.uri(), "--workers", "1"]
    proc = subprocess.Popen(
        [*command, "--host", "127.0.0.1", "--port", str(port)],
        cwd=home,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    with answering(proc, f"{tracker.ui_url}/health", "mlflow server", timeout_s=120, poll_s=0.25):
        yield links, names, str(home)


WHOLE = """el => {  // the text, laid out whole, ends inside its grid cell; nothing clips it
    const range = document.createRange();
    range.selectNodeContents(el);
    const text = range.getBoundingClientRect();
    const cell = el.closest('.ag-cell').getBoundingClientRect();
    const boxes = [el, ...el.querySelectorAll('*')];
    for (let e = el.parentElement; e && !e.classList.contains('ag-row'); e = e.parentElement)
        boxes.push(e);
    return text.right <= cell.right && boxes.every(e => e.scrollWidth <= e.clientWidth + 1);
}"""


def test_the_run_link_opens_the_runs_table_with_metrics_and_whole_names(mlflow_ui, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    links, names, home = mlflow_ui
    assert names["ggr"] == "ggr dedup pushdown · q1/llm_outputs · reviews.tsv"
    assert all(home not in name for name in names.values())
    flags = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    flags += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]
    out = Path(os.environ.get("LLM_ASSETS_SCREENSHOTS") or tmp_path)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=flags)
        page = browser.new_page(viewport={"width": 1600, "height": 700})
        # a fresh browser profile, as a first visit: nothing stored but the assistant
        # panel's "already shown" flag (it opens once and would cover the table)
        page.add_init_script(
            "localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true')"
        )
        page.goto(links.table)
        for name in names.values():
            cell = page.get_by_role("link", name=name, exact=True)
            expect(cell).to_be_visible(timeout=30_000)
            assert cell.evaluate(WHOLE), f"run name cut: {name}"
        header = page.locator(".ag-header-cell")
        for column in ("token_hit_rate", "engine_time_s", "cost_usd_self_hosted"):
            expect(header.filter(has_text=column)).to_be_visible()
        # "Model training", not GenAI: the page is "Runs" (GenAI calls it "Training runs")
        # and the sidebar has no GenAI "Overview" (whose charts read "No data" here)
        expect(page.get_by_role("heading", name="Runs", exact=True)).to_be_visible()
        expect(page.get_by_text("Overview", exact=True)).to_have_count(0)
        assert "No data" not in page.inner_text("body")
        page.screenshot(path=str(out / "mlflow_runs.png"))
        browser.close()
