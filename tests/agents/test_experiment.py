"""Experiments as a researcher runs them: settings, the run directory, resuming, curves and export."""

from __future__ import annotations

import argparse
import json
import math
import warnings

import numpy as np
import pytest

from agents import run_files
from agents.experiment.config import ExperimentConfig, ExperimentError
from agents.experiment.results import export_run
from agents.experiment.run import run_experiment
from agents.launch import add_arguments, config_from_args
from agents.tracking import Trackers, placement_matrix, wandb_mode
from placer.models import build_model
from placer.placement import check_same_graph, load_placement, read_placement_file


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


# -- settings -------------------------------------------------------------------------------------


def test_settings_layer_defaults_then_file_then_flags(tmp_path):
    config_file = tmp_path / "run.yaml"
    config_file.write_text("size: small\nupdates: 7\nagent_options:\n  learning_rate: 0.05\n  num_groups: 8\n")
    defaults = {"model": "nmt-2", "size": "paper", "cluster": "modeled:4xV100"}
    config, run_dir = config_from_args(_args("--config", str(config_file), "--updates", "9",
                                             "--set", "learning_rate=0.01"), defaults)
    assert (config.model, config.size, config.cluster, config.updates) == ("nmt-2", "small", "modeled:4xV100", 9)
    assert config.agent_options == {"learning_rate": 0.01, "num_groups": 8}
    assert run_dir is None


def test_time_budget_alone_trains_until_it_runs_out():
    config, _ = config_from_args(_args("two-tower", "--time-budget", "2"))
    assert config.updates is None and config.time_budget == 2


def test_bad_settings_are_refused_with_the_reason(tmp_path):
    with pytest.raises(ExperimentError, match="unknown setting.*learnin_rate"):
        config_from_args(_args("two-tower", "--config", str(_write(tmp_path / "c.yaml", "learnin_rate: 1"))))
    with pytest.raises(ExperimentError, match="KEY=VALUE"):
        config_from_args(_args("two-tower", "--set", "learning_rate"))
    with pytest.raises(ExperimentError, match="unknown backend"):
        ExperimentConfig(backend="gpu")
    with pytest.raises(ExperimentError, match="which model"):
        config_from_args(_args())
    with pytest.raises(ExperimentError, match="greedy_every must be a whole number of at least 0"):
        config_from_args(_args("two-tower", "--greedy-every", "-1"))
    assert config_from_args(_args("two-tower", "--greedy-every", "5"))[0].greedy_every == 5
    with pytest.raises(ExperimentError, match="confirm_repeats must be a whole number of at least 0"):
        config_from_args(_args("two-tower", "--confirm-repeats", "-1"))
    # measured timings are noisy, so a would-be best is re-timed by default; simulated ones are not
    assert config_from_args(_args("two-tower", "--backend", "measured"))[0].repeats_to_confirm == 3
    assert config_from_args(_args("two-tower"))[0].repeats_to_confirm == 0
    assert config_from_args(_args("two-tower", "--backend", "measured", "--confirm-repeats", "0"))[0].repeats_to_confirm == 0


def _write(path, text):
    path.write_text(text)
    return path


# -- a run ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def random_run(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    config = ExperimentConfig(model="two-tower", agent="random", updates=3, samples_per_update=3, runs=str(runs),
                              baselines=["single-device", "round-robin", "expert", "metis"], progress=False)
    return run_experiment(config)


def test_a_run_leaves_everything_a_researcher_looks_for(random_run):
    run_dir, summary = random_run.run_dir, random_run.summary
    assert run_dir.parent.name == "two-tower"
    for name in ("config.json", "log.txt", "baselines.json", "trainer_state.json", "best_placement.json",
                 "timeline.json", "summary.json"):
        assert (run_dir / name).is_file(), name
    assert summary.samples == 9 and summary.updates == 3
    assert run_files.read_summary(run_dir) == summary
    state = run_files.read_trainer_state(run_dir)
    assert summary.best_step_time == min(min(h["step_time_best"] for h in state.history), math.inf)
    baselines = run_files.read_baselines(run_dir)
    assert set(baselines) == {"single-device", "round-robin", "expert", "metis"}
    beaten = {name for name, timing in baselines.items() if timing.seconds > summary.best_step_time}
    assert set(summary.beaten_baselines) == beaten
    assert summary.best_baseline_step_time == min(timing.seconds for timing in baselines.values())
    # every placement in the run directory is a placement file of the run's graph
    graph = build_model("two-tower", "tiny")
    for name, timing in baselines.items():
        placement = read_placement_file(run_dir / timing.placement)
        check_same_graph(placement, graph)
        assert placement.metadata["method"] == name and placement.recorded_step_time == timing.step_time
    trace = json.loads((run_dir / "timeline.json").read_text())
    assert trace["traceEvents"], "the best placement's timeline is empty"
    assert "new best" in (run_dir / "log.txt").read_text()


def test_a_partition_started_planner_reports_where_it_started(tmp_path):
    from agents.experiment.results import describe

    options = {"num_groups": 8, "hidden_size": 16, "grouping_hidden_size": 8, "grouping_prior": "partition",
               "placement_prior_weight": 2.5, "tanh_constant": 2.5, "temperature": 0.5}
    config = ExperimentConfig(model="two-tower", size="small", updates=2, samples_per_update=2, greedy_every=1,
                              runs=str(tmp_path), baselines=["single-device", "expert"], agent_options=options,
                              progress=False)
    result = run_experiment(config)
    summary = result.summary
    start = read_placement_file(result.run_dir / "start_placement.json").recorded_step_time
    # The untrained policy's greedy placement is the partition's cut, one tower per GPU: as fast as the
    # expert's, much faster than one GPU. It is reported apart from what training found.
    assert summary.start_step_time == start
    assert start < 0.8 * summary.baselines["single-device"]
    assert start == pytest.approx(summary.baselines["expert"], rel=0.05)
    assert summary.samples == 2 * 2 + 2  # the greedy placement after each update counts as a sample
    assert "untrained policy" in describe(summary, result.run_dir) and "its greedy placement before training" in describe(
        summary, result.run_dir)


def test_a_simulated_run_shows_every_placement_against_the_bound(random_run):
    from agents.experiment.results import describe

    summary = random_run.summary
    bound = summary.bound["seconds"]
    assert summary.bound["simulated_on"] == "modeled:2xV100" and 0 < bound <= summary.best_step_time
    assert all(bound <= t for t in summary.baselines.values() if t is not None)
    best = summary.best_baseline_step_time
    assert summary.gap_closed == pytest.approx((best - summary.step_time) / (best - bound))
    table = describe(summary, random_run.run_dir)
    assert f"{summary.step_time / bound:6.2f}x bound" in table
    assert "simulated on modeled:2xV100" in table and "gap closed" in table
    assert run_files.read_summary(random_run.run_dir).bound == summary.bound  # kept in summary.json


def test_tensorboard_gets_grouped_curves_hparams_and_the_placement(random_run):
    import tensorflow as tf

    from placer.dashboard import layout

    def tags_in(directory):
        tags, plugins = set(), set()
        for path in directory.glob("events.out.tfevents.*"):
            for event in tf.compat.v1.train.summary_iterator(str(path)):
                for value in event.summary.value:
                    tags.add(value.tag)
                    plugins.add(value.metadata.plugin_data.plugin_name)
        return tags, plugins

    root = random_run.run_dir / "tensorboard"
    tags, plugins = tags_in(root)
    assert {"training/reward_mean", "training/failure_rate", layout.RUN_NAME_TAG} <= tags
    assert {"the_best_placement/devices", "the_best_placement/table", "custom_scalars__config__"} <= tags
    assert {"scalars", "images", "text", "hparams", "custom_scalars"} <= plugins
    # every step-time series is a run of its own, so that TensorBoard colours each; one tag, in ms
    baselines = run_files.read_baselines(random_run.run_dir)
    series = {"best", "sampled"} | {f"baseline/{name}" for name in baselines}
    assert all(tags_in(root / layout.SERIES_DIR / name)[0] == {layout.STEP_TIME_TAG} for name in series)
    # TensorBoard orders sections by name and opens the first two: step time, then the best placement; the
    # agent's internals (not logged by random search) come last
    from agents.tracking import PLACEMENT_IMAGE_TAG, SCALAR_TAGS

    sections = sorted({layout.STEP_TIME_TAG, *(tag.split("/")[0] for tag in [*SCALAR_TAGS.values(), PLACEMENT_IMAGE_TAG])})
    assert sections == [layout.STEP_TIME_TAG, "the_best_placement", "training", "update"]
    plugin_own = ("_hparams_/", "custom_scalars__", "run/")  # plugins' own tags, and the run's name
    assert {tag.split("/")[0] for tag in tags if not tag.startswith(plugin_own)} == set(sections) - {
        layout.STEP_TIME_TAG, "update"}


def test_a_run_resumes_and_extends_its_budget(random_run, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(random_run.run_dir, copy)
    config, run_dir = config_from_args(_args("--resume", str(copy), "--updates", "5", "--no-progress"))
    assert run_dir == copy and config.updates == 5 and config.model == "two-tower"
    result = run_experiment(config, run_dir)
    state = run_files.read_trainer_state(copy)
    assert [h["update"] for h in state.history] == [1, 2, 3, 4, 5]
    assert result.summary.samples == 15
    with pytest.raises(ExperimentError, match="only --updates, --time-budget, --workers and --ray"):
        config_from_args(_args("--resume", str(copy), "--size", "small"))
    # where the evaluations run does not change the results: a run may go on with workers
    config, _ = config_from_args(_args("--resume", str(copy), "--workers", "2", "--no-progress"))
    assert config.workers == 2 and config.model == "two-tower"


def test_export_carries_what_the_placement_is_worth(random_run, tmp_path):
    out = tmp_path / "placement.json"
    metadata = export_run(random_run.run_dir, out)
    summary = random_run.summary
    assert metadata["source"] == summary.fastest and metadata["step_time"] == summary.fastest_step_time
    assert metadata["learned_step_time"] == summary.best_step_time
    assert metadata["beaten_baselines"] == sorted(name for name, t in summary.baselines.items()
                                                  if name != metadata["source"] and metadata["step_time"] < t)
    assert metadata["model"] == "two-tower" and metadata["backend"] == "simulated"
    graph = build_model("two-tower", "tiny")
    placement = load_placement(out, graph, modeled_devices())
    if summary.fastest == "learned":
        assert tuple(placement.group_devices) == run_files.read_trainer_state(random_run.run_dir).best_assignment
    else:
        timing = run_files.read_baselines(random_run.run_dir)[summary.fastest]
        assert tuple(placement.group_devices) == tuple(run_files.baseline_assignment(
            random_run.run_dir, timing, graph, modeled_devices()))


def modeled_devices():
    """The devices of the default simulated target, modeled:2xV100."""
    from placer.cost import parse_target_spec

    return parse_target_spec("modeled:2xV100").devices


def test_a_run_whose_learned_placement_lost_exports_the_fastest_placement_it_measured(tmp_path):
    from agents.experiment.results import describe
    from placer.heuristics import make_heuristic

    # one random placement over a CPU and two GPUs cannot match the expert's one tower per GPU
    config = ExperimentConfig(model="two-tower", agent="random", updates=1, samples_per_update=1, runs=str(tmp_path),
                              baselines=["single-device", "expert"], greedy_every=0, progress=False)
    result = run_experiment(config)
    summary = result.summary
    assert summary.fastest == "expert" and summary.fastest_step_time == summary.baselines["expert"]
    assert summary.step_time > summary.fastest_step_time
    assert "the fastest placement measured is expert's" in describe(summary, result.run_dir)
    out = tmp_path / "placement.json"
    metadata = export_run(result.run_dir, out)
    assert metadata["source"] == "expert" and metadata["step_time"] == summary.baselines["expert"]
    assert metadata["learned_step_time"] == summary.step_time and "expert" not in metadata["beaten_baselines"]
    graph = build_model("two-tower", "tiny")
    devices = modeled_devices()
    exported = load_placement(out, graph, devices)
    assert exported.group_devices == make_heuristic("expert", graph, devices, model="two-tower").group_devices


def test_a_summary_an_older_placer_wrote_is_refused_with_what_to_run(random_run, tmp_path):
    import shutil

    copy = tmp_path / "old-run"
    shutil.copytree(random_run.run_dir, copy)
    data = json.loads((copy / "summary.json").read_text())
    del data["step_time"], data["baselines_at_start"]
    (copy / "summary.json").write_text(json.dumps(data))
    with pytest.raises(ExperimentError, match=r"lacks baselines_at_start, step_time: .*placer train --resume"):
        run_files.read_run(copy)


def test_export_of_a_run_without_an_update_says_so(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"experiment": ExperimentConfig().to_dict()}))
    with pytest.raises(ExperimentError, match="no best placement yet"):
        export_run(tmp_path, tmp_path / "out.json")
    with pytest.raises(ExperimentError, match="not a run directory"):
        export_run(tmp_path / "nowhere", tmp_path / "out.json")


# -- dashboards -----------------------------------------------------------------------------------


def test_placement_image_names_each_device_on_its_row():
    from agents.tracking import IMAGE_WIDTH, ROW_PIXELS, placement_image

    matrix = placement_matrix(np.array([0, 1, 1, 1]), np.array([1, 1, 2, 4]), num_devices=2, columns=2)
    names = ["worker:0/CPU:0", "worker:1/CPU:0"]
    (image,) = placement_image(matrix, names)
    assert image.shape[0] == 2 * ROW_PIXELS and image.shape[1] > IMAGE_WIDTH and image.dtype == np.uint8
    # left of the matrix's columns: ink on every row, and the two names differ (task 0 and 1)
    label_width = image.shape[1] - IMAGE_WIDTH
    rows = [image[r * ROW_PIXELS + 1:(r + 1) * ROW_PIXELS, :label_width, 0] for r in range(2)]
    assert all((row < 128).any() for row in rows) and not np.array_equal(*rows)
    with pytest.raises(ValueError, match="as many device names"):
        placement_image(matrix, names[:1])


def test_placement_image_matrix_shows_which_slice_runs_where():
    # 4 groups of 1, 1, 2, 4 ops over 2 devices, 2 columns: groups 0-1 in column 0, groups 2-3 in column 1
    matrix = placement_matrix(np.array([0, 1, 1, 1]), np.array([1, 1, 2, 4]), num_devices=2, columns=2)
    np.testing.assert_allclose(matrix, [[0.5, 0.0], [0.5, 1.0]])


def test_wandb_is_offline_without_an_account(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert wandb_mode("auto") == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_mode("auto") == "online"
    assert wandb_mode("offline") == "offline"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode("online") == "disabled"


def test_a_failing_tracker_is_dropped_not_fatal():
    class Broken:
        def log_update(self, update, metrics):
            raise OSError("disk full")

    class Recording:
        def __init__(self):
            self.updates = []

        def log_update(self, update, metrics):
            self.updates.append(update)

    recording = Recording()
    trackers = Trackers([Broken(), recording])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trackers.log_update(1, {})
        trackers.log_update(2, {})
    assert recording.updates == [1, 2]
    assert len(caught) == 1 and "disk full" in str(caught[0].message)


def test_wandb_run_through_an_experiment_stays_off_the_network(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    config = ExperimentConfig(model="two-tower", agent="random", updates=1, samples_per_update=2, runs=str(tmp_path),
                              baselines=["single-device"], wandb="auto", progress=False)
    result = run_experiment(config)
    assert result.summary.updates == 1


@pytest.mark.parametrize("model", ["inception-v3", "resnet-50", "rnnlm", "nmt-2", "nmt-4", "nmt-8", "transformer"])
def test_each_benchmark_has_a_launch_script_with_the_paper_setting(model, monkeypatch, capsys):
    import runpy
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "experiments" / f"train_{model.replace('-', '_')}.py"

    def printed_config(*flags):
        """The script run as `python SCRIPT --print-config FLAGS`, in this process (a fresh interpreter would
        spend seconds importing TensorFlow again)."""
        monkeypatch.setattr(sys, "argv", [str(script), "--print-config", *flags])
        with pytest.raises(SystemExit) as exited:
            runpy.run_path(str(script), run_name="__main__")
        assert exited.value.code == 0
        return json.loads(capsys.readouterr().out)

    config = printed_config("--updates", "3")
    assert (config["model"], config["size"], config["backend"], config["updates"]) == (model, "paper", "simulated", 3)
    assert config["cluster"].startswith("modeled:")
    measured = printed_config("--backend", "measured", "--size", "tiny")
    assert measured["cluster"] is None  # the modeled machine is dropped: measured means the testbed
