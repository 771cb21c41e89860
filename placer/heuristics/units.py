"""The unit graph the cost-reading heuristics place: colocation groups with their compute time per device,
memory and the bytes they exchange, aggregated from a `placer.simulate.Simulator`'s op-level arrays.

A unit's compute time on a device is the sum of its ops'; an edge between units carries the bytes of the
distinct tensors it sends; a unit's memory is its variables (with optimizer slots) plus its ops' outputs,
which is conservative (outputs are not all alive at once).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
    groups = simulator.op_group
    compute = np.zeros((units, len(devices)))
    for d in range(len(devices)):
        compute[:, d] = np.bincount(groups, weights=simulator.op_cost[:, d], minlength=units)
    for u, group in enumerate(graph.groups):
        for d, device in enumerate(devices):
            if device.kind not in group.kernel_devices:
                compute[u, d] = np.inf
    memory = np.bincount(groups, weights=simulator.op_alloc, minlength=units)
    memory += np.bincount(simulator.variable_groups, weights=simulator.variable_bytes, minlength=units)
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
