"""The GPU machines benchmark: which decision each column reports, the setups it takes, and one small run end to end."""

import json
import os

import pytest

from experiments.gpu_machines import GPU_SETUPS, PAPER_SETUPS, main, parse_setup, summarize

MS = 1e-3


def test_each_column_is_the_decision_it_names():
    alone = {"single-device": 10 * MS, "metis": 6 * MS, "expert": 7 * MS, "refined": 5.5 * MS}
    scheduled = {("single-device", "gpipe"): 9 * MS, ("metis", "1f1b"): 6.5 * MS, ("expert", "gpipe"): 8 * MS,
                 ("expert", "1f1b"): 4 * MS, ("refined", "gpipe"): 5 * MS}
    row = summarize(alone, scheduled)
    assert (row["placement"], row["placement_ms"]) == ("metis", pytest.approx(6.0))  # the refined one is its own column
    assert row["refined_ms"] == pytest.approx(5.5)
    assert (row["expert_schedule"], row["expert_scheduled_ms"]) == ("1f1b", pytest.approx(4.0))
    # one after another: the fastest placement alone (refined), then the fastest schedule for it
    assert (row["sequential"], row["sequential_ms"]) == ("refined + gpipe", pytest.approx(5.0))
    assert (row["joint"], row["joint_ms"]) == ("expert + 1f1b", pytest.approx(4.0))
    assert row["best_one_dim"] == "refined"
    assert row["joint_vs_best_one_dim_pct"] == pytest.approx(100 * (1 - 4 / 5.5))
    # the refined placement's own schedule, and the seed papers' metric: against the expert's placement
    assert (row["refined_schedule"], row["refined_scheduled_ms"]) == ("gpipe", pytest.approx(5.0))
    assert row["refined_vs_expert_pct"] == pytest.approx(100 * (1 - 5.5 / 7))


def test_the_planner_s_own_placement_is_neither_the_best_heuristic_nor_the_refined_one():
    row = summarize({"metis": 6 * MS, "planner": 5.5 * MS, "planner, refined": 4.5 * MS, "refined": 5 * MS}, {},
                    bound=4 * MS)
    assert (row["placement"], row["placement_ms"]) == ("metis", pytest.approx(6.0))
    assert "planner_ms" not in row  # the learners' columns read the search, on the machine's bound
    assert row["refined_gap_closed_pct"] == pytest.approx(50.0)


def test_without_a_refined_placement_its_columns_are_empty_and_a_slower_schedule_is_none():
    row = summarize({"single-device": 10 * MS, "expert": 7 * MS}, {})
    assert row["refined_ms"] is None and row["refined_schedule"] is None and row["refined_vs_expert_pct"] is None
    row = summarize({"single-device": 10 * MS, "expert": 7 * MS, "refined": 6 * MS}, {("refined", "1f1b"): 9 * MS})
    assert (row["refined_schedule"], row["refined_scheduled_ms"]) == ("none", pytest.approx(6.0))


def test_setups_name_the_model_its_size_and_the_modeled_machine():
    assert parse_setup("nmt-4:paper@4xH100") == ("nmt-4", "paper", "modeled:4xH100")
    assert parse_setup("gpt2@8xA100") == ("gpt2", "paper", "modeled:8xA100")
    assert len(PAPER_SETUPS) == 5 and len(GPU_SETUPS) == 8
    with pytest.raises(ValueError, match="MODEL"):
        parse_setup("nmt-4:paper")


def test_each_decision_is_shown_against_the_bound_with_the_gap_the_refined_placement_closed():
    alone = {"single-device": 10 * MS, "metis": 6 * MS, "refined": 5 * MS}
    row = summarize(alone, {("metis", "gpipe"): 3 * MS}, bound=4 * MS, schedule_bound=2 * MS)
    assert (row["bound_ms"], row["schedule_bound_ms"]) == (pytest.approx(4.0), pytest.approx(2.0))
    assert (row["placement_x_bound"], row["refined_x_bound"]) == (pytest.approx(1.5), pytest.approx(1.25))
    # a schedule goes below the bound of unscheduled placements: it is read against what no schedule beats
    assert row["joint_x_bound"] == pytest.approx(1.5) and row["x_bound"]["metis + gpipe"] == pytest.approx(1.5)
    assert row["refined_gap_closed_pct"] == pytest.approx(50.0)  # metis 6 ms, bound 4 ms, refined 5 ms
    assert row["x_bound"]["single-device"] == pytest.approx(2.5)
    assert summarize(alone, {})["bound_ms"] is None and summarize(alone, {})["refined_gap_closed_pct"] is None


def test_a_schedule_that_slows_the_expert_down_is_not_reported_as_its_schedule():
    row = summarize({"single-device": 10 * MS, "expert": 7 * MS}, {("expert", "gpipe"): 8 * MS})
    assert (row["expert_schedule"], row["expert_scheduled_ms"]) == ("none", pytest.approx(7.0))
    assert row["joint"] == "expert" and row["joint_vs_best_one_dim_pct"] == pytest.approx(0.0)


def test_the_single_gpu_under_a_schedule_counts_as_one_decision():
    row = summarize({"single-device": 10 * MS, "metis": 9 * MS}, {("single-device", "gpipe"): 8 * MS})
    assert row["best_one_dim"] == "single-device + gpipe" and row["joint_vs_best_one_dim_pct"] == pytest.approx(0.0)


def test_bad_arguments_are_refused_before_any_model_is_built(capsys):
    with pytest.raises(SystemExit):
        main(["--setups", "my_model.py:build@4xH100"])
    assert "not a built-in model" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--micro-batches", "1"])
    with pytest.raises(SystemExit):
        main(["--setups", "nmt-4@4xTPU"])
    with pytest.raises(SystemExit):
        main(["--setups", "nmt-4"])
    assert "MODEL[:SIZE]@NxGPU" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--budget", "0"])


def test_each_finished_setup_is_written_before_the_next_starts(tmp_path, monkeypatch):
    """A run over every setup takes hours: one stopped part way keeps what it finished."""
    import experiments.gpu_machines as benchmark

    row = {"setup": "nmt-2:tiny@2xV100", "bound_ms": 1.0, "placement_ms": 2.0, "placement": "expert",
           "refined_ms": None, "joint_ms": 2.0, "joint": "expert", "search_s": 3.0, "data_parallel_ms": 2.5,
           "best": "expert", "best_ms": 2.0, "best_x_machine_bound": 2.0, "machine_bound_ms": 1.0}
    calls = []

    def decide(model, size, spec, *rest):
        calls.append(model)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return dict(row)

    monkeypatch.setattr(benchmark, "decide", decide)
    out = tmp_path / "gpu_machines.json"
    with pytest.raises(KeyboardInterrupt):
        main(["--setups", "nmt-2:tiny@2xV100", "nmt-4:tiny@2xV100", "--out", str(out)])
    written = json.loads(out.read_text())
    assert [r["setup"] for r in written["rows"]] == ["nmt-2:tiny@2xV100"]
    assert written["setups_left"] == ["nmt-4:tiny@2xV100"]


@pytest.mark.slow
def test_a_small_run_prices_every_heuristic_and_schedule(tmp_path):
    out = tmp_path / "gpu_machines.json"
    assert main(["--setups", "two-tower:tiny@2xH100", "--micro-batches", "2", "--learn-updates", "0",
                 "--budget", "300", "--out", str(out)]) == 0
    row = json.loads(out.read_text())["rows"][0]
    assert {"single-device", "metis", "exact", "expert"} <= set(row["predicted_ms"])
    # the schedules are priced, or left out with their bound where the fastest plan already beats it
    scheduled = {"expert + gpipe", "expert + 1f1b"} <= set(row["predicted_ms"])
    left_out = [n for n in row["notes"] if n.startswith("no schedules over 2 micro-batches of expert")]
    assert scheduled != bool(left_out)
    if left_out:
        bound = float(left_out[0].rsplit("their bound is ", 1)[1].split(" ms")[0])
        assert min(row["predicted_ms"].values()) <= bound
    assert row["joint_ms"] == pytest.approx(min(row["predicted_ms"].values()))
    assert row["joint_vs_best_one_dim_pct"] >= 0
    bound = row["bound"]["seconds"] * 1e3
    assert row["bound_ms"] == pytest.approx(bound)
    assert all(bound <= ms * (1 + 1e-9) for name, ms in row["predicted_ms"].items() if "+" not in name)
    # data parallelism is a column, and the best plan of any kind is read against the machine's bound
    assert row["data_parallel_ms"] is not None and row["best_ms"] <= row["data_parallel_ms"]
    assert row["vs_data_parallel"] == pytest.approx(row["data_parallel_ms"] / row["best_ms"])
    assert row["machine_bound_ms"] <= min(row["best_ms"], row["bound_ms"]) * (1 + 1e-9)
    # what placer optimize writes: the best, or the simplest of the plans within 2 % of it
    assert row["best_ms"] <= row["recommended_ms"] <= row["best_ms"] * 1.02
    assert (row["recommended"] == row["best"]) == (row["recommended"] not in row["tied_with_best"])


def test_more_jobs_than_cores_is_refused_before_any_search():
    with pytest.raises(SystemExit):
        main(["--jobs", str(len(os.sched_getaffinity(0)) + 1)])
    with pytest.raises(SystemExit):
        main(["--jobs", "0"])


def test_the_largest_models_are_searched_after_the_others_one_at_a_time():
    from experiments.gpu_machines import split_searched_alone

    setups = [parse_setup(s) for s in ("llama:paper@8xH100", "gpt2:paper@8xH100", "llama:paper@4xH100")]
    side_by_side, alone = split_searched_alone(setups)
    assert side_by_side == [setups[1]] and alone == [setups[0], setups[2]]


@pytest.mark.slow
def test_setups_searched_side_by_side_come_back_in_the_order_asked(tmp_path):
    out = tmp_path / "gpu_machines.json"
    setups = ["two-tower:tiny@2xH100", "nmt-2:tiny@2xV100"]
    assert main(["--setups", *setups, "--jobs", "2", "--learn-updates", "0", "--micro-batches", "2",
                 "--budget", "120", "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert [row["setup"] for row in written["rows"]] == setups
    assert written["jobs"] == 2 and written["setups_left"] == []


def test_the_fastest_pipeline_names_its_micro_batches_and_the_bubble_arithmetic_uses_them():
    from experiments.gpu_machines import pipeline_speedups

    alone = {"expert": 8 * MS, "balanced-stages": 6 * MS}
    scheduled = {("expert", "1f1b"): 4 * MS, ("balanced-stages", "zb-h1"): 2 * MS}
    counts = {("expert", "1f1b"): 4, ("balanced-stages", "zb-h1"): 16}
    row = pipeline_speedups(alone, scheduled, 4, counts)
    assert row["pipeline_best"] == "balanced-stages + zb-h1 x16" and row["pipeline_micro_batches"] == 16
    assert row["pipeline_speedup"] == pytest.approx(3.0)  # over the same placement unscheduled
    assert row["bubble_arithmetic"] == pytest.approx(round(4 * 16 / (16 + 3), 3))
