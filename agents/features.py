"""Per-unit features for placement policies, from an `OpGraph` (pure numpy, computed once per graph).

A unit is a colocation group: TensorFlow runs its ops on one device, so policies decide per unit. A unit's
features pool its ops': a histogram of op types (over the types present in the graph), the log of its
summed output bytes and FLOPs, its op count, and its position in topological order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placer.graph.opgraph import OpGraph


@dataclass(frozen=True)
class UnitFeatures:
    op_types: np.ndarray
    """[U, T] int: how many ops of each type (of the T types present in the graph) each unit has."""
    sizes: np.ndarray
    """[U, 6] float32: log1p of output bytes, of FLOPs, of op count; relative topological position;
    log1p of the unit's incoming and outgoing edges to other units (its adjacency)."""
    edges: np.ndarray
    """[E, 2] int: (producer unit, consumer unit) for every data or control edge between two units."""
    type_names: tuple[str, ...]

    @property
    def num_units(self) -> int:
        return self.op_types.shape[0]

    def dense(self) -> np.ndarray:
        """[U, T + 6] float32: normalized type histogram and sizes, the grouper's input. A linear layer over
        the histogram is a learned op-type embedding averaged over the unit's ops."""
        counts = self.op_types.astype(np.float32)
        histogram = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1.0)
        return np.concatenate([histogram, self.sizes], axis=1).astype(np.float32)


def unit_features(graph: OpGraph) -> UnitFeatures:
    type_names = tuple(sorted({op.type for op in graph.ops}))
    type_index = {name: i for i, name in enumerate(type_names)}
    units = len(graph.groups)
    op_types = np.zeros((units, len(type_names)), np.int64)
    output_bytes = np.zeros(units)
    flops = np.zeros(units)
    count = np.zeros(units)
    for op in graph.ops:
        op_types[op.group, type_index[op.type]] += 1
        output_bytes[op.group] += sum(op.output_bytes)
        flops[op.group] += op.flops
        count[op.group] += 1
    edge_set = set()
    for op in graph.ops:
        for source in (*op.producers, *op.control_inputs):
            a, b = graph.op(source).group, op.group
            if a != b:
                edge_set.add((a, b))
    edges = np.array(sorted(edge_set), np.int64).reshape(-1, 2)
    fan_in = np.bincount(edges[:, 1], minlength=units)
    fan_out = np.bincount(edges[:, 0], minlength=units)
    position = np.arange(units) / max(units - 1, 1)
    sizes = np.stack([np.log1p(output_bytes) / 20, np.log1p(flops) / 25, np.log1p(count) / 5, position,
                      np.log1p(fan_in) / 5, np.log1p(fan_out) / 5], axis=1)
    return UnitFeatures(op_types, sizes.astype(np.float32), edges, type_names)
