"""The calibration fit: recovers known link costs from probe timings, shrugs off a disturbed probe, says
how well it fits, and refuses to be applied to devices it was not made for."""

from __future__ import annotations

import numpy as np
import pytest

from placer.calibrate import Calibration, fit_calibration, load_calibration
from placer.devices import local_devices
from placer.errors import ProfileError

TRUTH = {"step_overhead": 2e-3, "spanning_overhead": 1e-3, "transfer_cpu": 50e-6, "latency": 200e-6, "bandwidth": 1.5e9}
SIZES = (1_000, 10_000, 100_000, 1_000_000, 4_000_000)
COUNTS = (1, 4, 16, 32)


def _probes():
    probes = {f"size {n}": (n, 1) for n in SIZES}
    probes.update({f"count {k}": (1_000, k) for k in COUNTS})
    return probes


def _timings(rounds=5, noise=0.02, seed=0, disturb=None, drift=0.3):
    """Timings a machine with TRUTH's costs would give: the local step, and the split step that adds the
    transfers, with multiplicative noise and a drift shared by both sides of a round."""
    rng = np.random.default_rng(seed)
    timings = {}
    for name, (elements, tensors) in _probes().items():
        transfer = (TRUTH["spanning_overhead"] + tensors * TRUTH["transfer_cpu"]
                    + (TRUTH["latency"] + 4.0 * elements / TRUTH["bandwidth"] if name.startswith("size") else 0.0))
        local, split = [], []
        for r in range(rounds):
            speed = 1.0 + drift * r / rounds  # the machine slows down over the rounds
            local.append(TRUTH["step_overhead"] * speed * (1 + noise * rng.standard_normal()))
            split.append((TRUTH["step_overhead"] + transfer) * speed * (1 + noise * rng.standard_normal())
                         + (disturb[1] if disturb and disturb[0] == name else 0.0))
        timings[name] = {"local": local, "split": split}
    return timings


def test_the_fit_recovers_known_link_costs_with_intervals_that_cover_them():
    calibration = fit_calibration(_probes(), _timings(noise=0.005, drift=0.0))
    assert calibration.bandwidth == pytest.approx(TRUTH["bandwidth"], rel=0.1)
    assert calibration.spanning_overhead + calibration.transfer_cpu + calibration.latency == pytest.approx(
        TRUTH["spanning_overhead"] + TRUTH["transfer_cpu"] + TRUTH["latency"], rel=0.15)
    assert calibration.transfer_cpu == pytest.approx(TRUTH["transfer_cpu"], rel=0.2)
    for name in ("bandwidth", "transfer_cpu", "spanning_overhead"):
        low, high = calibration.intervals[name]
        assert low <= getattr(calibration, name) <= high
    assert not calibration.poor_fit


def test_a_disturbed_probe_does_not_move_the_fit_and_shows_in_its_residual():
    clean = fit_calibration(_probes(), _timings())
    # every round of one probe met a busy machine: 20 ms more
    disturbed = fit_calibration(_probes(), _timings(disturb=("size 100000", 20e-3)))
    assert disturbed.bandwidth == pytest.approx(clean.bandwidth, rel=0.2)
    assert disturbed.transfer_cpu == pytest.approx(clean.transfer_cpu, rel=0.2)
    worst = max(disturbed.residuals, key=lambda name: abs(disturbed.residuals[name]))
    assert worst == "size 100000" and disturbed.poor_fit and "POOR FIT" in disturbed.describe()


def test_drift_between_rounds_cancels_because_sides_are_paired_within_a_round():
    steady = fit_calibration(_probes(), _timings(drift=0.0, noise=0.0))
    drifting = fit_calibration(_probes(), _timings(drift=0.5, noise=0.0))
    assert drifting.bandwidth == pytest.approx(steady.bandwidth, rel=0.35)


def test_a_calibration_refuses_devices_it_was_not_made_for(tmp_path):
    made_on = local_devices(logical_cpus=2)
    calibration = fit_calibration(_probes(), _timings(), target="local:2", devices=made_on.names)
    path = calibration.save(tmp_path / "calibration.json")
    loaded = load_calibration(path)
    assert loaded == calibration
    loaded.apply(made_on)
    with pytest.raises(ProfileError, match="placer calibrate"):
        loaded.apply(local_devices(logical_cpus=3))


@pytest.mark.parametrize("content", [b"\xff\xfe\x00\x81", b"{}", b'{"format": "placer.calibration", "latency": "x"}',
                                     b"[1, 2]"])
def test_a_damaged_calibration_file_is_refused_with_what_to_do(tmp_path, content):
    path = tmp_path / "calibration.json"
    path.write_bytes(content)
    with pytest.raises(ProfileError, match="calibrat"):
        load_calibration(path)


def test_a_poor_fit_warns_when_applied():
    calibration = fit_calibration(_probes(), _timings(disturb=("count 4", 30e-3)))
    assert isinstance(calibration, Calibration) and calibration.poor_fit
    with pytest.warns(RuntimeWarning, match="poorly"):
        calibration.apply(local_devices(logical_cpus=2))


@pytest.mark.testbed
def test_a_calibrated_target_simulates_the_testbed_with_costs_profiled_there_once(tmp_path, monkeypatch, mlp):
    import gymnasium as gym

    import envs  # noqa: F401
    import placer.measure
    from placer.cost import open_target
    from placer.placement import Placement

    workers = tuple(f"/job:worker/replica:0/task:{i}/device:CPU:0" for i in range(2))
    path = fit_calibration(_probes(), _timings(), target="local:2", devices=workers).save(tmp_path / "testbed.json")
    with open_target(mlp, f"calibrated:{path}") as target:  # profiles the graph on local:2, once
        assert target.backend == "simulated" and target.devices.names == workers
        one = target.evaluate(Placement.single_device(mlp, target.devices))
        split = target.evaluate(Placement.round_robin(mlp, target.devices))
        assert one.ok and split.ok and one.seconds > TRUTH["step_overhead"]
        # a step over both workers pays the fitted overhead of spanning them and the links' costs
        assert split.seconds > TRUTH["spanning_overhead"]

    def no_testbed(*args, **kwargs):
        raise AssertionError("the cached op costs should have been used")

    monkeypatch.setattr(placer.measure, "Measurer", no_testbed)
    with open_target(mlp, f"calibrated:{path}") as again:
        assert again.evaluate(Placement.single_device(mlp, again.devices)).seconds == pytest.approx(one.seconds)
    env = gym.make("placer/Placement-v0", model="mlp", devices=f"calibrated:{path}")
    try:
        env.reset(seed=0)
        assert env.step(env.action_space.sample())[4]["ok"]
    finally:
        env.close()


def test_train_on_a_calibrated_target_is_simulated_and_a_missing_file_is_refused(tmp_path):
    import argparse

    from agents.launch import add_arguments, config_from_args
    from placer.errors import PlacerError

    path = fit_calibration(_probes(), _timings(), target="local:2",
                           devices=("/job:worker/replica:0/task:0/device:CPU:0",
                                    "/job:worker/replica:0/task:1/device:CPU:0")).save(tmp_path / "c.json")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    config, _ = config_from_args(parser.parse_args(["mlp", "--cluster", f"calibrated:{path}"]))
    assert config.backend == "simulated" and config.target == f"calibrated:{path}"
    with pytest.raises(PlacerError, match="no calibration file"):
        config_from_args(parser.parse_args(["mlp", "--cluster", f"calibrated:{tmp_path}/none.json"]))


@pytest.mark.testbed
def test_placer_calibrate_probes_the_testbed_and_saves_a_fit_that_says_how_good_it_is(tmp_path):
    import json
    import subprocess
    import sys

    out = tmp_path / "calibration.json"
    run = subprocess.run([sys.executable, "-m", "placer.cli", "calibrate", "--cluster", "local:2", "--out", str(out),
                          "--rounds", "2", "--json"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    calibration = load_calibration(out)
    assert report["target"] == "local:2" and calibration.rounds == 2 and len(calibration.devices) == 2
    assert calibration.step_overhead > 0 and calibration.bandwidth > 1e6
    assert set(calibration.residuals) == set(calibration.samples) and set(calibration.intervals) >= {"bandwidth"}
