"""`placer schedule SHAPE`: every method on a modeled shape, the plan and its timeline written."""

import json

import pytest

from placer.cli import main
from placer.schedule import read_schedule_file


def test_placer_schedule_compares_every_method_and_saves_tessels_plan(tmp_path, capsys):
    plan_file, trace_file = tmp_path / "plan.json", tmp_path / "trace.json"
    status = main(["schedule", "v-shape", "--devices", "2", "--micro-batches", "6", "--memory-limit", "4",
                   "--time-limit", "10", "--save", str(plan_file), "--timeline", str(trace_file), "--json"])
    assert status == 0
    rows = {row["method"]: row for row in json.loads(capsys.readouterr().out)["plans"]}
    assert set(rows) == {"sequential", "gpipe", "1f1b", "tessel", "tessel-fast"}
    assert rows["tessel"]["makespan"] <= rows["1f1b"]["makespan"] < rows["sequential"]["makespan"]
    plan = read_schedule_file(plan_file)
    assert plan.method == "tessel" and plan.makespan == rows["tessel"]["makespan"]
    assert json.loads(trace_file.read_text())["traceEvents"]


def test_placer_schedule_refuses_a_memory_limit_below_one_micro_batch(capsys):
    assert main(["schedule", "pipeline", "--devices", "2", "--memory-limit", "0", "--method", "1f1b"]) == 2
    assert "one micro-batch alone needs 1 memory units" in capsys.readouterr().err


def test_placer_schedule_schedules_a_placed_model_from_the_simulators_costs(capsys):
    status = main(["schedule", "--model", "two-tower", "--placement", "expert", "--target", "modeled:2xV100",
                   "--micro-batches", "4", "--method", "1f1b", "--method", "tessel", "--time-limit", "5", "--json"])
    assert status == 0
    printed = json.loads(capsys.readouterr().out)
    assert {b["name"] for b in printed["template"]["blocks"]} == {"f@GPU:0", "f@GPU:1", "b@GPU:0", "b@GPU:1"}
    rows = {row["method"]: row for row in printed["plans"]}
    assert rows["tessel"]["makespan"] <= rows["1f1b"]["makespan"]


@pytest.mark.slow  # about 40 s: a paper-size Transformer's schedules; the other schedule commands are tested in the default run
def test_placer_schedule_micro_batches_the_transformer_on_modeled_h100s(capsys):
    # the Transformer is built again at batch/M with the same op names, so the expert placement carries over
    status = main(["schedule", "transformer", "--size", "tiny", "--placement", "expert", "--target", "modeled:4xH100",
                   "--micro-batches", "4", "--method", "gpipe", "--method", "1f1b", "--json"])
    assert status == 0
    rows = {row["method"]: row for row in json.loads(capsys.readouterr().out)["plans"]}
    assert set(rows) == {"gpipe", "1f1b"}
    assert all(row["predicted"]["ok"] and row["makespan_seconds"] > 0 for row in rows.values())


def test_placer_schedule_runs_gpt2_as_a_four_stage_pipeline(capsys):
    status = main(["schedule", "gpt2", "--placement", "expert", "--target", "modeled:4xH100", "--micro-batches", "4",
                   "--method", "gpipe", "--method", "1f1b", "--json"])
    assert status == 0
    printed = json.loads(capsys.readouterr().out)
    assert {b["name"] for b in printed["template"]["blocks"]} == {f"{k}@GPU:{i}" for k in "fb" for i in range(4)}
    rows = {row["method"]: row for row in printed["plans"]}
    assert rows["1f1b"]["peak_memory"] <= rows["gpipe"]["peak_memory"]  # equal at M = p: both hold p on GPU:0
    assert all(row["predicted"]["ok"] for row in rows.values())


def test_slices_of_one_sequence_are_read_against_the_whole_batch_and_the_bound_of_any_schedule(capsys):
    """GPT-2 tiny (batch 8) in 8 micro-batches: each op on one sequence costs near its kernel's fixed cost, so no
    schedule of 8 can beat the whole batch at once; the table says so instead of ranking schedules alone."""
    import re

    status = main(["schedule", "gpt2", "--placement", "expert", "--target", "modeled:4xH100", "--micro-batches", "8",
                   "--method", "1f1b"])
    assert status == 0
    text = capsys.readouterr().out
    one_f_one_b = float(re.search(r"1f1b .* op by op ([\d.]+) ms", text).group(1))
    whole = float(re.search(r"none +the whole batch at once, no schedule: op by op ([\d.]+) ms", text).group(1))
    bound = float(re.search(r"no schedule of 8 micro-batches can go below the schedules' bound ([\d.]+) ms",
                            text).group(1))
    assert whole < bound <= one_f_one_b


def test_placer_schedule_wants_a_shape_or_a_model(capsys):
    assert main(["schedule", "--micro-batches", "4"]) == 2
    assert "give a shape" in capsys.readouterr().err


def test_placer_schedule_measure_runs_each_plan_for_real_and_reports_the_order_kept(capsys):
    status = main(["schedule", "--model", "two-tower", "--micro-batches", "4", "--measure", "--target", "inprocess:2",
                   "--method", "gpipe", "--method", "1f1b", "--json"])
    assert status == 0
    report = json.loads(capsys.readouterr().out)
    assert [run["method"] for run in report["runs"]] == ["gpipe", "1f1b"]
    for run in report["runs"]:
        assert run["order_kept"] is True and run["blocks_traced"] == run["blocks"] == 16
        assert run["step_time"]["ok"] and run["step_time"]["seconds"] > 0 and run["predicted_seconds"] > 0


def test_placer_schedule_measure_refuses_micro_batches_that_do_not_divide_the_batch(capsys):
    assert main(["schedule", "--model", "two-tower", "--micro-batches", "3", "--measure", "--target", "inprocess:2"]) == 2
    assert "3 micro-batches do not divide the batch of 64" in capsys.readouterr().err


def test_placer_schedule_measure_needs_a_measured_cluster(capsys):
    assert main(["schedule", "--model", "two-tower", "--measure", "--target", "modeled:2xV100"]) == 2
    assert "give a measured --target" in capsys.readouterr().err


def test_placer_schedule_inference_schedules_forward_blocks_only(capsys):
    assert main(["schedule", "v-shape", "--devices", "4", "--micro-batches", "4", "--inference", "--method", "1f1b",
                 "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert {b["kind"] for b in printed["template"]["blocks"]} == {"forward"}


def test_placer_schedule_measure_runs_inference_plans_as_forward_only_steps_that_keep_the_order(capsys):
    status = main(["schedule", "--model", "two-tower", "--inference", "--micro-batches", "4", "--measure",
                   "--target", "inprocess:2", "--method", "sequential", "--method", "tessel-fast", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 0, report
    assert {b["kind"] for b in report["template"]["blocks"]} == {"forward"}
    for run in report["runs"]:
        assert run["order_kept"] is True and run["violations"] == []
        assert run["blocks_traced"] == run["blocks"] == 8  # a forward block per device and micro-batch


def test_placer_schedule_takes_a_model_or_a_placement_file_where_a_shape_goes(tmp_path, capsys):
    """`placer schedule MODEL|PLACEMENT.json --strategy ...`, as the issue spells it: a model's expert placement,
    or the model and placement a placement file records."""
    assert main(["schedule", "two-tower", "--micro-batches", "4", "--strategy", "1f1b", "--json"]) == 0
    by_model = json.loads(capsys.readouterr().out)
    assert by_model["model"] == "two-tower" and [row["method"] for row in by_model["plans"]] == ["1f1b"]

    from placer.heuristics import make_heuristic
    from placer.cost import open_target
    from placer.models import build_model

    graph = build_model("two-tower", "tiny")
    with open_target(graph, "modeled:2xV100") as target:
        expert = make_heuristic("expert", graph, target.devices, model="two-tower")
    placement = tmp_path / "expert.json"
    expert.with_metadata(model="two-tower", size="tiny").save(placement, graph)
    assert main(["schedule", str(placement), "--micro-batches", "4", "--strategy", "1f1b", "--json"]) == 0
    by_file = json.loads(capsys.readouterr().out)
    assert by_file["model"] == "two-tower"
    assert by_file["plans"][0]["makespan"] == by_model["plans"][0]["makespan"]


def test_placer_schedule_names_what_it_takes_for_an_unknown_subject(capsys):
    assert main(["schedule", "no-such-thing", "--micro-batches", "4"]) == 2
    assert "is not a shape" in capsys.readouterr().err


def test_placer_schedule_prices_each_plan_op_by_op_and_saves_the_prediction_in_the_plan(tmp_path, capsys):
    plan_file = tmp_path / "plan.json"
    assert main(["schedule", "two-tower", "--target", "modeled:2xV100", "--micro-batches", "4", "--method", "gpipe",
                 "--method", "sequential", "--save", str(plan_file), "--json"]) == 0
    rows = {row["method"]: row for row in json.loads(capsys.readouterr().out)["plans"]}
    for row in rows.values():
        assert row["predicted"]["ok"] and row["predicted"]["target"] == "modeled:2xV100"
        assert row["predicted"]["calibration"] == ""  # a modeled target: no calibration to match later
    # One micro-batch after the other leaves the second device idle between them; GPipe overlaps them.
    assert rows["sequential"]["predicted"]["seconds"] > rows["gpipe"]["predicted"]["seconds"]
    from placer.schedule.origin import plan_prediction

    saved = plan_prediction(read_schedule_file(plan_file))
    assert saved.target == "modeled:2xV100" and saved.step_time.seconds == rows["gpipe"]["predicted"]["seconds"]


def test_placer_schedule_on_a_calibrated_target_pays_its_overheads_and_apply_refuses_the_plan_elsewhere(tmp_path,
                                                                                                     capsys):
    """On `calibrated:FILE` (op costs cached beside FILE, so nothing is profiled here) each plan's op-level
    prediction and its blocks' price (spans priced there, the tail after them) both include the fitted step
    overhead; `placer apply` refuses to compare it with a step measured on another target than the
    calibration's, before building anything."""
    from placer.calibration import Calibration
    from placer.host import this_machine
    from placer.cost import open_target
    from placer.cost.calibrated import cost_cache
    from placer.hardware import HOST_CPU
    from placer.heuristics import make_heuristic
    from placer.models import build_model
    from placer.profile import roofline_costs
    from placer.schedule.micro_batch import build_micro_batch_graph, micro_batched_step

    overhead = 5e-3
    devices = tuple(f"/job:worker/replica:0/task:{i}/device:CPU:0" for i in range(2))
    calibration = Calibration(step_overhead=overhead, spanning_overhead=0.0, send_cpu=2e-5, send_cpu_per_byte=1e-9,
                              recv_cpu=2e-5, recv_cpu_per_byte=1e-9, latency=5e-5, bandwidth=float("inf"), samples={},
                              target="local:2", devices=devices, rounds=2, machine=this_machine())
    path = calibration.save(tmp_path / "calibration.json")
    graph = build_model("two-tower", "tiny")
    step = micro_batched_step(build_micro_batch_graph("two-tower", "tiny", 4), 4)
    for costed in (graph, step.graph):  # what `placer calibrate`'s target would have profiled
        roofline_costs(costed, HOST_CPU).save(cost_cache(path, costed))
    with open_target(graph, f"calibrated:{path}") as target:
        expert = make_heuristic("expert", graph, target.devices, model="two-tower")
    placement, plan = tmp_path / "expert.json", tmp_path / "plan.json"
    expert.with_metadata(model="two-tower", size="tiny").save(placement, graph)

    assert main(["schedule", str(placement), "--cluster", f"calibrated:{path}", "--micro-batches", "4",
                 "--method", "1f1b", "--save", str(plan), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    [row] = printed["plans"]
    assert overhead < printed["template"]["tail_seconds"] < row["makespan_seconds"]
    assert overhead < row["predicted"]["seconds"]
    assert printed["template"]["metadata"]["spans_priced_on"] == f"calibrated:{path}"
    assert row["predicted"]["calibrated_on"] == "local:2"

    assert main(["apply", str(placement), "--schedule", str(plan), "--target", "inprocess:2"]) == 2
    assert "a calibration of local:2, so it predicts steps there, not on inprocess:2" in capsys.readouterr().err


def test_placer_schedule_zb_h1_splits_the_backward_and_apply_runs_its_plan_in_order(tmp_path, capsys):
    from placer.plan import read_plan_file

    path = tmp_path / "plan.json"
    assert main(["schedule", "two-tower", "--target", "inprocess:2", "--micro-batches", "4", "--method", "zb-h1",
                 "--method", "1f1b", "--save-plan", str(path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert {b["name"] for b in printed["template"]["blocks"]} == {"f@CPU:0", "f@CPU:1", "b@CPU:0", "w@CPU:0", "w@CPU:1"}
    assert [row["method"] for row in printed["plans"]] == ["zb-h1", "1f1b"]
    plan = read_plan_file(path)
    assert plan.schedule.method == "zb-h1" and plan.schedule.template.splits_weight_gradients
    assert "--split-weight-gradients" in plan.provenance["command"]
    status = main(["apply", str(path), "--repeats", "2", "--warmup", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 0, report
    assert report["method"] == "zb-h1" and report["order_kept"] is True
    assert report["blocks_traced"] == report["blocks"] == 5 * 4


def test_placer_schedule_refuses_the_split_for_a_shape_or_inference(capsys):
    assert main(["schedule", "pipeline", "--method", "zb-h1"]) == 2
    assert "--method zb-h1 splits a placed model's backward: give a model" in capsys.readouterr().err
    assert main(["schedule", "two-tower", "--split-weight-gradients", "--inference"]) == 2
    assert "--inference schedules forward blocks only" in capsys.readouterr().err


def test_a_keras_model_function_is_scheduled_for_real_and_its_plan_applied(tmp_path, capsys):
    """A model function that can be built at the micro-batch size (here a Keras model whose inputs fix no batch)
    is profiled, scheduled and run over micro-batches as a built-in model is; one that cannot is refused saying
    what it needs."""
    model_file = tmp_path / "my_model.py"
    model_file.write_text(
        "import keras\n\n\ndef build():\n"
        "    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(4)])\n"
        "    model.compile(optimizer='sgd', loss='mse')\n    return model\n\n\n"
        "def fixed():\n"
        "    model = keras.Sequential([keras.Input((8,), batch_size=32), keras.layers.Dense(4)])\n"
        "    model.compile(optimizer='sgd', loss='mse')\n    return model\n")
    plan = tmp_path / "plan.json"
    assert main(["schedule", "--model", f"{model_file}:build", "--placement", "round-robin", "--target", "inprocess:2",
                 "--micro-batches", "2", "--method", "1f1b", "--measure", "--save-plan", str(plan), "--json"]) == 0
    [run] = json.loads(capsys.readouterr().out)["runs"]
    assert run["order_kept"] is True and run["step_time"]["ok"] and run["predicted_seconds"] > 0
    assert main(["apply", str(plan), "--repeats", "2", "--warmup", "1", "--json"]) == 0
    applied = json.loads(capsys.readouterr().out)
    assert applied["method"] == "1f1b" and applied["order_kept"] is True

    assert main(["schedule", "--model", f"{model_file}:fixed", "--placement", "round-robin", "--target",
                 "inprocess:2", "--micro-batches", "2", "--measure"]) == 2
    err = capsys.readouterr().err
    assert "profiles the model built at a micro-batch size" in err and "`batch` parameter" in err
