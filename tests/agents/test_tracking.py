"""What a run writes for the dashboards: each step-time series in a TensorBoard run of its own, in milliseconds,
the run's name, and the simulated phase marked."""

from pathlib import Path

import pytest

from agents.tracking import TensorBoardTracker, WandbTracker
from placer.dashboard import layout

BASELINES = {"single-device": 4.0e-3, "round-robin": 5.0e-3, "expert": 2.89e-4, "metis": 2.82e-4,
             "scotch": 3.1e-4, "m-topo": 3.3e-4, "m-etf": 3.2e-4, "m-sct": 3.4e-4}


def _events(directory: Path) -> dict[str, list[tuple[int, object]]]:
    """tag -> [(step, value)] of the event files directly in `directory`."""
    import tensorflow as tf

    found: dict[str, list] = {}
    for path in sorted(directory.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                found.setdefault(value.tag, []).append((event.step, tf.make_ndarray(value.tensor)))
    return found


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("run")
    tracker = TensorBoardTracker(run, {"model": "two-tower"}, "two-tower modeled:2xV100 2026-11-27 14:05",
                                 baselines=BASELINES)
    # two simulated updates, then three measured: the measured best timed again slower at update 4
    for update, simulated, best in ((1, 1.0, 2.91e-4), (2, 1.0, 2.80e-4), (3, 0.0, 3.10e-4), (4, 0.0, 3.30e-4),
                                    (5, 0.0, 3.00e-4)):
        tracker.log_update(update, {"step_time_best": best, "step_time_sampled": 3.5e-4, "reward_mean": -1.0,
                                    "simulated": simulated})
    tracker.finish({}, None, None)
    return run / "tensorboard"


def test_every_baseline_and_learned_series_is_a_run_of_its_own_in_milliseconds(written):
    series = {path.parent.relative_to(written / layout.SERIES_DIR).as_posix()
              for path in (written / layout.SERIES_DIR).rglob("events.out.tfevents.*")}
    assert series == {"best", "best_simulated", "best_retimed", "sampled"} | {f"baseline/{name}" for name in BASELINES}

    def logged(name):
        events = _events(written / layout.SERIES_DIR / name)
        assert list(events) == [layout.STEP_TIME_TAG]
        return [(step, round(float(ms), 6)) for step, ms in events[layout.STEP_TIME_TAG]]

    # the simulator phase's best is its own series; the measured best so far never rises, its slower re-timing is
    # a series of its own
    assert logged("best_simulated") == [(1, 0.291), (2, 0.28)]
    assert logged("best") == [(3, 0.31), (4, 0.31), (5, 0.3)]
    assert logged("best_retimed") == [(4, 0.33)]
    metis = _events(written / layout.SERIES_DIR / "baseline" / "metis")[layout.STEP_TIME_TAG]
    assert [round(float(ms), 6) for _, ms in metis] == [0.282] * 5


def test_the_run_is_named_by_model_target_and_start_and_its_phases_are_logged(written):
    root = _events(written)
    (name,) = [value.item().decode() for _, value in root[layout.RUN_NAME_TAG]]
    assert name == "two-tower modeled:2xV100 2026-11-27 14:05"
    assert [(step, float(value)) for step, value in root[layout.SIMULATED_TAG]] == [(1, 1.0), (2, 1.0), (3, 0.0),
                                                                                 (4, 0.0), (5, 0.0)]
    assert not any(tag.startswith("step_time") for tag in root), "step times belong to the series runs"


def test_run_name_reads_the_start_time_from_the_run_directory(tmp_path):
    from agents.experiment.config import ExperimentConfig
    from agents.run_files import run_name

    config = ExperimentConfig(model="two-tower")
    assert run_name(config, tmp_path / "20261127-140512") == f"two-tower {config.target} 2026-11-27 14:05"
    assert run_name(config, tmp_path / "20261127-140512-2") == f"two-tower {config.target} 2026-11-27 14:05-2"
    assert run_name(config, tmp_path / "mine") == f"two-tower {config.target} mine"


def test_wandb_gets_the_same_series_in_milliseconds(monkeypatch):
    logged = []

    class Run:
        def log(self, values, step):
            logged.append((step, values))

    tracker = WandbTracker.__new__(WandbTracker)
    from agents.tracking import StepTimeSeries

    tracker.run, tracker._series = Run(), StepTimeSeries({"expert": 2.89e-4})
    tracker.log_update(4, {"step_time_best": 2.91e-4, "reward_mean": -1.0})
    ((step, values),) = logged
    assert step == 4 and values == pytest.approx({"step_time_ms/best": 0.291, "step_time_ms/baseline/expert": 0.289,
                                                  "training/reward_mean": -1.0})
