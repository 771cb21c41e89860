"""Baechi's memory-aware placement heuristics (Jeon et al., SoCC 2020): m-TOPO, m-ETF and m-SCT.

All three place units (colocation groups) with the simulator's costs (`placer.heuristics.units`) and
return an ordinary `Placement`; a graph they cannot fit raises PlacementError.

- m-TOPO: units in topological order fill one device after another, moving on when the device holds its
  share (1/k) of the total compute or its memory is full.
- m-ETF: list scheduling. Among ready units, place the (unit, device) pair that can start earliest,
  counting transfer time for inputs on other devices (latency + bytes / bandwidth) and skipping devices
  whose memory the unit would overflow. A unit holds ops from different points of the step (a variable
  with its reads and its update), so the unit graph can have cycles: only edges to later units (in the
  topological order of their first ops) order the schedule.
- m-SCT: m-ETF where each unit's favorite child, chosen by an LP relaxation (solved with HiGHS through
  `highspy`), is kept on its parent's device when it fits, saving that transfer.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from placer.devices import DeviceSet
from placer.errors import PlacementError
from placer.graph.opgraph import OpGraph
from placer.heuristics.units import UnitProblem, unit_problem
from placer.placement import Placement


def m_topo(graph: OpGraph, devices: DeviceSet, simulator) -> Placement:
    problem = unit_problem(simulator)
    units, k = problem.compute.shape
    finite = np.where(np.isfinite(problem.compute), problem.compute, 0.0)
    share = finite.min(axis=1).sum() / k
    used_memory = np.zeros(k)
    load = np.zeros(k)
    assignment = np.zeros(units, np.int64)
    device = 0
    for u in range(units):  # graph.groups are in topological order
        for step in range(k):
            candidate = (device + step) % k
            if not np.isfinite(problem.compute[u, candidate]):
                continue
            if used_memory[candidate] + problem.memory[u] > problem.capacity[candidate]:
                continue
            if step == 0 and load[candidate] >= share and candidate < k - 1 and _fits_anywhere(problem, used_memory, u, candidate + 1):
                continue  # this device has its share; the next one takes over
            break
        else:
            raise PlacementError(f"m-TOPO: unit {graph.groups[u].name!r} fits on no device (memory or kernels)")
        device = candidate
        assignment[u] = device
        load[device] += problem.compute[u, device]
        used_memory[device] += problem.memory[u]
    return Placement.from_assignment(graph, devices, assignment, {"method": "m-topo"})


def _fits_anywhere(problem: UnitProblem, used: np.ndarray, unit: int, start: int) -> bool:
    return any(np.isfinite(problem.compute[unit, d]) and used[d] + problem.memory[unit] <= problem.capacity[d]
               for d in range(start, len(used)))


def m_etf(graph: OpGraph, devices: DeviceSet, simulator) -> Placement:
    problem = unit_problem(simulator)
    return Placement.from_assignment(graph, devices, _list_schedule(graph, problem), {"method": "m-etf"})


def m_sct(graph: OpGraph, devices: DeviceSet, simulator) -> Placement:
    """m-ETF, except that each unit's favorite child (from the LP relaxation of Hanen and Munier's
    small-communication-time schedule) goes on its parent's device whenever that device has room."""
    problem = unit_problem(simulator)
    favorite_parent = _favorite_parents(problem)
    assignment = _list_schedule(graph, problem, favorite_parent)
    return Placement.from_assignment(graph, devices, assignment, {"method": "m-sct"})


def _forward_edges(problem: UnitProblem) -> np.ndarray:
    """Edges to later units only: a unit holds ops from different points of the step (a variable with its
    reads and its update), so the unit graph can have cycles; units are in topological order of their
    first ops, and the forward edges order the schedule."""
    return problem.edges[problem.edges[:, 0] < problem.edges[:, 1]] if len(problem.edges) else problem.edges


def _transfer_seconds(problem: UnitProblem, size: float) -> float:
    """Mean cost of sending `size` bytes between two different linked devices."""
    linked = problem.bandwidth > 0
    if not linked.any():
        return 0.0
    return float(np.mean(problem.latency[linked] + size / problem.bandwidth[linked]))


def _favorite_parents(problem: UnitProblem) -> np.ndarray:
    """[U] the parent whose favorite child each unit is (-1: none), from the LP relaxation.

    Variables: a start time per unit, x per edge (1: the edge pays its transfer), and the makespan w.
    Minimize w subject to s_b >= s_a + p_a + c_ab x_ab per edge, w >= s_u + p_u per unit, and for a unit
    with k > 1 children (parents) the x of its outgoing (incoming) edges summing to at least k - 1: at
    most one child (parent) shares its device. Edges with x < 1/2 are favorite edges.
    """
    import highspy

    units = problem.compute.shape[0]
    edges = _forward_edges(problem)
    finite = np.where(np.isfinite(problem.compute), problem.compute, np.nan)
    duration = np.nan_to_num(np.nanmin(finite, axis=1), nan=0.0)
    e_count = len(edges)
    w = units + e_count  # column of the makespan
    rows_start, rows_index, rows_value, lower = [0], [], [], []

    def row(index, value, low):
        rows_index.extend(index)
        rows_value.extend(value)
        rows_start.append(len(rows_index))
        lower.append(low)

    for e, (a, b, size) in enumerate(edges):
        row([int(b), int(a), units + e], [1.0, -1.0, -_transfer_seconds(problem, size)], duration[int(a)])
    for u in range(units):
        row([w, u], [1.0, -1.0], duration[u])
    for column in (0, 1):  # children of a unit, then parents of a unit
        groups: dict[int, list[int]] = {}
        for e, edge in enumerate(edges):
            groups.setdefault(int(edge[column]), []).append(e)
        for members in groups.values():
            if len(members) > 1:
                row([units + e for e in members], [1.0] * len(members), len(members) - 1.0)
    lp = highspy.HighsLp()
    lp.num_col_ = w + 1
    lp.num_row_ = len(lower)
    cost = np.zeros(w + 1)
    cost[w] = 1.0
    lp.col_cost_ = cost
    lp.col_lower_ = np.zeros(w + 1)
    upper = np.full(w + 1, highspy.kHighsInf)
    upper[units:w] = 1.0
    lp.col_upper_ = upper
    lp.row_lower_ = np.array(lower)
    lp.row_upper_ = np.full(len(lower), highspy.kHighsInf)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.array(rows_start)
    lp.a_matrix_.index_ = np.array(rows_index)
    lp.a_matrix_.value_ = np.array(rows_value)
    solver = highspy.Highs()
    solver.setOptionValue("output_flag", False)
    solver.passModel(lp)
    solver.run()
    if solver.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        raise PlacementError(f"m-SCT: the LP relaxation was not solved ({solver.getModelStatus()})")
    x = np.array(solver.getSolution().col_value)[units:w]
    favorite = np.full(units, -1, np.int64)
    chosen_x = np.full(units, np.inf)
    for e, (a, b, _) in enumerate(edges):
        if x[e] < 0.5 and x[e] < chosen_x[int(b)]:
            favorite[int(b)], chosen_x[int(b)] = int(a), x[e]
    return favorite


def _list_schedule(graph: OpGraph, problem: UnitProblem, favorite_parent: np.ndarray | None = None) -> np.ndarray:
    """Earliest-task-first list scheduling under memory limits. A unit with a favorite parent goes on
    that parent's device when the device is free the moment the parent ends and has room; otherwise
    it is scheduled like any other unit."""
    units, k = problem.compute.shape
    edges = _forward_edges(problem)
    sources, targets = edges[:, 0].astype(np.int64), edges[:, 1].astype(np.int64)
    by_target = np.argsort(targets, kind="stable")
    parent_ptr = np.searchsorted(targets[by_target], np.arange(units + 1)).astype(np.int64)
    by_source = np.argsort(sources, kind="stable")
    child_ptr = np.searchsorted(sources[by_source], np.arange(units + 1)).astype(np.int64)
    favorites = np.full(units, -1, np.int64) if favorite_parent is None else np.asarray(favorite_parent, np.int64)
    assignment, stuck = _earliest_task_first(
        problem.compute, problem.memory, problem.capacity, problem.bandwidth, problem.latency, parent_ptr,
        sources[by_target], edges[by_target, 2].astype(np.float64), child_ptr, targets[by_source], favorites)
    if stuck >= 0:
        raise PlacementError(f"list scheduling: unit {graph.groups[stuck].name!r} fits on no device (memory, kernels "
                             "or links)")
    return assignment


@njit(cache=True)
def _earliest_task_first(compute, memory, capacity, bandwidth, latency, parent_ptr, parent_unit, parent_bytes,
                         child_ptr, child_unit, favorite_parent):
    """The list scheduler in compiled code (on the Transformer's 15,216 units the Python loop took two minutes):
    each iteration places the ready (unit, device) pair of the smallest (start, end, unit, device). A unit's
    inputs are all placed once it is ready, so when they reach each device is computed once, then. Returns
    (assignment, a ready unit that fits nowhere or -1)."""
    units, k = compute.shape
    waiting = parent_ptr[1:] - parent_ptr[:-1]
    finish = np.zeros(units)
    assignment = np.full(units, -1, np.int64)
    device_free = np.zeros(k)
    used_memory = np.zeros(k)
    data_ready = np.zeros((units, k))  # when a ready unit's last input reaches each device
    ready = np.empty(units, np.int64)
    count = 0
    for u in range(units):
        if waiting[u] == 0:
            ready[count] = u
            count += 1
    while count > 0:
        best_start, best_end, best_u, best_d, best_at = np.inf, np.inf, -1, -1, -1
        for at in range(count):
            u = ready[at]
            only = -1
            parent = favorite_parent[u]
            if parent >= 0:
                home = assignment[parent]
                # As in Hanen and Munier's SCT: the favorite child follows its parent immediately on the
                # parent's device when that device is free then (and, here, has room for it).
                if (device_free[home] <= finish[parent] and np.isfinite(compute[u, home])
                        and used_memory[home] + memory[u] <= capacity[home]):
                    only = home
            for d in range(k):
                if only >= 0 and d != only:
                    continue
                if not np.isfinite(compute[u, d]) or used_memory[d] + memory[u] > capacity[d]:
                    continue
                start = max(device_free[d], data_ready[u, d])
                end = start + compute[u, d]
                if best_u < 0 or (start < best_start or (start == best_start and (
                        end < best_end or (end == best_end and (u < best_u or (u == best_u and d < best_d)))))):
                    best_start, best_end, best_u, best_d, best_at = start, end, u, d, at
        if best_u < 0 or not np.isfinite(best_start):
            stuck = ready[0]
            for at in range(count):
                stuck = min(stuck, ready[at])
            return assignment, stuck
        u, d = best_u, best_d
        assignment[u], finish[u] = d, best_end
        device_free[d] = best_end
        used_memory[d] += memory[u]
        count -= 1
        ready[best_at] = ready[count]  # the order of the ready units does not matter: ties go by index
        for c in range(child_ptr[u], child_ptr[u + 1]):
            child = child_unit[c]
            waiting[child] -= 1
            if waiting[child] == 0:
                for target in range(k):
                    arrival_max = 0.0
                    for q in range(parent_ptr[child], parent_ptr[child + 1]):
                        p = parent_unit[q]
                        arrival = finish[p]
                        if assignment[p] != target:
                            if bandwidth[assignment[p], target] <= 0:
                                arrival = np.inf
                            else:
                                arrival += latency[assignment[p], target] + parent_bytes[q] / bandwidth[assignment[p], target]
                        arrival_max = max(arrival_max, arrival)
                    data_ready[child, target] = arrival_max
                ready[count] = child
                count += 1
    return assignment, -1
