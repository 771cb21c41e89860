"""The heuristics that read neither costs nor the model: single-device, CPU-only and random placements.

`single_device_placement` is the one definition of "single-device" in placer: every comparison, the
"improvement" reward's reference and `placer measure`'s default placement use it.
"""

from __future__ import annotations

import numpy as np

from placer.devices import DeviceSet
from placer.errors import PlacementError
from placer.graph.opgraph import OpGraph
from placer.models.expert import whole_model_on_one_device
from placer.placement import Placement


def single_device_placement(graph: OpGraph, devices: DeviceSet) -> Placement:
    """Every op on the first GPU, else on the first device; a colocation group without a kernel there goes to
    the first device that has one, as TensorFlow's soft placement would move it."""
    return whole_model_on_one_device(graph, devices, method="single-device")


def cpu_only_placement(graph: OpGraph, devices: DeviceSet) -> Placement:
    """Every op on the first CPU device."""
    cpus = [i for i, d in enumerate(devices) if d.kind == "CPU"]
    if not cpus:
        raise PlacementError(f"the CPU-only placement needs a CPU device; the devices are {', '.join(devices.names)}")
    return Placement.on_device(graph, devices, cpus[0]).with_metadata(method="cpu-only")


def random_placement(graph: OpGraph, devices: DeviceSet, *, seed: int = 0) -> Placement:
    """Every colocation group on a device drawn uniformly from `seed`; a group drawn onto a device without a
    kernel for it is drawn again among those that have one (the first draw is kept where it can run, so a
    seed gives the placement it always gave)."""
    rng = np.random.default_rng(seed)
    assignment = rng.integers(0, len(devices), len(graph.groups))
    for unit, group in enumerate(graph.groups):
        if devices[int(assignment[unit])].kind not in group.kernel_devices:
            able = [i for i, device in enumerate(devices) if device.kind in group.kernel_devices]
            if able:  # none: from_assignment names the group
                assignment[unit] = able[int(rng.integers(len(able)))]
    return Placement.from_assignment(graph, devices, assignment, {"method": "random"})
