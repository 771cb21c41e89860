"""End to end through the console script, as a user runs it."""

import json
import subprocess
import sys

import pytest

from agents.cli import build_parser


def _placer(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "agents.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_measure_prints_step_time_statistics_as_json(tmp_path):
    out = tmp_path / "placement.json"
    run = _placer("measure", "mlp", "--placement", "round-robin", "--target", "inprocess:2", "--repeats", "3",
                  "--json", "--save-placement", str(out))
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert report["result"]["ok"] and len(report["result"]["samples"]) == 3
    saved = json.loads(out.read_text())
    assert saved["metadata"]["step_time"] == report["result"]["seconds"]

    again = _placer("measure", "mlp", "--placement", str(out), "--target", "inprocess:2", "--repeats", "2")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "step time median" in again.stdout


@pytest.mark.slow  # about 17 s; `placer.cost.compare` is tested in the default run
def test_several_placements_are_timed_side_by_side_in_interleaved_rounds():
    run = _placer("measure", "mlp", "--placement", "round-robin", "--placement", "single", "--target", "inprocess:2",
                  "--repeats", "2", "--rounds", "3", "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert report["rounds"] == 3 and [row["placement"] for row in report["placements"]] == ["round-robin", "single"]
    for row in report["placements"]:
        assert row["ok"] and len(row["rounds"]) == 3 and row["median"] == sorted(row["rounds"])[1]

    # a placement that fails (here every step times out) is reported with its reason, not retried every round;
    # two-tower's ~10 ms steps always pass a 1 ms deadline (mlp's ~1.3 ms steps sometimes made it in time)
    failing = _placer("measure", "two-tower", "--placement", "single", "--placement", "round-robin", "--target", "inprocess:2",
                      "--repeats", "2", "--rounds", "3", "--step-timeout", "0.001", "--json")
    assert failing.returncode == 1, failing.stderr[-2000:]
    for row in json.loads(failing.stdout)["placements"]:
        assert not row["ok"] and row["median"] is None and row["rounds"] == [None] and "timeout" in row["failure"]

    saving = _placer("measure", "mlp", "--placement", "single", "--placement", "single", "--save-placement", "x.json")
    assert saving.returncode == 2 and "single --placement" in saving.stderr
    one = _placer("measure", "mlp", "--rounds", "3")
    assert one.returncode == 2 and "more than once" in one.stderr


def test_placement_file_for_another_model_is_a_one_paragraph_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "placer.placement", "format_version": 1, "graph": {"fingerprint": "abc"}, "devices": [], "ops": {}}')
    run = _placer("measure", "mlp", "--placement", str(bad))
    assert run.returncode == 2
    assert "placer: error:" in run.stderr and "make a new placement for this graph" in run.stderr
    assert "Traceback" not in run.stderr


def test_unknown_model_lists_the_built_in_ones():
    run = _placer("measure", "resnet-9000")
    assert run.returncode == 2 and "two-tower" in run.stderr and "Traceback" not in run.stderr


def test_models_lists_every_benchmark_model_with_its_paper_setting():
    run = _placer("models")
    assert run.returncode == 0, run.stderr[-2000:]
    for name in ("inception-v3", "resnet-50", "rnnlm", "nmt-2", "nmt-4", "nmt-8", "transformer"):
        assert f"  {name} " in run.stdout
    assert "paper:" in run.stdout and "tiny, small, paper" in run.stdout


def test_measure_the_expert_placement_of_a_benchmark_model(tmp_path):
    out = tmp_path / "expert.json"
    run = _placer("measure", "rnnlm", "--placement", "expert", "--target", "inprocess:2", "--repeats", "2",
                  "--save-placement", str(out))
    assert run.returncode == 0, run.stderr[-2000:]
    saved = json.loads(out.read_text())
    assert saved["metadata"]["method"] == "expert"
    assert {device for device in saved["ops"].values()} == {"/job:localhost/replica:0/task:0/device:CPU:0",
                                                           "/job:localhost/replica:0/task:0/device:CPU:1"}


def test_expert_placement_of_a_user_model_is_refused_with_a_reason():
    run = _placer("measure", "placer.models.mlp:mlp_graph", "--placement", "expert")
    assert run.returncode == 2 and "exists only for built-in models" in run.stderr and "Traceback" not in run.stderr


USER_MODEL = '''
import tensorflow as tf

from placer.graph import graph_from_function


def tiny_step(size):
    def build():
        x = tf.random.uniform({"tiny": (4, 8), "small": (16, 8)}[size], name="features")
        w = tf.compat.v1.get_variable("w", (8, 2))
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w)), name="loss")
        return tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train"), loss

    return graph_from_function(build, name=f"user-step-{size}")


def broken():
    raise ValueError("no data here")
'''


@pytest.mark.slow  # about 13 s; Keras model specs are measured end to end in the default run
def test_measure_a_model_function_from_a_python_file(tmp_path):
    model = tmp_path / "user_model.py"
    model.write_text(USER_MODEL)
    run = _placer("measure", f"{model}:tiny_step", "--target", "inprocess:1", "--repeats", "2", "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert report["graph"] == "user-step-tiny" and report["result"]["ok"] and len(report["result"]["samples"]) == 2

    broken = _placer("measure", f"{model}:broken")
    assert broken.returncode == 2 and "Traceback" not in broken.stderr
    assert f"model function '{model}:broken' raised ValueError: no data here" in broken.stderr


def test_measure_on_a_modeled_machine_answers_from_the_simulator_with_a_timeline(tmp_path):
    timeline = tmp_path / "step.json"
    run = _placer("measure", "nmt-2", "--target", "modeled:2xV100", "--placement", "expert", "--timeline",
                  str(timeline), "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert report["backend"] == "simulated" and report["result"]["ok"] and report["result"]["seconds"] > 0
    assert set(report["result"]["peak_memory"]) == {f"/job:localhost/replica:0/task:0/device:{d}"
                                                    for d in ("CPU:0", "GPU:0", "GPU:1")}
    events = json.loads(timeline.read_text())["traceEvents"]
    assert any(e.get("cat") == "op" for e in events) and any(e.get("cat") == "transfer" for e in events)

    # heuristics that read the simulator's op costs are available there, and compared side by side
    compared = _placer("measure", "nmt-2", "--target", "modeled:2xV100", "--placement", "metis", "--placement",
                       "single-device", "--rounds", "2", "--json")
    assert compared.returncode == 0, compared.stderr[-2000:]
    rows = {row["placement"]: row for row in json.loads(compared.stdout)["placements"]}
    assert rows["metis"]["median"] < rows["single-device"]["median"]


def test_a_testbed_with_more_workers_than_cores_is_refused_at_once_with_what_to_use_instead():
    import os
    import time

    cores = len(os.sched_getaffinity(0))
    workers = max(99, cores + 1)
    started = time.monotonic()
    run = _placer("measure", "two-tower", "--target", f"local:{workers}", timeout=120)
    assert run.returncode == 2, run.stderr[-2000:]
    assert time.monotonic() - started < 60
    assert f"placer: error: local:{workers} needs {workers} cores" in run.stderr
    assert f"may use only {cores}" in run.stderr and f"local:{cores} or fewer" in run.stderr
    assert "Traceback" not in run.stderr and "did not listen" not in run.stderr


@pytest.mark.parametrize("argv, dest", [
    (["measure", "mlp"], "target"), (["calibrate", "--out", "c.json"], "target"), (["tune", "mlp"], "target"),
    (["schedule", "v-shape"], "target"), (["apply", "p.json"], "target"), (["place", "mlp", "--policy", "p"], "target"),
    (["train", "mlp"], "cluster"),
])
def test_every_command_that_takes_a_target_takes_target_and_still_its_old_spelling_cluster(argv, dest):
    parser = build_parser()
    assert getattr(parser.parse_args([*argv, "--target", "local:2"]), dest) == "local:2"
    assert getattr(parser.parse_args([*argv, "--cluster", "local:2"]), dest) == "local:2"


def test_pretrain_takes_its_targets_as_target_and_still_as_machines():
    parser = build_parser()
    for flag in ("--target", "--machines"):
        args = parser.parse_args(["pretrain", "--out", "p.npz", flag, "modeled:2xV100", "modeled:4xV100"])
        assert args.targets == ["modeled:2xV100", "modeled:4xV100"]


def test_steps_keeps_its_old_meanings_hidden_behind_repeats_in_apply_and_updates_in_train(capsys):
    parser = build_parser()
    assert parser.parse_args(["apply", "p.json", "--steps", "3"]).repeats == 3
    # without --repeats, apply times its default 10 steps and more until 0.3 s of them ran; a count given runs exactly
    from placer.apply.run import APPLY_CONFIG
    from placer.measure.config import measure_config

    assert measure_config(parser.parse_args(["apply", "p.json"]), APPLY_CONFIG) == APPLY_CONFIG
    assert APPLY_CONFIG.timed_steps == 10 and APPLY_CONFIG.timed_seconds == 0.3
    exact = measure_config(parser.parse_args(["apply", "p.json", "--repeats", "10"]), APPLY_CONFIG)
    assert (exact.timed_steps, exact.timed_seconds) == (10, 0.0)
    assert parser.parse_args(["train", "mlp", "--steps", "7"]).updates == 7
    for command in ("apply", "train"):
        with pytest.raises(SystemExit):
            parser.parse_args([command, "--help"])
        shown = capsys.readouterr().out
        assert "--steps" not in shown and "--target" in shown


def test_wandb_disabled_is_another_spelling_of_off():
    from agents.experiment.config import ExperimentConfig

    assert build_parser().parse_args(["train", "mlp", "--wandb", "disabled"]).wandb == "off"
    assert ExperimentConfig(model="mlp", wandb="disabled").wandb == "off"


def test_measure_flags_refuse_values_that_time_nothing_before_any_work():
    run = _placer("measure", "mlp", "--repeats", "0")
    assert run.returncode == 2 and "--repeats must be at least 1" in run.stderr, run.stderr[-2000:]
