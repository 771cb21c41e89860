"""experiments/probes/schedule_fidelity.py --dry-run prices every plan both ways and measures nothing."""

import json

from experiments.probes.schedule_fidelity import main
from placer.calibration import Calibration
from placer.host import this_machine


def calibration_file(tmp_path):
    calibration = Calibration(step_overhead=1e-3, spanning_overhead=3e-4, send_cpu=5e-5, send_cpu_per_byte=1e-9,
                              recv_cpu=5e-5, recv_cpu_per_byte=1e-9, latency=1e-4, bandwidth=float("inf"), samples={},
                              target="local:2", rounds=2, machine=this_machine(),
                              devices=tuple(f"/job:worker/replica:0/task:{i}/device:CPU:0" for i in range(2)))
    return calibration.save(tmp_path / "calibration.json")


def test_a_dry_run_prices_each_plan_op_by_op_and_by_block_spans_without_measuring(tmp_path, capsys, no_testbed):
    path = calibration_file(tmp_path)
    out = tmp_path / "fidelity.json"
    main(["--calibration", str(path), "--models", "two-tower", "--methods", "sequential", "gpipe", "--dry-run",
          "--time-limit", "2", "--out", str(out)])
    report = json.loads(out.read_text())
    rows = {(r["mode"], r["method"]): r for r in report["rows"]}
    assert set(rows) == {(mode, method) for mode in ("training", "inference") for method in ("sequential", "gpipe")}
    for row in rows.values():
        assert row["measured_ms"] is None
        # Both prices pay the calibrated step overhead (1 ms): the blocks' in the tail after their makespan.
        assert row["predicted_ms"] > 1.0 and row["span_ms"] > 1.0
    for mode in ("training", "inference"):
        assert report["plans"][f"two-tower {mode}"]["tail_seconds"] > 1e-3
    # One micro-batch at a time, the spans priced from the sequential step add up to that step.
    sequential = rows[("training", "sequential")]
    assert abs(sequential["span_ms"] - sequential["predicted_ms"]) < 0.05 * sequential["predicted_ms"]
    assert report["dry_run"] and report["command"].startswith("python")
    assert "op_level_picks" in capsys.readouterr().out


def test_zero_bubble_adds_plans_over_the_split_backward_in_training(tmp_path, no_testbed):
    out = tmp_path / "fidelity.json"
    main(["--calibration", str(calibration_file(tmp_path)), "--models", "two-tower", "--methods", "1f1b",
          "--zero-bubble", "--dry-run", "--time-limit", "2", "--out", str(out)])
    report = json.loads(out.read_text())
    rows = {(r["mode"], r["method"]): r for r in report["rows"]}
    assert set(rows) == {("training", "1f1b"), ("training", "zb-h1"), ("training", "tessel-zb"), ("inference", "1f1b")}
    assert all(row["predicted_ms"] > 1.0 for row in rows.values())
    training = report["plans"]["two-tower training"]
    assert any(name.startswith("w@") for name in training["split"]["blocks"])
    assert not any(name.startswith("w@") for name in training["whole"]["blocks"])
    assert set(training["orders"]) == {"1f1b", "zb-h1", "tessel-zb"} and report["zero_bubble"]


def test_each_price_is_scored_on_the_pairs_of_plans_measured_more_than_5_percent_apart():
    from experiments.probes.schedule_fidelity import fastest

    # Measured: a 10.0, b 10.3 (3 % apart: noise), c 12.0. Op by op orders a < c and b < c right; block spans
    # put c first, and price a and b alike, which does not matter: they are not measured apart.
    rows = [{"model": "m", "mode": "training", "method": method, "measured_ms": measured, "predicted_ms": op_level,
             "span_ms": span} for method, measured, op_level, span in
            [("a", 10.0, 9.0, 9.0), ("b", 10.3, 9.5, 9.0), ("c", 12.0, 11.0, 8.0)]]
    (summary,) = fastest(rows)
    assert (summary["measured_fastest"], summary["op_level_picks"], summary["block_spans_pick"]) == ("a", "a", "c")
    assert summary["op_level_pairs_ordered"] == "2 of 2"
    assert summary["block_spans_pairs_ordered"] == "0 of 2"
