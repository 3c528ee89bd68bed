"""The engine's concurrency pool: every step that sends LLM requests claims a slot of the pool
named after the engine resource key, so runs at once never exceed the limit a user sets with
`dagster instance concurrency set llm_engine N`."""

import threading
import time

import dagster as dg

from jobs.resources import resources_for
from llm_assets import llm_query_assets

SQL = "SELECT r.id, LLM('Summarize {review}', r.review) AS summary FROM reviews r"


def test_llm_steps_wait_for_a_slot_of_the_engine_pool(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_ASSETS_HOME", str(tmp_path / "home"))
    table = tmp_path / "reviews.csv"
    table.write_text("id,review\n1,good\n2,bad\n")
    defs = llm_query_assets("q", SQL, sources={"reviews": str(table)})
    pools = {
        key.to_user_string(): a.op.pool
        for a in defs.assets
        if isinstance(a, dg.AssetsDefinition)
        for key in a.keys
    }
    assert pools["q/llm_outputs"] == "llm_engine"
    assert pools["q/filtered"] is None  # only the steps that talk to the engine
    with dg.instance_for_test() as instance:
        instance.event_log_storage.set_concurrency_slots("llm_engine", 1)
        # another run holds the one slot
        instance.event_log_storage.claim_concurrency_slot("llm_engine", "other-run", "step")
        done = threading.Event()
        outcome = {}

        def run() -> None:
            outcome["result"] = dg.materialize(
                list(defs.assets) + list(defs.asset_checks),
                instance=instance,
                resources=resources_for("sim"),
            )
            done.set()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 120
        storage = instance.event_log_storage
        while not storage.get_concurrency_info("llm_engine").pending_step_count:
            assert not done.is_set(), "the run finished without waiting for the held slot"
            assert time.monotonic() < deadline, "the LLM step never queued for a slot"
            time.sleep(0.1)
        # queued for the pool while the slot is held, and not run
        assert not done.wait(1)
        assert not instance.get_latest_materialization_event(dg.AssetKey(["q", "llm_outputs"]))
        instance.event_log_storage.free_concurrency_slot_for_step("other-run", "step")
        assert done.wait(120)
        assert outcome["result"].success
