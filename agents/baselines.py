"""Baechi's memory-aware placement heuristics (Jeon et al., SoCC 2020): m-TOPO and m-ETF.

Both work on units (colocation groups) with costs from the simulator's compiled arrays: a unit's compute
time on each device is the sum of its ops'; an edge between units carries the bytes of the distinct
tensors it sends; a unit's memory is its variables (with optimizer slots) plus its ops' outputs, which
is conservative (outputs are not all alive at once). Each returns an ordinary `Placement`.

- m-TOPO: units in topological order fill one device after another, moving on when the device holds its
  share (1/k) of the total compute or its memory is full.
- m-ETF: list scheduling. Among ready units, place the (unit, device) pair that can start earliest,
  counting transfer time for inputs on other devices (latency + bytes / bandwidth) and skipping devices
  whose memory the unit would overflow. A unit holds ops from different points of the step (a variable
  with its reads and its update), so the unit graph can have cycles: only edges to later units (in the
  topological order of their first ops) order the schedule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placer.devices import DeviceSet
from placer.errors import PlacementError
from placer.graph.opgraph import OpGraph
from placer.placement import Placement


@dataclass(frozen=True)
class UnitProblem:
    compute: np.ndarray
    """[U, D] seconds of each unit on each device (inf where it has no kernel)."""
    memory: np.ndarray
    """[U] bytes a unit occupies on its device."""
    edges: np.ndarray
    """[E, 3] (source unit, target unit, bytes), one row per unit pair."""
    bandwidth: np.ndarray
    """[D, D] bytes per second (0: no link)."""
    latency: np.ndarray
    """[D, D] seconds."""
    capacity: np.ndarray
    """[D] bytes (inf when unknown)."""


def unit_problem(simulator) -> UnitProblem:
    """Aggregate a `placer.simulate.Simulator`'s op-level arrays to units."""
    graph, devices = simulator.graph, simulator.devices
    units = len(graph.groups)
    groups = simulator._op_group
    compute = np.zeros((units, len(devices)))
    for d in range(len(devices)):
        compute[:, d] = np.bincount(groups, weights=simulator.op_cost[:, d], minlength=units)
    for u, group in enumerate(graph.groups):
        for d, device in enumerate(devices):
            if device.kind not in group.kernel_devices:
                compute[u, d] = np.inf
    memory = np.bincount(groups, weights=simulator.op_alloc, minlength=units)
    memory += np.bincount(simulator._variable_groups, weights=simulator._variable_bytes, minlength=units)
    pairs: dict[tuple[int, int], float] = {}
    seen: set[tuple[int, int]] = set()
    for e in range(len(simulator.edge_src)):
        a, b = int(groups[simulator.edge_src[e]]), int(groups[simulator.out_dst[e]])
        tensor = int(simulator.out_tensor[e])
        if a != b and (tensor, b) not in seen:
            seen.add((tensor, b))
            pairs[(a, b)] = pairs.get((a, b), 0.0) + float(simulator.tensor_bytes[tensor])
    edges = np.array([(a, b, size) for (a, b), size in sorted(pairs.items())], dtype=np.float64).reshape(-1, 3)
    return UnitProblem(compute, memory, edges, simulator.link_bandwidth, simulator.link_latency, simulator.capacity)


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
    units, k = problem.compute.shape
    parents: list[list[tuple[int, float]]] = [[] for _ in range(units)]
    children: list[list[int]] = [[] for _ in range(units)]
    for a, b, size in problem.edges:
        # Units are in topological order of their first op; an edge back to an earlier unit (e.g. a
        # variable's unit, which also holds its update) would make a cycle, so only forward edges order.
        if a < b:
            parents[int(b)].append((int(a), size))
            children[int(a)].append(int(b))
    waiting = np.array([len(p) for p in parents])
    finish = np.zeros(units)
    assignment = np.full(units, -1, np.int64)
    device_free = np.zeros(k)
    used_memory = np.zeros(k)
    ready = [u for u in range(units) if waiting[u] == 0]
    while ready:
        best = None
        for u in ready:
            for d in range(k):
                if not np.isfinite(problem.compute[u, d]) or used_memory[d] + problem.memory[u] > problem.capacity[d]:
                    continue
                start = device_free[d]
                for parent, size in parents[u]:
                    p = assignment[parent]
                    arrival = finish[parent]
                    if p != d:
                        if problem.bandwidth[p, d] <= 0:
                            arrival = np.inf
                        else:
                            arrival += problem.latency[p, d] + size / problem.bandwidth[p, d]
                    start = max(start, arrival)
                key = (start, start + problem.compute[u, d], u, d)
                if best is None or key < best:
                    best = key
        if best is None or not np.isfinite(best[0]):
            stuck = graph.groups[ready[0]].name
            raise PlacementError(f"m-ETF: unit {stuck!r} fits on no device (memory, kernels or links)")
        start, end, u, d = best
        assignment[u], finish[u] = d, end
        device_free[d] = end
        used_memory[d] += problem.memory[u]
        ready.remove(u)
        for child in children[u]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    return Placement.from_assignment(graph, devices, assignment, {"method": "m-etf"})
