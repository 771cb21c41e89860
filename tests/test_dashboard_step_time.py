"""The step-time page's data, from TensorBoard's scalars: runs grouped with their series, in milliseconds, named,
ordered, and the switch from simulated to measured updates found; runs written before the series directories
still read."""

import pytest

from placer.dashboard.step_time import step_time_runs


def test_series_runs_are_grouped_under_their_run_and_named():
    scalars = {
        "two-tower/20261127-140512/tensorboard": {"training/simulated": [(1, 1.0), (2, 1.0), (3, 0.0), (4, 0.0)]},
        "two-tower/20261127-140512/tensorboard/step_time/best": {"step_time_ms": [(1, 0.4), (2, 0.3), (3, 0.29)]},
        "two-tower/20261127-140512/tensorboard/step_time/sampled": {"step_time_ms": [(1, 0.5), (2, float("inf"))]},
        "two-tower/20261127-140512/tensorboard/step_time/baseline/expert": {"step_time_ms": [(1, 0.289)]},
        "two-tower/20261127-140512/tensorboard/step_time/baseline/single-device": {"step_time_ms": [(1, 4.0)]},
        "two-tower/20261127-140512/tensorboard/step_time/baseline/metis": {"step_time_ms": [(1, 0.282)]},
    }
    names = {"two-tower/20261127-140512/tensorboard": "two-tower local:2 2026-11-27 14:05"}
    (run,) = step_time_runs(scalars, names, "runs")

    assert run["name"] == "two-tower local:2 2026-11-27 14:05" and run["measured_from"] == 3
    # the learned series first, then the baselines fastest first; failed (infinite) samples are left out
    assert [(s["name"], s["label"]) for s in run["series"]] == [
        ("best", "best so far"), ("sampled", "sampled median"), ("baseline/metis", "metis"),
        ("baseline/expert", "expert"), ("baseline/single-device", "single-device")]
    assert run["series"][1]["points"] == [[1, 0.5]]


def test_a_run_written_in_seconds_as_tags_still_reads_in_milliseconds():
    scalars = {"tensorboard": {"step_time/best": [(1, 4e-4), (2, 2.82e-4)], "step_time/sampled": [(1, 6e-4)],
                               "step_time/best_baseline": [(1, 3e-4)], "step_time/baseline/expert": [(1, 2.89e-4)],
                               "training/reward_mean": [(1, -1.0)]}}
    (run,) = step_time_runs(scalars, {}, "20261127-140512")

    assert run["name"] == "20261127-140512" and run["measured_from"] is None
    assert [s["name"] for s in run["series"]] == ["best", "sampled", "baseline/expert"]
    assert run["series"][0]["points"] == [[1, pytest.approx(0.4)], [2, pytest.approx(0.282)]]


def test_a_run_served_from_its_tensorboard_folder_is_named_by_that_folder():
    (run,) = step_time_runs({"step_time/best": {"step_time_ms": [(1, 0.3)]}}, {}, "tensorboard")
    assert run["run"] == "." and run["name"] == "tensorboard"
