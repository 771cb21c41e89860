"""The transfer-pattern experiment's per-tensor arithmetic, on hand-made measurements."""

import json

import pytest

from experiments.probes.transfer_pattern import Timed, main, per_tensor_rows


def test_each_placement_is_reported_per_tensor_beyond_the_single_worker_placement():
    measured = {
        "worker 0": [Timed(2e-3, (1.5e-3, 0.0), (10, 0)), Timed(2.2e-3, (1.4e-3, 0.0), (9, 0)),
                     Timed(1.8e-3, (1.6e-3, 0.0), (11, 0))],
        "split": [Timed(8e-3, (5e-3, 5e-3), (150, 110))] * 3,  # 100 tensors: 60 us of wall, 85 us of CPU, 2.5 switches
        "metis": [Timed(6e-3, (4.5e-3, 4e-3), (210, 200)), Timed(6e-3, (4.5e-3, 4e-3), (210, 200)),
                  Timed(99.0, (9.0, 9.0), (1e6, 1e6))],  # one outlier round
    }
    rows = {r["placement"]: r for r in per_tensor_rows(measured, {"worker 0": 0, "split": 100, "metis": 50}, "worker 0")}
    assert rows["worker 0"]["extra_cpu_per_tensor_us"] is None and rows["worker 0"]["step_ms"] == pytest.approx(2.0)
    assert rows["split"]["extra_wall_per_tensor_us"] == pytest.approx(60.0)
    assert rows["split"]["extra_cpu_per_tensor_us"] == pytest.approx(85.0)
    assert rows["split"]["extra_switches_per_tensor"] == pytest.approx(2.5)
    assert rows["metis"]["extra_switches_per_tensor"] == pytest.approx(8.0)
    assert rows["metis"]["extra_wall_per_tensor_us"] == pytest.approx(80.0)  # the medians shrug off the outlier
    assert rows["metis"]["extra_cpu_per_tensor_us"] == pytest.approx(140.0)


def test_placements_the_report_lacks_or_a_reference_that_sends_are_refused_before_anything_runs(tmp_path):
    row = {"model": "branchy-0", "heldout": True, "placement": "split 0.50", "on_worker_1": 0.5, "assignment": [0, 1],
           "tensors_sent": 3}
    report = tmp_path / "run.json"
    report.write_text(json.dumps({"rows": [row]}))
    with pytest.raises(SystemExit, match="no branchy-0 row with an assignment for 'metis'"):
        main(["--report", str(report), "--placements", "split 0.50", "metis"])
    with pytest.raises(SystemExit, match="must keep every op on one worker"):
        main(["--report", str(report), "--placements", "split 0.50"])
