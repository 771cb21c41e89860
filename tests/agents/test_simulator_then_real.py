"""Simulator, then real: a measured run first trains on its target's calibrated simulator, and the policy
and the best placement it reached carry over to measured rewards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tensorflow as tf

from agents.experiment.config import ExperimentConfig, ExperimentError
from agents.experiment.run import run_experiment
from placer.calibration import Calibration
from placer.host import this_machine

SIMULATOR_HEURISTICS = {"metis", "scotch", "m-topo", "m-etf", "m-sct", "exact"}
"""The heuristics that place with a simulator's op costs."""
DEVICES = ("/job:localhost/replica:0/task:0/device:CPU:0", "/job:localhost/replica:0/task:0/device:CPU:1")
SMALL_AGENT = {"num_groups": 4, "hidden_size": 16, "grouping_hidden_size": 8}


def _calibration(path: Path, target: str = "inprocess:2") -> Path:
    """A calibration of in-process devices, written by hand: the hand-over does not depend on its numbers."""
    Calibration(step_overhead=2e-4, spanning_overhead=1e-4, send_cpu=2e-5, send_cpu_per_byte=1e-10, recv_cpu=2e-5,
                recv_cpu_per_byte=1e-10, latency=1e-5, bandwidth=float("inf"), samples={}, target=target,
                devices=DEVICES, rounds=2, machine=this_machine()).save(path)
    return path


def _config(tmp_path: Path, **overrides) -> ExperimentConfig:
    settings = dict(model="two-tower", size="tiny", backend="measured", cluster="inprocess:2", simulator_updates=3,
                    calibration=str(_calibration(tmp_path / "calibration.json")), updates=1, samples_per_update=2,
                    greedy_every=0, warmup_steps=1, timed_steps=1, confirm_repeats=0, final_rounds=1,
                    baselines=["single-device"], agent_options=SMALL_AGENT, runs=str(tmp_path / "runs"),
                    progress=False)
    return ExperimentConfig(**{**settings, **overrides})


def _policy_updates(run_dir: Path) -> int:
    """How many updates the policy has learned from, read from the run's latest checkpoint."""
    reader = tf.train.load_checkpoint(str(run_dir / "checkpoints"))
    [key] = [k for k in reader.get_variable_to_shape_map() if k.endswith("updates/.ATTRIBUTES/VARIABLE_VALUE")]
    return int(reader.get_tensor(key))


@pytest.mark.slow  # about 20 s; the simulator-then-real run's measured end is tested in the default run
def test_the_policy_and_the_best_placement_carry_over_from_the_simulator_and_resuming_works_across(tmp_path):
    config = _config(tmp_path)
    result = run_experiment(config)
    run_dir = result.run_dir
    simulated = json.loads((run_dir / "simulator" / "trainer_state.json").read_text())
    measured = json.loads((run_dir / "trainer_state.json").read_text())
    assert simulated["updates"] == 3 and measured["updates"] == 1
    # the measured phase continued the simulator's policy: 3 simulated updates, then 1 measured
    assert _policy_updates(run_dir) == 4
    # ... and started from the simulator's best placement, measured before the first measured update
    assert measured["samples"] == 1 + 2
    assert result.summary.simulator.updates == 3
    assert result.summary.simulator.predicted_step_time == simulated["best_step_time"]
    assert "simulator-best" in result.summary.final_comparison

    # resuming goes on with measured rewards; the simulator phase is not run again
    resumed = run_experiment(ExperimentConfig(**{**config.to_dict(), "updates": 2}), run_dir)
    assert json.loads((run_dir / "simulator" / "trainer_state.json").read_text())["updates"] == 3
    assert resumed.summary.updates == 2 and _policy_updates(run_dir) == 5


def test_simulator_first_settings_are_checked_before_any_work(tmp_path):
    with pytest.raises(ExperimentError, match="needs the measured backend"):
        ExperimentConfig(backend="simulated", simulator_updates=5)
    with pytest.raises(ExperimentError, match="give --simulator-updates"):
        ExperimentConfig(backend="measured", cluster="inprocess:2",
                         calibration=str(_calibration(tmp_path / "c.json")))
    with pytest.raises(ExperimentError, match="made on local:2, not on inprocess:2"):
        _config(tmp_path, calibration=str(_calibration(tmp_path / "other.json", target="local:2")))
    with pytest.raises(ExperimentError, match="there is no calibration file"):
        _config(tmp_path, calibration=str(tmp_path / "missing.json"))


def test_with_a_simulator_phase_every_heuristic_is_measured_at_the_end_and_export_takes_the_fastest(
        tmp_path, monkeypatch, capsys):
    import dataclasses

    from agents.cli import main
    from agents.experiment.results import describe
    from placer.heuristics import registry
    from placer.placement import read_placement_file

    def expert_breaks(inputs):
        raise RuntimeError("the expert's rule broke")

    monkeypatch.setitem(registry.HEURISTICS, "expert",
                        dataclasses.replace(registry.HEURISTICS["expert"], make=expert_breaks))
    result = run_experiment(_config(tmp_path, baselines=None, agent="random", agent_options={}))
    summary, run_dir = result.summary, result.run_dir
    # placed with the calibrated simulator's op costs, then measured side by side with the learned placement
    assert set(summary.baselines) == SIMULATOR_HEURISTICS | {"single-device", "round-robin"}
    assert set(summary.baselines) <= set(summary.final_comparison)
    # a heuristic that raises is logged and left out; the run goes on without it
    assert "baseline expert skipped: RuntimeError: the expert's rule broke" in (run_dir / "log.txt").read_text()
    # the simulator phase learned on the twin checked against those baselines' measured steps, and the log says how
    assert "the twin's core time per transfer" in (run_dir / "log.txt").read_text()
    assert summary.simulator.calibration in {str(tmp_path / "calibration.json"), str(run_dir / "calibration.refit.json")}
    table = describe(summary, run_dir)
    assert all(f"  {name} " in table for name in summary.baselines)

    final = summary.final_comparison
    fastest = min(final, key=lambda name: (final[name], name != "learned"))
    assert summary.fastest == fastest
    out = tmp_path / "placement.json"
    assert main(["export", str(run_dir), "--out", str(out)]) == 0
    metadata = read_placement_file(out).metadata
    assert metadata["source"] == fastest and metadata["step_time"] == final[fastest]
    printed = capsys.readouterr().out
    which = "the learned placement" if fastest == "learned" else f"{fastest}'s placement"
    assert f"wrote {out}: {which} of two-tower (tiny)" in printed
    assert (f"the fastest placement the run measured is {fastest}'s" in printed) == (fastest != "learned")


def test_without_a_simulator_only_the_heuristics_that_read_no_op_costs_are_measured(tmp_path):
    config = _config(tmp_path, simulator_updates=0, calibration=None, baselines=None, agent="random",
                     agent_options={})
    summary = run_experiment(config).summary
    assert set(summary.final_comparison) == {"learned", "single-device", "round-robin", "expert"}


def test_a_heuristic_that_reads_op_costs_is_a_measured_baseline_only_with_a_simulator_phase(tmp_path):
    assert _config(tmp_path, baselines=["metis", "m-etf"]).baselines == ("metis", "m-etf")
    with pytest.raises(ExperimentError, match="metis baseline reads the simulator's op costs.*--simulator-updates N"):
        _config(tmp_path, simulator_updates=0, calibration=None, baselines=["metis"])


def test_the_measured_phase_starts_from_a_baseline_that_measures_faster_than_the_simulators_best(tmp_path):
    import logging
    from types import SimpleNamespace

    from agents.experiment.run import _measured_start
    from agents.run_files import BaselineTiming, SimulatorPhase
    from agents.experiment.run import SimulatorResult
    from placer.cost import StepTime

    seconds = {(0, 1, 0): 0.004, (0, 0, 0): 0.003, (1, 1, 1): 0.002, (1, 0, 1): 0.009}
    env = SimpleNamespace(graph=None, devices=None, target=SimpleNamespace(
        evaluate=lambda assignment: StepTime(seconds[tuple(assignment)], "measured", "fake")))
    simulator = SimulatorResult(SimulatorPhase(updates=3, samples=6, wall_time=1.0, predicted_step_time=0.001,
                                               calibration="c.json"), [0, 1, 0])
    baselines = {"single-device": BaselineTiming("single-device", 0.0031, assignment=(0, 0, 0)),
                 "metis": BaselineTiming("metis", 0.0025, assignment=(1, 1, 1)),
                 "round-robin": BaselineTiming("round-robin", 0.0090, assignment=(1, 0, 1)),
                 "expert": BaselineTiming("expert", None, failure="oom", assignment=(1, 1, 0))}
    config = _config(tmp_path, final_rounds=2)
    start = _measured_start(config, env, tmp_path, simulator, baselines, logging.getLogger("test"))
    assert (start.name, start.assignment, start.best_baseline) == ("metis", [1, 1, 1], "metis")
    # the simulator's best wins where it measures fastest, and the fastest baseline is still named: the one the
    # learned placement is judged against; no simulator phase, no choice to make
    seconds[(0, 1, 0)] = 0.001
    start = _measured_start(config, env, tmp_path, simulator, baselines, logging.getLogger("test"))
    assert (start.name, start.best_baseline) == ("simulator-best", "metis")
    assert _measured_start(config, env, tmp_path, None, baselines, logging.getLogger("test")) is None
    # every baseline is a contender, not only those fastest when the run timed them once
    seconds[(0, 1, 0)], seconds[(1, 0, 1)] = 0.004, 0.0015
    assert _measured_start(config, env, tmp_path, simulator, baselines, logging.getLogger("test")).name == "round-robin"


def test_a_placement_that_two_contenders_share_is_measured_once_and_reports_one_time():
    from agents.experiment.run import _compare_distinct
    from placer.cost import StepTime

    timed = []
    noisy = iter([0.004, 0.005, 0.003, 0.006, 0.0045, 0.0035])

    def evaluate(assignment):
        timed.append(tuple(assignment))
        return StepTime(next(noisy), "measured", "fake")

    compared = _compare_distinct(evaluate, {"learned": [1, 0], "exact": [1, 0], "metis": [0, 1]}, rounds=3)
    assert timed == [(1, 0), (0, 1)] * 3  # the learned placement that kept exact's is not timed twice a round
    assert compared["learned"].median == compared["exact"].median == 0.004 and compared["metis"].median == 0.005
    assert [c.name for c in compared.values()] == ["learned", "exact", "metis"]


def test_a_run_that_confirms_nothing_faster_than_its_start_says_that_the_learned_placement_is_the_start(tmp_path):
    from agents.experiment.results import describe
    from agents.run_files import RunSummary

    summary = RunSummary(model="two-tower", size="tiny", backend="measured", cluster="local:2", agent="hierarchical",
                         updates=10, samples=40, wall_time=60.0, step_time=0.003, best_step_time=0.0029,
                         best_update=3, final_comparison={"learned": 0.003, "metis": 0.003}, best_placement=None,
                         baselines={"metis": 0.003},
                         baselines_at_start={"metis": 0.003}, best_baseline="metis", best_baseline_step_time=0.003,
                         improvement_over_best_baseline=0.0, beaten_baselines=(), measured_start="metis",
                         learned_is_start=True)
    text = describe(summary, tmp_path)
    assert "the measured phase started from metis, which measured faster than the simulator phase's best" in text
    assert "training confirmed nothing faster than its start (metis): the learned placement is that start" in text
    assert "UNRELIABLE" not in text
    from dataclasses import replace

    from agents.run_files import SimulatorPhase

    poor = describe(replace(summary, calibration_poor_fit="worst probes: free 1000x16 +40%", simulator=SimulatorPhase(
        updates=20, samples=80, wall_time=5.0, predicted_step_time=0.002, calibration="c.json", step_time=0.003)),
        tmp_path)
    assert "after 20 simulated updates; UNRELIABLE)" in poor
    assert "the calibration fits its probes poorly (worst probes: free 1000x16 +40%)" in poor
    # where the simulator's best measured fastest, the table says the measured phase started there
    from_simulator = describe(replace(summary, measured_start="simulator-best", learned_is_start=False), tmp_path)
    assert "the measured phase started from the simulator phase's best, which measured fastest" in from_simulator
    assert "started from metis" not in from_simulator


def test_the_best_baseline_is_chosen_before_the_final_comparison_and_judged_by_it(tmp_path):
    """Of baselines as fast as each other, the one whose final timings came out lowest is the luckiest: the
    learned placement is judged against the baseline chosen before, timed again there."""
    from agents.experiment.results import describe, summarize
    from agents.run_files import BaselineTiming, TrainerState

    config = _config(tmp_path)
    state = TrainerState(updates=10, samples=40, best_step_time=0.0033, best_assignment=(1, 0, 1))
    baselines = {"scotch": BaselineTiming("scotch", 0.0041), "single-device": BaselineTiming("single-device", 0.0049),
                 "round-robin": BaselineTiming("round-robin", 0.0120)}
    final = {"learned": 0.00503, "scotch": 0.00503, "single-device": 0.00469, "round-robin": 0.0125}
    summary = summarize(config, tmp_path, state, baselines, (0.0041, "scotch"), "hierarchical", final)
    assert (summary.best_baseline, summary.best_baseline_step_time) == ("scotch", 0.00503)
    assert summary.improvement_over_best_baseline == 0.0
    assert summary.fastest == "single-device"  # still named: export writes the fastest measured
    text = describe(summary, tmp_path)
    assert "learned: as fast as the best baseline (scotch)" in text
    assert "scotch: the fastest baseline before the final comparison, timed again there, not chosen there" in text
    # a chosen baseline that failed in the final comparison leaves the judgement to the fastest there
    failed = summarize(config, tmp_path, state, baselines, (0.0041, "scotch"), "hierarchical",
                       {**final, "scotch": float("inf")})
    assert (failed.best_baseline, failed.best_baseline_step_time) == ("single-device", 0.00469)
