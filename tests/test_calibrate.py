"""The calibration fit: recovers known link costs from probe timings, shrugs off a disturbed probe, says
how well it fits, and refuses to be applied to devices it was not made for."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from placer.calibrate import default_probes, fit_calibration, modeled_extra
from placer.calibration import Calibration, load_calibration
from placer.devices import local_devices
from placer.errors import ProfileError

TRUTH = {"step_overhead": 2e-3, "spanning_overhead": 1e-3, "send_cpu": 40e-6, "send_cpu_per_byte": 0.4e-9,
         "recv_cpu": 90e-6, "recv_cpu_per_byte": 0.9e-9, "latency": 150e-6, "bandwidth": math.inf}
PROBES = default_probes()


def _timings(rounds=5, noise=0.02, seed=0, disturb=None, drift=0.3, truth=TRUTH):
    """Timings a machine with `truth`'s costs would give: each probe's reference step and the probe step that
    adds its transfers, with multiplicative noise and a drift shared by both sides of a round."""
    rng = np.random.default_rng(seed)
    timings = {}
    for probe in PROBES:
        base = truth["step_overhead"] + (20e-3 if "busy" in probe.family else 0.0)  # the busy chain
        extra = modeled_extra(probe, truth)
        reference, placed = [], []
        for r in range(rounds):
            speed = 1.0 + drift * r / rounds  # the machine slows down over the rounds
            reference.append(base * speed * (1 + noise * rng.standard_normal()))
            disturbance = disturb[1] if disturb and disturb[0] == probe.name else 0.0
            if not isinstance(disturbance, float):  # one disturbance per round
                disturbance = disturbance[r]
            placed.append((base + extra) * speed * (1 + noise * rng.standard_normal()) + disturbance)
        timings[probe.name] = {"reference": reference, "probe": placed}
    return timings


def _with_cpu(timings, noise=0.03, seed=1, truth=TRUTH, participation=1e-3):
    """The free probes' CPU seconds per step of workers 0 and 1 that `truth`'s cores would show: the sender
    serializes, the receiver deserializes and pays `participation` for joining the step at all."""
    rng = np.random.default_rng(seed)
    for probe in PROBES:
        if probe.family != "free":
            continue
        rounds = len(timings[probe.name]["reference"])
        maker = 0.3e-3 + probe.nbytes * probe.tensors * 0.1e-9  # filling the tensors, on worker 0 either way
        k, b = probe.tensors, probe.nbytes
        send = k * (truth["send_cpu"] + truth["send_cpu_per_byte"] * b)
        recv = participation + k * (truth["recv_cpu"] + truth["recv_cpu_per_byte"] * b)
        jitter = lambda: 1 + noise * rng.standard_normal()  # noqa: E731
        timings[probe.name]["reference_cpu"] = [[maker * jitter(), 0.0] for _ in range(rounds)]
        timings[probe.name]["probe_cpu"] = [[(maker + send) * jitter(), recv * jitter()] for _ in range(rounds)]
    return timings


def test_the_cores_costs_come_from_the_workers_cpu_time_where_it_was_measured():
    # step times swinging 20 % between measurements bury the busy probes' signal; the CPU time does not swing
    noisy = _timings(noise=0.2, seed=3)
    from_busy = fit_calibration(PROBES, noisy)
    from_cpu = fit_calibration(PROBES, _with_cpu(noisy))
    assert from_busy.core_fit == "busy-probes" and from_cpu.core_fit == "cpu-time"
    for name in ("send_cpu_per_byte", "recv_cpu_per_byte"):
        assert getattr(from_cpu, name) == pytest.approx(TRUTH[name], rel=0.1), name
    assert from_cpu.recv_cpu == pytest.approx(TRUTH["recv_cpu"], abs=20e-6)
    assert from_cpu.send_cpu == pytest.approx(TRUTH["send_cpu"], abs=20e-6)
    assert abs(from_busy.recv_cpu_per_byte / TRUTH["recv_cpu_per_byte"] - 1) > 0.1  # what it replaces
    # the busy families then check the model on wall time instead of being fitted
    assert {name.split()[0] for name in from_cpu.check_residuals} == {"both-ways", "sender-busy", "receiver-busy"}
    assert "CPU time" in from_cpu.describe()


def test_a_cpu_time_calibration_round_trips_and_an_unknown_core_fit_is_refused(tmp_path):
    calibration = fit_calibration(PROBES, _with_cpu(_timings()))
    loaded = load_calibration(calibration.save(tmp_path / "c.json"))
    assert loaded.core_fit == "cpu-time" and loaded.recv_cpu_per_byte == calibration.recv_cpu_per_byte
    assert loaded.samples["free 1000x4"]["probe_cpu"] == calibration.samples["free 1000x4"]["probe_cpu"]
    damaged = (tmp_path / "c.json").read_text().replace('"cpu-time"', '"guesswork"')
    (tmp_path / "d.json").write_text(damaged)
    with pytest.raises(ProfileError, match="core_fit"):
        load_calibration(tmp_path / "d.json")


def test_the_fit_recovers_known_transfer_costs_with_intervals_that_cover_them():
    calibration = fit_calibration(PROBES, _timings(noise=0.002, drift=0.0))
    for name in ("send_cpu_per_byte", "recv_cpu_per_byte", "recv_cpu", "spanning_overhead"):
        assert getattr(calibration, name) == pytest.approx(TRUTH[name], rel=0.15), name
        low, high = calibration.intervals[name]
        assert low <= getattr(calibration, name) <= high
    assert calibration.send_cpu == pytest.approx(TRUTH["send_cpu"], abs=15e-6)
    assert calibration.latency == pytest.approx(TRUTH["latency"], abs=40e-6)
    # the cores, not a wire, bind these transfers: the rate their bytes move at is the busier core's
    assert 1 / calibration.bandwidth == pytest.approx(TRUTH["recv_cpu_per_byte"], rel=0.15)
    assert not calibration.poor_fit


def test_a_step_away_from_the_masters_worker_costs_the_fitted_remote_overhead(tmp_path, mlp):
    import json

    from placer.placement import Placement
    from placer.profile import CostTable
    from placer.simulate import Simulator

    truth = {**TRUTH, "remote_overhead": 0.6e-3}
    devices = local_devices(logical_cpus=2)
    calibration = fit_calibration(PROBES, _timings(noise=0.002, drift=0.0, truth=truth), devices=devices.names)
    assert calibration.remote_overhead == pytest.approx(0.6e-3, rel=0.1)
    assert "remote_overhead" in calibration.describe()
    linked, config = calibration.apply(devices)
    costs = CostTable(mlp.fingerprint, "CPU", {op.name: 1e-4 for op in mlp.step_ops}, "hand-made")
    simulator = Simulator(mlp, linked, costs, config)
    on_first, on_second = (simulator.simulate(Placement.on_device(mlp, linked, d)).step_time for d in (0, 1))
    assert on_second - on_first == pytest.approx(calibration.remote_overhead)
    # a file from before the remote probes loads with none
    path = calibration.save(tmp_path / "calibration.json")
    older = json.loads(path.read_text())
    older.pop("remote_overhead")
    path.write_text(json.dumps(older))
    assert load_calibration(path).remote_overhead == 0.0


def test_the_request_delay_reaches_the_simulator_and_a_file_from_before_it_loads_with_none(tmp_path):
    import dataclasses
    import json

    devices = local_devices(logical_cpus=2)
    calibration = dataclasses.replace(fit_calibration(PROBES, _timings(), devices=devices.names),
                                      request_delay=2e-3, request_hops={"idle": (3e-4,), "busy": (2.3e-3,)})
    assert calibration.apply(devices)[1].request_delay == 2e-3
    assert "request_delay" in calibration.describe()
    path = calibration.save(tmp_path / "calibration.json")
    assert load_calibration(path).request_delay == 2e-3
    older = json.loads(path.read_text())
    older.pop("request_delay")
    older.pop("request_hops")
    path.write_text(json.dumps(older))
    assert load_calibration(path).request_delay == 0.0


def test_the_request_delay_is_said_as_the_share_of_busy_hops_that_were_late_and_by_how_much():
    import dataclasses

    hops = {"idle": (4e-4,) * 4, "busy": (3e-3, 4e-3, 3e-4, 2e-4)}  # two late, two as prompt as idle ones
    calibration = dataclasses.replace(fit_calibration(PROBES, _timings()), request_delay=1.4e-3, request_hops=hops)
    assert calibration.late_hops == pytest.approx((0.5, 3.5e-3))
    assert "50 % of the busy hops late, by 3.5 ms on average" in calibration.describe()
    assert dataclasses.replace(calibration, request_hops={}).late_hops is None


def test_a_wire_slower_than_both_cores_is_found():
    truth = {**TRUTH, "bandwidth": 0.5e9}  # 2 ns per byte, slower than either core
    calibration = fit_calibration(PROBES, _timings(noise=0.002, drift=0.0, truth=truth))
    assert calibration.bandwidth == pytest.approx(0.5e9, rel=0.15)


def test_where_the_cores_bind_every_calibration_gives_a_bandwidth_near_theirs_and_none_flips_to_infinity():
    """At 5 % above the busier core a wire was once taken, below it none: on the testbed the bandwidth then
    flipped between about 2 GB/s and infinity from one calibration to the next while transfers cost the same."""
    fits = [fit_calibration(PROBES, _timings(noise=0.02, seed=seed, drift=0.1)) for seed in range(6)]
    rates = [f.bandwidth for f in fits]
    assert all(math.isfinite(rate) for rate in rates)
    assert max(rates) / min(rates) < 1.4
    for fit in fits:  # and the free transfers are priced as the cores bind them, whichever side of the edge
        extra = modeled_extra(PROBES[3], {**TRUTH, **{k: getattr(fit, k) for k in TRUTH}})
        assert extra == pytest.approx(modeled_extra(PROBES[3], TRUTH), rel=0.15)


def test_a_disturbed_probe_does_not_move_the_fit_and_shows_in_its_residual():
    clean = fit_calibration(PROBES, _timings())
    # its rounds met a busy machine, by different amounts and once the other way: noise
    disturbed = fit_calibration(PROBES, _timings(disturb=("receiver-busy 100000x1", [30e-3, 20e-3, -6e-3, 25e-3, 12e-3])))
    assert disturbed.recv_cpu_per_byte == pytest.approx(clean.recv_cpu_per_byte, rel=0.2)
    assert disturbed.send_cpu_per_byte == pytest.approx(clean.send_cpu_per_byte, rel=0.2)
    worst = max(disturbed.residuals, key=lambda name: abs(disturbed.residuals[name]))
    assert worst == "receiver-busy 100000x1" and disturbed.poor_fit and "POOR FIT" in disturbed.describe()
    assert not clean.poor_fit and not clean.model_limits


def test_a_probe_the_model_misses_in_every_round_is_its_limit_not_a_poor_fit():
    # one probe costs 20 ms more than the model says in every round: recalibrating would give the same
    limited = fit_calibration(PROBES, _timings(disturb=("receiver-busy 100000x1", 20e-3)))
    assert not limited.poor_fit and list(limited.model_limits) == ["receiver-busy 100000x1"]
    assert "POOR FIT" not in limited.describe() and "a limit of the transfer model" in limited.describe()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        limited.apply(local_devices(logical_cpus=2))  # no warning at every use: nothing to act on


def test_drift_between_rounds_cancels_because_sides_are_paired_within_a_round():
    steady = fit_calibration(PROBES, _timings(drift=0.0, noise=0.0))
    drifting = fit_calibration(PROBES, _timings(drift=0.5, noise=0.0))
    assert drifting.recv_cpu_per_byte == pytest.approx(steady.recv_cpu_per_byte, rel=0.35)


def test_the_both_ways_probes_check_the_model_without_being_fitted():
    # A machine where sending and receiving at once cost each core only the larger of the two: the check
    # probes miss, the fit does not move, and the calibration says so without calling itself a poor fit.
    timings = _timings(noise=0.0, drift=0.0)
    for probe in PROBES:
        if probe.family == "both-ways":
            timings[probe.name]["probe"] = [t - 0.5 * probe.tensors * probe.nbytes * 0.4e-9 - 0.3e-3
                                            for t in timings[probe.name]["probe"]]
    calibration = fit_calibration(PROBES, timings)
    assert calibration.recv_cpu_per_byte == pytest.approx(TRUTH["recv_cpu_per_byte"], rel=0.05)
    assert set(calibration.check_residuals) == {p.name for p in PROBES if p.family == "both-ways"}
    assert min(calibration.check_residuals.values()) < -0.05
    assert not calibration.poor_fit and "model check" in calibration.describe()


def test_a_fit_without_the_probes_it_needs_is_refused():
    without_busy = [p for p in PROBES if p.family != "sender-busy"]
    with pytest.raises(ProfileError, match="sender-busy"):
        fit_calibration(without_busy, _timings())


def test_a_calibration_refuses_devices_it_was_not_made_for(tmp_path):
    made_on = local_devices(logical_cpus=2)
    calibration = fit_calibration(PROBES, _timings(), target="local:2", devices=made_on.names)
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
    calibration = fit_calibration(PROBES, _timings(disturb=("sender-busy 1000x4", [40e-3, 30e-3, -8e-3, 35e-3, 0.0])))
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
    path = fit_calibration(PROBES, _timings(), target="local:2", devices=workers).save(tmp_path / "testbed.json")
    with open_target(mlp, f"calibrated:{path}") as target:  # profiles the graph on local:2, once
        assert target.backend == "simulated" and target.devices.names == workers
        one = target.evaluate(Placement.on_device(mlp, target.devices, 0))
        split = target.evaluate(Placement.round_robin(mlp, target.devices))
        assert one.ok and split.ok and one.seconds > TRUTH["step_overhead"]
        # a step over both workers pays the fitted overhead of spanning them and the links' costs
        assert split.seconds > TRUTH["spanning_overhead"]

        # the small constants TensorFlow sends anyway, learned once in process and kept beside the op costs
        from placer.cost.calibrated import sent_constants_cache
        from placer.measure.partitions import constants_sent_when_cut

        learned = target.simulator.config.sent_constants
        assert learned == constants_sent_when_cut(mlp)
        assert json.loads(sent_constants_cache(path, mlp).read_text())["sent_constants"] == sorted(learned)

    def no_testbed(*args, **kwargs):
        raise AssertionError("the cached op costs should have been used")

    def not_again(*args, **kwargs):
        raise AssertionError("the cached small constants should have been used")

    monkeypatch.setattr(placer.measure, "Measurer", no_testbed)
    monkeypatch.setattr(placer.measure.partitions, "constants_sent_when_cut", not_again)
    with open_target(mlp, f"calibrated:{path}") as again:
        assert again.evaluate(Placement.on_device(mlp, again.devices, 0)).seconds == pytest.approx(one.seconds)
        assert again.simulator.config.sent_constants == learned
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

    path = fit_calibration(PROBES, _timings(), target="local:2",
                           devices=("/job:worker/replica:0/task:0/device:CPU:0",
                                    "/job:worker/replica:0/task:1/device:CPU:0")).save(tmp_path / "c.json")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    config, _ = config_from_args(parser.parse_args(["mlp", "--target", f"calibrated:{path}"]))
    assert config.backend == "simulated" and config.target == f"calibrated:{path}"
    with pytest.raises(PlacerError, match="no calibration file"):
        config_from_args(parser.parse_args(["mlp", "--target", f"calibrated:{tmp_path}/none.json"]))


# About 29 s: `calibrate` on the testbed runs in the default suite (tests/test_testbed.py); this is its command line.
@pytest.mark.slow
@pytest.mark.testbed
def test_placer_calibrate_probes_the_testbed_and_saves_a_fit_that_says_how_good_it_is(tmp_path):
    import json
    import subprocess
    import sys

    out = tmp_path / "calibration.json"
    run = subprocess.run([sys.executable, "-m", "placer.cli", "calibrate", "--target", "local:2", "--out", str(out),
                          "--rounds", "2", "--json"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    calibration = load_calibration(out)
    # 2 rounds, or 4 where the first fit missed by noise and every probe was timed again (`fit_repeating_a_poor_fit`)
    assert report["target"] == "local:2" and calibration.rounds in (2, 4) and len(calibration.devices) == 2
    assert calibration.step_overhead > 0 and calibration.bandwidth > 1e6
    assert set(calibration.residuals) == set(calibration.samples) and set(calibration.intervals) >= {"bandwidth"}
    # the request probe: its own 20 rounds (2 are too few), each the hops of four traced steps after a first
    # left out, from each device in turn, beside an idle sender and a busy one; each side averaged without its
    # 16 lowest and 16 highest hops
    assert {name: len(hops) for name, hops in calibration.request_hops.items()} == {"idle": 160, "busy": 160,
                                                                                   "sender": 160}
    import statistics

    hops = {name: sorted(calibration.request_hops[name])[16:-16] for name in ("idle", "busy")}
    assert calibration.request_delay == pytest.approx(
        max(statistics.mean(hops["busy"]) - statistics.mean(hops["idle"]), 0.0))


def test_a_calibration_from_an_older_placer_or_another_machine_says_what_to_rerun(tmp_path):
    import json

    made_on = local_devices(logical_cpus=2)
    elsewhere = {"processor": "some other processor", "cores": 64}
    calibration = fit_calibration(PROBES, _timings(), target="local:2", devices=made_on.names, machine=elsewhere)
    path = calibration.save(tmp_path / "calibration.json")
    with pytest.warns(RuntimeWarning, match="another machine.*placer calibrate"):
        load_calibration(path).apply(made_on)
    old = json.loads(path.read_text())
    old.pop("version")
    path.write_text(json.dumps(old))
    with pytest.raises(ProfileError, match="older placer.*calibrate again"):
        load_calibration(path)


def test_a_busy_chain_grows_with_what_its_probe_sends():
    from placer.calibrate import Probe, busy_chain_matmuls

    small, many, large = (busy_chain_matmuls(Probe("sender-busy", e, k)) for e, k in ((1_000, 1), (1_000, 32), (4_000_000, 1)))
    assert small < many < large
    assert large >= 4 * small  # 16 MB needs a chain several times that of 4 KB, which would drown in it


def test_a_busy_probe_whose_chain_the_transfer_outlasted_is_flagged():
    timings = _timings()
    assert not [w for w in _fit_warnings(timings) if "busy chain" in w]
    # the 16 MB receiver-busy probe's chain was shorter than the receiving core's time for 16 MB
    name = "receiver-busy 4000000x1"
    timings = _with_cpu(timings)
    timings[name] = {side: [t - 19e-3 for t in values] for side, values in timings[name].items()}
    assert [w for w in _fit_warnings(timings) if "busy chain" in w and name in w]


def _fit_warnings(timings) -> list[str]:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit_calibration(PROBES, timings)
    return [str(w.message) for w in caught]


def test_one_probe_with_lucky_fast_steps_does_not_set_the_step_overhead():
    timings = _timings(noise=0.002, drift=0.0)
    lucky = timings["ping-pong 1x8"]  # every round of one light probe's reference ran at half the overhead
    lucky["reference"] = [t - TRUTH["step_overhead"] / 2 for t in lucky["reference"]]
    lucky["probe"] = [t - TRUTH["step_overhead"] / 2 for t in lucky["probe"]]
    calibration = fit_calibration(PROBES, timings)
    assert calibration.step_overhead == pytest.approx(TRUTH["step_overhead"], rel=0.05)


def test_one_disturbed_remote_probe_does_not_set_the_remote_overhead():
    truth = {**TRUTH, "remote_overhead": 0.6e-3}
    calibration = fit_calibration(PROBES, _timings(noise=0.002, drift=0.0, truth=truth,
                                                   disturb=("remote 1000x1", 1.5e-3)))
    assert sum(probe.family == "remote" for probe in PROBES) >= 3
    assert calibration.remote_overhead == pytest.approx(0.6e-3, rel=0.1)


def test_the_request_probe_reads_every_traced_step_but_the_first_which_is_late_after_untraced_steps(monkeypatch):
    import types

    import placer.calibrate as calibrate
    from placer.calibration import request_delay_by_sender
    from placer.measure import MeasureConfig

    # Each measurement's traces: a first traced step always late (5 ms), then hops of 0.3 ms when the sender
    # idles and, beside the busy chain, 1.3 ms from device 0 and 3.3 ms from device 1 (whose core has nothing
    # to wake the request's thread); the chain's links take 2.5 ms each.
    def trace_hops(name, sender):
        later = 0.3e-3 if name.endswith("x0") else (1.3e-3, 3.3e-3)[sender]
        return [5e-3] + [later] * (calibrate.REQUEST_TRACED_STEPS - 1)

    class Measurer:
        devices = ("worker0", "worker1")
        config = MeasureConfig()

        def measure(self, graph, sender, config):
            assert config.profile_steps == calibrate.REQUEST_TRACED_STEPS and config.keep_every_trace
            return types.SimpleNamespace(ok=True, failure=None,
                                         chrome_traces=tuple(f"{graph}:{hop}" for hop in trace_hops(graph, sender)))

    monkeypatch.setattr(calibrate, "request_probe_graph", lambda size, links: f"probe-x{links}")
    monkeypatch.setattr(calibrate, "request_probe_placement", lambda graph, devices, sender=0: sender)
    monkeypatch.setattr(calibrate, "traced_hop", lambda trace: (float(trace.split(":")[1]), 0.0, 10e-3))
    delay, hops = calibrate.measure_request_delay(Measurer(), rounds=3)
    read = calibrate.REQUEST_TRACED_STEPS - calibrate.REQUEST_SKIPPED_STEPS
    # both devices send in every round, as many hops each
    assert {name: len(values) for name, values in hops.items()} == {"idle": 6 * read, "busy": 6 * read,
                                                                    "sender": 6 * read}
    assert hops["sender"].count(0) == hops["sender"].count(1)
    assert request_delay_by_sender(hops) == pytest.approx({0: 1e-3, 1: 3e-3})
    assert delay == pytest.approx(2e-3)  # the one delay the simulator takes: the average over both
    alone, hops = calibrate.measure_request_delay(Measurer(), rounds=3, senders=(1,))
    assert alone == pytest.approx(3e-3) and set(hops["sender"]) == {1}
    with pytest.raises(ValueError, match="skip fewer than them"):
        calibrate.measure_request_delay(Measurer(), rounds=3, traced_steps=2, skipped_steps=2)
    with pytest.raises(ValueError, match="devices 0 and 1"):
        calibrate.measure_request_delay(Measurer(), rounds=3, senders=(2,))


def test_hops_from_a_file_made_before_both_devices_sent_are_all_device_0s():
    from placer.calibration import request_delay_by_sender

    assert request_delay_by_sender({"idle": [3e-4] * 4, "busy": [2.3e-3] * 4}) == pytest.approx({0: 2e-3})


def test_the_request_delay_averages_the_hops_and_a_stray_hop_does_not_move_it():
    from placer.calibration import request_delay

    idle = (3e-4,) * 20
    busy = tuple(1e-3 + 2.5e-4 * k for k in range(20))  # 1.0-5.75 ms, evenly: their mean is 3.375 ms
    assert request_delay({"idle": idle, "busy": busy}) == pytest.approx(3.075e-3)
    # A worker descheduled for 50 ms in one round, beside the busy or the idle sender: left out.
    assert request_delay({"idle": idle, "busy": busy[:-1] + (50e-3,)}) == pytest.approx(3.075e-3)
    assert request_delay({"idle": idle[:-1] + (50e-3,), "busy": busy}) == pytest.approx(3.075e-3)
    # Not later beside the busy sender: no delay.
    assert request_delay({"idle": busy, "busy": idle}) == 0.0


def test_the_request_delay_s_interval_resamples_rounds_and_is_wide_when_busy_hops_are_now_prompt_now_late():
    from placer.calibrate import request_delay_interval

    idle = (3e-4,) * 5
    steady = request_delay_interval({"idle": idle, "busy": (2.3e-3,) * 5})
    assert steady == pytest.approx((2e-3, 2e-3))
    # Three late hops and two prompt ones: resamples put the delay anywhere from a fifth of 2 ms to all of it.
    mixed = request_delay_interval({"idle": idle, "busy": (2.3e-3, 3e-4, 2.3e-3, 3e-4, 2.3e-3)})
    assert mixed == pytest.approx((4e-4, 2e-3))
    with pytest.raises(ValueError, match="as many idle hops as busy ones"):
        request_delay_interval({"idle": idle, "busy": (2.3e-3,)})
    import dataclasses

    calibration = dataclasses.replace(fit_calibration(PROBES, _timings()), request_delay=2e-3,
                                      request_hops={"idle": idle, "busy": (2.3e-3,) * 5})
    calibration = dataclasses.replace(calibration, intervals={**calibration.intervals, "request_delay": mixed})
    assert "request_delay           2.000 ms     90% interval [0.400, 2.000]" in calibration.describe()


def test_a_graph_that_cannot_run_in_process_keeps_the_replication_rule_and_says_so(tmp_path, monkeypatch, mlp):
    import tensorflow as tf

    import placer.measure.partitions
    from placer.cost.calibrated import learned_sent_constants, sent_constants_cache

    def out_of_memory(*args, **kwargs):
        raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")

    monkeypatch.setattr(placer.measure.partitions, "constants_sent_when_cut", out_of_memory)
    with pytest.warns(RuntimeWarning, match="could not run 'mlp.*OOM when allocating"):
        assert learned_sent_constants(mlp, tmp_path / "testbed.json") == frozenset()
    assert not sent_constants_cache(tmp_path / "testbed.json", mlp).exists()  # tried again next time


def test_a_poor_fit_times_the_probes_again_and_fits_every_round_before_it_is_reported(tmp_path):
    """A busy moment disturbs one probe in the first five rounds (by different amounts, once the other way): that
    fit is poor, so the probes run five rounds more on a quiet machine and the fit of all ten holds."""
    from placer.calibrate import fit_repeating_a_poor_fit

    disturbed = _timings(disturb=("receiver-busy 100000x1", [30e-3, 20e-3, -6e-3, 25e-3, 12e-3]))
    batches = iter([disturbed, _timings(seed=7)])
    timed = []

    def time_rounds():
        timed.append(1)
        return next(batches)

    fitted = fit_repeating_a_poor_fit(time_rounds, lambda timings: fit_calibration(PROBES, timings))
    assert len(timed) == 2 and fitted.rounds == 10 and not fitted.poor_fit
    assert list(fitted.first_misses) == ["receiver-busy 100000x1"]
    assert "timed twice: the first 5 rounds missed receiver-busy 100000x1" in fitted.describe()
    assert load_calibration(fitted.save(tmp_path / "c.json")).first_misses == fitted.first_misses
    # a fit that holds is timed once
    once = []
    clean = fit_repeating_a_poor_fit(lambda: once.append(1) or _timings(), lambda t: fit_calibration(PROBES, t))
    assert len(once) == 1 and clean.rounds == 5 and not clean.first_misses
