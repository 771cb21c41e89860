import json

import numpy as np
import pytest

from placer.calibration import Calibration, load_calibration
from placer.cost.calibrated import calibration_variant, cost_cache, cost_cache_dir, sent_constants_cache
from placer.cost.refit import MIN_PLACEMENTS, fit_transfer_factor, refit_changes
from placer.devices import machine_from_dict
from placer.placement import Placement
from placer.profile import CostTable
from placer.simulate import Simulator, SimulatorConfig

MS = 1e-3
ON_CORES = {"send_cpu": 0.2 * MS, "send_cpu_per_byte": 1e-10, "recv_cpu": 0.3 * MS, "recv_cpu_per_byte": 1e-10}


def _simulator(graph, **config):
    devices = machine_from_dict({
        "devices": [{"name": "CPU:0"}, {"name": "CPU:1"}],
        "links": [{"source": "CPU:0", "target": "CPU:1", "bandwidth": "1e9", "latency": 1e-5},
                  {"source": "CPU:1", "target": "CPU:0", "bandwidth": "1e9", "latency": 1e-5}]})
    rng = np.random.default_rng(3)
    table = CostTable(graph.fingerprint, "CPU", {op.name: float(rng.random()) * MS for op in graph.step_ops}, "random")
    return Simulator(graph, devices, table, SimulatorConfig(cpu_slots=1, **config))


def _placements(graph, simulator, count: int) -> dict[str, Placement]:
    rng = np.random.default_rng(7)
    return {f"random-{k}": Placement.from_assignment(graph, simulator.devices, rng.integers(0, 2, len(graph.groups)))
            for k in range(count)}


def test_a_reconfigured_simulator_predicts_as_one_built_with_that_config(two_tower):
    simulator = _simulator(two_tower, **ON_CORES)
    dearer = {"send_cpu": 0.6 * MS, "recv_cpu": 0.9 * MS, "request_delay": 1 * MS}
    built = _simulator(two_tower, **{**ON_CORES, **dearer})
    for placement in _placements(two_tower, simulator, 3).values():
        assert simulator.reconfigured(**dearer).simulate(placement).step_time == pytest.approx(
            built.simulate(placement).step_time)
        assert simulator.simulate(placement).step_time < built.simulate(placement).step_time  # the original stands
    with pytest.raises(ValueError, match="cpu_slots"):
        simulator.reconfigured(cpu_slots=2)


def test_the_fit_finds_the_factor_the_measured_steps_were_made_with(two_tower):
    simulator = _simulator(two_tower, **ON_CORES)
    truth = simulator.reconfigured(send_cpu=2 * ON_CORES["send_cpu"], recv_cpu=2 * ON_CORES["recv_cpu"])
    measured = {name: (p, truth.simulate(p).step_time) for name, p in _placements(two_tower, simulator, 5).items()}
    fit = fit_transfer_factor(simulator, measured)
    assert fit.changed and fit.factor == pytest.approx(2.0, rel=0.05)
    assert fit.error_after < 0.01 < fit.error_before
    assert "x2.00" in fit.describe() and len(fit.placements) == 5


def test_a_slow_minute_that_slows_every_step_alike_is_not_put_on_the_transfers(two_tower):
    simulator = _simulator(two_tower, **ON_CORES)
    truth = simulator.reconfigured(send_cpu=2 * ON_CORES["send_cpu"], recv_cpu=2 * ON_CORES["recv_cpu"])
    slow = 1.3  # the machine at the minute of the check: every step 30 % longer than profiled
    measured = {name: (p, slow * truth.simulate(p).step_time)
                for name, p in _placements(two_tower, simulator, 5).items()}
    alone = Placement.on_device(two_tower, simulator.devices, 0)
    fit = fit_transfer_factor(simulator, measured, ("single-device", alone, slow * truth.simulate(alone).step_time))
    assert fit.factor == pytest.approx(2.0, rel=0.05) and fit.error_after < 0.01
    assert "against single-device's step" in fit.describe()
    assert fit_transfer_factor(simulator, measured).factor > 2.5  # without the reference, the minute is taken too


def test_a_twin_that_already_fits_keeps_the_calibration_s_costs(two_tower):
    simulator = _simulator(two_tower, **ON_CORES)
    measured = {name: (p, simulator.simulate(p).step_time * 1.01)  # within a step's noise
                for name, p in _placements(two_tower, simulator, 4).items()}
    fit = fit_transfer_factor(simulator, measured)
    assert not fit.changed and fit.factor == 1.0
    assert "kept as calibrated" in fit.describe()


def test_a_kept_calibration_names_a_dearer_factor_only_where_it_would_lower_the_error():
    from placer.cost.refit import TransferRefit

    better = TransferRefit(1.0, ("metis", "scotch", "exact"), 0.106, 0.095, 1.26, "single-device")
    assert "(x1.26 would give 9.5 %)" in better.describe()
    worse = TransferRefit(1.0, ("metis", "scotch", "exact"), 0.106, 0.109, 3.43, "single-device")
    assert worse.describe().endswith("its median error is 10.6 % (no dearer transfer fits them better)")


def test_no_fit_from_too_few_placements_that_span_devices_or_without_core_costs(two_tower):
    simulator = _simulator(two_tower, **ON_CORES)
    spanning = list(_placements(two_tower, simulator, MIN_PLACEMENTS - 1).items())
    alone = [(f"alone-{d}", Placement.on_device(two_tower, simulator.devices, d)) for d in (0, 1)]
    measured = {name: (p, 0.01) for name, p in spanning + alone}
    assert fit_transfer_factor(simulator, measured) is None  # one device's steps say nothing of transfers
    links_only = _simulator(two_tower)
    assert fit_transfer_factor(links_only, {name: (p, 0.01) for name, p in
                                            _placements(two_tower, links_only, 5).items()}) is None


def test_a_calibration_variant_keeps_the_op_costs_profiled_for_the_original(tmp_path, two_tower):
    original = Calibration(step_overhead=2e-4, spanning_overhead=1e-4, send_cpu=2e-5, send_cpu_per_byte=1e-10,
                           recv_cpu=3e-5, recv_cpu_per_byte=1e-10, latency=1e-5, bandwidth=float("inf"), samples={},
                           target="local:2").save(tmp_path / "calibration.json")
    costs = cost_cache(original, two_tower)
    costs.parent.mkdir(parents=True)
    costs.write_text(json.dumps({"op costs": 1}))
    sent_constants_cache(original, two_tower).write_text(json.dumps({"sent_constants": []}))
    changes = {"send_cpu": 4e-5, "recv_cpu": 6e-5}
    variant = calibration_variant(original, changes, tmp_path / "plan.refit.calibration.json")
    loaded = load_calibration(variant)
    assert (loaded.send_cpu, loaded.recv_cpu, loaded.latency) == (4e-5, 6e-5, 1e-5)
    assert cost_cache(variant, two_tower).read_text() == costs.read_text()  # found under the variant's digest
    assert sent_constants_cache(variant, two_tower).exists()
    assert cost_cache_dir(variant) != cost_cache_dir(original)
    again = calibration_variant(original, {"send_cpu": 8e-5}, variant)  # a later run's refit, saved in its place
    assert [p.name for p in cost_cache_dir(again).glob(f"{two_tower.name}-*.json")
            if "sent-constants" not in p.name] == [cost_cache(again, two_tower).name]  # the stale table is gone
    with pytest.raises(ValueError, match="beside it"):
        calibration_variant(original, changes, original)


def test_refit_changes_scale_the_per_transfer_costs_only(two_tower):
    simulator = _simulator(two_tower, **ON_CORES)
    truth = simulator.reconfigured(send_cpu=3 * ON_CORES["send_cpu"], recv_cpu=3 * ON_CORES["recv_cpu"])
    fit = fit_transfer_factor(simulator, {n: (p, truth.simulate(p).step_time)
                                          for n, p in _placements(two_tower, simulator, 4).items()})
    calibration = Calibration(step_overhead=0, spanning_overhead=0, samples={}, latency=0, bandwidth=1e9, **ON_CORES)
    changes = refit_changes(calibration, fit)
    assert set(changes) == {"send_cpu", "recv_cpu"}
    assert changes["send_cpu"] == pytest.approx(fit.factor * ON_CORES["send_cpu"])
