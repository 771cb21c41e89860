"""Placements: which device each colocation group (and so each op) of an `OpGraph` runs on.

A `Placement` is validated when it is made, applies to the graph's GraphDef, and round-trips through a
versioned JSON file that names the graph fingerprint and the devices it was made for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from placer.devices import DeviceSet
from placer.errors import DeviceSpecError, PlacementError, PlacementFileError
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
        if len(assignment) != len(graph.groups):
            raise PlacementError(
                f"the assignment has {len(assignment)} entries but graph {graph.name!r} has {len(graph.groups)} "
                "colocation groups: give one device index per group"
            )
        for group, index in zip(graph.groups, assignment):
            if not 0 <= int(index) < len(devices):
                raise PlacementError(
                    f"colocation group {group.name!r} is assigned device index {index}, but there are only "
                    f"{len(devices)} devices ({', '.join(d.short_name for d in devices)})"
                )
        placement = cls(graph.fingerprint, devices.names, tuple(int(i) for i in assignment), dict(metadata or {}))
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
    def single_device(cls, graph: OpGraph, devices: DeviceSet, device: str | int = 0) -> Placement:
        index = device if isinstance(device, int) else _device_index(devices, device, "the single-device placement")
        return cls.from_assignment(graph, devices, [index] * len(graph.groups), {"method": "single"})

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

    def check_kernels(self, graph: OpGraph, devices: DeviceSet) -> None:
        """Raise if an op is placed on a device type for which TensorFlow has no kernel for it."""
        for group, index in zip(graph.groups, self.group_devices):
            kind = devices[index].kind
            if kind in group.kernel_devices:
                continue
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

    def to_json_dict(self, graph: OpGraph) -> dict[str, Any]:
        return {
            "format": FILE_FORMAT,
            "format_version": FILE_FORMAT_VERSION,
            "graph": {"name": graph.name, "fingerprint": graph.fingerprint, "ops": len(graph.ops), "groups": len(graph.groups),
                      # what one step runs and what initializes it: `placer.apply` rebuilds the graph from these
                      "train_op": graph.train_op, "init_op": graph.init_op, "loss": graph.loss},
            "devices": list(self.devices),
            "groups": {g.name: self.device_of_group(g.index) for g in graph.groups},
            "ops": self.op_devices(graph),
            "metadata": dict(self.metadata),
        }

    def save(self, path: str | Path, graph: OpGraph) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json_dict(graph), indent=1, default=str))
        tmp.replace(path)  # atomic: a reader never sees half a file
        return path


def load_placement(path: str | Path, graph: OpGraph, devices: DeviceSet) -> Placement:
    """Read a placement file made for `graph`; refuse, with the reason, one made for anything else."""
    return placement_from_json_dict(read_placement_json(path), graph, devices, source=str(path))


def read_placement_json(path: str | Path) -> Any:
    """A placement file's parsed JSON; PlacementFileError if it cannot be read or parsed."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except OSError as error:
        raise PlacementFileError(f"cannot read placement file {path}: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise PlacementFileError(f"placement file {path} is not valid JSON ({error.msg} at line {error.lineno})") from None


def placement_from_json_dict(data: Any, graph: OpGraph, devices: DeviceSet, *, source: str = "placement") -> Placement:
    if not isinstance(data, dict) or data.get("format") != FILE_FORMAT:
        raise PlacementFileError(f"{source} is not a placer placement file (no \"format\": \"{FILE_FORMAT}\")")
    version = data.get("format_version")
    if version != FILE_FORMAT_VERSION:
        raise PlacementFileError(
            f"{source} has format version {version!r}; this placer reads version {FILE_FORMAT_VERSION}. "
            "Re-export it with a matching placer"
        )
    for key, kind in (("graph", dict), ("devices", list), ("ops", dict)):
        if not isinstance(data.get(key), kind):
            raise PlacementFileError(f"{source} needs a {kind.__name__} under {key!r}")
    fingerprint = data["graph"].get("fingerprint")
    if fingerprint != graph.fingerprint:
        raise PlacementFileError(
            f"{source} was made for graph {data['graph'].get('name')!r} (fingerprint {str(fingerprint)[:12]}), "
            f"not for {graph.name!r} (fingerprint {graph.fingerprint[:12]}). The model or its size, batch or "
            "optimizer differ: make a new placement for this graph"
        )
    missing = []
    for name in data["devices"]:
        try:
            devices.resolve(str(name))
        except DeviceSpecError:
            missing.append(str(name))
    if missing:
        raise PlacementFileError(
            f"{source} places ops on devices that {devices.name!r} does not have: {_few(missing)}; "
            f"available: {', '.join(d.short_name for d in devices)}"
        )
    try:
        return Placement.from_op_devices(graph, devices, data["ops"], data.get("metadata") or {})
    except PlacementError as error:
        raise PlacementFileError(f"{source}: {error}") from None


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
