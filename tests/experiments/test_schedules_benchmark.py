"""experiments/schedules.py runs end to end on the smallest case and writes its table as JSON."""

import json

from experiments.schedules import main


def test_the_schedule_benchmark_writes_a_row_per_case(tmp_path, capsys):
    out = tmp_path / "schedules.json"
    main(["--shapes", "pipeline", "v-shape", "--devices", "2", "--micro-batches", "4", "--memory-limits", "1x",
          "--time-limit", "2", "--out", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert [(r["shape"], r["memory_limit"]) for r in rows] == [("pipeline", "1x"), ("v-shape", "1x")]
    pipeline, v_shape = rows
    assert pipeline["tessel_makespan"] == pipeline["1f1b_makespan"]
    assert v_shape["tessel_makespan"] < v_shape["1f1b_makespan"]
    assert "tessel_makespan" in capsys.readouterr().out
