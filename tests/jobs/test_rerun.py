"""Reruns resume instead of paying twice: the persistent response cache, through the job."""

from jobs.resources import resources_for
from llm_assets.data import generate
from resources.llm_resources import ResponseCacheResource
from tests.jobs.conftest import run_job


def outputs_meta(result):
    (meta,) = [
        {k: v.value for k, v in e.materialization.metadata.items()}
        for e in result.get_asset_materialization_events()
        if e.materialization.asset_key.path[-1] == "llm_outputs"
    ]
    return meta


def joined_csv(path, rows):
    """A movies table in the joined layout of movies_small.csv, first `rows` reviews."""
    tables = generate("movies", 300, seed=3)
    joined = tables["reviews"].merge(tables["movies"], on="rotten_tomatoes_link")
    joined = joined.rename(columns={"review_id": "id"}).sort_values("id").head(rows)
    joined[["rotten_tomatoes_link", "review_content", "movie_title", "movie_info", "id"]].to_csv(
        path, index=False
    )
    return str(path)


def test_rerun_and_grown_data_send_only_new_prompts(make_defs, home, tmp_path):
    defs = make_defs(response_cache=ResponseCacheResource(path=str(home / "responses.duckdb")))
    small = joined_csv(tmp_path / "small.csv", 200)
    first = outputs_meta(run_job(defs, "q1_job", movies=[small]))
    assert first["requests_sent"] == first["n_requests"] > 0 and first["cache_hits"] == 0
    again = outputs_meta(run_job(defs, "q1_job", movies=[small]))
    assert again["requests_sent"] == 0 and again["cache_hits"] == first["requests_sent"]
    assert again["stage_rows_answered"] == first["stage_rows_answered"]
    grown = outputs_meta(run_job(defs, "q1_job", movies=[joined_csv(tmp_path / "big.csv", 260)]))
    assert grown["cache_hits"] == first["requests_sent"]
    assert 0 < grown["requests_sent"] <= grown["stage_rows_answered"] - first["stage_rows_answered"]


def test_response_cache_is_off_for_the_simulated_engine_by_default():
    assert resources_for("sim")["response_cache"].enabled is False
    assert resources_for("openai")["response_cache"].enabled is True


def test_empty_source_is_a_clear_error(make_defs, tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("rotten_tomatoes_link,review_content,movie_title,movie_info,id\n")
    result = run_job(make_defs(), "q1_job", movies=[str(empty)])
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "has no rows" in str(failure.event_specific_data.error)
