"""Placements: which device each colocation group (and so each op) of an `OpGraph` runs on.

A `Placement` is validated when it is made, applies to the graph's GraphDef, and round-trips through a
versioned JSON file (`PlacementFile`: one reader, one writer) that names the graph and devices it was made for.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from placer.devices import DeviceSet
from placer.errors import DeviceSpecError, PlacementError, PlacementFileError
from placer.files import write_atomically
from placer.graph.opgraph import OpGraph

FILE_FORMAT = "placer.placement"
FILE_FORMAT_VERSION = 1


@dataclass(frozen=True)
class Placement:
    """Device index per colocation group of one graph, over one ordered device set."""

    graph_fingerprint: str
    devices: tuple[str, ...]
    """Full device names; `group_devices` indexes into this."""
    group_devices: tuple[int, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False)
    """Free-form facts carried into the file (measured step time, method, ...)."""

    # -- construction (every constructor validates against the graph and devices) --------------------

    @classmethod
    def from_assignment(
        cls, graph: OpGraph, devices: DeviceSet, assignment: Sequence[int], metadata: Mapping[str, Any] | None = None
    ) -> Placement:
        """From one device index per colocation group, in `graph.groups` order (what agents emit)."""
        values = np.asarray(assignment)
        if values.ndim != 1:
            raise PlacementError(
                f"an assignment is a sequence of device indices, one per colocation group; got {type(assignment).__name__}"
                + (f" of shape {values.shape}" if values.ndim else "")
            )
        if values.shape != (len(graph.groups),):
            raise PlacementError(
                f"the assignment has {len(values)} entries but graph {graph.name!r} has {len(graph.groups)} "
                "colocation groups: give one device index per group"
            )
        if values.size and values.dtype.kind not in "iub":
            if values.dtype.kind != "f" or not np.all(values == np.floor(values)):
                raise PlacementError(f"device indices must be whole numbers, got {values.dtype} values such as {values[0]!r}")
        values = values.astype(np.int64)
        outside = (values < 0) | (values >= len(devices))
        if outside.any():
            group, index = graph.groups[int(np.argmax(outside))], values[int(np.argmax(outside))]
            raise PlacementError(
                f"colocation group {group.name!r} is assigned device index {index}, but there are only "
                f"{len(devices)} devices ({', '.join(d.short_name for d in devices)})"
            )
        placement = cls(graph.fingerprint, devices.names, tuple(values.tolist()), dict(metadata or {}))
        values.flags.writeable = False  # our own copy (astype copies): callers cannot change it behind our back
        placement.__dict__["group_device_array"] = values  # the cached property, already at hand
        placement.check_kernels(graph, devices)
        return placement

    @classmethod
    def from_groups(
        cls, graph: OpGraph, devices: DeviceSet, mapping: Mapping[str, str], metadata: Mapping[str, Any] | None = None
    ) -> Placement:
        """From colocation-group name -> device name (short names allowed). Every group must be listed."""
        unknown = sorted(set(mapping) - {g.name for g in graph.groups})
        if unknown:
            raise PlacementError(f"graph {graph.name!r} has no colocation groups named {_few(unknown)}")
        missing = [g for g in graph.groups if g.name not in mapping]
        if missing:
            raise PlacementError(
                f"{len(missing)} colocation groups are left out of the placement, e.g. {missing[0].name!r} "
                f"(ops {_few(missing[0].ops)}); every group needs a device"
            )
        assignment = [_device_index(devices, mapping[g.name], f"group {g.name!r}") for g in graph.groups]
        return cls.from_assignment(graph, devices, assignment, metadata)

    @classmethod
    def from_op_devices(
        cls, graph: OpGraph, devices: DeviceSet, op_devices: Mapping[str, str], metadata: Mapping[str, Any] | None = None
    ) -> Placement:
        """From op name -> device name. Ops of one colocation group must agree: TensorFlow would move them."""
        unknown = sorted(name for name in op_devices if name not in graph)
        if unknown:
            raise PlacementError(
                f"the placement names {len(unknown)} ops that graph {graph.name!r} does not have, e.g. {_few(unknown)}"
            )
        missing = [op.name for op in graph.ops if op.name not in op_devices]
        if missing:
            raise PlacementError(
                f"{len(missing)} ops of graph {graph.name!r} have no device in the placement, e.g. {_few(missing)}"
            )
        assignment = []
        for group in graph.groups:
            chosen = {op: _device_index(devices, op_devices[op], f"op {op!r}") for op in group.ops}
            distinct = sorted(set(chosen.values()))
            if len(distinct) > 1:
                first, second = (next(op for op, d in chosen.items() if d == i) for i in distinct[:2])
                raise PlacementError(
                    f"ops {first!r} (on {devices[chosen[first]].short_name}) and {second!r} "
                    f"(on {devices[chosen[second]].short_name}) are in one colocation group ({group.name!r}); "
                    "TensorFlow runs a group on one device, so give them the same device"
                )
            assignment.append(distinct[0])
        return cls.from_assignment(graph, devices, assignment, metadata)

    @classmethod
    def on_device(cls, graph: OpGraph, devices: DeviceSet, device: str | int) -> Placement:
        """Every colocation group on `device` (an index or a name), even one without a kernel there (refused).
        The single-device heuristic (the first GPU, soft placement's moves) is
        `placer.heuristics.single_device_placement`."""
        index = device if isinstance(device, int) else _device_index(devices, device, "the one-device placement")
        return cls.from_assignment(graph, devices, [index] * len(graph.groups), {"method": "one-device"})

    @classmethod
    def round_robin(cls, graph: OpGraph, devices: DeviceSet) -> Placement:
        """Groups dealt to devices in topological order, skipping devices without kernels for a group."""
        assignment = []
        cursor = 0
        for group in graph.groups:
            for step in range(len(devices)):
                candidate = (cursor + step) % len(devices)
                if devices[candidate].kind in group.kernel_devices:
                    break
            else:
                candidate = cursor % len(devices)  # no device fits; from_assignment names the op
            assignment.append(candidate)
            cursor = candidate + 1
        return cls.from_assignment(graph, devices, assignment, {"method": "round-robin"})

    # -- checks and views ---------------------------------------------------------------------------

    @cached_property
    def group_device_array(self) -> np.ndarray:
        """`group_devices` as a read-only int64 array (what the simulator and vectorized checks take)."""
        values = np.asarray(self.group_devices, dtype=np.int64)
        values.flags.writeable = False
        return values

    @property
    def devices_used(self) -> int:
        """How many devices run its groups: 1 for a placement that sends nothing between devices."""
        return len(set(self.group_devices))

    def check_kernels(self, graph: OpGraph, devices: DeviceSet) -> None:
        """Raise if an op is placed on a device type for which TensorFlow has no kernel for it."""
        assigned = self.group_device_array
        for kind in {device.kind for device in devices}:
            lacking = graph.groups_without_kernel(kind)
            if not lacking.any():  # usually so for CPUs: no check per group (agents make placements per sample)
                continue
            is_kind = np.array([device.kind == kind for device in devices])
            misplaced = lacking & is_kind[assigned]
            if not misplaced.any():
                continue
            group = graph.groups[int(np.argmax(misplaced))]
            index = int(assigned[group.index])
            for op_name in group.ops:
                op = graph.op(op_name)
                if kind not in op.kernel_devices:
                    supported = ", ".join(sorted(op.kernel_devices)) or "no device type"
                    raise PlacementError(
                        f"op {op.name!r} ({op.type}) has no {kind} kernel, so it cannot run on "
                        f"{devices[index].short_name}; it has kernels for {supported}. Place its colocation "
                        f"group {group.name!r} on another device"
                    )

    def device_of_group(self, group_index: int) -> str:
        return self.devices[self.group_devices[group_index]]

    def op_devices(self, graph: OpGraph) -> dict[str, str]:
        self._require_graph(graph)
        return {op.name: self.devices[self.group_devices[op.group]] for op in graph.ops}

    def apply(self, graph: OpGraph):
        """The graph's GraphDef with every node's device set (a new proto; the graph is not changed)."""
        import tensorflow as tf

        graph_def = tf.compat.v1.GraphDef.FromString(graph.graph_def)
        op_devices = self.op_devices(graph)
        for node in graph_def.node:
            node.device = op_devices[node.name]
        return graph_def

    def with_metadata(self, **metadata: Any) -> Placement:
        return Placement(self.graph_fingerprint, self.devices, self.group_devices, {**self.metadata, **metadata})

    def summary(self, graph: OpGraph, devices: DeviceSet | None = None) -> str:
        """A table per device: colocation groups, ops, parameters, FLOPs and output bytes per step."""
        self._require_graph(graph)
        rows = {name: [0, 0, 0, 0, 0] for name in self.devices}
        for device_index in self.group_devices:
            rows[self.devices[device_index]][0] += 1
        for op in graph.ops:
            row = rows[self.devices[self.group_devices[op.group]]]
            row[1] += 1
            row[2] += op.parameters
            if op.in_step:
                row[3] += op.flops
                row[4] += sum(op.output_bytes)
        short = {d.name: d.short_name for d in devices} if devices else {}
        lines = [f"{'device':<40} {'groups':>7} {'ops':>7} {'params':>12} {'FLOPs':>14} {'bytes':>12}"]
        for name, (groups, ops, params, flops, nbytes) in rows.items():
            lines.append(f"{short.get(name, name):<40} {groups:>7} {ops:>7} {params:>12,} {flops:>14,} {nbytes:>12,}")
        return "\n".join(lines)

    def _require_graph(self, graph: OpGraph) -> None:
        if graph.fingerprint != self.graph_fingerprint:
            raise PlacementError(
                f"this placement was made for graph fingerprint {self.graph_fingerprint[:12]}, not for "
                f"{graph.name!r} ({graph.fingerprint[:12]})"
            )

    # -- files ----------------------------------------------------------------------------------------

    def to_file(self, graph: OpGraph, source: str = "the placement") -> PlacementFile:
        """This placement as the file it saves to: op -> device for every op of `graph`, and the graph's facts."""
        return PlacementFile(
            source=source, graph_name=graph.name, fingerprint=graph.fingerprint, devices=self.devices,
            op_devices=self.op_devices(graph), groups={g.name: self.device_of_group(g.index) for g in graph.groups},
            metadata=dict(self.metadata), train_op=graph.train_op, init_op=graph.init_op, loss=graph.loss,
            batch_size=graph.batch.size if graph.batch is not None else None,
        )

    def to_json_dict(self, graph: OpGraph) -> dict[str, Any]:
        return self.to_file(graph).to_json_dict()

    def save(self, path: str | Path, graph: OpGraph) -> Path:
        return self.to_file(graph).save(path)


@dataclass(frozen=True)
class PlacementFile:
    """A placement file as written: op -> device, the devices, the graph it was made for, and its metadata.

    Needs no `OpGraph` (and no TensorFlow), so TF2 code can read the mapping; `to_placement` checks it
    against a graph and its devices before it becomes a `Placement`.
    """

    source: str
    """Where it was read from (used in error messages)."""
    graph_name: str
    fingerprint: str
    devices: tuple[str, ...]
    op_devices: Mapping[str, str]
    """Full device name of every op of the placement's graph."""
    groups: Mapping[str, str]
    """Device of every colocation group, by the group's anchor op (empty if the file has none)."""
    metadata: Mapping[str, Any]
    train_op: str | None = None
    """The fetches the placement's graph was built with; None in files written before they were recorded."""
    init_op: str | None = None
    loss: str | None = None
    batch_size: int | None = None
    """Examples per step of the graph's training step, when its builder knew them (a Keras model's step)."""

    def device_for(self, op_name: str) -> str | None:
        """The device of an op of the placement's graph, or None if the placement does not name the op."""
        return self.op_devices.get(op_name)

    def groups_and_ops_per_device(self) -> dict[str, tuple[int, int]]:
        """(colocation groups, ops) on each of the file's devices, by full name, in the file's device order:
        every op and group counts once, on its own device."""
        return {device: (sum(d == device for d in self.groups.values()), sum(d == device for d in self.op_devices.values()))
                for device in self.devices}

    @property
    def recorded_step_time(self) -> float | None:
        """Step time in seconds recorded when the placement was made (`step_time`, or `measured.median`)."""
        candidates = [self.metadata.get("step_time")]
        measured = self.metadata.get("measured")
        if isinstance(measured, Mapping):
            candidates.append(measured.get("median"))
        for value in candidates:
            if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
                return float(value)
        return None

    def to_placement(self, graph: OpGraph, devices: DeviceSet) -> Placement:
        """The placement of `graph` over `devices`; PlacementFileError if the file was made for another graph,
        names devices that `devices` lacks, or splits a colocation group."""
        check_same_graph(self, graph)
        missing = []
        for name in self.devices:
            try:
                devices.resolve(name)
            except DeviceSpecError:
                missing.append(name)
        if missing:
            raise PlacementFileError(
                f"{self.source} places ops on devices that {devices.name!r} does not have: {_few(missing)}; "
                f"available: {', '.join(d.short_name for d in devices)}"
            )
        try:
            return Placement.from_op_devices(graph, devices, self.op_devices, self.metadata)
        except PlacementError as error:
            raise PlacementFileError(f"{self.source}: {error}") from None

    def with_metadata(self, **metadata: Any) -> PlacementFile:
        """The same placement with `metadata` added to (and overriding) the file's."""
        return dataclasses.replace(self, metadata={**self.metadata, **metadata})

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "format": FILE_FORMAT,
            "format_version": FILE_FORMAT_VERSION,
            "graph": {"name": self.graph_name, "fingerprint": self.fingerprint, "ops": len(self.op_devices),
                      "groups": len(self.groups),
                      # what one step runs and what initializes it: `placer.apply` rebuilds the graph from these
                      "train_op": self.train_op, "init_op": self.init_op, "loss": self.loss,
                      **({"batch_size": self.batch_size} if self.batch_size is not None else {})},
            "devices": list(self.devices),
            "groups": dict(self.groups),
            "ops": dict(self.op_devices),
            "metadata": dict(self.metadata),
        }

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_atomically(path, json.dumps(self.to_json_dict(), indent=1, default=_json_value))


def load_placement(path: str | Path, graph: OpGraph, devices: DeviceSet) -> Placement:
    """Read a placement file made for `graph`; refuse, with the reason, one made for anything else."""
    return read_placement_file(path).to_placement(graph, devices)


def read_placement_file(path: str | Path) -> PlacementFile:
    """Read and check a placement file's shape; raise PlacementFileError naming what is wrong."""
    return placement_file_from_json_dict(_read_json(path), source=str(path))


def placement_mapping(path: str | Path) -> dict[str, str]:
    """op name -> full device name from a placement file (e.g. for `tf.device` scopes in TF2 code)."""
    return dict(read_placement_file(path).op_devices)


def placement_from_json_dict(data: Any, graph: OpGraph, devices: DeviceSet, *, source: str = "placement") -> Placement:
    return placement_file_from_json_dict(data, source=source).to_placement(graph, devices)


def placement_file_from_json_dict(data: Any, *, source: str = "placement") -> PlacementFile:
    """The one check of a placement file's format: everything but the graph and devices it is used with."""
    if not isinstance(data, dict) or data.get("format") != FILE_FORMAT:
        raise PlacementFileError(f"{source} is not a placer placement file (no \"format\": \"{FILE_FORMAT}\")")
    if data.get("format_version") != FILE_FORMAT_VERSION:
        raise PlacementFileError(
            f"{source} has format version {data.get('format_version')!r}; this placer reads version "
            f"{FILE_FORMAT_VERSION}. Re-export it with a matching placer"
        )
    graph = data.get("graph")
    if not isinstance(graph, dict) or not isinstance(graph.get("fingerprint"), str) or not graph["fingerprint"]:
        raise PlacementFileError(f"{source} needs the graph it was made for under \"graph\", with its \"fingerprint\"")
    # Empty "devices" or "ops" pass: the graph check then says which of the graph's ops the file lacks.
    devices = data.get("devices")
    if not isinstance(devices, list) or not all(isinstance(d, str) and d for d in devices):
        raise PlacementFileError(f"{source} needs a list of device names under \"devices\"")
    ops = data.get("ops")
    if not isinstance(ops, dict):
        raise PlacementFileError(f"{source} needs a mapping of op name -> device under \"ops\"")
    groups = data.get("groups") or {}
    metadata = data.get("metadata") or {}
    for key, value in (("groups", groups), ("metadata", metadata)):
        if not isinstance(value, dict):
            raise PlacementFileError(f"{source} has a {type(value).__name__} under {key!r}; expected a mapping")
    known = set(devices)
    for what, mapping in (("op", ops), ("colocation group", groups)):
        for name, device in mapping.items():
            if device not in known:
                raise PlacementFileError(
                    f"{source} puts {what} {name!r} on {device!r}, which is not one of its devices ({', '.join(devices)})"
                )
    fetches = {key: graph.get(key) for key in ("train_op", "init_op", "loss")}
    for key, value in fetches.items():
        if value is not None and not isinstance(value, str):
            raise PlacementFileError(f"{source} has a {type(value).__name__} as the graph's {key}; expected an op name")
    batch_size = graph.get("batch_size")
    if batch_size is not None and (not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1):
        raise PlacementFileError(f"{source} has {batch_size!r} as the graph's batch_size; expected a positive whole number")
    return PlacementFile(
        source=source, graph_name=str(graph.get("name", "")), fingerprint=graph["fingerprint"],
        devices=tuple(devices), op_devices=dict(ops), groups=dict(groups), metadata=dict(metadata), **fetches,
        batch_size=batch_size,
    )


def check_same_graph(placement_file: PlacementFile, graph: OpGraph) -> None:
    """Raise PlacementFileError, saying what differs, unless `placement_file` was made for `graph`."""
    if graph.fingerprint == placement_file.fingerprint:
        return
    names = {op.name for op in graph.ops}
    missing = sorted(set(placement_file.op_devices) - names)
    extra = sorted(names - set(placement_file.op_devices))
    if missing or extra:
        differs = (f"{len(missing)} of its ops are not in your graph ({_few(missing)}) and " if missing else "") + (
            f"{len(extra)} ops of your graph are not in it ({_few(extra)})" if extra else "the rest match by name"
        )
    else:
        differs = "every op name matches, so op types, shapes, dtypes or edges differ"
    raise PlacementFileError(
        f"{placement_file.source} was made for graph {placement_file.graph_name!r} (fingerprint "
        f"{placement_file.fingerprint[:12]}), not for your graph {graph.name!r} (fingerprint {graph.fingerprint[:12]}): "
        f"{differs}. The model or its size, batch or optimizer changed: build the graph exactly as for the placement, "
        "or make a new placement for this graph"
    )


_WHAT_A_PLACEMENT_FILE_IS = "a placement file is the JSON that `placer measure --save-placement` or `placer export` writes"


def _read_json(path: str | Path) -> Any:
    """A placement file's parsed JSON; PlacementFileError, never an OSError or UnicodeDecodeError, if it has none."""
    from placer.files import read_json_file

    return read_json_file(path, "placement file", _WHAT_A_PLACEMENT_FILE_IS, PlacementFileError)


def _json_value(value: Any) -> Any:
    """Metadata values JSON has no type for: NumPy scalars as numbers, anything else as its text."""
    if getattr(value, "shape", None) == () and hasattr(value, "item"):
        return value.item()
    return str(value)


def _device_index(devices: DeviceSet, name: str | int, what: str) -> int:
    if isinstance(name, int):
        if not 0 <= name < len(devices):
            raise PlacementError(f"{what} is placed on device index {name}, but there are {len(devices)} devices")
        return name
    try:
        return devices.index(str(name))
    except DeviceSpecError as error:
        raise PlacementError(f"{what}: {error}") from None


def _few(names: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(repr(n) for n in list(names)[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
