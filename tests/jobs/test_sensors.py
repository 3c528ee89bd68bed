import dagster as dg

from jobs.definitions import build_defs
from jobs.sensors import landing_folder_sensor


def test_new_files_launch_the_matching_job_once_each(home):
    folder = home / "landing" / "q1"
    folder.mkdir(parents=True)
    (folder / "reviews.csv").write_text("a\n1\n")
    (home / "landing" / "nonsense").mkdir()
    (home / "landing" / "nonsense" / "x.csv").write_text("a\n")
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(instance=instance, definitions=build_defs())
        runs = landing_folder_sensor(context)
    assert len(runs) == 1
    (run,) = runs
    assert run.job_name == "q1_job"
    assert run.run_config["ops"]["movies_source"]["config"]["paths"] == [
        str(folder / "reviews.csv")
    ]
    assert run.run_key.startswith(str(folder / "reviews.csv"))


def test_empty_landing_folder_skips(home):
    with dg.instance_for_test() as instance:
        result = landing_folder_sensor(dg.build_sensor_context(instance=instance))
    assert isinstance(result, dg.SkipReason)
    assert "landing" in result.skip_message
