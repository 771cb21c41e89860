"""`place`: a Keras 3 model's layers on their devices for `fit`, `evaluate` and `predict` (forward ops, gradients,
variables, optimizer updates), refused before any step if the placement is another model's or names a missing
device; `PlacedModel.check` compares a traced `fit` with it.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from placer.keras.layers import (
    KerasPlacementError, LayerPlacement, _few, _layer_variables, _short, layer_paths, read_layer_placement,
)
from placer.devices import name_parts
from placer.keras.device_map import (
    DeviceMap, check_devices_exist, default_device_map, device_map_from, local_device,
)
from placer.placement import PlacementFile

if TYPE_CHECKING:
    from placer.keras.fit import OpTrace
    from placer.measure.result import MovedOp

_UPDATE_SCOPE = "placed_update"
"""The name scope each variable's optimizer update runs in once placed, so a trace can tell whose update an op is."""

# tf.gradients names its ops "gradients/<forward op's scope>/...", "gradients_1/..." when called again in a step
_GRADIENT_PREFIX = re.compile(r"^gradients(_\d+)?/")


@dataclass
class PlacedModel:
    """A model `place` put on its layers' devices, and the name scopes its placed ops got when `fit` traced them."""

    model: Any
    layers: LayerPlacement
    """The device of each layer in this process (the placement's devices mapped by `device_map`)."""
    device_map: DeviceMap
    """Which device of this process runs each device of the placement."""
    forward_scopes: dict[str, list[str]] = field(default_factory=dict)
    update_scopes: dict[str, list[str]] = field(default_factory=dict)

    def describe(self) -> str:
        """Where the layers run here: the device map used (and who chose it), then each layer's device."""
        rule = "default map" if self.device_map.chosen_by == "default" else "device map"
        lines = [f"placement devices -> devices of this process ({rule}):"]
        lines += [f"  {line}" for line in self.device_map.describe().splitlines()]
        lines += [f"  {line}" for line in self.layers.describe().splitlines()]
        return "\n".join(lines)

    def check(self, trace: OpTrace) -> FitPlacementCheck:
        """Where the ops of each layer ran in `trace` (a `trace_devices()` around `fit`) against its device."""
        from placer.measure.result import MovedOp

        # (scope prefix, layer path, is an update scope); the longest prefix first, so a nested scope wins
        prefixes = sorted([(f"{scope}/", path, False) for path, scopes in self.forward_scopes.items() for scope in scopes]
                          + [(f"{scope}/", path, True) for path, scopes in self.update_scopes.items() for scope in scopes],
                          key=lambda item: -len(item[0]))
        wanted = {path: local_device(device) for path, device in self.layers.devices.items()}
        moved: list[MovedOp] = []
        checked: Counter[str] = Counter()
        shared_reads = 0
        for op, device in trace.ran_on.items():
            name = _GRADIENT_PREFIX.sub("", op)
            path, update = next(((p, u) for prefix, p, u in prefixes if name.startswith(prefix)), (None, False))
            if path is None:
                continue
            if local_device(device) == wanted[path]:
                checked[path] += 1
            elif update and trace.op_types.get(op) == "ReadVariableOp":
                # the layer's own variables are on its device, so this reads the optimizer's step count or
                # learning rate: a read runs where its variable lives, and those are shared by every layer
                shared_reads += 1
            else:
                checked[path] += 1
                moved.append(MovedOp(op, wanted[path], local_device(device)))
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


def place(model: Any, placement: str | Path | PlacementFile | LayerPlacement,
          device_map: DeviceMap | Mapping[str | int, str] | str | None = None) -> PlacedModel:
    """Put each layer of the compiled, built Keras 3 `model` on this process's device for the placement's device
    of that layer, for `fit`, `evaluate` and `predict`: its forward ops run there, its variables and their
    optimizer slots are made there again (with their current values), its gradients are colocated with its
    forward ops, and each variable's optimizer update runs on the variable's device.

    device_map: placement device (or its index in the file's devices) -> device here, e.g. {0: "GPU:0",
    1: "GPU:1"} or "0=GPU:0,1=GPU:1"; default: the map recorded by `placer export --device-map`, else
    `default_device_map` (placement device i -> GPU:i, or CPU:i without GPUs). The result's `device_map` and
    `describe()` say which map was used.

    Checked before anything changes: the layer paths match the model's (else the placement is another model's),
    the map covers every device the layers use, and each mapped device exists here
    (`tf.config.list_logical_devices()`). Call it before the first `fit`, or call it again; it resets the model's
    compiled train function so that the next `fit` traces the placed step."""
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
    chosen = _chosen_device_map(layers, device_map, [device.name for device in tf.config.list_logical_devices()])
    layers = dataclasses.replace(layers, devices={path: chosen[device] for path, device in layers.devices.items()},
                                 split={path: {chosen.devices.get(d, d): n for d, n in counts.items()}
                                        for path, counts in layers.split.items()})
    unbuilt = [path for path, layer in paths.items() if not layer.built]
    if unbuilt:
        raise KerasPlacementError(f"layers {', '.join(unbuilt)} of Keras model {model.name!r} are not built: start the "
                                  "model with keras.Input(shape=...) or call model.build(input_shape) first, so that "
                                  "its variables exist and can be placed")
    placed = PlacedModel(model, layers, chosen)
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


def _chosen_device_map(layers: LayerPlacement, device_map, process_devices: list[str]) -> DeviceMap:
    """The map given to `place`, else the one recorded at export, else the default; refused if a device the
    layers use is unmapped or missing here."""
    if isinstance(device_map, DeviceMap):
        chosen = device_map
    elif device_map is not None:
        chosen = device_map_from(device_map, layers.devices_in_order, used=layers.used_devices)
    elif layers.device_map:
        chosen = device_map_from(layers.device_map, layers.devices_in_order, used=layers.used_devices)
    else:
        has_gpus = any(name_parts(name)[2] == "GPU" for name in process_devices)
        chosen = default_device_map(layers.devices_in_order, has_gpus)
    check_devices_exist(chosen, process_devices, layers.used_devices)
    return chosen


def _make_again_on(variable, device: str) -> None:
    """A TensorFlow variable's device is fixed when it is made, so the Keras variable gets a new one on `device`
    holding its current value (the Keras object, and so every reference to it, stays)."""
    import tensorflow as tf

    if local_device(variable.value.device) == local_device(device):
        return
    with tf.init_scope(), tf.device(device):
        variable._initialize(tf.identity(variable.value.read_value()))


def _placed_call(call, device: str, scopes: list[str]):
    import tensorflow as tf

    def placed_call(*args, **kwargs):
        with tf.device(device):
            _remember(scopes, tf.get_current_name_scope())
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
            _remember(scopes.setdefault(path_of_variable[id(variable)], []), tf.get_current_name_scope())
            return update_step(gradient, variable, learning_rate)

    return placed_update_step


def _remember(scopes: list[str], scope: str) -> None:
    if scope not in scopes:  # fit, evaluate and predict each trace the layer again
        scopes.append(scope)


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
