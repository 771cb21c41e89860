"""Inputs of the generalizing policy that mean the same on every graph and every machine.

The hierarchical planner's unit features histogram the op types present in one graph, so their columns
mean something else on the next graph. Here op types are hashed into a fixed number of buckets (a stable
hash, so a saved policy reads new graphs the same way), and devices are described by their kind and
hardware numbers rather than by their index, so one policy can score units against any device set.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from agents.features import unit_features
from placer.devices import DeviceSet
from placer.graph.opgraph import OpGraph

OP_TYPE_BUCKETS = 64
"""Op types are hashed into this many buckets: TensorFlow has about a thousand, a training graph uses a
few dozen, and a collision only merges two types' columns."""
DEVICE_KINDS = ("CPU", "GPU")
FEATURES_VERSION = 1
"""Bumped when the meaning of a feature column changes: a saved policy records the version it reads."""


def op_type_bucket(op_type: str) -> int:
    return zlib.crc32(op_type.encode()) % OP_TYPE_BUCKETS


@dataclass(frozen=True)
class GraphInputs:
    """One graph's units as the policy sees them."""

    name: str
    units: np.ndarray
    """[U, OP_TYPE_BUCKETS + 6] float32: the share of each hashed op type among the unit's ops, then the
    sizes of `agents.features.UnitFeatures` (output bytes, FLOPs, op count, position, fan-in, fan-out)."""
    edges: np.ndarray
    """[E, 2] int64: (producer unit, consumer unit)."""

    @property
    def num_units(self) -> int:
        return self.units.shape[0]


def graph_inputs(graph: OpGraph) -> GraphInputs:
    features = unit_features(graph)
    buckets = np.zeros((len(features.type_names), OP_TYPE_BUCKETS), np.float32)
    buckets[np.arange(len(features.type_names)), [op_type_bucket(t) for t in features.type_names]] = 1.0
    counts = features.op_types.astype(np.float32) @ buckets
    shares = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1.0)
    return GraphInputs(graph.name, np.concatenate([shares, features.sizes], axis=1).astype(np.float32),
                       features.edges.astype(np.int64))


@dataclass(frozen=True)
class GraphBatch:
    """Several graphs as one disjoint graph: no padding, so graphs of any sizes share a batch."""

    units: np.ndarray
    """[N, F] the units of every graph, one graph after the other."""
    edges: np.ndarray
    """[E, 2] edges between rows of `units`."""
    offsets: tuple[int, ...]
    """Where each graph's units start; a last entry N closes the last graph."""

    @classmethod
    def of(cls, graphs: list[GraphInputs]) -> GraphBatch:
        if not graphs:
            raise ValueError("a batch needs at least one graph")
        offsets = np.concatenate([[0], np.cumsum([g.num_units for g in graphs])]).astype(int)
        edges = [g.edges + offset for g, offset in zip(graphs, offsets[:-1])]
        return cls(np.concatenate([g.units for g in graphs]), np.concatenate(edges).reshape(-1, 2),
                   tuple(int(o) for o in offsets))

    def split(self, rows: np.ndarray) -> list[np.ndarray]:
        """Per-unit rows (e.g. logits) of the batch, cut back into one array per graph."""
        return [rows[start:end] for start, end in zip(self.offsets[:-1], self.offsets[1:])]


@dataclass(frozen=True)
class DeviceInputs:
    kinds: tuple[str, ...]
    features: np.ndarray
    """[D, len(DEVICE_KINDS) + 4] float32: kind one-hot; log-scaled peak FLOP/s, memory and memory
    bandwidth (0 where unknown); 1 where those numbers are unknown (a real device nobody modeled)."""


def device_inputs(devices: DeviceSet) -> DeviceInputs:
    rows = []
    for device in devices:
        kind = [float(device.kind == k) for k in DEVICE_KINDS]
        known = device.peak_flops is not None
        numbers = [np.log10(device.peak_flops) - 12 if device.peak_flops else 0.0,
                   np.log10(device.memory_bytes) - 10 if device.memory_bytes else 0.0,
                   np.log10(device.memory_bandwidth) - 11 if device.memory_bandwidth else 0.0]
        rows.append(kind + numbers + [0.0 if known else 1.0])
    return DeviceInputs(tuple(d.kind for d in devices), np.asarray(rows, np.float32))
