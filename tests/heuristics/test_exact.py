"""The exact baseline: a program whose optimum is known by hand, its coarsening, and its refusals."""

import numpy as np
import pytest

from placer.errors import PlacementError
from placer.heuristics.exact import coarsen, solve_exact
from placer.heuristics.units import UnitProblem

pytest.importorskip("highspy")

MS = 1e-3


def problem(compute, edges, *, bandwidth=1e9, latency=0.0, capacity=np.inf, memory=None):
    compute = np.asarray(compute, dtype=float)
    devices = compute.shape[1]
    links = np.full((devices, devices), float(bandwidth))
    np.fill_diagonal(links, 0.0)
    return UnitProblem(compute=compute, memory=np.zeros(len(compute)) if memory is None else np.asarray(memory, float),
                       edges=np.asarray(edges, dtype=float).reshape(-1, 3), bandwidth=links,
                       latency=np.full((devices, devices), float(latency)),
                       capacity=np.full(devices, float(capacity)))


def two_towers(tower_length=4, **links):
    """A source, two independent chains of 1 ms units, and a sink joining them, on two equal devices."""
    compute, edges = [[0.1 * MS] * 2], []
    for tower in range(2):
        previous = 0
        for _ in range(tower_length):
            compute.append([1 * MS] * 2)
            edges.append((previous, len(compute) - 1, 1e3))
            previous = len(compute) - 1
        edges.append((previous, 2 * tower_length + 1, 1e3))
    compute.append([0.1 * MS] * 2)
    return problem(compute, edges, **links)


def test_two_independent_towers_go_one_per_device_when_links_are_cheap():
    solution = solve_exact(two_towers(), clusters=8, time_limit=10)
    towers = solution.unit_devices[1:5], solution.unit_devices[5:9]
    assert len(set(towers[0])) == 1 and len(set(towers[1])) == 1 and towers[0][0] != towers[1][0]
    assert solution.makespan == pytest.approx(4.2 * MS, rel=1e-3)  # one tower's 4 ms and the two 0.1 ms ends
    assert solution.gap == pytest.approx(0.0, abs=1e-6) and solution.status == "Optimal"


def test_everything_stays_on_one_device_when_transfers_cost_more_than_they_save():
    solution = solve_exact(two_towers(latency=5 * MS), clusters=8, time_limit=10)
    assert len(set(solution.unit_devices)) == 1
    assert solution.makespan == pytest.approx(8.2 * MS, rel=1e-3)


def test_memory_forces_a_split_the_program_would_not_choose():
    chain = problem([[1 * MS] * 2] * 4, [(0, 1, 1e3), (1, 2, 1e3), (2, 3, 1e3)], latency=1 * MS, capacity=2,
                    memory=[1, 1, 1, 1])
    solution = solve_exact(chain, clusters=4, time_limit=10)
    assert sorted(np.bincount(solution.unit_devices, minlength=2)) == [2, 2]
    assert solution.makespan == pytest.approx(5 * MS, rel=1e-3)  # 4 ms of compute and one 1 ms transfer


def test_an_unrolled_pipeline_overlaps_its_layers_across_devices():
    """Two layers of an unrolled recurrence: layer 2's step t needs layer 1's step t. On two devices they
    overlap like a wavefront, which a program that waited for whole clusters could not see."""
    steps = 6
    compute = [[1 * MS] * 2 for _ in range(2 * steps)]  # units 0..5 layer 1, 6..11 layer 2
    edges = [(t, t + 1, 1e3) for t in range(steps - 1)] + [(steps + t, steps + t + 1, 1e3) for t in range(steps - 1)]
    edges += [(t, steps + t, 1e3) for t in range(steps)]
    solution = solve_exact(problem(compute, edges), clusters=2, time_limit=10)
    assert solution.unit_devices[0] != solution.unit_devices[steps]
    assert solution.makespan == pytest.approx((steps + 1) * MS, rel=1e-3)  # not 12 ms on one device


def test_coarsening_keeps_parallel_branches_apart_and_only_sends_forward():
    towers = two_towers(tower_length=6)
    cluster_of = coarsen(towers, clusters=4)
    assert cluster_of.max() + 1 <= 4
    assert not set(cluster_of[1:7]) & set(cluster_of[7:13])  # no cluster holds units of both towers
    for a, b, _ in towers.edges:
        assert cluster_of[int(a)] <= cluster_of[int(b)]  # numbered in a topological order: no cycle


def test_a_unit_no_device_can_run_is_refused():
    stuck = problem([[1 * MS, 1 * MS], [np.inf, np.inf]], [(0, 1, 1e3)])
    with pytest.raises(PlacementError, match="no device has a kernel"):
        solve_exact(stuck, clusters=2, time_limit=10)


def test_a_graph_too_big_for_the_devices_is_refused():
    too_big = problem([[1 * MS] * 2] * 2, [(0, 1, 1e3)], capacity=1, memory=[2, 2])
    with pytest.raises(PlacementError, match="no placement fits"):
        solve_exact(too_big, clusters=2, time_limit=10)


@pytest.mark.parametrize("bad", [{"clusters": 0, "time_limit": 1}, {"clusters": 2, "time_limit": 0}])
def test_settings_out_of_range_are_refused(bad):
    with pytest.raises(ValueError):
        solve_exact(two_towers(), **bad)
