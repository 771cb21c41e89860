"""The transfer CPU experiment's arithmetic, on hand-made measurements (the experiment itself needs local:2)."""

import pytest

from experiments.probes.transfer_cpu import COLUMNS, fault_fit, parse_env, per_step, round_differences


def measurement(index, side, **values):
    return {"round": index, "side": side, **{column: values.get(column, 0.0) for column in COLUMNS}}


def test_each_round_is_its_probe_minus_its_reference_in_every_column():
    rows = round_differences([measurement(0, "reference", step_ms=2.0, sender_faults=100.0),
                              measurement(0, "probe", step_ms=10.0, sender_faults=40.0),
                              measurement(1, "probe", step_ms=9.0), measurement(1, "reference", step_ms=1.5)])
    assert [r["round"] for r in rows] == [0, 1]
    assert rows[0]["step_ms"] == 8.0 and rows[0]["sender_faults"] == -60.0 and rows[1]["step_ms"] == 7.5
    with pytest.raises(ValueError, match="round 2 needs one reference and one probe"):
        round_differences([measurement(2, "probe")])


def test_per_step_takes_cpu_from_the_timed_steps_and_counters_over_every_step_run():
    row = per_step({"median": 0.01, "worker_cpu": (0.005, 0.008)},
                   {"sender_faults": 100, "receiver_faults": 0, "ksoftirqd": 1.0, "softirq": 2.0},
                   {"sender_faults": 800, "receiver_faults": 70, "ksoftirqd": 1.007, "softirq": 2.0},
                   steps_run=7)
    assert row["step_ms"] == pytest.approx(10.0) and row["sender_cpu_ms"] == pytest.approx(5.0)
    assert row["sender_faults"] == 100 and row["receiver_faults"] == 10 and row["ksoftirqd_ms"] == pytest.approx(1.0)


def test_the_fault_fit_recovers_the_cost_per_fault_and_the_cost_without_faults():
    rows = [{"sender_faults": f, "sender_cpu_ms": 5.0 + 0.002 * f} for f in (-500.0, 0.0, 1100.0, 2200.0)]
    fit = fault_fit(rows)
    assert fit["us_per_fault"] == pytest.approx(2.0) and fit["cpu_ms_without_faults"] == pytest.approx(5.0)
    assert fit["correlation"] == pytest.approx(1.0)
    assert fault_fit(rows[:2])["correlation"] is None  # too few rounds to fit


def test_env_pairs_are_checked():
    assert parse_env(["A=1", "B=x=y"]) == {"A": "1", "B": "x=y"}
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        parse_env(["TF_CPU_ALLOCATOR_USE_BFC"])
