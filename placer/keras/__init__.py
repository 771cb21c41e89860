"""A learned placement on your own Keras 3 model, for `model.fit`: one device per layer (its forward ops, their
gradients, its variables and their optimizer update), a check of where `fit`'s ops ran, and a step timer.

Keras code places per layer, not per op: `layer_placement` turns an op-level placement of a model's training
step into a device per layer (`placer.keras.layers`), a `DeviceMap` says which device of this process runs each
of the placement's (`placer.keras.device_map`), `place` runs the model on it (`placer.keras.place`), and
`trace_devices`, `StepTimer` and `make_logical_cpus` go around your `fit` (`placer.keras.fit`). A data-parallel plan
goes into `fit` as a `MirroredStrategy` (`mirrored_strategy`, `placer.keras.replicas`).
"""

from placer.keras.device_map import DeviceMap, default_device_map, device_map_from
from placer.keras.fit import OpTrace, StepTimer, make_logical_cpus, trace_devices
from placer.keras.layers import (
    LAYER_PLACEMENT_KEY, KerasPlacementError, LayerPlacement, add_layer_placement, layer_ops, layer_paths,
    layer_placement, placement_of_layers, read_layer_placement,
)
from placer.keras.place import FitPlacementCheck, PlacedModel, place
from placer.keras.replicas import MirroredPlan, mirrored_strategy

__all__ = [
    "LAYER_PLACEMENT_KEY", "DeviceMap", "FitPlacementCheck", "KerasPlacementError", "LayerPlacement", "MirroredPlan",
    "OpTrace", "PlacedModel", "StepTimer", "add_layer_placement", "default_device_map", "device_map_from", "layer_ops",
    "layer_paths", "layer_placement", "make_logical_cpus", "mirrored_strategy", "place",
    "placement_of_layers", "read_layer_placement", "trace_devices",
]
