"""Bad input is refused before any work starts: one paragraph on stderr, exit status 2, no traceback."""

from __future__ import annotations

import time

import pytest

from agents.cli import main


def _refused(capsys, *argv: str) -> str:
    status = main(list(argv))
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err and err.startswith("placer: error: ") and err.count("\n") == 1, err
    return err


@pytest.fixture
def runs(tmp_path):
    return tmp_path / "runs"


@pytest.mark.parametrize("flags, reason", [
    (["--updates", "-3"], "updates must be a whole number of at least 1"),
    (["--time-budget", "0"], "time_budget must be a positive number"),
    (["--time-budget", "-5"], "time_budget must be a positive number"),
    (["--samples-per-update", "0"], "samples_per_update must be a whole number of at least 1"),
    (["--set", "nonsense=3"], "agent hierarchical has no option(s) nonsense"),
    (["--set", "learning_rate=abc"], "learning_rate needs a float, not 'abc'"),
    (["--set", "num_groups=2.5"], "num_groups needs an int or null, not 2.5"),
    (["--baselines", "single-device,bogus"], "unknown baseline 'bogus'"),
    (["--backend", "measured", "--target", "modeled:2xV100"], "is a modeled machine"),
    (["--backend", "simulated", "--target", "local:2"], "is a real target"),
    (["--backend", "measured", "--target", "local:99"], "cores"),
])
def test_train_refuses_bad_settings_before_timing_anything(capsys, runs, flags, reason):
    err = _refused(capsys, "train", "two-tower", "--runs", str(runs), *flags)
    assert reason in err
    assert not runs.exists(), "a run directory was made for a configuration that was refused"


def test_a_config_file_with_an_unknown_key_is_refused(capsys, runs, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("model: two-tower\nupdates: 2\nlearnin_rate: 0.1\n")
    assert "unknown setting(s) learnin_rate" in _refused(capsys, "train", "--config", str(config), "--runs", str(runs))
    assert not runs.exists()


def test_a_config_file_that_is_binary_is_refused(capsys, runs, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_bytes(b"\xff\xfe\x00binary\x81")
    assert "config file" in _refused(capsys, "train", "--config", str(config), "--runs", str(runs))


@pytest.mark.parametrize("body, reason", [
    ("def build():\n    raise ValueError('no such layer size')\n", "ValueError: no such layer size"),
    ("def build():\n    return 42\n", "int"),
    ("def other():\n    pass\n", "build"),
])
def test_a_model_function_that_fails_is_refused_with_what_it_did(capsys, runs, tmp_path, body, reason):
    path = tmp_path / "my_models.py"
    path.write_text(body)
    assert reason in _refused(capsys, "train", f"{path}:build", "--updates", "1", "--runs", str(runs))


def test_a_missing_model_file_is_refused_before_anything_is_built(capsys, runs, tmp_path):
    err = _refused(capsys, "train", f"{tmp_path}/nowhere.py:build", "--runs", str(runs))
    assert "nowhere.py" in err and not runs.exists()


def test_a_binary_placement_file_is_refused(capsys, tmp_path):
    path = tmp_path / "placement.json"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff")
    assert "placement" in _refused(capsys, "measure", "mlp", "--placement", str(path))


def test_measure_refuses_a_heuristic_without_the_simulator_and_an_unknown_placement(capsys):
    assert "needs a simulated target" in _refused(capsys, "measure", "mlp", "--placement", "metis")
    assert "neither a placement file nor a baseline" in _refused(capsys, "measure", "mlp", "--placement", "bogus")


# -- where a command writes, checked before any work ------------------------------------------------------

UNWRITABLE = ("/proc/nope/out.json", "a path under /proc, which no one can write")


@pytest.fixture
def a_file(tmp_path):
    """A plain file, so that a path under it names a directory that cannot exist."""
    path = tmp_path / "a-file"
    path.write_text("not a directory\n")
    return path


@pytest.mark.parametrize("command", [
    ["optimize", "two-tower", "--out", "{bad}"],
    ["optimize", "two-tower", "--calibration", "{bad}"],
    ["calibrate", "--out", "{bad}"],
    ["measure", "mlp", "--save-placement", "{bad}"],
    ["measure", "mlp", "--timeline", "{bad}"],
    ["schedule", "v-shape", "--save", "{bad}"],
    ["schedule", "v-shape", "--timeline", "{bad}"],
    ["schedule", "two-tower", "--target", "inprocess:2", "--save-plan", "{bad}"],
    ["train", "two-tower", "--runs", "{bad}"],
    ["train", "two-tower", "--run-dir", "{bad}"],
    ["export", "{here}", "--out", "{bad}"],
    ["pretrain", "--out", "{bad}"],
    ["place", "two-tower", "--policy", "{here}/policy.npz", "--out", "{bad}"],
])
@pytest.mark.parametrize("where", ["under /proc", "under a file"])
def test_every_output_path_that_cannot_be_written_is_refused_before_any_work(capsys, monkeypatch, tmp_path, a_file,
                                                                             command, where):
    import placer.calibrate

    def no_work(*args, **kwargs):
        raise AssertionError("work started before the output path was checked")

    monkeypatch.setattr(placer.calibrate, "calibrate", no_work)
    bad = "/proc/nope/out.json" if where == "under /proc" else str(a_file / "out.json")
    started = time.monotonic()
    err = _refused(capsys, *(word.format(bad=bad, here=tmp_path) for word in command))
    assert bad in err and ("cannot write in /proc" in err or f"{a_file} is a file, not a directory" in err), err
    assert time.monotonic() - started < 10, "refused only after some work"


def test_an_output_path_that_is_a_directory_is_refused(capsys, tmp_path):
    err = _refused(capsys, "optimize", "two-tower", "--out", str(tmp_path))
    assert f"--out {tmp_path} is a directory: give a file's path" in err


def test_a_calibration_file_that_is_binary_is_refused_with_what_it_holds(capsys, tmp_path):
    path = tmp_path / "calibration.json"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff")
    err = _refused(capsys, "measure", "mlp", "--target", f"calibrated:{path}")
    assert f"{path} is not a calibration file: it holds binary data" in err and "codec" not in err


def test_a_negative_memory_limit_is_refused(capsys):
    err = _refused(capsys, "schedule", "v-shape", "--memory-limit", "-1")
    assert "--memory-limit is a count of memory units per device (a forward block keeps 1), not -1" in err
    assert "over the limit" not in err


@pytest.mark.parametrize("content", [b"PK\x03\x04 not really a zip\x00\xff", b"neither zip nor numpy"])
@pytest.mark.parametrize("command", [["place", "two-tower", "--policy", "{policy}"],
                                     ["train", "two-tower", "--init", "{policy}", "--runs", "{runs}"]])
def test_a_corrupt_policy_file_is_refused_without_numpy_advice(capsys, tmp_path, content, command):
    policy = tmp_path / "policy.npz"
    policy.write_bytes(content)
    err = _refused(capsys, *(word.format(policy=policy, runs=tmp_path / "runs") for word in command))
    assert f"{policy} is not a placer policy file" in err and "pickle" not in err


def test_a_broken_plan_is_called_a_plan_file(capsys, tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text('{\n "format": "placer.plan",\n "version": 1,\n "model": "two-tower\n}\n')
    err = _refused(capsys, "apply", str(plan))
    assert f"plan file {plan} is not valid JSON (Invalid control character, line 4, column 21)" in err, err
    assert "placement file" not in err and "at at" not in err


@pytest.mark.parametrize("command", [
    ["pretrain", "--target", "calibrated:{binary}", "--out", "{here}/policy.npz", "--no-progress"],
    ["schedule", "--model", "two-tower", "--placement", "{binary}", "--target", "inprocess:2"],
    ["measure", "mlp", "--placement", "{binary}", "--target", "inprocess:2"],
])
def test_a_file_argument_is_read_before_any_worker_or_model_starts(capsys, monkeypatch, tmp_path, command):
    import agents.workers
    import placer.models

    def no_work(*args, **kwargs):
        raise AssertionError("work started before the file argument was read")

    monkeypatch.setattr(agents.workers, "open_workers", no_work)
    monkeypatch.setattr(placer.models, "load_model", no_work)
    binary = tmp_path / "file.json"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff")
    err = _refused(capsys, *(word.format(binary=binary, here=tmp_path) for word in command))
    assert f"{binary} is not a" in err and "it holds binary data" in err


def test_a_loop_whose_trip_count_depends_on_the_data_is_refused_when_asked_to_unroll(capsys, tmp_path):
    path = tmp_path / "my_models.py"
    path.write_text('''
import keras
import tensorflow as tf
from placer.graph import graph_from_keras_model


class HalveUntilSmall(keras.layers.Layer):
    def call(self, x):
        return tf.while_loop(lambda y: tf.norm(y) > 1.0, lambda y: [y * 0.5], [x])[0]


def build():
    inputs = keras.Input((4,), batch_size=4)
    model = keras.Model(inputs, keras.layers.Dense(2)(HalveUntilSmall()(inputs)))
    model.compile(optimizer="adam", loss="mse")
    return graph_from_keras_model(model, unroll_loops=True)
''')
    started = time.monotonic()
    err = _refused(capsys, "optimize", f"{path}:build", "--target", "local:2", "--out", str(tmp_path / "plan.json"))
    assert "trip count depends on the data cannot be unrolled" in err
    assert time.monotonic() - started < 60 and not (tmp_path / "plan.json").exists()  # before any testbed started
