"""A learned placement on your own Keras 3 model, for `model.fit`: one device per layer (its forward ops, their
gradients, its variables and their optimizer update), a check of where `fit`'s ops ran, and a step timer.

Keras code places per layer, not per op: `layer_placement` turns an op-level placement of a model's training step
into a device per layer (each layer's majority device; the layers the placement splits are reported), keyed by
stable layer paths ("1:Dense": position among the model's layers and class), never by counter-made layer names.
"""

from __future__ import annotations

import re
import statistics
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from placer.errors import PlacementError
from placer.placement import Placement, PlacementFile, check_same_graph, read_placement_file

if TYPE_CHECKING:
    from placer.devices import DeviceSet
    from placer.graph.opgraph import OpGraph
    from placer.measure.result import MovedOp

LAYER_PLACEMENT_KEY = "keras_layers"
"""Where a placement file's metadata holds its layer placement (`placer export --keras` writes it)."""

_UPDATE_SCOPE = "placed_update"
"""The name scope each variable's optimizer update runs in once placed, so a trace can tell whose update an op is."""

# tf.gradients names its ops "gradients/<forward op's scope>/...", "gradients_1/..." when called again in a step
_GRADIENT_PREFIX = re.compile(r"^gradients(_\d+)?/")
# nodes of a partition graph carry the names of the function calls they were inlined from
_CALL_PREFIX = re.compile(r"^((Stateful)?PartitionedCall(_\d+)?/)+")


class KerasPlacementError(PlacementError):
    """A layer placement does not fit a Keras model (other layers) or this machine (a device it lacks)."""


@dataclass(frozen=True)
class LayerPlacement:
    """The device of each layer of one Keras model, by layer path; with the layers an op-level placement split."""

    devices: Mapping[str, str]
    """Layer path -> full device name, in the model's layer order."""
    split: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Layer path -> ops of that layer per device, for each layer whose ops the op-level placement put on more
    than one device; the layer runs on the device with most of them."""

    def describe(self) -> str:
        lines = [f"{path:<28} {_short(device)}" + (f"  (split: {_counts(self.split[path])})" if path in self.split else "")
                 for path, device in self.devices.items()]
        if self.split:
            lines.append(f"{len(self.split)} of {len(self.devices)} layers were split by the op-level placement; "
                         "each runs on the device with most of its ops")
        return "\n".join(lines)

    def to_json_dict(self) -> dict[str, Any]:
        return {"layers": dict(self.devices), "split": {path: dict(counts) for path, counts in self.split.items()}}

    @classmethod
    def from_json_dict(cls, data: Any, source: str = "layer placement") -> LayerPlacement:
        layers = data.get("layers") if isinstance(data, Mapping) else None
        if not isinstance(layers, Mapping) or not all(isinstance(k, str) and isinstance(v, str) and v
                                                       for k, v in layers.items()):
            raise KerasPlacementError(f"{source} needs a mapping of layer path -> device under \"layers\"")
        split = data.get("split") or {}
        if not isinstance(split, Mapping):
            raise KerasPlacementError(f"{source} has a {type(split).__name__} under \"split\"; expected a mapping")
        return cls(dict(layers), {path: dict(counts) for path, counts in split.items()})


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
    return LayerPlacement.from_json_dict(data, source=f"{file.source}'s {LAYER_PLACEMENT_KEY}")


# -- layers and their paths ----------------------------------------------------------------------------------


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
    op_devices = _op_devices(graph, placement)
    device_order = {device: i for i, device in enumerate(dict.fromkeys(op_devices.values()))}
    devices: dict[str, str] = {}
    split: dict[str, dict[str, int]] = {}
    for path, ops in layer_ops(graph, model).items():
        counts = Counter(op_devices[name] for name in ops)
        devices[path] = max(counts, key=lambda device: (counts[device], -device_order[device]))
        if len(counts) > 1:
            split[path] = dict(counts.most_common())
    return LayerPlacement(devices, split)


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
    _add_update_ops(graph, model, layers)
    return layers


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


def add_layer_placement(path: str | Path, model: str, size: str = "tiny") -> LayerPlacement:
    """Write into the placement file at `path` the layer placement of the Keras model that `model` (a model
    function returning a compiled keras.Model, as given to `placer train`) builds; returns it."""
    from placer.models.loader import load_keras_model

    file = read_placement_file(path)
    keras_model, graph = load_keras_model(model, size)
    layers = layer_placement(graph, file, keras_model)
    file.with_metadata(**{LAYER_PLACEMENT_KEY: layers.to_json_dict()}).save(path)
    return layers


def _op_devices(graph: OpGraph, placement) -> Mapping[str, str]:
    if isinstance(placement, Placement):
        return placement.op_devices(graph)
    file = placement if isinstance(placement, PlacementFile) else read_placement_file(placement)
    check_same_graph(file, graph)
    return file.op_devices


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
    """Each layer's `call` replaced by `wrap(path, call)` inside the block."""
    layers = layer_paths(model)
    for path, layer in layers.items():
        layer.call = wrap(path, layer.call)
    try:
        yield
    finally:
        for layer in layers.values():
            del layer.call  # the instance attribute goes; the class's call is back


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


# -- placing a model ------------------------------------------------------------------------------------------


@dataclass
class PlacedModel:
    """A model `place` put on its layers' devices, and the name scopes its placed ops got when `fit` traced them."""

    model: Any
    layers: LayerPlacement
    forward_scopes: dict[str, list[str]] = field(default_factory=dict)
    update_scopes: dict[str, list[str]] = field(default_factory=dict)

    def check(self, trace: OpTrace) -> FitPlacementCheck:
        """Where the ops of each layer ran in `trace` (a `trace_devices()` around `fit`) against its device."""
        from placer.measure.result import MovedOp

        # (scope prefix, layer path, is an update scope); the longest prefix first, so a nested scope wins
        prefixes = sorted([(f"{scope}/", path, False) for path, scopes in self.forward_scopes.items() for scope in scopes]
                          + [(f"{scope}/", path, True) for path, scopes in self.update_scopes.items() for scope in scopes],
                          key=lambda item: -len(item[0]))
        wanted = {path: _local_device(device) for path, device in self.layers.devices.items()}
        moved: list[MovedOp] = []
        checked: Counter[str] = Counter()
        shared_reads = 0
        for op, device in trace.ran_on.items():
            name = _GRADIENT_PREFIX.sub("", op)
            path, update = next(((p, u) for prefix, p, u in prefixes if name.startswith(prefix)), (None, False))
            if path is None:
                continue
            if _local_device(device) == wanted[path]:
                checked[path] += 1
            elif update and trace.op_types.get(op) == "ReadVariableOp":
                # the layer's own variables are on its device, so this reads the optimizer's step count or
                # learning rate: a read runs where its variable lives, and those are shared by every layer
                shared_reads += 1
            else:
                checked[path] += 1
                moved.append(MovedOp(op, wanted[path], _local_device(device)))
        unchecked = tuple(path for path in self.layers.devices if not checked[path])
        return FitPlacementCheck(sum(checked.values()), tuple(sorted(moved, key=lambda m: m.op)), unchecked,
                                 shared_reads)


@dataclass(frozen=True)
class FitPlacementCheck:
    """What a traced `fit` showed: the ops of placed layers it saw, those that ran elsewhere, layers it never saw."""

    ops_checked: int
    moved_ops: tuple[MovedOp, ...]
    layers_not_traced: tuple[str, ...] = ()
    shared_variable_reads: int = 0
    """Reads, in a layer's update, of the optimizer's own variables (iteration, learning rate), which run on
    their variables' device, not counted as checked or moved."""

    @property
    def ok(self) -> bool:
        return self.ops_checked > 0 and not self.moved_ops and not self.layers_not_traced

    def describe(self) -> str:
        if self.moved_ops:
            shown = "; ".join(f"{m.op}: {_short(m.requested)} -> {_short(m.actual)}" for m in self.moved_ops[:5])
            text = f"WARNING: TensorFlow moved {len(self.moved_ops)} of {self.ops_checked} layer ops: {shown}"
        else:
            text = f"placement check: all {self.ops_checked} traced ops of the placed layers ran where placed"
        if self.shared_variable_reads:
            text += (f" ({self.shared_variable_reads} reads of the optimizer's own step count and learning rate ran "
                     "where those variables live)")
        if self.layers_not_traced:
            text += f"\nno traced op of layers {', '.join(self.layers_not_traced)}: trace a fit that trains them"
        return text


def place(model: Any, placement: str | Path | PlacementFile | LayerPlacement) -> PlacedModel:
    """Put each layer of the compiled, built Keras 3 `model` on the device `placement` names for it, for `fit`,
    `evaluate` and `predict`: its forward ops run there, its variables and their optimizer slots are made there
    again (with their current values), its gradients are colocated with its forward ops, and each variable's
    optimizer update runs on the variable's device.

    Checked before anything changes: the layer paths match the model's (else the placement is another model's)
    and every device exists here (`tf.config.list_logical_devices()`). Call it before the first `fit`, or call
    it again; it resets the model's compiled train function so that the next `fit` traces the placed step."""
    import keras
    import tensorflow as tf

    layers = read_layer_placement(placement)
    if not isinstance(model, keras.Model):
        raise KerasPlacementError(f"place() takes a Keras 3 keras.Model, not a {type(model).__module__}."
                                  f"{type(model).__name__}")
    if keras.backend.backend() != "tensorflow":
        raise KerasPlacementError(f"placer.keras places Keras 3 on TensorFlow; the Keras backend here is "
                                  f"{keras.backend.backend()!r} (set KERAS_BACKEND=tensorflow)")
    if getattr(model, "optimizer", None) is None:
        raise KerasPlacementError(f"Keras model {model.name!r} is not compiled: compile it (model.compile(optimizer="
                                  "..., loss=...)) before placing it, so its optimizer state is placed too")
    paths = layer_paths(model)
    _check_same_layers(layers, paths, model)
    _check_devices_exist(layers)
    unbuilt = [path for path, layer in paths.items() if not layer.built]
    if unbuilt:
        raise KerasPlacementError(f"layers {', '.join(unbuilt)} of Keras model {model.name!r} are not built: start the "
                                  "model with keras.Input(shape=...) or call model.build(input_shape) first, so that "
                                  "its variables exist and can be placed")
    placed = PlacedModel(model, layers)
    optimizer = model.optimizer
    if not optimizer.built:
        optimizer.build(model.trainable_variables)  # its slots must exist to be placed with their variables
    device_of_variable: dict[int, str] = {}
    path_of_variable: dict[int, str] = {}
    for path, layer in paths.items():
        device = layers.devices[path]
        for variable in _layer_variables(layer, model):
            _make_again_on(variable, device)
            # the optimizer updates a Keras variable through its TensorFlow variable: either may come
            for key in (id(variable), id(variable.value)):
                device_of_variable[key], path_of_variable[key] = device, path
    # The optimizer finds a variable's slots by its TensorFlow variable's id, which is new now
    optimizer._trainable_variables_indices = {optimizer._var_key(variable): index
                                              for index, variable in enumerate(optimizer._trainable_variables)}
    # A second place() wraps the wrapped calls: the inner device scope wins, so undo the first one's wrappers.
    for layer in paths.values():
        if "call" in vars(layer):
            del layer.call
    for path, layer in paths.items():
        layer.call = _placed_call(layer.call, layers.devices[path], placed.forward_scopes.setdefault(path, []))
    optimizer.update_step = _placed_update(type(optimizer).update_step.__get__(optimizer), device_of_variable,
                                           path_of_variable, placed.update_scopes)
    model.train_step = _colocated_gradients(type(model).train_step.__get__(model))
    model.train_function = model.test_function = model.predict_function = None  # re-traced placed by the next call
    return placed


def _check_same_layers(layers: LayerPlacement, paths: Mapping[str, Any], model) -> None:
    missing = [path for path in layers.devices if path not in paths]
    extra = [path for path in paths if path not in layers.devices]
    if missing or extra:
        raise KerasPlacementError(
            f"the placement is for another model: its layers {_few(missing) or '(all match)'} are not layers of "
            f"Keras model {model.name!r}, whose layers {_few(extra) or '(all match)'} it does not place. Layer paths "
            "are position:class among the model's layers: export the placement of this model (same layers, same "
            "order)")


def _check_devices_exist(layers: LayerPlacement) -> None:
    import tensorflow as tf

    from placer.measure.runner import canonical_device

    devices = [device.name for device in tf.config.list_logical_devices()]
    here = {_local_device(name) for name in devices}
    missing = sorted({device for device in layers.devices.values() if _local_device(device) not in here})
    if missing:
        cpus = len(tf.config.list_logical_devices("CPU"))
        raise KerasPlacementError(
            f"the placement puts layers on devices this process does not have: {', '.join(missing)}; it has "
            f"{', '.join(sorted(here))}. Run where those devices exist; for in-process CPU devices call "
            f"placer.keras.make_logical_cpus(N) before TensorFlow starts (it has {cpus} CPU device(s) now)")


def _local_device(name: str) -> str:
    """A device name as this process knows it: "/device:CPU:1" for "/job:localhost/replica:0/task:0/device:CPU:1"
    (another job's device keeps its full name, so it is never found here)."""
    from placer.measure.runner import canonical_device

    full = canonical_device(name)
    return full[len(_LOCAL_TASK):] if full.startswith(_LOCAL_TASK) else full


_LOCAL_TASK = "/job:localhost/replica:0/task:0"


def _make_again_on(variable, device: str) -> None:
    """A TensorFlow variable's device is fixed when it is made, so the Keras variable gets a new one on `device`
    holding its current value (the Keras object, and so every reference to it, stays)."""
    import tensorflow as tf

    if _local_device(variable.value.device) == _local_device(device):
        return
    with tf.init_scope(), tf.device(device):
        variable._initialize(tf.identity(variable.value.read_value()))


def _placed_call(call, device: str, scopes: list[str]):
    import tensorflow as tf

    def placed_call(*args, **kwargs):
        with tf.device(device):
            scopes.append(tf.get_current_name_scope())
            return call(*args, **kwargs)

    return placed_call


def _placed_update(update_step, device_of_variable: Mapping[int, str], path_of_variable: Mapping[int, str],
                   scopes: dict[str, list[str]]):
    import tensorflow as tf

    def placed_update_step(gradient, variable, learning_rate):
        device = device_of_variable.get(id(variable))
        if device is None:  # a variable of no placed layer (the model's own): where TensorFlow puts it
            return update_step(gradient, variable, learning_rate)
        with tf.device(device), tf.name_scope(_UPDATE_SCOPE):
            scopes.setdefault(path_of_variable[id(variable)], []).append(tf.get_current_name_scope())
            return update_step(gradient, variable, learning_rate)

    return placed_update_step


def _colocated_gradients(train_step):
    """The model's train_step, with `tf.GradientTape.gradient` computed by `tf.gradients` while it is traced:
    a tape's gradient ops get no device, so they would all run on the default one; `tf.gradients` colocates
    each with its forward op (and so with the layer's device). Eager steps (run_eagerly) keep the tape."""
    import tensorflow as tf

    tape_gradient = tf.GradientTape.gradient

    def gradient(tape, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        if tf.executing_eagerly():
            return tape_gradient(tape, target, sources, output_gradients, unconnected_gradients)
        flat = tf.nest.flatten(sources)
        values = [getattr(source, "value", source) for source in flat]  # a Keras variable's tf.Variable
        grads = tf.gradients(target, values, grad_ys=output_gradients, unconnected_gradients=unconnected_gradients)
        return tf.nest.pack_sequence_as(sources, grads)

    def placed_train_step(data):
        tf.GradientTape.gradient = gradient
        try:
            return train_step(data)
        finally:
            tf.GradientTape.gradient = tape_gradient

    return placed_train_step


# -- checking and timing fit ---------------------------------------------------------------------------------


class OpTrace:
    """The device every op of the TensorFlow functions run inside the block ran on, from their partition graphs:
    `with trace_devices() as trace: model.fit(...)`, then `placed.check(trace)`. Tracing slows the steps: check
    with a short fit, time without it."""

    def __init__(self):
        self.ran_on: dict[str, str] = {}
        self.op_types: dict[str, str] = {}

    def __enter__(self) -> OpTrace:
        from tensorflow.python.eager import context

        context.context().export_run_metadata()  # drops what was collected before the block
        context.enable_run_metadata()
        return self

    def __exit__(self, *exc) -> None:
        from tensorflow.python.eager import context

        from placer.measure.runner import canonical_device

        metadata = context.export_run_metadata()
        context.disable_run_metadata()
        for function in metadata.function_graphs:
            for partition in function.partition_graphs:
                for node in partition.node:
                    if node.op.startswith("_") or not node.device:  # sends, receives, function arguments
                        continue
                    name = _CALL_PREFIX.sub("", node.name)
                    self.ran_on[name] = canonical_device(node.device)
                    self.op_types[name] = node.op


trace_devices = OpTrace


def make_logical_cpus(count: int) -> None:
    """Split this process's CPU into `count` logical devices ("/device:CPU:0" ...), as `inprocess:N` does; must run
    before TensorFlow starts (before any tensor or model is made)."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    except RuntimeError:
        have = len(tf.config.list_logical_devices("CPU"))
        if have == count:
            return
        raise KerasPlacementError(f"TensorFlow has started with {have} CPU device(s), so it cannot make {count}: call "
                                  "make_logical_cpus first thing, before any model or tensor is made") from None


try:
    from keras.callbacks import Callback as _Callback
except ImportError:  # Keras 3 is optional for the rest of placer; StepTimer needs it
    _Callback = object


class StepTimer(_Callback):
    """A Keras callback that times `fit`'s training steps: `median` (seconds) over the steps after `warmup` ones
    (the first traces the step). Compare placements in your own loop: `model.fit(..., callbacks=[timer])`."""

    def __init__(self, warmup: int = 2):
        super().__init__()
        self.warmup = warmup
        self.step_times: list[float] = []
        self._seen = 0
        self._started = 0.0

    def on_train_batch_begin(self, batch, logs=None):
        self._started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        elapsed = time.perf_counter() - self._started
        self._seen += 1
        if self._seen > self.warmup:
            self.step_times.append(elapsed)

    @property
    def median(self) -> float | None:
        return statistics.median(self.step_times) if self.step_times else None

    def describe(self) -> str:
        if not self.step_times:
            return f"no step timed yet ({self._seen} steps run, {self.warmup} warm-up)"
        return (f"fit step time median {self.median * 1e3:.2f} ms over {len(self.step_times)} steps "
                f"(min {min(self.step_times) * 1e3:.2f}, max {max(self.step_times) * 1e3:.2f}; {self.warmup} warm-up)")


def _short(device: str) -> str:
    return device.split("device:")[-1] if "device:" in device else device


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{_short(device)} {n}" for device, n in counts.items())


def _few(names, limit: int = 4) -> str:
    names = list(names)
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
