"""The testbed's data-parallel benchmark: its arguments, and one small run measuring every way side by side."""

import json

import pytest

from experiments.probes.data_parallel import main


def test_bad_arguments_are_refused_before_anything_starts():
    for argv in (["--rounds", "0"], ["--timed-steps", "0"], ["--models", "nope"]):
        with pytest.raises(SystemExit):
            main(argv)


@pytest.mark.slow
def test_a_small_run_measures_data_parallelism_beside_one_process_and_its_ceiling(tmp_path):
    out = tmp_path / "data_parallel.json"
    assert main(["--models", "transformer-block", "--rounds", "1", "--timed-steps", "1", "--out", str(out)]) == 0
    row = json.loads(out.read_text())["rows"][0]
    for column in ("one_process_default_ms", "one_process_tuned_ms", "one_worker_ms", "one_replica_ms",
                   "data_parallel_ms"):
        assert row[column] > 0, column
    assert row["winner"] != "one replica alone"  # half the batch is not a way to run the step
    assert row["vs_one_process"] == pytest.approx(
        min(row["one_process_default_ms"], row["one_process_tuned_ms"]) / row["data_parallel_ms"])
