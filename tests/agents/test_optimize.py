"""`placer optimize`: the fastest measured plan over thread settings, placements and schedules, never slower
(measured, side by side) than the best one-dimension candidate, written as a plan that round-trips; bad input
refused before anything runs."""

import json
import os
import random
import re

import pytest

from agents.candidates import Candidate
from agents.optimize import (
    OptimizeArgs, OptimizeError, confirm, optimize, recommend, retime_ties, tied_with_fastest, to_measure,
)
from placer.calibration import Calibration
from placer.host import this_machine
from placer.cost import StepTime
from placer.measure.targets import InProcess

IN_PROCESS = ("/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:1")


def _candidate(name, dimensions=(), predicted=None, machine=InProcess(1)):
    return Candidate(name, dimensions, machine, None,
                     predicted=None if predicted is None else StepTime(predicted, "simulated", "twin"))


def _timings(medians, noise=0.0, seed=0, failing=()):
    """A fake measurer: each candidate's step time around its median, or a failure."""
    rng = random.Random(seed)

    def measure(candidate):
        if candidate.name in failing:
            return StepTime.failed("oom", "out of memory", "measured", "fake")
        return StepTime(medians[candidate.name] * (1 + rng.uniform(-noise, noise)), "measured", "fake")

    return measure


# -- the selection rule ----------------------------------------------------------------------------------


def test_the_fastest_measured_plan_is_recommended_not_the_fastest_predicted():
    candidates = [_candidate("one process, default"), _candidate("one process, intra 1 / inter 2", ("pools",)),
                  _candidate("expert", ("placement",), predicted=0.007),
                  _candidate("expert + 1f1b x2", ("placement", "schedule"), predicted=0.004)]
    measured = confirm(candidates, _timings({"one process, default": 0.0098, "one process, intra 1 / inter 2": 0.0052,
                                             "expert": 0.007, "expert + 1f1b x2": 0.009}), rounds=3)
    assert recommend(measured).candidate.name == "one process, intra 1 / inter 2"


def test_the_recommendation_is_never_slower_measured_than_the_best_one_dimension_candidate():
    from placer.cost.compare import separated

    for seed in range(50):
        rng = random.Random(seed)
        names = ["one process, default", "one process, tuned", "round-robin", "learned", "learned, pools 1/1",
                 "learned + gpipe x2"]
        dimensions = [(), ("pools",), ("placement",), ("placement",), ("placement", "pools"), ("placement", "schedule")]
        candidates = [_candidate(n, d) for n, d in zip(names, dimensions)]
        medians = {name: rng.uniform(0.004, 0.010) for name in names}
        measured = confirm(candidates, _timings(medians, noise=0.2, seed=seed), rounds=3)
        best_one_dimension = min((m for m in measured if m.candidate.one_dimension), key=lambda m: m.median)
        recommended = recommend(measured)
        # never slower beyond the noise of its rounds, and never slower at all unless tied with the fastest
        assert not separated(best_one_dimension.compared, recommended.compared)
        if recommended.median > best_one_dimension.median:
            assert recommended.candidate.name in {m.candidate.name for m in tied_with_fastest(measured)}


def test_among_plans_tied_with_the_fastest_the_simplest_is_recommended_and_the_table_names_the_tie():
    import dataclasses

    from agents.optimize import OptimizeResult

    candidates = [_candidate("one process, default"), _candidate("one process, intra 1 / inter 2", ("pools",)),
                  _candidate("metis", ("placement",)), _candidate("expert", ("placement",))]
    rounds = {"one process, default": [5.3, 5.0, 5.6], "one process, intra 1 / inter 2": [5.0, 5.2, 5.1],
              "metis": [4.9, 5.4, 5.0], "expert": [7.0, 7.1, 7.3]}
    count = {name: 0 for name in rounds}

    def measure(candidate):  # each round's timing in turn: the three fast plans trade rounds
        timing = rounds[candidate.name][count[candidate.name] % 3] * 1e-3
        count[candidate.name] += 1
        return StepTime(timing, "measured", "fake")

    measured = confirm(candidates, measure, rounds=3)
    assert [m.candidate.name for m in tied_with_fastest(measured)] == [
        "metis", "one process, intra 1 / inter 2", "one process, default"]
    assert recommend(measured).candidate.name == "one process, default"  # the simplest of the tie
    # tied plans are measured again until they separate or reach the most rounds: these never separate
    again = retime_ties(measured, measure, most_rounds=7)
    assert [len(m.compared.timings) for m in again] == [7, 7, 7, 3]  # the expert, 1.4x slower, is not retimed
    result = OptimizeResult("mlp", "tiny", "mlp", "local:2", "twin.json", 3, tuple(again), recommend(again),
                            None, "plan.json")
    table = result.describe()
    assert "tie: 3 plans within the noise of the fastest" in table and "1.00x tie" in table
    assert "in 3 interleaved rounds (up to 7 for those that were within the noise of the fastest)" in table
    assert re.search(r"expert\s.*\d+%\s+-\s+1\.\d\dx$", table, re.M)  # not part of the tie
    rows = {row["name"]: row for row in result.to_json_dict()["measured"]}
    assert rows["metis"]["tied_with_fastest"] and not rows["expert"]["tied_with_fastest"]
    assert rows["expert"]["spread"] == pytest.approx(0.3 / 7.1)


def test_a_plan_faster_in_every_round_is_recommended_over_a_simpler_one():
    candidates = [_candidate("one process, default"), _candidate("metis", ("placement",))]
    measured = confirm(candidates, _timings({"one process, default": 0.006, "metis": 0.005}, noise=0.02), rounds=3)
    assert tied_with_fastest(measured) == [measured[1]]
    assert recommend(measured).candidate.name == "metis"


def test_between_equal_medians_the_simpler_plan_is_recommended():
    candidates = [_candidate("expert, pools 1/1", ("placement", "pools")), _candidate("expert", ("placement",))]
    measured = confirm(candidates, _timings({"expert, pools 1/1": 0.005, "expert": 0.005}), rounds=1)
    assert recommend(measured).candidate.name == "expert"


def test_the_table_shows_each_plan_against_the_bound_and_the_gap_the_learned_placement_closed():
    import dataclasses

    from agents.optimize import OptimizeResult
    from placer.simulate.bound import StepTimeBound

    candidates = [_candidate("one process, default"),
                  dataclasses.replace(_candidate("metis", ("placement",)), made_by="heuristic metis"),
                  dataclasses.replace(_candidate("expert = scotch", ("placement",)), made_by="heuristic expert; heuristic scotch"),
                  dataclasses.replace(_candidate("learned", ("placement",)), made_by="hierarchical planner")]
    measured = confirm(candidates, _timings({"one process, default": 0.012, "metis": 0.010, "expert = scotch": 0.011,
                                             "learned": 0.008}), rounds=1)
    bound = StepTimeBound(critical_path=0.004, work=0.003, memory=0.0, overhead=0.0, devices_needed=1,
                          simulated_on="calibrated:twin.json")
    result = OptimizeResult("mlp", "tiny", "mlp", "local:2", "twin.json", 1, tuple(measured), recommend(measured),
                            None, "plan.json", bound=bound)
    # the best heuristic measured 10 ms, the bound is 4 ms: the learned 8 ms closed a third of the gap
    assert result.gap_closed == pytest.approx(2 / 6)
    table = result.describe()
    assert "x bound" in table and "2.00x" in table  # learned 8 ms over the bound's 4 ms
    # one process is another use of the machine than the workers the bound is for: no ratio on its row
    assert re.search(r"one process, default\s.*12\.00 ms\s+-\s+-\s+1\.\d\dx", table), table
    assert "3.00x" not in table
    assert "predicted" in table and "calibrated:twin.json" in table and "+33.3%" in table
    record = result.to_json_dict()
    assert record["bound"]["seconds"] == pytest.approx(0.004) and record["bound"]["predicted"]
    assert {row["name"]: row["x_bound"] for row in record["measured"]}["metis"] == pytest.approx(2.5)
    assert dataclasses.replace(result, bound=None).gap_closed is None


def test_a_calibration_that_fits_its_probes_poorly_is_marked_unreliable_in_the_table_itself():
    import dataclasses

    from agents.optimize import OptimizeResult

    candidates = [_candidate("one process, default"), _candidate("metis", ("placement",), predicted=0.009)]
    measured = confirm(candidates, _timings({"one process, default": 0.012, "metis": 0.010}), rounds=1)
    result = OptimizeResult("mlp", "tiny", "mlp", "local:2", "twin.json", 1, tuple(measured), recommend(measured),
                            None, "plan.json", poor_fit="worst probes: free_1mb -27%")
    header, _, metis_row = result.describe().splitlines()[:3]
    assert "UNRELIABLE" in header and "free_1mb -27%" in header and "calibrate again" in header
    assert "9.00 ms?" in metis_row
    assert result.to_json_dict()["calibration_poor_fit"] == "worst probes: free_1mb -27%"
    reliable = dataclasses.replace(result, poor_fit=None).describe()
    assert "UNRELIABLE" not in reliable and "9.00 ms?" not in reliable and "9.00 ms" in reliable


def test_a_failed_candidate_is_never_recommended_and_all_failing_is_an_error():
    candidates = [_candidate("one process, default"), _candidate("metis", ("placement",))]
    measured = confirm(candidates, _timings({"one process, default": 0.01}, failing={"metis"}), rounds=2)
    assert recommend(measured).candidate.name == "one process, default"
    everything_failed = confirm(candidates, _timings({}, failing={"one process, default", "metis"}), rounds=2)
    with pytest.raises(OptimizeError, match="every candidate failed"):
        recommend(everything_failed)


def test_no_measurement_starts_that_would_end_past_the_budget_and_the_plan_is_the_fastest_measured(monkeypatch):
    import sys

    clock = [0.0]
    monkeypatch.setattr(sys.modules["placer.cost.compare"], "time", type("FakeClock", (), {"monotonic": lambda: clock[0]}))
    medians = {"one process, default": 0.010, "metis": 0.004, "learned": 0.002}
    fake = _timings(medians)

    def measure(candidate):  # every measurement takes 10 s of the budget
        clock[0] += 10
        return fake(candidate)

    candidates = [_candidate("one process, default"), _candidate("metis", ("placement",)),
                  _candidate("learned", ("placement",))]
    measured = confirm(candidates, measure, rounds=3, deadline=45)  # room for four measurements, not a fifth
    assert [len(m.compared.timings) for m in measured] == [2, 1, 1] and clock[0] == 40
    assert recommend(measured).candidate.name == "learned"
    cut = confirm(candidates, measure, rounds=3, deadline=clock[0] + 35)  # a first timing is given twice the longest
    assert [m.compared.timed for m in cut] == [True, True, False]
    assert recommend(cut).candidate.name == "metis"
    with pytest.raises(OptimizeError, match="--budget ran out before any candidate was measured"):
        recommend(confirm(candidates, measure, rounds=3, deadline=clock[0]))


def test_a_budget_that_cannot_calibrate_the_target_and_measure_is_refused_before_any_work(tmp_path):
    from agents.optimize import check_optimize_args

    args = OptimizeArgs(model="two-tower", target="inprocess:2", budget=30, out=str(tmp_path / "plan.json"))
    with pytest.raises(OptimizeError, match="--budget 30 s cannot calibrate inprocess:2 .* --calibration FILE"):
        check_optimize_args(args)


def test_every_one_dimension_candidate_is_measured_and_of_each_joint_family_the_predicted_fastest():
    candidates = [_candidate("one process, default"), _candidate("slow heuristic", ("placement",), predicted=1.0),
                  *[_candidate(f"best + {m}", ("placement", "schedule"), predicted=p)
                    for m, p in (("gpipe", 0.003), ("1f1b", 0.002), ("tessel-fast", 0.004))],
                  _candidate("best, pools 1/1", ("placement", "pools"))]  # the twin cannot price pools: measured
    kept = [c.name for c in to_measure(candidates, keep=2)]
    assert kept == ["one process, default", "slow heuristic", "best + gpipe", "best + 1f1b", "best, pools 1/1"]


def test_each_placement_s_schedules_are_a_family_of_their_own():
    """The best placement's and the expert's schedules: the predicted fastest of each is measured, so the expert
    under its best schedule is in the comparison even when the best placement's schedules are all faster."""
    from types import SimpleNamespace

    def scheduled(name, group_devices, predicted):
        return Candidate(name, ("placement", "schedule"), InProcess(1), SimpleNamespace(group_devices=group_devices),
                         predicted=StepTime(predicted, "simulated", "twin"))

    candidates = [scheduled("best + gpipe", (0, 1), 0.001), scheduled("best + 1f1b", (0, 1), 0.002),
                  scheduled("expert + gpipe", (1, 0), 0.005), scheduled("expert + 1f1b", (1, 0), 0.004)]
    assert [c.name for c in to_measure(candidates, keep=1)] == ["best + gpipe", "expert + 1f1b"]


# -- bad input -------------------------------------------------------------------------------------------


def _calibration_of(target, devices, path):
    Calibration(step_overhead=2e-4, spanning_overhead=1e-4, send_cpu=2e-5, send_cpu_per_byte=1e-10, recv_cpu=2e-5,
                recv_cpu_per_byte=1e-10, latency=1e-5, bandwidth=float("inf"), samples={}, target=target,
                devices=devices, rounds=2, machine=this_machine()).save(path)
    return path


@pytest.mark.parametrize("flags, refusal", [
    (["no-such-model"], "not a built-in model"),
    (["mlp", "--target", f"local:{len(os.sched_getaffinity(0)) + 1}"], "cores"),
    (["mlp", "--target", "inprocess:1"], "at least two devices"),
    (["mlp", "--budget", "0"], "--budget"),
    (["mlp", "--rounds", "0"], "--rounds"),
    (["two-tower", "--schedules", "--micro-batches", "3"], "do not divide the batch"),
    (["mlp", "--target", "inprocess:2", "--replicas", "3"], "give --replicas 2 (or 1: no data parallelism)"),
])
def test_bad_input_is_refused_before_anything_runs(flags, refusal, nothing_may_run, tmp_path, capsys):
    from agents.cli import main

    out = tmp_path / "plan.json"
    assert main(["optimize", *flags, "--out", str(out), "--no-progress"]) == 2
    assert refusal in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_replicas_or_schedules_of_a_model_function_that_cannot_be_built_at_another_batch_are_refused_once_loaded(
        monkeypatch, tmp_path, capsys):
    """Whether a model function can be built at a slice of its batch is known once it is loaded: refused then,
    saying what the function needs, before anything is calibrated, measured or opened."""
    import placer.calibrate
    import placer.cost
    from agents.cli import main

    def refuse(*args, **kwargs):
        raise AssertionError("work started before the input was checked")

    monkeypatch.setattr(placer.cost, "open_target", refuse)
    monkeypatch.setattr(placer.calibrate, "calibrate", refuse)
    out = tmp_path / "plan.json"
    for flags in (["--replicas", "2"], ["--schedules"]):
        assert main(["optimize", "placer.models.heldout:branchy_0_graph", "--target", "inprocess:2", *flags,
                     "--out", str(out), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert "cannot be built at another batch" in err and "`batch` parameter" in err
        assert not list(tmp_path.iterdir())


def test_a_calibration_of_another_target_is_refused_with_what_to_run(nothing_may_run, tmp_path):
    from agents.optimize import check_optimize_args

    calibration = _calibration_of("inprocess:2", IN_PROCESS, tmp_path / "calibration.json")
    with pytest.raises(OptimizeError, match="placer calibrate --target inprocess:3"):
        check_optimize_args(OptimizeArgs("mlp", target="inprocess:3", calibration=str(calibration)))


# -- end to end ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def optimized(tmp_path_factory):
    """The tiny MLP optimized on inprocess:2 with a ready calibration, two thread settings, no learning, two
    rounds of few steps (about 40 s on 2 cores: four measurement processes)."""
    from placer.concurrency import ThreadSetting
    from placer.measure import MeasureConfig

    folder = tmp_path_factory.mktemp("optimize")
    calibration = _calibration_of("inprocess:2", IN_PROCESS, folder / "calibration.json")
    args = OptimizeArgs("mlp", target="inprocess:2", calibration=str(calibration), rounds=2, learn_updates=0,
                        out=str(folder / "plan.json"), progress=False)
    return optimize(args, measure_config=MeasureConfig(warmup_steps=1, timed_steps=3),
                    thread_settings={"default": ThreadSetting(), "intra 1 / inter 1": ThreadSetting(1, 1)},
                    say=SAID.append)


SAID: list[str] = []
"""What the optimize fixture said as it went."""


def test_optimize_measures_one_process_every_heuristic_and_tuned_pools_side_by_side(optimized):
    from placer.heuristics import applicable_heuristics

    names = " = ".join(m.candidate.name for m in optimized.measured)
    assert "one process, default" in names and "one process, intra 1 / inter 1" in names
    for heuristic in applicable_heuristics(builtin_model=True, simulator=True, model="mlp"):  # measured, or said why not
        assert heuristic in names or any(note.startswith(f"heuristic {heuristic} ") for note in optimized.notes)
    assert any(m.candidate.dimensions == ("placement", "pools") for m in optimized.measured)
    # the twin was checked on measured placements before anything was learned on it, and the table says how
    assert any(line.split("] ", 1)[-1].startswith("checking the twin against inprocess:2") for line in SAID)
    assert any(note.startswith("the twin's core time per transfer") for note in optimized.notes)
    # data parallelism beside them: a replica a device, each on half the batch
    replicated = next(m for m in optimized.measured if m.candidate.replicas is not None)
    assert replicated.candidate.name == "data parallel x2" and replicated.candidate.replicas.batch == 16
    assert replicated.ok and replicated.candidate.dimensions == ("replicas",)
    # in the table the modeled search prints too: its replicas said in their own column, as there
    assert re.search(r"data parallel x2\s+inprocess:2\s+2 x 16\s+none\s+-\s+[\d.]+ ms", optimized.describe())
    tied = tied_with_fastest(optimized.measured)
    # 2 rounds each, and 2 more at a time for those within the noise of the fastest, until they separate, or 9
    assert all(2 <= len(m.compared.timings) <= 9 for m in optimized.measured if m.ok)
    assert optimized.recommended in tied
    assert optimized.plan.provenance["tied_with"] == [m.candidate.name for m in tied if m is not optimized.recommended]
    json.dumps(optimized.to_json_dict())  # --json prints it
    assert "recommended:" in optimized.describe()
    assert optimized.bound is not None and optimized.bound.simulated_on.startswith("calibrated:")
    assert "x bound" in optimized.describe()
    # measured one process first, then the placements the twin predicted fastest first (what a short --budget keeps)
    kinds = [bool(m.candidate.dimensions and "placement" in m.candidate.dimensions) for m in optimized.measured]
    assert kinds == sorted(kinds)
    placed = [m.candidate.predicted_seconds for m in optimized.measured if m.candidate.dimensions == ("placement",)]
    assert placed == sorted(placed)
    assert set(optimized.phase_seconds) >= {"building the graph", "profiling", "heuristics", "measuring"}
    assert "where the time went: building the graph" in optimized.describe()
    # each phase's line says how much of the budget was spent when it started
    assert SAID and all(line.startswith("[") and f" s of {180}] " in line for line in SAID)
    assert any("measuring" in line for line in SAID)


def test_the_written_plan_is_the_recommended_one_and_round_trips(optimized, mlp):
    from placer.plan import read_plan_file

    plan = read_plan_file(optimized.plan_path)
    winner = optimized.recommended
    assert plan.provenance["made_by"] == "placer optimize"
    assert plan.provenance["candidate"] == winner.candidate.name
    assert plan.provenance["measured"]["median"] == pytest.approx(winner.median)
    assert set(plan.provenance["alternatives"]) == {m.candidate.name for m in optimized.measured}
    assert plan.machine == winner.candidate.machine
    plan.check_graph(mlp)
    assert plan.check_target() == winner.candidate.machine
    assert plan.to_json_dict() == read_plan_file(optimized.plan_path).to_json_dict()


def test_every_measured_alternative_makes_a_plan_that_runs_on_its_own_machine_use(optimized, mlp, tmp_path):
    from agents.optimize import plan_of
    from placer.plan import read_plan_file

    args = OptimizeArgs("mlp", target="inprocess:2")
    twin = f"calibrated:{optimized.calibration}"
    for index, alternative in enumerate(optimized.measured):
        plan = plan_of(args, mlp, alternative, optimized.measured, InProcess(2), twin, "placer optimize mlp")
        read = read_plan_file(plan.save(tmp_path / f"plan-{index}.json"))
        assert read.machine == alternative.candidate.machine
        assert read.provenance["candidate"] == alternative.candidate.name
        assert read.replicas == alternative.candidate.replicas
        # a replicated plan places one replica: the step at its slice of the batch
        read.check_graph(mlp if read.replicas is None else alternative.candidate.replica_graph)
        if alternative.candidate.machine == InProcess(2):  # on the calibrated target: made for its twin
            assert read.check_target(twin) == InProcess(2)


def test_a_data_parallel_plan_runs_with_placer_apply_on_its_replicas(optimized, mlp, tmp_path, capsys):
    from agents.cli import main
    from agents.optimize import plan_of

    replicated = next(m for m in optimized.measured if m.candidate.replicas is not None)
    twin = f"calibrated:{optimized.calibration}"
    plan = plan_of(OptimizeArgs("mlp", target="inprocess:2"), mlp, replicated, optimized.measured, InProcess(2), twin,
                   "placer optimize mlp").save(tmp_path / "replicated.json")
    assert main(["apply", str(plan)]) == 0
    out = capsys.readouterr().out
    assert "2 replicas of 16 samples" in out and "step time measured when the plan was made" in out


def test_past_the_limit_one_process_keeps_the_default_the_recommended_and_the_settings_priced_fastest():
    from agents.optimize import settings_to_measure
    from placer.concurrency import ThreadSetting, tuning_candidates

    sweep = tuning_candidates(cores=4)  # 16 pairs, the default and the recommended one
    priced = []

    def price(settings):
        priced.extend(settings)
        return {name: StepTime(s.intra_op_threads * 1e-3 / s.inter_op_threads, "simulated", "twin")
                for name, s in settings.items()}

    kept, left_out = settings_to_measure(sweep, 5, price)
    assert len(kept) == 5 and any("default" in name for name in kept) and any("recommended" in name for name in kept)
    assert all(sweep[name].intra_op_threads in (1, 2, 4) for name in priced)  # one profiled process per width
    fastest = min(left_out.values(), key=lambda t: t.seconds).seconds
    assert all(price({name: sweep[name]})[name].seconds <= fastest for name in kept if name in priced)
    assert settings_to_measure({"default": ThreadSetting()}, 5, price) == ({"default": ThreadSetting()}, {})


@pytest.mark.slow
def test_schedules_are_priced_for_the_best_placement_and_the_expert_s_and_measured_side_by_side(tmp_path):
    from placer.concurrency import ThreadSetting
    from placer.measure import MeasureConfig

    calibration = _calibration_of("inprocess:2", IN_PROCESS, tmp_path / "calibration.json")
    args = OptimizeArgs("two-tower", target="inprocess:2", calibration=str(calibration), rounds=2, learn_updates=0,
                        schedules=True, micro_batches=2, keep=1, out=str(tmp_path / "plan.json"), progress=False)
    result = optimize(args, measure_config=MeasureConfig(warmup_steps=1, timed_steps=3),
                      thread_settings={"default": ThreadSetting()}, say=lambda line: None)
    scheduled = [m for m in result.measured if "schedule" in m.candidate.dimensions]
    placements = {m.candidate.name.split(" + ")[0] for m in scheduled}
    assert any("expert" in name.split(" = ") for name in placements), [m.candidate.name for m in result.measured]
    assert all(m.compared.timings for m in scheduled)
    # the fastest, or the simplest plan within the noise of it
    assert result.recommended in tied_with_fastest(result.measured)
    # a scheduled plan is read against what no schedule can beat, not the whole batch's placements' bound
    assert result.schedule_bound is not None and result.schedule_bound.simulated_on.startswith("calibrated:")
    rows = {row["name"]: row for row in result.to_json_dict()["measured"]}
    for m in scheduled:
        if m.ok:
            assert rows[m.candidate.name]["x_bound"] == pytest.approx(m.median / result.schedule_bound.value)
    assert "a scheduled plan over the schedules' bound" in result.describe()


def test_the_loops_a_profile_priced_are_named_with_their_iterations():
    from agents.optimize import control_flow_note
    from placer.profile import CostTable

    costs = CostTable("f", "calibrated", {}, "profiled", {"control_flow": {
        "lstm/while": {"type": "While", "seconds": 0.0012, "iterations": 20, "nodes_per_step": 2000},
        "cond": {"type": "If", "seconds": 0.0001, "iterations": None, "nodes_per_step": 8}}})
    note = control_flow_note(costs)
    assert note.startswith("2 loops or conditionals") and "lstm/while (20 iterations, 1.20 ms)" in note
    assert "cond (0.10 ms)" in note
    assert control_flow_note(CostTable("f", "calibrated", {}, "profiled", {"control_flow": {}})) == ""


def test_the_calls_compiled_with_xla_are_named_with_their_profiled_time(compiled_call_step):
    import tensorflow as tf

    from agents.optimize import compiled_calls_note
    from placer.graph import graph_from_tf_function
    from placer.graph.control_flow import CALL_OPS
    from placer.profile import CostTable

    graph = graph_from_tf_function(compiled_call_step)
    (call,) = [op.name for op in graph.step_ops if op.type in CALL_OPS]
    note = compiled_calls_note(graph, CostTable("f", "calibrated", {call: 0.0025}, "profiled", {}))
    assert note.startswith("1 call compiled with XLA") and note.endswith("2.50 ms of the profiled ops' time")
    v = tf.Variable(tf.ones([8, 8]))
    plain = graph_from_tf_function(tf.function(lambda: v.assign_add(tf.ones([8, 8]))))
    assert compiled_calls_note(plain, CostTable("f", "calibrated", {}, "profiled", {})) == ""


def test_a_machines_first_run_is_refused_once_the_memory_left_would_not_hold_what_a_first_run_grew(monkeypatch):
    """A profile read from the cache leaves the target's processes small: the first run of one process on a 40k-op
    graph then grew by 6 GB, and three of them started side by side filled the machine."""
    import agents.optimize as optimize
    from agents.optimize import FirstRunMemory
    from placer.cost import StepTime

    gib = 2**30
    machine = {"available": 20 * gib, "resident": 1 * gib}
    monkeypatch.setattr(optimize, "memory_total", lambda: 24 * gib)  # 4.8 GiB kept free
    monkeypatch.setattr(optimize, "memory_available", lambda: machine["available"])
    monkeypatch.setattr(optimize, "descendants_resident_bytes", lambda: {1: machine["resident"]})

    def loads(grown):
        def run():
            machine["available"] -= grown
            machine["resident"] += grown
            return StepTime(0.1, backend="measured", target="inprocess:1")
        return run

    memory = FirstRunMemory(gib, always={"local:2"})
    assert memory.admits("inprocess:1")
    memory.first_run("inprocess:1", loads(6 * gib))  # the default's first run: 6 GiB
    assert memory.estimate == 6 * gib
    assert memory.admits("inprocess:1,intra=2")  # 14 GiB left, 9.2 above what is kept free
    memory.first_run("inprocess:1,intra=2", loads(6 * gib))
    assert not memory.admits("inprocess:1,intra=1")  # 8 GiB left: 3.2 above, less than a first run
    assert memory.admits("inprocess:1") and memory.admits("local:2")  # ran already; the target's never refused
    memory.first_run("inprocess:1", loads(gib))  # later runs are not weighed
    assert memory.estimate == 6 * gib
    monkeypatch.setattr(optimize, "memory_available", lambda: None)
    assert memory.admits("inprocess:1,intra=1")  # no reading of the memory: nothing refused


def test_candidates_that_need_processes_past_the_machines_memory_are_left_out_in_order():
    from agents.optimize import fit_in_memory, left_out_for_memory_note
    from placer.host import memory_total
    from placer.measure import InProcess, LocalTestbed

    gib = 2**30
    spare = 0.2 * (memory_total() or 0)  # kept free
    testbed = LocalTestbed(2)
    default = Candidate("one process, default", (), InProcess(1), None)
    tuned = [Candidate(f"one process, intra {n}", ("pools",), InProcess(1, intra_op_threads=n), None) for n in (1, 2)]
    on_testbed = Candidate("metis", ("placement",), testbed, None)
    pools = Candidate("metis, pools intra 1", ("placement", "pools"), LocalTestbed(2, intra_op_threads=(1, 1)), None)
    candidates = [default, *tuned, on_testbed, pools]
    # room for the default and one more machine; the open testbed's placements cost nothing
    kept, left_out = fit_in_memory(candidates, {str(testbed)}, 2 * gib, int(spare + 4.5 * gib))
    assert kept == [default, tuned[0], on_testbed] and left_out == [tuned[1], pools]
    # the default is kept even without room; no reading of the memory keeps everything
    assert fit_in_memory(candidates, {str(testbed)}, 2 * gib, int(spare))[0] == [default, on_testbed]
    assert fit_in_memory(candidates, set(), 2 * gib, None) == (candidates, [])
    # the note says where the memory went: "19.8 GiB available" alone read as if there were room
    note = left_out_for_memory_note(left_out, kept, {str(testbed)}, 2 * gib, int(spare + 4.5 * gib))
    assert note.startswith("not measured for lack of memory: one process, intra 2; metis, pools intra 1. ")
    assert "about 2.0 GiB for this graph" in note and "20% of the machine's memory is kept free" in note
    assert note.endswith(f"holds 2 such machines beside the target ({default.machine}, {tuned[0].machine})")


def test_a_machine_is_sized_by_one_session_of_the_graph_not_by_what_the_targets_past_sessions_hold(mlp, monkeypatch):
    """A TensorFlow process keeps what a closed session of a big graph held: the testbed's processes held 8.3 GiB
    for NASNetMobile after the twin's check, and every process under a thread setting was left out for it."""
    import agents.optimize as optimize
    from types import SimpleNamespace

    gib = 2**30
    monkeypatch.setattr(optimize, "descendants_resident_bytes", lambda: {1: int(8.3 * gib)})
    measured = SimpleNamespace(measurer=SimpleNamespace(process_bytes=lambda graph: 4 * gib))
    assert optimize._machine_bytes(mlp, measured) == 4 * gib
    cached = SimpleNamespace(measurer=SimpleNamespace(process_bytes=lambda graph: 0))
    assert optimize._machine_bytes(mlp, cached) == int(8.3 * gib)  # no session measured: what they hold now


def test_the_twins_check_starts_no_placement_past_its_share_of_the_budget_and_says_what_it_cut(mlp, cpus2, tmp_path,
                                                                                               monkeypatch):
    """InceptionResNetV2's five measurements took 326 s of a 600 s budget and left the comparison 216 s."""
    import agents.optimize as optimize
    from types import SimpleNamespace

    from placer.placement import Placement

    clock = {"now": 0.0}
    monkeypatch.setattr(optimize.time, "monotonic", lambda: clock["now"])

    def evaluate(placement):
        clock["now"] += 60.0  # a session of a big graph set up for each
        return StepTime(0.1, backend="measured", target="local:2")

    split = Placement.round_robin(mlp, cpus2)
    placements = [Candidate(f"split {n}", ("placement",), "local:2", split,
                            predicted=StepTime(0.01 * (n + 1), backend="simulated", target="twin")) for n in range(4)]
    placements.append(Candidate("single-device", ("placement",), "local:2", Placement.on_device(mlp, cpus2, 0),
                                predicted=StepTime(0.05, backend="simulated", target="twin")))
    real = SimpleNamespace(spec="local:2", evaluate=evaluate)
    twin = SimpleNamespace(simulator=SimpleNamespace(config=SimpleNamespace(send_cpu=3e-5, recv_cpu=3e-5)))
    args = SimpleNamespace(out=str(tmp_path / "plan.json"))
    notes = []
    refit = optimize._refit_twin(args, placements, real, twin, tmp_path / "calibration.json", lambda line: None,
                                 notes, deadline=150.0)
    assert refit is None and clock["now"] == 180.0  # single-device, then two splits: the third would start at 180 s
    assert notes == ["the twin was checked on 2 of 4 placements: the check takes at most 25 % of --budget, and each "
                     "measurement of this graph sets up a session of its own; too few to refit it"]


def test_before_a_measurement_the_other_machines_give_back_what_their_past_sessions_hold_fullest_first(monkeypatch):
    import agents.optimize as optimize
    from agents.optimize import FirstRunMemory

    gib = 2**30
    monkeypatch.setattr(optimize, "memory_total", lambda: 20 * gib)  # 4 GiB kept free
    machine = {"available": 6 * gib}
    monkeypatch.setattr(optimize, "memory_available", lambda: machine["available"])

    class Holding:
        def __init__(self, held):
            self.held_bytes = held

        def release_memory(self):
            machine["available"] += self.held_bytes
            self.held_bytes = 0

    measurers = {"local:2": Holding(9 * gib), "inprocess:1": Holding(3 * gib), "inprocess:1,intra=1": Holding(5 * gib)}
    memory = FirstRunMemory(4 * gib)
    assert memory.make_room("local:2", measurers) == ["inprocess:1,intra=1"]  # 11 GiB then: 7 above the 4 kept free
    assert measurers["local:2"].held_bytes == 9 * gib and measurers["inprocess:1"].held_bytes == 3 * gib
    assert memory.make_room("local:2", measurers) == []  # room already
    machine["available"] = 2 * gib
    assert memory.make_room("local:2", measurers) == ["inprocess:1"]  # 5 GiB: all the others give back, still short


def test_a_keras_model_function_gets_data_parallelism_measured_on_a_real_target(tmp_path):
    """A Keras model whose inputs fix no batch is built at each replica's slice: the plan practitioners start from
    is a row for the models users bring, measured as `placer apply` runs it."""
    from agents.optimize import _data_parallel_candidates
    from placer.cost import open_target
    from placer.measure import parse_target
    from placer.models import load_model

    model_file = tmp_path / "my_model.py"
    model_file.write_text(
        "import keras\n\n\ndef build():\n"
        "    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(4)])\n"
        "    model.compile(optimizer='adam', loss='mse')\n    return model\n")
    spec = f"{model_file}:build"
    with open_target(load_model(spec), "inprocess:2") as real:
        notes = []
        [plain] = _data_parallel_candidates(OptimizeArgs(spec, target="inprocess:2"), parse_target("inprocess:2"),
                                            real, notes)
        assert plain.name == "data parallel x2" and plain.replicas.batch == 16 and not notes
        step_graph, placement = plain.replicated
        measurement = real.measurer.measure(step_graph, placement)
        assert measurement.ok and min(measurement.samples) > 0 and not measurement.moved_ops
    # its plan runs again from the model function, rebuilt at the replicas' slice
    from agents.cli import main
    from placer.plan import Plan

    plan = Plan.made_for(spec, "tiny", plain.replica_graph, plain.placement, "inprocess:2", replicas=plain.replicas,
                         made_by="test").save(tmp_path / "plan.json")
    assert main(["apply", str(plan), "--repeats", "2"]) == 0
