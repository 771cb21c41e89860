"""The simulator-fidelity experiment's placement set, built without a testbed (the dry run's stand-in simulator)."""

import json
from pathlib import Path

import numpy as np
import pytest

from experiments.simulator_fidelity import (
    FLIP_RATES,
    KINDS,
    PERTURBED_SPLITS,
    RANDOM_SHARES,
    SPLIT_SHARES,
    fidelity_placements,
    simulated_twin,
    split_assignment,
    summaries,
)
from placer.placement import Placement


@pytest.fixture(scope="module")
def twin(two_tower):
    target, _ = simulated_twin(two_tower, None, dry_run=True)
    return target


@pytest.fixture(scope="module")
def placement_files(two_tower, twin, tmp_path_factory):
    """A learned placement of two-tower, and one made for another graph."""
    folder = tmp_path_factory.mktemp("placements")
    groups = len(two_tower.groups)
    learned = Placement.from_assignment(two_tower, twin.devices, [g % 3 == 0 for g in range(groups)])
    mine = learned.save(folder / "run-7.json", two_tower)
    other = json.loads(mine.read_text())
    other["graph"]["name"], other["graph"]["fingerprint"] = "another-model", "f" * 64
    theirs = folder / "other.json"
    theirs.write_text(json.dumps(other))
    return [mine, theirs]


@pytest.fixture(scope="module")
def candidates(two_tower, twin, placement_files):
    notes = []
    built = fidelity_placements(two_tower, twin.devices, model="two-tower", simulator=twin.simulator,
                                placement_files=placement_files, seed=3, note=notes.append)
    return built, notes


def by_label(candidates):
    return {c.label: c for c in candidates}


def test_the_set_has_every_kind_of_placement(candidates):
    built, _ = candidates
    assert {c.kind for c in built} == set(KINDS)
    labels = by_label(built)
    expected = {"worker 0", "worker 1", "round-robin", "expert", "metis", "scotch", "m-topo", "learned run-7"}
    assert expected <= set(labels)
    assert {f"split {share:.2f}" for share in SPLIT_SHARES} <= set(labels)


def test_identical_assignments_appear_once_under_the_first_label(candidates):
    built, _ = candidates
    assignments = [c.placement.group_devices for c in built]
    assert len(set(assignments)) == len(assignments)
    assert len({c.label for c in built}) == len(built)
    worker_0 = by_label(built)["worker 0"]
    assert worker_0.kind == "extreme" and "single-device" in worker_0.aliases
    assert "single-device" not in by_label(built)
    assert "round-robin" not in by_label(built)["round-robin"].aliases


def test_splits_are_contiguous_cuts_with_both_workers_used(candidates, two_tower):
    built, _ = candidates
    groups = len(two_tower.groups)
    for share in SPLIT_SHARES:
        assignment = np.array(by_label(built)[f"split {share:.2f}"].placement.group_devices)
        assert np.all(np.diff(assignment) >= 0) and 0 < assignment.sum() < groups
        assert (assignment == 0).sum() == round(groups * share)


def test_perturbations_flip_their_share_of_groups_and_at_least_one(candidates, two_tower):
    built, _ = candidates
    groups = len(two_tower.groups)
    for share in PERTURBED_SPLITS:
        for rate in FLIP_RATES:
            flipped = np.array(by_label(built)[f"split {share:.2f} flip {rate:.0%}"].placement.group_devices)
            assert (flipped != split_assignment(groups, share)).sum() == max(1, round(groups * rate))


def test_random_placements_put_exactly_their_share_on_worker_1(candidates, two_tower):
    built, _ = candidates
    for share in RANDOM_SHARES:
        random = by_label(built)[f"random {share:.0%}"]
        assert random.kind == "random"
        assert (np.array(random.placement.group_devices) == 1).sum() == round(len(two_tower.groups) * share)


def test_a_placement_file_for_another_graph_is_skipped_with_a_note(candidates):
    built, notes = candidates
    assert [c.label for c in built if c.kind == "learned"] == ["learned run-7"]
    assert any("other.json" in note and "another-model" in note for note in notes)


def test_the_set_is_the_same_for_the_same_seed(two_tower, twin, candidates):
    built, _ = candidates
    again = fidelity_placements(two_tower, twin.devices, model="two-tower", simulator=twin.simulator,
                                seed=3, note=lambda _: None)
    assert [c.placement.group_devices for c in again if c.kind == "perturbation"] == \
        [c.placement.group_devices for c in built if c.kind == "perturbation"]


def test_without_a_simulator_the_heuristics_are_left_out(two_tower, twin):
    built = fidelity_placements(two_tower, twin.devices, model=None, simulator=None, note=lambda _: None)
    assert not {"expert", "metis", "m-etf"} & {c.label for c in built}


def test_the_set_needs_two_devices(two_tower, twin):
    from placer.devices import DeviceSet

    with pytest.raises(ValueError, match="two devices"):
        fidelity_placements(two_tower, DeviceSet(twin.devices.devices[:1]), model=None, simulator=None)


def test_zoo_and_heldout_are_summarized_apart_and_failures_left_out():
    rows = [{"model": model, "heldout": heldout, "measured_ms": measured, "predicted_ms": predicted}
            for model, heldout, measured, predicted in [
                ("a", False, 1.0, 1.1), ("a", False, 2.0, 2.2), ("a", False, None, 3.0),
                ("h", True, 1.0, 2.0), ("h", True, 3.0, 1.0)]]
    summary = {s["models"]: s for s in summaries(rows, ["a", "h"])}
    assert summary["a"]["placements"] == 2 and summary["a"]["median_abs_error_pct"] == pytest.approx(10.0)
    assert summary["zoo (all)"]["spearman"] == pytest.approx(1.0)
    assert summary["held-out (all)"]["pair_order"] == 0.0


def test_error_sources_split_the_profiles_level_from_the_split_placements_own_error():
    """Single-worker placements measured 25 % slower than predicted are the profile's level; scaled by it,
    the split placements are off by their own 5 %. The rounds' repeatability is one round against the
    mean of the others."""
    from experiments.simulator_fidelity import error_sources

    def row(share, measured, predicted, rounds=(10.0, 11.0, 9.0)):
        return {"model": "a", "heldout": False, "on_worker_1": share, "measured_ms": measured,
                "predicted_ms": predicted, "error_pct": measured and 100 * (predicted / measured - 1),
                "rounds_ms": list(rounds)}

    rows = [row(0.0, 10.0, 8.0), row(1.0, 12.5, 10.0), row(0.5, 20.0, 16.0 * 1.05), row(0.25, 30.0, 24.0 * 0.95),
            row(0.5, 40.0, 32.0 * 1.05), row(0.5, None, 5.0, rounds=(None,))]
    (source,) = error_sources(rows, ["a"])
    assert source["single_worker"] == 2 and source["split"] == 3
    assert source["level_pct"] == pytest.approx(-20.0)
    assert source["split_median_abs_error_pct"] == pytest.approx(16.0)
    assert source["split_level_scaled_pct"] == pytest.approx(5.0)
    # rounds 10, 11, 9: against the others' means 0 %, 13.6 %, 16.7 %
    assert source["round_repeat_pct"] == pytest.approx(100 * 1.5 / 11)
    assert source["error_tensors_rho"] is None  # no rows say how many tensors they send


def test_error_sources_rank_the_split_placements_signed_error_against_the_tensors_they_send():
    """Few tensors predicted slow, many fast: rho -1; single-worker placements are not ranked."""
    from experiments.simulator_fidelity import error_sources

    def row(share, tensors, error):
        return {"model": "a", "heldout": True, "on_worker_1": share, "measured_ms": 10.0,
                "predicted_ms": 10.0 * (1 + error / 100), "error_pct": error, "rounds_ms": [10.0, 10.0],
                "tensors_sent": tensors}

    rows = [row(0.0, 0, 50.0), row(0.5, 80, 20.0), row(0.25, 140, 10.0), row(0.5, 300, -20.0)]
    (source,) = error_sources(rows, ["a"])
    assert source["error_tensors_rho"] == pytest.approx(-1.0)
    rows[1]["tensors_sent"] = 400
    assert error_sources(rows, ["a"])[0]["error_tensors_rho"] == pytest.approx(0.5)


class FakeTestbed:
    """Stands in for local:2: every placement takes its predicted time plus 10 %, and `fails` runs out of memory."""

    def __init__(self, twin, fails):
        self.twin, self.fails, self.devices = twin, fails, twin.devices

    def evaluate(self, placement):
        from placer.cost import StepTime

        if placement.group_devices == self.fails.group_devices:
            return StepTime.failed("oom", "out of memory on worker 1", "measured", "local:2")
        predicted = self.twin.evaluate(placement).seconds
        return StepTime(predicted * 1.1, "measured", "local:2", samples=(predicted * 1.1,))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def test_a_measured_failure_is_a_row_with_its_message_left_out_of_the_metrics(two_tower, twin, candidates, monkeypatch):
    import argparse

    import experiments.simulator_fidelity as fidelity

    built, _ = candidates
    chosen = built[:4]
    import inspect

    from placer.cost import open_target

    def fake_open_target(*args, **kwargs):
        inspect.signature(open_target).bind(*args, **kwargs)  # called as the real one can be
        return FakeTestbed(twin, chosen[1].placement)

    monkeypatch.setattr(fidelity, "open_target", fake_open_target)
    plan = fidelity.ModelPlan("two-tower", False, two_tower, twin, chosen,
                              {c.label: twin.evaluate(c.placement) for c in chosen})
    rows = fidelity.measure_model(plan, argparse.Namespace(warmup=1, repeats=1, rounds=2, profile_in_rounds=False,
                                                           out="unused.json"))
    failed = [r for r in rows if r["failure"]]
    assert [r["placement"] for r in failed] == [chosen[1].label] and "out of memory" in failed[0]["failure"]
    assert failed[0]["measured_ms"] is None and failed[0]["rounds_ms"] == [None]  # not timed again
    for row in fidelity.scored(rows):
        assert row["error_pct"] == pytest.approx(100 * (1 / 1.1 - 1)) and row["spread_pct"] == 0
    assert fidelity.summaries(rows, ["two-tower"])[0]["placements"] == 3
    # each row keeps its assignment, so that --replay can predict it again later
    assert [tuple(r["assignment"]) for r in rows] == [c.placement.group_devices for c in chosen]
    # and how many tensors it sends between the workers, as the twin sends them
    for row, candidate in zip(rows, chosen):
        sent = twin.simulator.simulate(candidate.placement, timeline=True).transfers
        assert row["tensors_sent"] == len(sent) and (row["tensors_sent"] == 0) == (len(set(candidate.placement.group_devices)) == 1)


def hand_made_calibration(graph, path, spanning):
    """A calibration of two in-process CPUs with op costs of 0.1 ms each cached beside it."""
    from placer.calibration import Calibration
    from placer.host import this_machine
    from placer.cost.calibrated import cost_cache
    from placer.profile import CostTable

    Calibration(step_overhead=2e-4, spanning_overhead=spanning, send_cpu=2e-5, send_cpu_per_byte=1e-10,
                recv_cpu=2e-5, recv_cpu_per_byte=1e-10, latency=1e-5, bandwidth=float("inf"), samples={},
                target="inprocess:2", rounds=2, machine=this_machine(),
                devices=tuple(f"/job:localhost/replica:0/task:0/device:CPU:{i}" for i in range(2))).save(path)
    costs = CostTable(graph.fingerprint, "CPU", {op.name: 1e-4 for op in graph.step_ops}, "hand-made")
    costs.save(cost_cache(path, graph))
    return path


def test_profiled_in_every_round_each_placement_is_predicted_from_the_median_of_the_rounds_profiles(
        two_tower, twin, candidates, tmp_path, monkeypatch):
    """--profile-in-rounds: each round profiles the model first, then times the placements; a placement's
    prediction is the median of the rounds' predictions, and a replay predicts the same from the saved tables."""
    import argparse
    import inspect
    from dataclasses import replace

    import experiments.simulator_fidelity as fidelity
    import placer.profile
    from placer.cost import open_target
    from placer.profile import CostTable, load_cost_table

    calibration = hand_made_calibration(two_tower, tmp_path / "cal.json", spanning=1e-4)
    spec = f"calibrated:{calibration}"
    calibrated = open_target(two_tower, spec)
    chosen = [replace(c, placement=Placement.from_assignment(two_tower, calibrated.devices, c.placement.group_devices))
              for c in candidates[0][:4]]
    log = []

    class Testbed(FakeTestbed):
        measurer = "the testbed's measurer"

        def evaluate(self, placement):
            log.append("placement")
            return super().evaluate(placement)

    def fake_open_target(*args, **kwargs):
        inspect.signature(open_target).bind(*args, **kwargs)
        if kwargs.get("backend") == "measured":
            return Testbed(calibrated, fails=argparse.Namespace(group_devices=()))  # none fails
        return open_target(*args, **kwargs)

    scales = iter([1.0, 3.0, 2.0])  # the rounds' op costs: the median round is the last

    def fake_profile(graph, measurer, **kwargs):
        assert measurer == "the testbed's measurer" and kwargs["rounds"] == 1
        log.append("profile")
        scale = next(scales)
        return CostTable(graph.fingerprint, "calibrated", {op.name: 1e-4 * scale for op in graph.step_ops}, "profiled",
                         {"step_time_median": 0.01 * scale})

    monkeypatch.setattr(fidelity, "open_target", fake_open_target)
    monkeypatch.setattr(placer.profile, "profile_costs", fake_profile)
    plan = fidelity.ModelPlan("two-tower", False, two_tower, calibrated, chosen,
                              {c.label: calibrated.evaluate(c.placement) for c in chosen}, spec=spec)
    out = tmp_path / "run.json"
    rows = fidelity.measure_model(plan, argparse.Namespace(warmup=1, repeats=1, rounds=3, profile_in_rounds=True,
                                                           out=str(out)))
    assert log == (["profile"] + ["placement"] * len(chosen)) * 3  # first in every round
    assert len(plan.round_profiles) == 3 and all(Path(p).is_file() for p in plan.round_profiles)
    middle = open_target(two_tower, spec, costs={"CPU": load_cost_table(plan.round_profiles[2], two_tower)})
    for row, candidate in zip(rows, chosen):
        by_round = [open_target(two_tower, spec, costs={"CPU": load_cost_table(p, two_tower)}).evaluate(
            candidate.placement).seconds * 1e3 for p in plan.round_profiles]
        assert row["predicted_rounds_ms"] == pytest.approx(by_round)
        assert row["predicted_ms"] == pytest.approx(middle.evaluate(candidate.placement).seconds * 1e3)
        assert by_round[0] < row["predicted_ms"] < by_round[1]

    report = tmp_path / "measured.json"
    report.write_text(json.dumps({"calibration": str(calibration), "size": "tiny", "rows": rows,
                                  "graphs": {"two-tower": two_tower.fingerprint},
                                  "round_profiles": {"two-tower": plan.round_profiles}}))
    replayed = tmp_path / "replayed.json"
    fidelity.main(["--replay", str(report), "--out", str(replayed), "--plot", ""])
    again = {r["placement"]: r for r in json.loads(replayed.read_text())["rows"]}
    for row in rows:
        assert again[row["placement"]]["predicted_ms"] == pytest.approx(row["predicted_ms"])
    Path(plan.round_profiles[1]).unlink()
    with pytest.raises(SystemExit, match="is not there"):
        fidelity.main(["--replay", str(report), "--out", str(replayed), "--plot", ""])


def test_a_replay_predicts_the_runs_placements_again_against_its_measurements(two_tower, tmp_path):
    """A finished run's rows keep their assignments; a replay predicts them with the calibration it is
    given (op costs from its cache) and recomputes the errors against the run's measurements."""
    import experiments.simulator_fidelity as fidelity
    from placer.cost import open_target
    from placer.simulate import SimulatorConfig

    def calibration(path, spanning):
        return hand_made_calibration(two_tower, path, spanning)

    used = calibration(tmp_path / "run.json", spanning=1e-4)
    other = calibration(tmp_path / "other.json", spanning=5e-3)  # a step spanning both workers costs 5 ms more
    target = open_target(two_tower, f"calibrated:{used}")
    groups = len(two_tower.groups)
    split = [0] * (groups // 2) + [1] * (groups - groups // 2)
    rows = [{"model": "two-tower", "heldout": False, "kind": kind, "placement": label, "on_worker_1": share,
             "measured_ms": measured, "predicted_ms": None, "error_pct": None, "spread_pct": 0.0, "rounds_ms": [],
             "aliases": [], "failure": None, "assignment": assignment}
            for kind, label, share, measured, assignment in [("extreme", "worker 0", 0.0, 2.0, [0] * groups),
                                                             ("split", "split 0.50", 0.5, 9.0, split)]]
    report = tmp_path / "measured.json"
    report.write_text(json.dumps({"calibration": str(used), "size": "tiny", "rows": rows,
                                  "graphs": {"two-tower": two_tower.fingerprint}}))

    out = tmp_path / "replayed.json"
    fidelity.main(["--replay", str(report), "--calibration", str(other), "--out", str(out), "--plot", ""])
    replayed = {r["placement"]: r for r in json.loads(out.read_text())["rows"]}
    with_other = open_target(two_tower, f"calibrated:{other}")
    for label, assignment in (("worker 0", [0] * groups), ("split 0.50", split)):
        expected = with_other.evaluate(Placement.from_assignment(two_tower, with_other.devices, assignment)).seconds
        assert replayed[label]["predicted_ms"] == pytest.approx(expected * 1e3)
        assert replayed[label]["error_pct"] == pytest.approx(100 * (expected * 1e3 / replayed[label]["measured_ms"] - 1))
    assert replayed["worker 0"]["tensors_sent"] == 0 and replayed["split 0.50"]["tensors_sent"] > 0
    split_with_run = target.evaluate(Placement.from_assignment(two_tower, target.devices, split)).seconds
    assert replayed["split 0.50"]["predicted_ms"] == pytest.approx(split_with_run * 1e3 + 4.9)  # the extra spanning

    # With --executor-queues the replay prices with the executor's queues, and says so.
    queued = tmp_path / "queued.json"
    fidelity.main(["--replay", str(report), "--calibration", str(other), "--executor-queues", "--out", str(queued),
                   "--plot", ""])
    emulating = open_target(two_tower, f"calibrated:{other}", simulator_config=SimulatorConfig(executor_queues=True))
    replayed = json.loads(queued.read_text())
    assert replayed["executor_queues"] is True
    expected = emulating.evaluate(Placement.from_assignment(two_tower, emulating.devices, split)).seconds
    assert {r["placement"]: r for r in replayed["rows"]}["split 0.50"]["predicted_ms"] == pytest.approx(expected * 1e3)
    with pytest.raises(SystemExit, match="price a replay"):
        fidelity.main(["--executor-queues", "--dry-run", "--out", str(queued)])

    # With --rule-constants every small constant is copied to its readers, none sent, and it says so.
    by_rule = tmp_path / "rule.json"
    fidelity.main(["--replay", str(report), "--calibration", str(other), "--rule-constants", "--out", str(by_rule),
                   "--plot", ""])
    copying = open_target(two_tower, f"calibrated:{other}", simulator_config=SimulatorConfig(sent_constants=frozenset()))
    assert copying.simulator.config.sent_constants == frozenset() and with_other.simulator.config.sent_constants
    replayed = json.loads(by_rule.read_text())
    assert replayed["rule_constants"] is True
    split_row = {r["placement"]: r for r in replayed["rows"]}["split 0.50"]
    expected = copying.evaluate(Placement.from_assignment(two_tower, copying.devices, split)).seconds
    assert split_row["predicted_ms"] == pytest.approx(expected * 1e3)
    assert split_row["tensors_sent"] == len(copying.simulator.simulate(
        Placement.from_assignment(two_tower, copying.devices, split), timeline=True).transfers)
    with pytest.raises(SystemExit, match="price a replay"):
        fidelity.main(["--rule-constants", "--dry-run", "--out", str(by_rule)])

    with pytest.raises(SystemExit, match="its own file"):
        fidelity.main(["--replay", str(report), "--out", str(report)])
    for row in rows:
        del row["assignment"]
    report.write_text(json.dumps({"calibration": str(used), "size": "tiny", "rows": rows}))
    with pytest.raises(SystemExit, match="no assignments"):
        fidelity.main(["--replay", str(report), "--out", str(out)])
