"""A plan (placer.plan): machine use + placement + schedule in one file, refused before anything runs when it
was made for another graph, target, calibration or machine, and run for real by `placer apply PLAN.json`."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from placer.calibration import Calibration
from placer.host import this_machine
from placer.cost import StepTime
from placer.errors import PlanFileError
from placer.measure.targets import InProcess, LocalTestbed
from placer.placement import Placement
from placer.plan import Plan, read_plan_file
from placer.schedule.methods import make_schedule
from placer.schedule.shapes import shape_template

CORES = len(os.sched_getaffinity(0))
REMAKE = "placer schedule mlp --placement round-robin --target inprocess:2 --save-plan plan.json"
IN_PROCESS = ("/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:1")


def _calibration(path, step_overhead=2e-4):
    Calibration(step_overhead=step_overhead, spanning_overhead=1e-4, send_cpu=2e-5, send_cpu_per_byte=1e-10,
                recv_cpu=2e-5, recv_cpu_per_byte=1e-10, latency=1e-5, bandwidth=float("inf"), samples={},
                target="inprocess:2", devices=IN_PROCESS, rounds=2, machine=this_machine()).save(path)
    return path


def _mlp_plan(mlp, cpus2, target="inprocess:2", **kwargs) -> Plan:
    return Plan.made_for("mlp", "tiny", mlp, Placement.round_robin(mlp, cpus2), target, made_by="test",
                         command=REMAKE, **kwargs)


def _schedule(batch_size: int, micro_batches: int = 4):
    """A 1F1B schedule of a two-stage pipeline, its blocks measured for `batch_size` and `micro_batches`."""
    template = dataclasses.replace(shape_template("pipeline", 2),
                                   metadata={"batch_size": batch_size, "micro_batches": micro_batches})
    return make_schedule("1f1b", template, micro_batches)


@pytest.fixture(scope="module")
def mlp_plan_file(tmp_path_factory, mlp, cpus2):
    """A plan of the tiny MLP, round-robin on inprocess:2, no schedule, predicting 4 ms."""
    plan = _mlp_plan(mlp, cpus2, predicted=StepTime(0.004, "simulated", "inprocess:2", samples=(0.004,)))
    return plan.save(tmp_path_factory.mktemp("plan") / "mlp-plan.json")


def _edited(path, tmp_path, edit):
    data = json.loads(path.read_text())
    edit(data)
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    return edited


# -- the file ------------------------------------------------------------------------------------------------


def test_plan_file_round_trips_machine_use_placement_schedule_prediction_and_provenance(tmp_path, mlp, cpus2):
    plan = _mlp_plan(mlp, cpus2, schedule=_schedule(batch_size=8),
                     predicted=StepTime(0.004, "simulated", "inprocess:2", samples=(0.004,)))
    back = read_plan_file(plan.save(tmp_path / "plan.json"))
    assert back.to_json_dict() == plan.to_json_dict()
    assert (back.model, back.size, back.fingerprint, back.target) == ("mlp", "tiny", mlp.fingerprint, "inprocess:2")
    assert back.machine == InProcess(2)
    assert back.placement.op_devices == Placement.round_robin(mlp, cpus2).op_devices(mlp)
    assert back.schedule.method == "1f1b" and back.schedule.blocks == plan.schedule.blocks
    assert back.predicted.seconds == 0.004 and back.predicted.backend == "simulated"
    assert back.provenance == {"made_by": "test", "command": REMAKE}


@pytest.mark.skipif(CORES < 2, reason="two testbed workers need two cores")
def test_testbed_workers_keep_their_cores_and_thread_pools_through_the_file(tmp_path, mlp):
    from placer.devices import cluster_devices

    workers = cluster_devices({"worker": ["localhost:1", "localhost:2"]})
    plan = Plan.made_for("mlp", "tiny", mlp, Placement.round_robin(mlp, workers), "local:widths=1+1,intra=1,inter=1+2")
    back = read_plan_file(plan.save(tmp_path / "plan.json"))
    assert isinstance(back.machine, LocalTestbed)
    assert [(len(w.cores), w.intra_op_threads, w.inter_op_threads) for w in back.machine.layout()] == [(1, 1, 1),
                                                                                                     (1, 1, 2)]
    assert back.check_target("local:widths=1+1,intra=1,inter=1+2").layout() == back.machine.layout()
    with pytest.raises(PlanFileError, match="not for local:2"):  # the same workers, other pools
        back.check_target("local:2")


@pytest.mark.parametrize("edit, reason", [
    (lambda d: d.update(format="placer.placement"), "is not a placer plan file"),
    (lambda d: d.update(format_version=99), "plan format version 99; this placer reads version 1"),
    (lambda d: d.pop("machine"), "needs how it uses the machine"),
    (lambda d: d["placement"].update(devices=["/job:localhost/replica:0/task:0/device:CPU:0"]),
     "edited.json's placement puts op .* on .*CPU:1', which is not one of its devices"),
])
def test_malformed_plan_file_is_refused_with_the_reason(mlp_plan_file, tmp_path, edit, reason):
    with pytest.raises(PlanFileError, match=reason):
        read_plan_file(_edited(mlp_plan_file, tmp_path, edit))


# -- refusals, each before anything is built or started ---------------------------------------------------------


def test_plan_for_another_graph_is_refused_naming_both_and_what_to_rerun(mlp_plan_file, two_tower):
    plan = read_plan_file(mlp_plan_file)
    with pytest.raises(PlanFileError) as refused:
        plan.check_graph(two_tower)
    assert "'mlp-tiny'" in str(refused.value) and "'two-tower-tiny'" in str(refused.value)
    assert REMAKE in str(refused.value)
    with pytest.raises(PlanFileError, match=f"made for mlp at size tiny, not for mlp at size small.*{REMAKE}"):
        plan.check_model(None, "small")


def test_plan_for_another_target_is_refused_and_its_own_target_is_what_runs(mlp_plan_file):
    plan = read_plan_file(mlp_plan_file)
    assert plan.check_target(None) == plan.check_target("inprocess:2") == InProcess(2)
    with pytest.raises(PlanFileError, match="made for inprocess:2, not for inprocess:1.*Leave out --target"):
        plan.check_target("inprocess:1")
    with pytest.raises(PlanFileError, match="modeled machine, which cannot run a plan"):
        plan.check_target("modeled:2xV100")


def test_placement_made_for_another_targets_devices_is_refused_when_the_plan_is_made(mlp, cpus2):
    with pytest.raises(PlanFileError, match="puts ops on CPU:1, which inprocess:1 .* does not have"):
        _mlp_plan(mlp, cpus2, target="inprocess:1")
    if CORES >= 2:  # local:2 needs a core per worker
        with pytest.raises(PlanFileError, match="puts ops on CPU:0, CPU:1, which local:2 .* does not have"):
            _mlp_plan(mlp, cpus2, target="local:2")


def test_plan_made_on_a_calibrated_twin_runs_on_the_calibrated_target_and_refuses_another_calibration(
        tmp_path, mlp, cpus2):
    calibration = _calibration(tmp_path / "calibration.json")
    plan = _mlp_plan(mlp, cpus2, target=f"calibrated:{calibration}")
    assert plan.machine == InProcess(2) and plan.calibration == str(calibration)
    assert plan.check_target(f"calibrated:{calibration}") == InProcess(2)
    other = _calibration(tmp_path / "other.json", step_overhead=5e-4)
    with pytest.raises(PlanFileError, match=f"not with {other}.*{REMAKE}"):
        plan.check_target(f"calibrated:{other}")
    _calibration(calibration, step_overhead=5e-4)  # calibrated again into the same file
    with pytest.raises(PlanFileError, match="calibrated again since"):
        plan.check_target(None)


@pytest.mark.parametrize("machine", [
    {"process": {"logical_cpus": 2, "intra_op_threads": CORES + 1, "inter_op_threads": None}},
    {"workers": [{"cores": list(range(CORES + 1)), "intra_op_threads": 1, "inter_op_threads": 2}]},
    {"workers": [{"cores": [c], "intra_op_threads": 1, "inter_op_threads": 2} for c in range(CORES + 1)]},
], ids=["pools", "one-wide-worker", "a-worker-per-core-and-one-more"])
def test_machine_use_beyond_this_machines_cores_is_refused_on_reading(mlp_plan_file, tmp_path, machine):
    with pytest.raises(PlanFileError, match=f"uses more of the machine than this one has.*{REMAKE}"):
        read_plan_file(_edited(mlp_plan_file, tmp_path, lambda d: d.update(machine=machine)))


def test_schedule_whose_micro_batches_do_not_divide_the_batch_is_refused(mlp_plan_file, mlp, cpus2, tmp_path):
    with pytest.raises(PlanFileError, match=f"4 micro-batches do not divide the batch of 6.*{REMAKE}"):
        _mlp_plan(mlp, cpus2, schedule=_schedule(batch_size=6))
    schedule = _mlp_plan(mlp, cpus2, schedule=_schedule(batch_size=8)).schedule.to_json_dict()
    schedule["template"]["metadata"]["batch_size"] = 6
    with pytest.raises(PlanFileError, match="do not divide the batch of 6"):
        read_plan_file(_edited(mlp_plan_file, tmp_path, lambda d: d.update(schedule=schedule)))


def _apply_refusal(*args):
    """`placer apply ARGS` in a fresh process: its exit status, its one error line, and whether TensorFlow loaded."""
    run = subprocess.run([sys.executable, "-c", (
        "import sys; from placer.cli import main; status = main(sys.argv[1:]); "
        "print('tensorflow loaded' if 'tensorflow' in sys.modules else 'tensorflow not loaded'); sys.exit(status)"),
        "apply", *map(str, args)], capture_output=True, text=True, timeout=120)
    errors = [line for line in run.stderr.splitlines() if line.startswith("placer: error:")]
    assert "Traceback" not in run.stderr and len(errors) == 1, run.stderr[-2000:]
    return run.returncode, errors[0], "tensorflow not loaded" in run.stdout


@pytest.mark.parametrize("case", ["target", "size", "machine", "micro-batches", "schedule-flag"])
def test_cli_apply_refuses_a_plan_that_does_not_fit_before_tensorflow_loads(mlp_plan_file, tmp_path, case):
    plan, flags = mlp_plan_file, []
    if case == "target":
        flags, expected = ["--target", "inprocess:1"], "made for inprocess:2, not for inprocess:1"
    elif case == "size":
        flags, expected = ["mlp", "--size", "small"], "made for mlp at size tiny, not for mlp at size small"
    elif case == "machine":
        plan = _edited(mlp_plan_file, tmp_path, lambda d: d.update(machine={"workers": [
            {"cores": list(range(CORES + 1)), "intra_op_threads": 1, "inter_op_threads": 2}]}))
        expected = "uses more of the machine than this one has"
    elif case == "micro-batches":
        schedule = _schedule(batch_size=8).to_json_dict()
        schedule["template"]["metadata"]["batch_size"] = 6
        plan = _edited(mlp_plan_file, tmp_path, lambda d: d.update(schedule=schedule))
        expected = "do not divide the batch of 6"
    else:
        flags, expected = ["--schedule", "plan.json"], "holds its own schedule (or none): leave out --schedule"
    status, error, tensorflow_not_loaded = _apply_refusal(plan, *flags)
    assert status == 2 and expected in error and tensorflow_not_loaded


# -- placer apply PLAN.json, for real ---------------------------------------------------------------------------


def test_cli_apply_runs_a_plan_without_schedule_on_its_machine_use_against_its_prediction(mlp_plan_file, capsys):
    from placer.cli import main

    capsys.readouterr()
    assert main(["apply", str(mlp_plan_file), "--repeats", "2", "--warmup", "1"]) == 0
    printed = capsys.readouterr().out
    assert f"plan {mlp_plan_file} (one process, 2 logical CPU device(s)" in printed
    assert "on inprocess:2: 3 training steps (1 warm-up)" in printed and "step time median" in printed
    assert "placement check" in printed or "TensorFlow moved" in printed
    assert "predicted step time 4.00 ms (simulated on inprocess:2); this run" in printed


def test_schedule_save_plan_then_apply_runs_it_over_micro_batches_and_the_traced_step_keeps_the_order(
        tmp_path, capsys, cpus2):
    from placer.cli import main

    path = tmp_path / "plan.json"
    assert main(["schedule", "two-tower", "--placement", "expert", "--target", "inprocess:2", "--micro-batches", "4",
                 "--method", "1f1b", "--save-plan", str(path)]) == 0
    plan = read_plan_file(path)
    assert plan.schedule.micro_batches == 4 and plan.machine == InProcess(2) and plan.predicted.ok
    assert plan.provenance["command"].startswith("placer schedule two-tower --size tiny --placement expert")
    capsys.readouterr()
    status = main(["apply", str(path), "--repeats", "2", "--warmup", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 0, report
    assert report["plan"] == str(path) and report["method"] == "1f1b" and report["micro_batches"] == 4
    assert report["order_kept"] is True and report["blocks_traced"] == report["blocks"] == 16
    assert report["step_time"]["ok"] and len(report["step_time"]["samples"]) == 2
    assert report["predicted"]["seconds"] == pytest.approx(report["predicted_seconds"]) == plan.predicted.seconds


def test_save_plan_is_refused_on_a_modeled_machine_before_any_work(tmp_path, capsys):
    from placer.cli import main

    path = tmp_path / "plan.json"
    assert main(["schedule", "two-tower", "--target", "modeled:2xV100", "--save-plan", str(path)]) == 2
    assert "needs a target that can run it" in capsys.readouterr().err and not path.exists()


def test_cli_apply_holds_a_plan_nothing_priced_against_what_its_maker_measured(mlp, cpus2, tmp_path, capsys):
    """One process wins `placer optimize` unpriced (the twin models the workers): apply compares with its rounds."""
    from placer.cli import main

    plan = dataclasses.replace(_mlp_plan(mlp, cpus2), provenance={
        "made_by": "placer optimize", "command": REMAKE, "measured": {"median": 0.005, "target": "inprocess:2"}})
    path = plan.save(tmp_path / "measured-plan.json")
    capsys.readouterr()
    assert main(["apply", str(path), "--repeats", "2", "--warmup", "1"]) == 0
    assert ("step time measured when the plan was made 5.00 ms (by placer optimize on inprocess:2); this run"
            in capsys.readouterr().out)


def test_a_plan_for_a_modeled_machine_round_trips_and_is_refused_to_run_in_one_line(mlp, tmp_path, capsys):
    from placer.cli import main
    from placer.cost import parse_target_spec
    from placer.plan import ModeledMachine

    devices = parse_target_spec("modeled:2xV100").devices
    plan = Plan.made_for("mlp", "tiny", mlp, Placement.round_robin(mlp, devices), "modeled:2xV100",
                         predicted=StepTime(0.002, "simulated", "modeled:2xV100"), made_by="test",
                         command="placer optimize mlp --target modeled:2xV100")
    path = plan.save(tmp_path / "plan.json")
    assert json.loads(path.read_text())["machine"] == {"modeled": "modeled:2xV100"}
    read = read_plan_file(path)
    assert read.machine == ModeledMachine("modeled:2xV100") and read.target == "modeled:2xV100"
    assert read.placement.op_devices == plan.placement.op_devices and read.predicted == plan.predicted
    assert "modeled:2xV100, a modeled machine (simulated" in read.describe()
    with pytest.raises(PlanFileError, match="a modeled machine: its step time is simulated"):
        read.check_target()
    assert main(["apply", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "placer optimize mlp --size tiny --target local:2" in err


def test_a_modeled_machine_placer_does_not_model_is_refused_on_reading(mlp_plan_file, tmp_path):
    path = _edited(mlp_plan_file, tmp_path, lambda data: data.update(machine={"modeled": "modeled:2xNOPE"}))
    with pytest.raises(PlanFileError, match="modeled machine: unknown device model 'NOPE'"):
        read_plan_file(path)
