"""The thread-fidelity experiment's inputs: the co-running probe's slowdown and a measured run to price again."""

import json

import pytest

from experiments.thread_fidelity import co_running_slowdown, stored_run


def write(path, record):
    path.write_text(json.dumps(record))
    return str(path)


def test_the_co_running_slowdown_is_the_probe_s_median_or_none(tmp_path):
    assert co_running_slowdown(write(tmp_path / "probe.json", {"median_slowdown": 1.065})) == 1.065
    assert co_running_slowdown("none") == 1.0
    with pytest.raises(ValueError, match="not a co-running probe's JSON.*experiments/probes/co_running.py"):
        co_running_slowdown(write(tmp_path / "other.json", {"rows": []}))
    with pytest.raises(ValueError, match="below 1"):
        co_running_slowdown(write(tmp_path / "fast.json", {"median_slowdown": 0.9}))


def test_a_measured_run_is_priced_again_only_from_the_op_costs_it_saved(tmp_path):
    record = {"experiment": "thread_fidelity", "mode": "measured", "date": "2026-11-26 06:59:00", "cores": 2,
              "models": ["two-tower:small"], "rounds": 3, "warmup": 3, "repeats": 10,
              "rows": [{"model": "two-tower-small", "setting": "default", "measured_ms": 33.0},
                       {"model": "two-tower-small", "setting": "intra 1 / inter 1", "measured_ms": None}],
              "picks": [{"model": "two-tower-small", "profiling_s": 10.0, "sweep_s": 21.0}]}
    with pytest.raises(ValueError, match="no op costs per width.*measure again"):
        stored_run(write(tmp_path / "old.json", record))
    with pytest.raises(ValueError, match="not a measured run"):
        stored_run(write(tmp_path / "predicted.json", {**record, "mode": "predict only", "width_costs": {}}))
    stored = stored_run(write(tmp_path / "new.json", {**record, "width_costs": {"two-tower:small": {}}}))
    assert stored["measured"] == {"two-tower-small": {"default": pytest.approx(0.033)}}
    assert stored["models"] == ["two-tower:small"] and stored["cores"] == 2 and stored["measurement"]["rounds"] == 3
