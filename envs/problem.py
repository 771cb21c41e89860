"""Set up what an environment evaluates: the graph, the devices, and the backend that times placements."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

from placer.devices import DeviceSet, load_machine
from placer.errors import DeviceSpecError
from placer.graph.opgraph import OpGraph

DEFAULT_MACHINE = "modeled:2xV100"


def load_graph(model: str | OpGraph, size: str) -> OpGraph:
    if isinstance(model, OpGraph):
        return model
    from placer.models import build_model

    return build_model(model, size)


def modeled_devices(spec: str | DeviceSet) -> DeviceSet:
    """"modeled:4xV100" or "modeled:4xA100-nvlink3" (see `placer.hardware`), a machine file, or a DeviceSet."""
    if isinstance(spec, DeviceSet):
        return spec
    match = re.fullmatch(r"modeled:(\d+)x(\w+?)(?:-(\w[\w-]*))?", spec)
    if match:
        from placer.hardware import modeled_machine

        gpus, gpu, link = int(match.group(1)), match.group(2), match.group(3) or "nvlink2"
        return modeled_machine(gpus, gpu, link)
    if Path(spec).is_file():
        return load_machine(spec)
    raise DeviceSpecError(f"{spec!r} is not a modeled machine: use e.g. 'modeled:2xV100', 'modeled:4xA100-nvlink3' "
                          "or a machine file (YAML/JSON)")


def roofline_tables(graph: OpGraph, devices: DeviceSet) -> dict[str, Any]:
    """A roofline cost table per kind of device in `devices`, from `placer.hardware` or the devices' own peaks."""
    from placer.hardware import GPUS, HOST_CPU, DeviceModel
    from placer.profile import roofline_costs

    tables = {}
    for device in devices:
        key = device.model or device.kind
        if key in tables:
            continue
        if device.model in GPUS or device.model == HOST_CPU.name:
            model = GPUS.get(device.model, HOST_CPU)
        elif device.peak_flops and device.memory_bandwidth:
            model = DeviceModel(key, device.kind, device.memory_bytes or 0, device.peak_flops, device.memory_bandwidth,
                                launch_overhead=5e-6)
        else:
            raise DeviceSpecError(
                f"{device.short_name} has no known model and no peak_flops/memory_bandwidth: give the simulated "
                "backend cost tables (costs=...) or describe the device"
            )
        tables[key] = roofline_costs(graph, model)
    return tables


def make_backend(graph: OpGraph, backend: str, devices, costs: Any = "roofline", *, measure_config=None,
                 simulator_config=None):
    from envs.backends import MeasuredBackend, SimulatedBackend

    if backend == "simulated":
        device_set = modeled_devices(devices or DEFAULT_MACHINE)
        tables = roofline_tables(graph, device_set) if costs == "roofline" else costs
        if not isinstance(tables, Mapping) and not hasattr(tables, "op_seconds"):
            raise ValueError("costs must be 'roofline', a CostTable, or a mapping of device model/kind to CostTable")
        return SimulatedBackend(graph, device_set, tables, simulator_config)
    if backend == "measured":
        return MeasuredBackend(graph, devices or "local:2", measure_config)
    raise ValueError(f"unknown backend {backend!r}: 'measured' (real execution) or 'simulated'")
