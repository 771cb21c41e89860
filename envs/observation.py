"""What an agent sees of a placement problem: fixed-shape arrays describing the graph and the devices.

`observation_space(...)` and `graph_observation(...)` agree field by field; every field is listed in
`FIELDS` with its meaning. Shapes are fixed per environment: N ops (step ops, padded to `max_ops`),
U placeable units (colocation groups, padded to `max_units`), D devices, K neighbours per op, E edges.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from gymnasium import spaces

from placer.devices import DeviceSet
from placer.graph.opgraph import OpGraph

SHAPE_DIMS = 4
"""Dimensions of each op's first output shape kept (higher ranks are truncated)."""

FIELDS = {
    "op_type": "(N,) int: index of the op type in `op_type_vocabulary()` (0 = padding, 1 = unknown type)",
    "op_shape": "(N, 4) int: first output's dims, -1 where unknown, 0 past the rank or for padding",
    "op_bytes": "(N,) float: bytes of all outputs",
    "op_flops": "(N,) float: FLOPs per step (TensorFlow's statistics; 0 where it has none)",
    "op_cost": "(N, D) float: seconds on each device from the backend's cost tables (0 when there are none)",
    "op_unit": "(N,) int: the unit (colocation group) of each op; 0 for padding",
    "op_mask": "(N,) int8: 1 for real ops, 0 for padding",
    "in_neighbours": "(N, K) int: ops whose outputs this op reads (data and control), -1 padded",
    "out_neighbours": "(N, K) int: ops reading this op's outputs, -1 padded",
    "edges": "(E, 2) int: (producer, consumer) op indices, -1 padded",
    "edge_mask": "(E,) int8: 1 for real edges",
    "unit_mask": "(U,) int8: 1 for real units",
    "device_mask": "(U, D) int8: 1 where the unit has kernels for the device's type",
    "device_kind": "(D,) int: 0 CPU, 1 GPU",
    "device_memory": "(D,) float: bytes of memory (0 when unknown)",
    "device_speed": "(D,) float: peak FLOP/s (0 when unknown)",
    "device_threads": "(D,) int: threads an op placed there runs on, its width (0 when unknown); on workers of "
                      "different widths (local:widths=2+1+1) choosing an op's device chooses its threads",
}


@lru_cache(maxsize=1)
def op_type_vocabulary() -> tuple[str, ...]:
    """Every op type TensorFlow registers, sorted: the same indices for every graph (per TF version).
    Index 0 is padding and 1 an unknown type; type i of this tuple has index i + 2."""
    import tensorflow as tf

    return tuple(sorted(name for name in dir(tf.raw_ops) if not name.startswith("_")))


@dataclass(frozen=True)
class ObservationShape:
    ops: int
    units: int
    devices: int
    neighbours: int
    edges: int


def observation_shape(graph: OpGraph, devices: DeviceSet, *, max_ops: int | None = None, max_units: int | None = None,
                      max_neighbours: int = 8, max_edges: int | None = None) -> ObservationShape:
    step = graph.step_ops
    edges = sum(len(op.data_inputs) + len(op.control_inputs) for op in step)
    shape = ObservationShape(max_ops or len(step), max_units or len(graph.groups), len(devices), max_neighbours,
                             max_edges or edges)
    if shape.ops < len(step) or shape.units < len(graph.groups) or shape.edges < edges:
        raise ValueError(f"graph {graph.name!r} has {len(step)} step ops, {len(graph.groups)} units and {edges} edges; "
                         f"max_ops={max_ops}, max_units={max_units}, max_edges={max_edges} are too small")
    return shape


def observation_space(shape: ObservationShape) -> spaces.Dict:
    n, u, d, k, e = shape.ops, shape.units, shape.devices, shape.neighbours, shape.edges
    types = len(op_type_vocabulary()) + 2
    big = np.iinfo(np.int64).max
    huge = float(np.finfo(np.float32).max)  # finite bounds: check_env warns on inf
    return spaces.Dict({
        "op_type": spaces.Box(0, types - 1, (n,), np.int64),
        "op_shape": spaces.Box(-1, big, (n, SHAPE_DIMS), np.int64),
        "op_bytes": spaces.Box(0, huge, (n,), np.float32),
        "op_flops": spaces.Box(0, huge, (n,), np.float32),
        "op_cost": spaces.Box(0, huge, (n, d), np.float32),
        "op_unit": spaces.Box(0, max(u - 1, 0), (n,), np.int64),
        "op_mask": spaces.Box(0, 1, (n,), np.int8),
        "in_neighbours": spaces.Box(-1, max(n - 1, 0), (n, k), np.int64),
        "out_neighbours": spaces.Box(-1, max(n - 1, 0), (n, k), np.int64),
        "edges": spaces.Box(-1, max(n - 1, 0), (e, 2), np.int64),
        "edge_mask": spaces.Box(0, 1, (e,), np.int8),
        "unit_mask": spaces.Box(0, 1, (u,), np.int8),
        "device_mask": spaces.Box(0, 1, (u, d), np.int8),
        "device_kind": spaces.Box(0, 1, (d,), np.int64),
        "device_memory": spaces.Box(0, huge, (d,), np.float32),
        "device_speed": spaces.Box(0, huge, (d,), np.float32),
        "device_threads": spaces.Box(0, big, (d,), np.int64),
    })


def graph_observation(graph: OpGraph, devices: DeviceSet, shape: ObservationShape,
                      op_cost: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The arrays of `observation_space(shape)` for one graph and device set (see `FIELDS`)."""
    step = graph.step_ops
    index = {op.name: i for i, op in enumerate(step)}
    vocabulary = {name: i + 2 for i, name in enumerate(op_type_vocabulary())}
    n, u, d, k, e = shape.ops, shape.units, shape.devices, shape.neighbours, shape.edges
    obs = {
        "op_type": np.zeros(n, np.int64), "op_shape": np.zeros((n, SHAPE_DIMS), np.int64),
        "op_bytes": np.zeros(n, np.float32), "op_flops": np.zeros(n, np.float32), "op_cost": np.zeros((n, d), np.float32),
        "op_unit": np.zeros(n, np.int64), "op_mask": np.zeros(n, np.int8),
        "in_neighbours": np.full((n, k), -1, np.int64), "out_neighbours": np.full((n, k), -1, np.int64),
        "edges": np.full((e, 2), -1, np.int64), "edge_mask": np.zeros(e, np.int8),
        "unit_mask": np.zeros(u, np.int8), "device_mask": np.zeros((u, d), np.int8),
        "device_kind": np.array([1 if dev.kind == "GPU" else 0 for dev in devices], np.int64),
        "device_memory": np.array([dev.memory_bytes or 0 for dev in devices], np.float32),
        "device_speed": np.array([dev.peak_flops or 0 for dev in devices], np.float32),
        "device_threads": np.array([dev.width or 0 for dev in devices], np.int64),
    }
    out_count = np.zeros(n, np.int64)
    edge = 0
    for i, op in enumerate(step):
        obs["op_type"][i] = vocabulary.get(op.type, 1)
        if op.output_shapes and op.output_shapes[0] is not None:
            dims = [-1 if dim is None else dim for dim in op.output_shapes[0]][:SHAPE_DIMS]
            obs["op_shape"][i, : len(dims)] = dims
        obs["op_bytes"][i] = sum(op.output_bytes)
        obs["op_flops"][i] = op.flops
        obs["op_unit"][i] = op.group
        obs["op_mask"][i] = 1
        sources = [index[name] for name in (*op.producers, *op.control_inputs)]
        for slot, src in enumerate(sources[:k]):
            obs["in_neighbours"][i, slot] = src
        for src in sources:
            if out_count[src] < k:
                obs["out_neighbours"][src, out_count[src]] = i
            out_count[src] += 1
            obs["edges"][edge] = (src, i)
            obs["edge_mask"][edge] = 1
            edge += 1
    if op_cost is not None:
        obs["op_cost"][: len(step)] = op_cost
    obs["unit_mask"][: len(graph.groups)] = 1
    for g, group in enumerate(graph.groups):
        obs["device_mask"][g] = [dev.kind in group.kernel_devices for dev in devices]
    return obs
