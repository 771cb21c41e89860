"""Baechi's list schedulers (m-TOPO, m-ETF, m-SCT) on hand-built graphs whose best placement is known."""

import numpy as np
import pytest

from placer.errors import PlacementError
from placer.heuristics.list_scheduling import m_etf, m_sct, m_topo
from placer.heuristics.units import unit_problem
from placer.profile import CostTable
from placer.simulate import Simulator

@pytest.mark.parametrize("heuristic", [m_etf, m_sct])
def test_list_schedulers_keep_a_chain_on_one_device(heuristic, hand_built):
    graph = hand_built.towers_graph(towers=1, depth=6)
    machine = hand_built.devices()
    sim = hand_built.simulator(graph, machine, {f"t0/op{i}": 5 for i in range(6)})
    placement = heuristic(graph, machine, sim)
    assert len(set(placement.group_devices)) == 1
    assert sim.simulate(placement).step_time == pytest.approx(30 * hand_built.MS)


@pytest.mark.parametrize("heuristic", [m_etf, m_sct])
def test_list_schedulers_put_two_independent_towers_on_two_devices(heuristic, hand_built):
    graph = hand_built.towers_graph(towers=2, depth=3)
    machine = hand_built.devices()
    costs = {f"t{t}/op{i}": 10 for t in range(2) for i in range(3)}
    sim = hand_built.simulator(graph, machine, costs)
    placement = heuristic(graph, machine, sim)
    assert hand_built.device_of(graph, placement, "t0/op") != hand_built.device_of(graph, placement, "t1/op")
    single = sim.simulate(np.zeros(len(graph.groups), np.int64)).step_time
    # Not the ideal 30 ms: m-ETF plans its own start times, the executor runs ready ops in its own order.
    assert sim.simulate(placement).step_time < single


@pytest.mark.parametrize("heuristic", [m_topo, m_etf, m_sct])
def test_a_graph_too_big_for_one_device_is_spread_within_memory(heuristic, hand_built):
    graph = hand_built.towers_graph(towers=2, depth=3)
    costs = {f"t{t}/op{i}": 10 for t in range(2) for i in range(3)}
    roomy = hand_built.devices(memory="1GiB")
    # Each device holds a bit over half of what the heuristics count the whole graph to need.
    need = unit_problem(hand_built.simulator(graph, roomy, costs)).memory.sum()
    cramped = hand_built.devices(memory=str(int(need * 0.6)))
    sim = hand_built.simulator(graph, cramped, costs)
    placement = heuristic(graph, cramped, sim)
    assert len(set(placement.group_devices)) == 2
    assert sim.simulate(placement).ok


@pytest.mark.parametrize("heuristic", [m_topo, m_etf, m_sct])
def test_a_graph_that_fits_nowhere_is_a_clear_error(heuristic, hand_built):
    graph = hand_built.towers_graph(towers=2, depth=3)
    tiny = hand_built.devices(memory="1000")
    with pytest.raises(PlacementError, match="fits on no device"):
        heuristic(graph, tiny, hand_built.simulator(graph, tiny, {}))


def test_m_topo_splits_compute_evenly_in_topological_order(hand_built):
    graph = hand_built.towers_graph(towers=1, depth=6)
    machine = hand_built.devices()
    sim = hand_built.simulator(graph, machine, {f"t0/op{i}": 5 for i in range(6)})
    placement = m_topo(graph, machine, sim)
    first, second = (hand_built.device_of(graph, placement, f"t0/op{i}") for i in (0, 5))
    assert first != second  # the share of each device is half the chain
    ops = [graph.op(f"t0/op{i}").group for i in range(6)]
    assert sorted(placement.group_devices[g] for g in ops) == [placement.group_devices[g] for g in ops]


@pytest.mark.parametrize("heuristic", [m_topo, m_etf, m_sct])
def test_heuristics_place_a_training_step_whose_unit_graph_has_cycles(two_tower, heuristic, hand_built):
    # A variable's unit holds its reads and its update, so gradients flow back into it: a cycle of units.
    machine = hand_built.devices()
    table = CostTable(two_tower.fingerprint, "CPU", {op.name: 1e-4 for op in two_tower.step_ops}, "flat")
    sim = Simulator(two_tower, machine, table)
    placement = heuristic(two_tower, machine, sim)
    assert len(placement.group_devices) == len(two_tower.groups) and sim.simulate(placement).ok


def test_m_sct_lp_makes_each_chain_link_a_favorite_and_gives_a_parent_at_most_one_favorite_child(hand_built):
    from placer.heuristics.list_scheduling import _favorite_parents

    graph = hand_built.towers_graph(towers=2, depth=3)
    machine = hand_built.devices()
    sim = hand_built.simulator(graph, machine, {f"t{t}/op{i}": 10 for t in range(2) for i in range(3)})
    favorite = _favorite_parents(unit_problem(sim))
    for t in range(2):  # in a chain with no alternative, every link is worth keeping local
        for i in range(1, 3):
            add = graph.op(f"t{t}/op{i}").producers[0]  # op_i = sqrt(op_{i-1} + 1)
            assert favorite[graph.op(add).group] == graph.op(f"t{t}/op{i - 1}").group
    parents = favorite[favorite >= 0]
    assert len(parents) == len(set(parents.tolist()))


def test_earliest_task_first_places_each_unit_where_it_can_start_first_counting_transfers():
    from placer.heuristics.list_scheduling import _list_schedule
    from placer.heuristics.units import UnitProblem

    # a diamond 0 -> {1, 2} -> 3 on two devices; a transfer costs 0.5 s (latency; the bytes are free)
    problem = UnitProblem(compute=np.array([[1.0, 1.0], [2.0, 2.0], [2.0, 2.0], [1.0, 1.0]]), memory=np.zeros(4),
                          edges=np.array([[0, 1, 1.0], [0, 2, 1.0], [1, 3, 1.0], [2, 3, 1.0]]),
                          bandwidth=np.full((2, 2), 1e30), latency=np.full((2, 2), 0.5), capacity=np.full(2, np.inf))
    # 0 on device 0 (a tie: the lower device); 1 after it there (starts at 1, against 1.5 across); 2 across at
    # 1.5 (device 0 is busy until 3); 3 on device 1 at 3.5, where 1's output arrives at 3.5 and 2's is local
    np.testing.assert_array_equal(_list_schedule(None, problem), [0, 0, 1, 1])
    # with transfers dearer than waiting, the whole diamond stays on one device
    dear = UnitProblem(**{**problem.__dict__, "latency": np.full((2, 2), 5.0)})
    np.testing.assert_array_equal(_list_schedule(None, dear), [0, 0, 0, 0])
