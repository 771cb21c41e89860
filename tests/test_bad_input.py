"""Bad input is refused before any work starts: one paragraph on stderr, exit status 2, no traceback."""

from __future__ import annotations

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
