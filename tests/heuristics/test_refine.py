"""Refining a placement on the simulator: hand-built graphs whose best placement is known."""

import time

import numpy as np
import pytest

from placer.heuristics.refine import piece_levels, refine_placement

TOWER_MS = 10


def everything_on(graph, device):
    return np.full(len(graph.groups), device, np.int64)


def test_two_towers_on_one_device_are_spread_to_the_optimum(hand_built):
    graph = hand_built.towers_graph(towers=2, depth=3)
    machine = hand_built.devices()
    costs = {f"t{t}/op{i}": TOWER_MS for t in range(2) for i in range(3)}
    simulator = hand_built.simulator(graph, machine, costs)
    refined = refine_placement(graph, simulator, everything_on(graph, 0), deadline=time.monotonic() + 60)
    busy = simulator.simulate(refined.group_devices).device_busy
    assert sorted(busy.values()) == pytest.approx([30 * hand_built.MS] * 2)  # three 10 ms ops on each device
    assert refined.start_seconds == pytest.approx(60 * hand_built.MS, rel=0.05)  # both towers, one after the other
    assert refined.seconds == pytest.approx(30 * hand_built.MS, rel=0.05)  # 3 ops, plus a 1 MB transfer
    assert refined.seconds == simulator.simulate(refined.group_devices).step_time
    assert refined.moves >= 1 and refined.gain == pytest.approx(0.5, abs=0.03)


def test_a_chain_stays_whole_on_its_device(hand_built):
    graph = hand_built.towers_graph(towers=1, depth=3)  # any cut makes its ops wait for a 1 MB transfer
    machine = hand_built.devices()
    costs = {f"t0/op{i}": TOWER_MS for i in range(3)}
    simulator = hand_built.simulator(graph, machine, costs)
    start = everything_on(graph, 1)
    refined = refine_placement(graph, simulator, start, deadline=time.monotonic() + 60)
    assert refined.group_devices.tolist() == start.tolist()
    assert refined.moves == 0 and refined.gain == 0.0 and refined.seconds == refined.start_seconds


def test_a_start_that_runs_out_of_memory_is_refined_into_one_that_fits(hand_built):
    graph = hand_built.towers_graph(towers=2, depth=3)
    machine = hand_built.devices(memory="2.5MB")  # both towers at once hold 3 MB of tensors at their peak
    simulator = hand_built.simulator(graph, machine, {f"t{t}/op{i}": TOWER_MS for t in range(2) for i in range(3)})
    start = everything_on(graph, 0)
    assert not simulator.simulate(start).ok
    refined = refine_placement(graph, simulator, start, deadline=time.monotonic() + 60)
    assert refined.start_seconds == np.inf
    assert simulator.simulate(refined.group_devices).ok and np.isfinite(refined.seconds)


def test_refining_stops_at_its_deadline_with_the_start(hand_built):
    graph = hand_built.towers_graph(towers=2, depth=3)
    machine = hand_built.devices()
    simulator = hand_built.simulator(graph, machine, {f"t{t}/op{i}": TOWER_MS for t in range(2) for i in range(3)})
    start = everything_on(graph, 0)
    refined = refine_placement(graph, simulator, start, deadline=time.monotonic() - 1)
    assert refined.group_devices.tolist() == start.tolist() and refined.evaluations == 1 and refined.finest_pieces == 0


def test_levels_go_from_a_piece_per_device_to_single_units():
    assert piece_levels(20_000, 4) == [4, 16, 64, 256, 1024, 4096, 16384, 20_000]
    assert piece_levels(10, 2) == [2, 8, 10]
    assert piece_levels(1, 1) == [1]


def test_time_a_refinement_leaves_goes_to_the_next_start_and_none_is_started_after_the_deadline(hand_built):
    from placer.heuristics.refine import refine_starts

    graph = hand_built.towers_graph(towers=2, depth=3)
    simulator = hand_built.simulator(graph, hand_built.devices(),
                                     {f"t{t}/op{i}": TOWER_MS for t in range(2) for i in range(3)})
    starts = [everything_on(graph, 0), everything_on(graph, 1)]
    both = refine_starts(graph, simulator, starts, deadline=time.monotonic() + 60)
    assert len(both) == 2 and all(r.wall_seconds > 0 for r in both)  # both ended at their optimum in no time
    assert [r.start_seconds for r in both] == pytest.approx([60 * hand_built.MS] * 2, rel=0.05)
    assert all(r.seconds == pytest.approx(30 * hand_built.MS, rel=0.05) for r in both)
    late = refine_starts(graph, simulator, starts, deadline=time.monotonic() - 1)
    assert [r.group_devices.tolist() for r in late] == [s.tolist() for s in starts]
    assert all(r.wall_seconds == 0 and r.evaluations == 1 for r in late)


def test_a_refinement_resumed_in_turns_ends_where_one_run_ends(hand_built):
    from placer.heuristics.refine import Refiner

    graph = hand_built.towers_graph(towers=4, depth=3)
    costs = {f"t{t}/op{i}": TOWER_MS * (t + 1) for t in range(4) for i in range(3)}
    simulator = hand_built.simulator(graph, hand_built.devices(), costs)
    whole = Refiner(graph, simulator, everything_on(graph, 0)).run(time.monotonic() + 60)
    refiner, turns = Refiner(graph, simulator, everything_on(graph, 0)), 0
    while not refiner.at_optimum and turns < 10_000:
        refiner.run(time.monotonic() + 2e-4)  # a piece or two per turn
        turns += 1
    assert refiner.at_optimum and turns > 1
    resumed = refiner.refinement()
    assert resumed.group_devices.tolist() == whole.group_devices.tolist()
    assert (resumed.seconds, resumed.moves, resumed.evaluations) == (whole.seconds, whole.moves, whole.evaluations)
    # Towers of 3 ops of 10, 20, 30 and 40 ms: 30 + 120 ms on one device, 60 + 90 on the other.
    assert whole.seconds == pytest.approx(150 * hand_built.MS, rel=0.01)


def test_the_tournament_refines_its_first_starts_and_keeps_each_result(hand_built):
    from placer.heuristics.refine import TOURNAMENT_STARTS, refine_starts

    graph = hand_built.towers_graph(towers=2, depth=3)
    simulator = hand_built.simulator(graph, hand_built.devices(),
                                     {f"t{t}/op{i}": TOWER_MS for t in range(2) for i in range(3)})
    starts = [everything_on(graph, k % 2) for k in range(TOURNAMENT_STARTS + 2)]
    refinements = refine_starts(graph, simulator, starts, deadline=time.monotonic() + 60)
    assert len(refinements) == TOURNAMENT_STARTS
    # Each reached the optimum in its first round, so none was halved away before it got there.
    assert all(r.seconds == pytest.approx(30 * hand_built.MS, rel=0.05) for r in refinements)


def test_a_challenger_enters_beside_the_first_starts_and_each_records_its_rounds(hand_built):
    from placer.heuristics.refine import TOURNAMENT_STARTS, refine_starts

    graph = hand_built.towers_graph(towers=2, depth=3)
    simulator = hand_built.simulator(graph, hand_built.devices(),
                                     {f"t{t}/op{i}": TOWER_MS for t in range(2) for i in range(3)})
    starts = [everything_on(graph, k % 2) for k in range(TOURNAMENT_STARTS + 2)]
    challenger = np.arange(len(graph.groups)) % 2  # the towers' ops alternate: every edge cut
    refinements = refine_starts(graph, simulator, starts, deadline=time.monotonic() + 60, challengers=[challenger])
    assert len(refinements) == TOURNAMENT_STARTS + 1
    assert refinements[-1].start_seconds == pytest.approx(simulator.simulate(challenger).step_time)
    assert refinements[-1].seconds < refinements[-1].start_seconds  # refined like the others
    # every entrant ran the first round, and its last round's step is where it ended
    assert all(r.round_seconds and r.round_seconds[-1] == r.seconds for r in refinements)


def _ran(*round_ms):
    from placer.heuristics.refine import Refinement

    return Refinement(np.zeros(1, np.int64), 100.0, round_ms[-1], 1, 0, 1, 1.0, tuple(round_ms))


@pytest.mark.parametrize("challenger, heuristics, expected", [
    # halved away after the first round: read at its end, against the heuristics' fastest then, not at the finish
    (_ran(60), [_ran(50, 40, 30), _ran(55, 45), _ran(70)], (1, 60, 50, False)),
    # never halved away: read at the last round a heuristic ran in, the same time spent
    (_ran(50, 40, 38, 35), [_ran(52, 45, 41), _ran(55, 47)], (3, 38, 41, True)),
])
def test_a_challenger_is_read_against_the_heuristics_at_the_same_round(challenger, heuristics, expected):
    from placer.heuristics.refine import standing

    read = standing(challenger.round_seconds, heuristics)
    assert (read.rounds, read.seconds, read.others_seconds, read.last) == expected
    assert read.ahead == pytest.approx(1 - expected[1] / expected[2])


def test_a_refinement_that_ran_no_round_has_no_standing():
    from placer.heuristics.refine import Refinement, standing

    never = Refinement(np.zeros(1, np.int64), 100.0, 100.0, 1, 0, 0, 0.0)
    assert standing(never.round_seconds, [_ran(50)]) is None and standing((50,), [never]) is None


def four_devices():
    from placer.devices import machine_from_dict

    names = [f"CPU:{d}" for d in range(4)]
    return machine_from_dict({"devices": [{"name": name, "memory": "1GiB"} for name in names],
                              "links": [{"source": a, "target": b, "bandwidth": "1e9", "latency": 1e-4}
                                        for a in names for b in names if a != b]})


def test_with_neighbours_a_piece_is_tried_where_its_neighbours_are_and_on_the_least_loaded_device(hand_built):
    from placer.heuristics.refine import Refiner

    graph = hand_built.towers_graph(towers=3, depth=3)
    simulator = hand_built.simulator(graph, four_devices(), {f"t{t}/op{i}": TOWER_MS for t in range(3) for i in range(3)})
    first_op = [group.ops[0] for group in graph.groups]
    tower = np.array([int(name[1]) if name[0] == "t" and name[1].isdigit() else 0 for name in first_op])
    start = tower.copy()  # tower t on device t, the sum on device 0, device 3 idle
    every = Refiner(graph, simulator, start, devices_tried="every")
    near = Refiner(graph, simulator, start, devices_tried="neighbours")
    middle = np.flatnonzero([name == "t1/op1" for name in first_op])
    assert every._devices_to_try(middle).tolist() == [0, 1, 2, 3]
    assert near._devices_to_try(middle).tolist() == [1, 3]  # its own tower's device, and the idle one
    with pytest.raises(ValueError, match="devices_tried is one of every, neighbours"):
        Refiner(graph, simulator, start, devices_tried="some")


def test_with_neighbours_two_towers_on_one_device_are_still_spread_to_the_optimum(hand_built):
    graph = hand_built.towers_graph(towers=2, depth=3)
    simulator = hand_built.simulator(graph, hand_built.devices(), {f"t{t}/op{i}": TOWER_MS for t in range(2) for i in range(3)})
    refined = refine_placement(graph, simulator, everything_on(graph, 0), deadline=time.monotonic() + 60,
                               devices_tried="neighbours")
    assert refined.seconds == pytest.approx(30 * hand_built.MS, rel=0.05)


def test_with_neighbours_the_optimum_is_one_no_single_unit_leaves_for_any_device(hand_built):
    graph = hand_built.towers_graph(towers=3, depth=3)
    simulator = hand_built.simulator(graph, four_devices(), {f"t{t}/op{i}": TOWER_MS for t in range(3) for i in range(3)})
    refined = refine_placement(graph, simulator, everything_on(graph, 0), deadline=time.monotonic() + 60)
    step = simulator.simulate(refined.group_devices).step_time
    for unit in range(len(graph.groups)):
        for device in range(4):
            moved = refined.group_devices.copy()
            moved[unit] = device
            assert simulator.simulate(moved).step_time >= step - 1e-12, (unit, device)
