"""A device per layer of a Keras 3 model, from an op-level placement of its training step: layers keyed by stable
paths ("1:Dense": position among the model's layers and class), split layers reported, read from and written to
the placement file.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from placer.devices import name_parts
from placer.errors import KerasPlacementError, PlacementError
from placer.placement import Placement, PlacementFile, check_same_graph, read_placement_file

if TYPE_CHECKING:
    from placer.devices import DeviceSet
    from placer.graph.opgraph import OpGraph

LAYER_PLACEMENT_KEY = "keras_layers"
"""Where a placement file's metadata holds its layer placement (`placer export --keras` writes it)."""


@dataclass(frozen=True)
class LayerPlacement:
    """The device of each layer of one Keras model, by layer path; with the layers an op-level placement split."""

    devices: Mapping[str, str]
    """Layer path -> full device name, in the model's layer order."""
    split: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Layer path -> ops of that layer per device, for each layer whose ops the op-level placement put on more
    than one device; the layer runs on the device with most of them."""
    placement_devices: tuple[str, ...] = ()
    """The op-level placement's devices in its file's order (worker i of `local:N` is device i), which a device
    map numbers; empty for a hand-made layer placement: then the devices its layers use, in name order."""
    device_map: Mapping[str, str] = field(default_factory=dict)
    """Placement device -> device of the process that fits, when one was chosen at export (`--device-map`);
    empty: `place` maps by `placer.keras.device_map.default_device_map`."""

    @property
    def devices_in_order(self) -> tuple[str, ...]:
        """The devices a device map numbers: the placement's, or those the layers use in name order."""
        return self.placement_devices or tuple(sorted(set(self.devices.values()), key=name_parts))

    @property
    def used_devices(self) -> tuple[str, ...]:
        """The devices some layer runs on, in the order of `devices_in_order`."""
        used = set(self.devices.values())
        return tuple(device for device in self.devices_in_order if device in used)

    def describe(self) -> str:
        lines = [f"{path:<28} {_short(device)}" + (f"  (split: {_counts(self.split[path])})" if path in self.split else "")
                 for path, device in self.devices.items()]
        if self.split:
            lines.append(f"{len(self.split)} of {len(self.devices)} layers were split by the op-level placement; "
                         "each runs on the device with most of its ops")
        return "\n".join(lines)

    def to_json_dict(self) -> dict[str, Any]:
        # the placement's devices are the file's own ("devices"): not written twice
        data = {"layers": dict(self.devices), "split": {path: dict(counts) for path, counts in self.split.items()}}
        return {**data, "device_map": dict(self.device_map)} if self.device_map else data

    @classmethod
    def from_json_dict(cls, data: Any, source: str = "layer placement") -> LayerPlacement:
        layers = data.get("layers") if isinstance(data, Mapping) else None
        if not isinstance(layers, Mapping) or not all(isinstance(k, str) and isinstance(v, str) and v
                                                       for k, v in layers.items()):
            raise KerasPlacementError(f"{source} needs a mapping of layer path -> device under \"layers\"")
        split = data.get("split") or {}
        device_map = data.get("device_map") or {}
        for key, value in (("split", split), ("device_map", device_map)):
            if not isinstance(value, Mapping):
                raise KerasPlacementError(f"{source} has a {type(value).__name__} under \"{key}\"; expected a mapping")
        return cls(dict(layers), {path: dict(counts) for path, counts in split.items()}, device_map=dict(device_map))


def read_layer_placement(placement: str | Path | PlacementFile | LayerPlacement) -> LayerPlacement:
    """The layer placement a placement file carries (written by `placer export --keras`)."""
    if isinstance(placement, LayerPlacement):
        return placement
    file = placement if isinstance(placement, PlacementFile) else read_placement_file(placement)
    data = file.metadata.get(LAYER_PLACEMENT_KEY)
    if data is None:
        raise KerasPlacementError(
            f"{file.source} has no layer placement: export it with `placer export RUN_DIR --out FILE --keras`, or "
            "add one with placer.keras.add_layer_placement(FILE, MODEL)")
    layers = LayerPlacement.from_json_dict(data, source=f"{file.source}'s {LAYER_PLACEMENT_KEY}")
    return dataclasses.replace(layers, placement_devices=tuple(file.devices))


def layer_paths(model: Any) -> dict[str, Any]:
    """The model's placeable layers by stable path: "<position>:<class>" among its layers (input layers left out),
    so the same architecture has the same paths however many models the process built before it. A nested model
    is one layer."""
    import keras

    layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    return {f"{index}:{type(layer).__name__}": layer for index, layer in enumerate(layers)}


def layer_placement(graph: OpGraph, placement: Placement | PlacementFile | str | Path, model: Any) -> LayerPlacement:
    """A device per layer of `model` from an op-level placement of its training step `graph` (the graph that
    `graph_from_keras_model(model)` or `placer.models.load_keras_model` made of this very model).

    A layer's ops are its forward ops, their gradients and its variables with their optimizer slots; it gets the
    device most of them are on (ties: the placement's first device), and a layer whose ops sit on several
    devices is listed in `split`. Refused: a placement of another graph, a model that is not the graph's."""
    op_devices, placement_devices = _op_devices(graph, placement)
    device_order = {device: i for i, device in enumerate(dict.fromkeys(op_devices.values()))}
    devices: dict[str, str] = {}
    split: dict[str, dict[str, int]] = {}
    for path, ops in layer_ops(graph, model).items():
        counts = Counter(op_devices[name] for name in ops)
        devices[path] = max(counts, key=lambda device: (counts[device], -device_order[device]))
        if len(counts) > 1:
            split[path] = dict(counts.most_common())
    return LayerPlacement(devices, split, tuple(placement_devices))


def layer_ops(graph: OpGraph, model: Any) -> dict[str, set[str]]:
    """The ops of `graph` (the training step of `model`) that belong to each layer, by layer path: its forward ops,
    their gradients, and its variables' and optimizer slots' colocation groups (their reads and updates)."""
    scopes = _layer_scopes(model, graph)
    op_names = [op.name for op in graph.ops]
    group_of = {op.name: op.group for op in graph.ops}
    ops_of_group: dict[int, list[str]] = {}
    for op in graph.ops:
        ops_of_group.setdefault(op.group, []).append(op.name)
    layers: dict[str, set[str]] = {}
    for path, layer in layer_paths(model).items():
        prefixes = tuple(f"{scope}/" for scope in scopes.get(path, ())) + tuple(
            f"gradient_tape/{scope}/" for scope in scopes.get(path, ()))
        ops = {name for name in op_names if name.startswith(prefixes)} if prefixes else set()
        for variable in _layer_variables(layer, model):
            if variable.path in group_of:  # the variable's handle op, with its reads and updates
                ops.update(ops_of_group[group_of[variable.path]])
        if not ops:
            raise KerasPlacementError(f"layer {path} ({layer.name!r}) has no op in graph {graph.name!r}: the graph is "
                                      "not this model's training step")
        layers[path] = ops
    _add_compiled_gradients(graph, layers)
    _add_update_ops(graph, model, layers)
    return layers


def _add_compiled_gradients(graph: OpGraph, layers: dict[str, set[str]]) -> None:
    """Give each layer the gradients of its calls compiled with XLA (Keras's grouped convolutions on CPU): such a
    gradient is a call of its own, outside every layer's scope, that reads the forward call's outputs (what the
    backward needs of it); `place` colocates it with the call it differentiates, on the layer's device."""
    from placer.graph.control_flow import CALL_OPS

    owner = {op: path for path, ops in layers.items() for op in ops}
    for op in graph.ops:
        if op.type not in CALL_OPS or op.name in owner:
            continue
        forward = {owner.get(producer) for producer in op.producers if graph.op(producer).type in CALL_OPS}
        forward.discard(None)
        if len(forward) == 1:
            layers[forward.pop()].add(op.name)


def _add_update_ops(graph: OpGraph, model: Any, layers: dict[str, set[str]]) -> None:
    """Give each layer the optimizer's ops that compute its variables' updates (Adam's moments and step), which
    `place` runs on the layer's device: an op in the optimizer's scope belongs to the first layer its outputs
    reach; an op that reaches none (the step count's own update), or reads the optimizer's own variables, to no
    layer."""
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        return
    owner = {op: path for path, ops in layers.items() for op in ops}
    consumers: dict[str, list[str]] = {}
    for op in graph.ops:
        for producer in op.data_inputs:
            consumers.setdefault(producer.split(":")[0], []).append(op.name)
    # reads of the optimizer's own variables (step count, learning rate) run where those live, shared by all layers
    shared = {op.group for op in graph.ops if op.type == "VarHandleOp" and op.name not in owner}
    scope = f"{optimizer.name}/"
    for op in graph.ops:
        if op.name in owner or not op.name.startswith(scope) or op.group in shared:
            continue
        seen, frontier = {op.name}, [op.name]
        while frontier and op.name not in owner:
            following = []
            for name in frontier:
                for consumer in consumers.get(name, ()):
                    if consumer in owner:
                        owner[op.name] = owner[consumer]
                        break
                    if consumer not in seen:
                        seen.add(consumer)
                        following.append(consumer)
                if op.name in owner:
                    break
            frontier = following
        if op.name in owner:
            layers[owner[op.name]].add(op.name)


def placement_of_layers(graph: OpGraph, model: Any, layers: LayerPlacement, devices: DeviceSet) -> Placement:
    """The op-level placement of `graph` that runs what `place(model, layers)` runs: each colocation group on the
    device of the layer most of its ops belong to, groups of no layer (loss, metrics, the optimizer's step count)
    on the first device. `placer apply` and `placer measure` time it like any placement."""
    layer_of_op = {op: path for path, ops in layer_ops(graph, model).items() for op in ops}
    missing = [path for path in layers.devices if path not in layer_paths(model)]
    if missing:
        raise KerasPlacementError(f"the layer placement names layers {_few(missing)} that Keras model {model.name!r} "
                                  "does not have")
    index = {name: devices.index(name) for name in dict.fromkeys(layers.devices.values())}
    votes: dict[int, Counter[str]] = {}
    for op in graph.ops:
        path = layer_of_op.get(op.name)
        if path is not None:
            votes.setdefault(op.group, Counter())[path] += 1
    assignment = [index[layers.devices[votes[group.index].most_common(1)[0][0]]] if group.index in votes else 0
                  for group in graph.groups]
    return Placement.from_assignment(graph, devices, assignment, {LAYER_PLACEMENT_KEY: layers.to_json_dict()})


def add_layer_placement(path: str | Path, model: str, size: str = "tiny",
                        device_map: Mapping[str | int, str] | str | None = None) -> LayerPlacement:
    """Write into the placement file at `path` the layer placement of the Keras model that `model` (a model
    function returning a compiled keras.Model, as given to `placer train`) builds; returns it. `device_map`
    (`placer.keras.device_map.device_map_from`'s forms) is recorded with it for `place` to use; it is checked
    against the file's devices before the model is built."""
    from placer.keras.device_map import device_map_from
    from placer.models.loader import load_keras_model

    file = read_placement_file(path)
    if device_map is not None:
        device_map_from(device_map, file.devices)
    keras_model, graph = load_keras_model(model, size)
    layers = layer_placement(graph, file, keras_model)
    if device_map is not None:
        chosen = device_map_from(device_map, file.devices, used=layers.used_devices)
        layers = dataclasses.replace(layers, device_map=dict(chosen.devices))
    file.with_metadata(**{LAYER_PLACEMENT_KEY: layers.to_json_dict()}).save(path)
    return layers


def _op_devices(graph: OpGraph, placement) -> tuple[Mapping[str, str], tuple[str, ...]]:
    """Op -> device, and the placement's devices in order."""
    if isinstance(placement, Placement):
        return placement.op_devices(graph), tuple(placement.devices)
    file = placement if isinstance(placement, PlacementFile) else read_placement_file(placement)
    check_same_graph(file, graph)
    return file.op_devices, tuple(file.devices)


def _layer_scopes(model, graph: OpGraph) -> dict[str, list[str]]:
    """The name scope each layer's forward ops got in `graph`: TensorFlow makes scopes unique per graph
    ("dense_1_2"), so they are read by tracing the model's step again and recording them, and that trace must
    be `graph` itself (same fingerprint), else the model is another one."""
    from placer.graph.keras_model import graph_from_keras_model

    scopes: dict[str, list[str]] = {}
    with _wrapped_calls(model, lambda path, call: _recording(call, scopes.setdefault(path, []))):
        again = graph_from_keras_model(model, name=graph.name)
    if again.fingerprint != graph.fingerprint:
        raise KerasPlacementError(
            f"Keras model {model.name!r} does not build graph {graph.name!r} (its training step has fingerprint "
            f"{again.fingerprint[:12]}, the graph {graph.fingerprint[:12]}): pass the model the graph was made of")
    return scopes


def _recording(call, scopes: list[str]):
    import tensorflow as tf

    def recorded(*args, **kwargs):
        scopes.append(tf.get_current_name_scope())
        return call(*args, **kwargs)

    return recorded


@contextmanager
def _wrapped_calls(model, wrap) -> Iterator[None]:
    """Each layer's `call` replaced by `wrap(path, call)` inside the block (a placed layer's call included)."""
    layers = layer_paths(model)
    before = {path: vars(layer).get("call") for path, layer in layers.items()}
    for path, layer in layers.items():
        layer.call = wrap(path, layer.call)
    try:
        yield
    finally:
        for path, layer in layers.items():
            if before[path] is None:
                del layer.call  # the instance attribute goes; the class's call is back
            else:
                layer.call = before[path]


def _layer_variables(layer, model) -> list:
    """The layer's variables and, once its optimizer is built, their optimizer slots (Adam's momentum, ...)."""
    variables = list(layer.variables)  # weights, and state such as a dropout seed generator's
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and getattr(optimizer, "built", False):
        for variable in list(variables):
            variables += _slots_of(optimizer, variable)
    return variables


def _slots_of(optimizer, variable) -> list:
    # Keras 3 names a slot "<optimizer>/<variable path with / as _>_<slot>" (add_variable_from_reference)
    prefix = f"{optimizer.name}/{variable.path.replace('/', '_')}_"
    return [slot for slot in optimizer.variables if slot.path.startswith(prefix)
            and "/" not in slot.path[len(prefix):] and tuple(slot.shape) == tuple(variable.shape)]


def _short(device: str) -> str:
    return device.split("device:")[-1] if "device:" in device else device


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{_short(device)} {n}" for device, n in counts.items())


def _few(names, limit: int = 4) -> str:
    names = list(names)
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
